#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# lockstep PostgresCluster pod entrypoint (the container's main command).
#
# Decides from the pod's role label and the state of $PGDATA what to do, then
# runs `postgres` as its child and supervises it (see "Supervision and fencing"
# below; SIGTERM/SIGINT/SIGQUIT are forwarded, the exit code is postgres's):
#
#   role     PGDATA                          action
#   primary  empty                           initdb + roles + config, start
#   primary  standby data (standby.signal)   promote it locally, start as primary
#   primary  primary data                    start
#   replica  empty                           pg_basebackup from the primary, start as standby
#   replica  old primary (no standby.signal) pg_rewind against the primary, start as standby
#                                            (pg_rewind fails -> wipe + pg_basebackup, loudly)
#   replica  standby data                    point primary_conninfo at the primary, start
#   demoted  anything                        exactly as replica: never starts as a primary
#
# `demoted` (selected by neither Service) marks a pod that is, or may still be, a
# writable primary that must not serve: an old primary between the demote step of
# a switchover/failover and its restart. A demoted pod that restarts in place must
# come back as a standby, so it rejoins like a replica (pg_rewind, or re-clone);
# waiting for the label to change instead could wait forever, as the operator only
# relabels a recreated pod.
#
# Supervision and fencing (issue 12; README.md "Fencing: the lease agent"): with
# LOCKSTEP_LEASE_NAME set, only the holder of the coordination Lease
# <cluster>-primary ("$POD_NAME/$POD_UID") may run a writable server.
#   - A pod labelled primary starts a writable server only after the Lease names
#     it and one renewal by this pod succeeded (it rejoins as a standby if the
#     label turns replica/demoted meanwhile).
#   - A running standby labelled primary promotes ITSELF (pg_promote) once the
#     Lease names it, right after a renewal of its own succeeded; the operator's
#     promote Job only waits for that (promote.sh). No one else promotes a
#     server: a late or stray pg_promote from outside makes a writable server
#     this agent never renewed for, which it fences at once.
#   - While the server is writable (or asked to promote), every
#     LOCKSTEP_RENEW_SECONDS (R) the agent GETs the Lease and PUTs it back with
#     renewTime = now (resourceVersion precondition). It FENCES at once -
#     `pg_ctl stop -m immediate`, SIGKILL of the postmaster and its children if
#     that is not done within 5 s, exit 5 - when the Lease names another holder
#     or none, when the role label is neither primary, replica (labels follow the
#     Lease) nor demoted, when it never renewed, or when no renewal has succeeded
#     for LOCKSTEP_FENCE_SECONDS (T) of monotonic time (/proc/uptime), counted
#     from the start of the last successful request.
#   - Labelled `demoted` after it served as the primary (started as one,
#     promoted itself, or was labelled primary while writable): a clean
#     `pg_ctl stop -m fast` (walsenders send all WAL to connected standbys
#     before the server exits), then the Lease is released: holderIdentity
#     cleared and annotation lockstep.dev/released-by = "$POD_NAME/$POD_UID".
#     Exit 0; the container restarts and rejoins as a standby. A server that
#     stops cleanly on a forwarded signal (pod deletion) releases it too, and so
#     does a container that starts as a standby while the Lease still names it.
#   - Without LOCKSTEP_LEASE_NAME (an operator that renders no Lease) there is
#     no lease check: a standby labelled primary promotes itself, and a writable
#     server labelled `demoted` still stops cleanly.
#
# `entrypoint.sh --liveness` is the liveness probe command: while the
# entrypoint prepares (bootstrap, clone, rewind, waiting for the Lease) it
# succeeds; once postgres answered, it fails only when `pg_isready` on the local
# socket gets no answer at all (a server rejecting connections is alive).
#
# Runs as the postgres OS user (uid 999 in the postgres:<major> images), never
# as root. Needs bash and the PostgreSQL 13+ server binaries (initdb, pg_ctl,
# postgres, pg_basebackup, pg_rewind, pg_controldata, psql) on PATH or in
# $PG_BIN. Secrets are passed to child processes through the environment
# (PGPASSWORD) or stdin, never through argv, and are never logged.
#
# Environment (all strings; "required" means the script exits 2 without it):
#   PGDATA                 required. Data directory; use a sub-directory of the
#                          volume mount (e.g. /var/lib/postgresql/data/pgdata).
#   PGPORT                 port this instance listens on (default 5432).
#   LOCKSTEP_ROLE_FILE     downward-API labels file (default
#                          /etc/lockstep/podinfo/labels); lines `key="value"`.
#   LOCKSTEP_ROLE_LABEL    label holding the role (default lockstep.dev/role).
#   LOCKSTEP_ROLE          if set, overrides the file (primary|replica|demoted).
#   ROLE_WAIT_SECONDS      how long to wait for the role label to appear in the
#                          file (default 300): a pod the StatefulSet just made
#                          has no role until the operator labels it.
#   POSTGRES_USER          superuser name (default postgres).
#   POSTGRES_PASSWORD      required. Superuser password (Secret). Replicas use
#                          it for pg_rewind's connection to the primary.
#   POSTGRES_DB            optional database created at bootstrap (besides
#                          `postgres`).
#   REPLICATION_USER       replication role name (default replicator).
#   REPLICATION_PASSWORD   required. Replication role password (Secret).
#   PRIMARY_HOST           required for replicas: the primary's address, e.g.
#                          the `<cluster>-rw` Service DNS name.
#   PRIMARY_PORT           the primary's port (default 5432).
#   PRIMARY_WAIT_SECONDS   how long a replica waits for a writable primary
#                          before giving up with exit 3 (default 300).
#   RETRY_INTERVAL_SECONDS pause between attempts (default 2).
#   APPLICATION_NAME       name this standby reports to the primary (default
#                          $POD_NAME, else $HOSTNAME, else lockstep-replica).
#   LISTEN_ADDRESSES       listen_addresses (default '*').
#   PG_SOCKET_DIR          unix socket directory (default /var/run/postgresql).
#   MAX_WAL_SENDERS        max_wal_senders (default 10).
#   WAL_KEEP_SIZE          wal_keep_size, WAL kept for lagging/rejoining
#                          standbys (default 1GB).
#   INITDB_ARGS            extra initdb arguments, word-split (default
#                          "--encoding=UTF8 --locale=C --data-checksums").
#   POSTGRES_EXTRA_CONF    extra postgresql.conf lines appended verbatim to the
#                          managed lockstep.conf.
#   RECLONE_ON_REWIND_FAILURE  true (default) | false: when pg_rewind of a
#                          demoted primary fails, wipe and re-clone (true) or
#                          exit 4 (false).
#   START_TIMEOUT_SECONDS  bound for temporary server start/stop (default 120).
#   PG_BIN                 optional directory prepended to PATH.
#   LOCKSTEP_LEASE_NAME    the Lease naming the one writable pod; unset: no
#                          lease checks (fencing off).
#   POD_NAME, POD_UID, POD_NAMESPACE  required with LOCKSTEP_LEASE_NAME.
#   LOCKSTEP_LEASE_SECONDS L (default 15); LOCKSTEP_FENCE_SECONDS T (default
#                          L/2); LOCKSTEP_RENEW_SECONDS R (default 2).
#   LOCKSTEP_API_URL       the API server (default
#                          https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
#   LOCKSTEP_TOKEN_FILE, LOCKSTEP_CA_FILE  default: the mounted ServiceAccount's
#                          token and ca.crt.
#
# Exit codes (before postgres starts; afterwards postgres's own):
#   2 configuration error (missing/invalid variable, unknown role, PGDATA
#     non-empty but not a data directory)
#   3 the primary did not become reachable+writable within PRIMARY_WAIT_SECONDS
#   4 bootstrap / clone / rewind / local promotion failed
#   5 fenced: the server was stopped because this pod may no longer write
#   0 after a clean stop on demotion (the container restarts as a standby)
set -Eeuo pipefail
umask 0077

LOCKSTEP_SCRIPT=entrypoint
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# --- quoting helpers (values may contain quotes, backslashes, spaces) -------
sql_literal() { local v=${1//\'/\'\'}; printf "'%s'" "$v"; }
sql_ident() { local v=${1//\"/\"\"}; printf '"%s"' "$v"; }
# libpq conninfo value: backslash and single quote are backslash-escaped.
conninfo_quote() {
	local v=$1 bs='\' q="'"
	v=${v//"$bs"/"$bs$bs"}
	v=${v//"$q"/"$bs$q"}
	printf "'%s'" "$v"
}
# postgresql.conf string value: backslash escapes, quote doubled.
conf_quote() {
	local v=$1 bs='\' q="'"
	v=${v//"$bs"/"$bs$bs"}
	v=${v//"$q"/"$q$q"}
	printf "'%s'" "$v"
}

# --- configuration ------------------------------------------------------------
PHASE_FILE="${PG_SOCKET_DIR:-/var/run/postgresql}/lockstep-phase.${PGPORT:-5432}"
if [[ "${1:-}" == --liveness ]]; then
	# Alive while preparing; once postgres answered, alive iff it answers.
	[[ "$(cat "$PHASE_FILE" 2>/dev/null)" == running ]] || exit 0
	# pg_isready: 0 accepting, 1 rejecting (starting, stopping, a busy recovery), 2 no
	# answer. Only a server that does not answer at all is dead.
	rc=0
	pg_isready -q -h "${PG_SOCKET_DIR:-/var/run/postgresql}" -p "${PGPORT:-5432}" -t 5 || rc=$?
	((rc != 2)) || exit 1
	exit 0
fi
[[ "$(id -u)" != 0 ]] || die 2 "must not run as root; run as the postgres user (runAsUser: 999)"

require PGDATA
PGDATA=${PGDATA%/}
PGPORT=${PGPORT:-5432}
REPLICATION_USER=${REPLICATION_USER:-replicator}
PRIMARY_PORT=${PRIMARY_PORT:-5432}
PRIMARY_WAIT_SECONDS=${PRIMARY_WAIT_SECONDS:-300}
RETRY_INTERVAL_SECONDS=${RETRY_INTERVAL_SECONDS:-2}
START_TIMEOUT_SECONDS=${START_TIMEOUT_SECONDS:-120}
LISTEN_ADDRESSES=${LISTEN_ADDRESSES:-*}
PG_SOCKET_DIR=${PG_SOCKET_DIR:-/var/run/postgresql}
MAX_WAL_SENDERS=${MAX_WAL_SENDERS:-10}
WAL_KEEP_SIZE=${WAL_KEEP_SIZE:-1GB}
INITDB_ARGS=${INITDB_ARGS---encoding=UTF8 --locale=C --data-checksums}
RECLONE_ON_REWIND_FAILURE=${RECLONE_ON_REWIND_FAILURE:-true}
APPLICATION_NAME=${APPLICATION_NAME:-${POD_NAME:-${HOSTNAME:-lockstep-replica}}}
LOCKSTEP_ROLE_FILE=${LOCKSTEP_ROLE_FILE:-/etc/lockstep/podinfo/labels}
LOCKSTEP_ROLE_LABEL=${LOCKSTEP_ROLE_LABEL:-lockstep.dev/role}
ROLE_WAIT_SECONDS=${ROLE_WAIT_SECONDS:-300}
require POSTGRES_PASSWORD REPLICATION_PASSWORD
LEASE_NAME=${LOCKSTEP_LEASE_NAME:-}
LOCKSTEP_LEASE_SECONDS=${LOCKSTEP_LEASE_SECONDS:-15}
require_uint LOCKSTEP_LEASE_SECONDS
LEASE_SECONDS=$LOCKSTEP_LEASE_SECONDS
RENEW_SECONDS=${LOCKSTEP_RENEW_SECONDS:-2}
FENCE_SECONDS=${LOCKSTEP_FENCE_SECONDS:-$((LEASE_SECONDS / 2))}
if [[ -n "$LEASE_NAME" ]]; then
	require POD_NAME POD_UID POD_NAMESPACE
	ME="$POD_NAME/$POD_UID"
	API_URL=${LOCKSTEP_API_URL:-https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}}
	TOKEN_FILE=${LOCKSTEP_TOKEN_FILE:-/var/run/secrets/kubernetes.io/serviceaccount/token}
	CA_FILE=${LOCKSTEP_CA_FILE:-/var/run/secrets/kubernetes.io/serviceaccount/ca.crt}
	LEASE_URL="$API_URL/apis/coordination.k8s.io/v1/namespaces/$POD_NAMESPACE/leases/$LEASE_NAME"
fi
require_uint PGPORT PRIMARY_PORT PRIMARY_WAIT_SECONDS RETRY_INTERVAL_SECONDS START_TIMEOUT_SECONDS MAX_WAL_SENDERS ROLE_WAIT_SECONDS FENCE_SECONDS RENEW_SECONDS
export PGPORT
# Marker files beside PGDATA (on the same volume) that survive a crash in the
# middle of initdb / pg_basebackup, so the half-built directory is redone.
INITDB_MARKER="$PGDATA.lockstep-initdb-in-progress"
CLONE_MARKER="$PGDATA.lockstep-clone-in-progress"

# The role label's value in the downward-API labels file (key="value" per
# line), or status 1 if the label is not there (yet).
role_from_file() {
	local line key value
	while IFS= read -r line || [[ -n "$line" ]]; do
		key=${line%%=*}
		[[ "$key" == "$LOCKSTEP_ROLE_LABEL" ]] || continue
		value=${line#*=}
		value=${value#\"}
		value=${value%\"}
		printf '%s' "$value"
		return 0
	done <"$LOCKSTEP_ROLE_FILE"
	return 1
}

# Reads the role, waiting up to ROLE_WAIT_SECONDS for the operator to label the
# pod (the kubelet refreshes the file when the label appears).
read_role() {
	if [[ -n "${LOCKSTEP_ROLE:-}" ]]; then
		printf '%s' "$LOCKSTEP_ROLE"
		return
	fi
	[[ -r "$LOCKSTEP_ROLE_FILE" ]] || die 2 "role labels file LOCKSTEP_ROLE_FILE=$LOCKSTEP_ROLE_FILE is missing or unreadable"
	local deadline=$((SECONDS + ROLE_WAIT_SECONDS)) logged=
	until role_from_file; do
		((SECONDS < deadline)) ||
			die 2 "label $LOCKSTEP_ROLE_LABEL not found in $LOCKSTEP_ROLE_FILE after ${ROLE_WAIT_SECONDS}s (ROLE_WAIT_SECONDS)"
		[[ -n "$logged" ]] || log "no $LOCKSTEP_ROLE_LABEL label yet; waiting up to ${ROLE_WAIT_SECONDS}s for the operator to assign a role"
		logged=1
		sleep "$RETRY_INTERVAL_SECONDS"
	done
}

has_data() { [[ -f "$PGDATA/PG_VERSION" ]]; }
is_standby_data() { [[ -f "$PGDATA/standby.signal" ]]; }
dir_is_empty() { [[ -z "$(find "$1" -mindepth 1 -maxdepth 1 -print -quit 2>/dev/null)" ]]; }

wipe_pgdata() {
	log "removing contents of $PGDATA"
	find "$PGDATA" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
}

prepare_pgdata() {
	mkdir -p "$PGDATA" 2>/dev/null ||
		die 2 "cannot create $PGDATA: its volume ($(dirname "$PGDATA"), owner uid $(stat -c %u "$(dirname "$PGDATA")" 2>/dev/null || echo '?')) is not writable by uid $(id -u); use fsGroup $(id -g) on a volume type that applies it, or give the volume to uid $(id -u)"
	chmod 0700 "$PGDATA" || die 2 "cannot chmod 0700 $PGDATA (owned by $(stat -c %u "$PGDATA"), running as $(id -u))"
	mkdir -p "$PG_SOCKET_DIR" 2>/dev/null || true
	[[ -w "$PG_SOCKET_DIR" ]] || die 2 "socket directory PG_SOCKET_DIR=$PG_SOCKET_DIR is missing or not writable by uid $(id -u)"
}

# Managed config: rewritten on every start so env changes take effect.
write_config() {
	local role=$1
	{
		echo "# Managed by lockstep entrypoint.sh; rewritten on every start. Do not edit."
		echo "listen_addresses = $(conf_quote "$LISTEN_ADDRESSES")"
		echo "port = $PGPORT"
		echo "unix_socket_directories = $(conf_quote "$PG_SOCKET_DIR")"
		echo "wal_level = replica"
		echo "max_wal_senders = $MAX_WAL_SENDERS"
		echo "max_replication_slots = $MAX_WAL_SENDERS"
		echo "wal_keep_size = $(conf_quote "$WAL_KEEP_SIZE")"
		echo "hot_standby = on"
		echo "wal_log_hints = on"
		echo "password_encryption = 'scram-sha-256'"
		echo "recovery_target_timeline = 'latest'"
		if [[ "$role" == replica ]]; then
			local ci
			ci="host=$(conninfo_quote "$PRIMARY_HOST") port=$PRIMARY_PORT"
			ci+=" user=$(conninfo_quote "$REPLICATION_USER") password=$(conninfo_quote "$REPLICATION_PASSWORD")"
			ci+=" application_name=$(conninfo_quote "$APPLICATION_NAME") connect_timeout=10"
			echo "primary_conninfo = $(conf_quote "$ci")"
		fi
		if [[ -n "${POSTGRES_EXTRA_CONF:-}" ]]; then
			echo "# POSTGRES_EXTRA_CONF"
			printf '%s\n' "$POSTGRES_EXTRA_CONF"
		fi
	} >"$PGDATA/lockstep.conf"
	chmod 0600 "$PGDATA/lockstep.conf"
	if ! grep -q "^include_if_exists = 'lockstep.conf'" "$PGDATA/postgresql.conf"; then
		printf "\n# lockstep managed settings\ninclude_if_exists = 'lockstep.conf'\n" >>"$PGDATA/postgresql.conf"
	fi
	# postgresql.auto.conf is read last and would override our primary_conninfo
	# (pg_basebackup -R / pg_rewind -R write one there): drop those lines.
	if [[ -f "$PGDATA/postgresql.auto.conf" ]]; then
		sed -i -e '/^[[:space:]]*primary_conninfo[[:space:]]*=/d' \
			-e '/^[[:space:]]*primary_slot_name[[:space:]]*=/d' "$PGDATA/postgresql.auto.conf"
	fi
	cat >"$PGDATA/pg_hba.conf" <<-'EOF'
		# Managed by lockstep entrypoint.sh; rewritten on every start.
		# TYPE  DATABASE     USER  ADDRESS  METHOD
		local   all          all            trust
		local   replication  all            trust
		host    replication  all   all      scram-sha-256
		host    all          all   all      scram-sha-256
	EOF
	if [[ "$role" == replica ]]; then
		: >"$PGDATA/standby.signal"
	else
		rm -f "$PGDATA/standby.signal" "$PGDATA/recovery.signal"
	fi
}

# Temporary server reachable only through the unix socket.
temp_start() {
	log "starting temporary local-only server"
	pg_ctl -D "$PGDATA" -w -t "$START_TIMEOUT_SECONDS" -o "-c listen_addresses=''" start >&2
}
temp_stop() {
	log "stopping temporary server"
	pg_ctl -D "$PGDATA" -w -t "$START_TIMEOUT_SECONDS" -m fast stop >&2
}
local_psql() {
	psql -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCKET_DIR" -p "$PGPORT" -U "$POSTGRES_USER" -d postgres "$@"
}

bootstrap_primary() {
	if ! dir_is_empty "$PGDATA"; then
		if [[ -e "$INITDB_MARKER" ]]; then
			log "previous bootstrap was interrupted; starting it over"
			wipe_pgdata
		else
			die 2 "PGDATA=$PGDATA is not empty but holds no PostgreSQL data directory (no PG_VERSION); refusing to initdb over it"
		fi
	fi
	: >"$INITDB_MARKER"
	log "initializing a new cluster in $PGDATA (superuser $POSTGRES_USER)"
	# shellcheck disable=SC2086 # INITDB_ARGS is deliberately word-split
	initdb -D "$PGDATA" -U "$POSTGRES_USER" --auth-local=trust --auth-host=scram-sha-256 $INITDB_ARGS >&2 ||
		die 4 "initdb failed"
	write_config primary
	temp_start || die 4 "temporary server did not start"
	local sql
	sql="ALTER ROLE $(sql_ident "$POSTGRES_USER") WITH PASSWORD $(sql_literal "$POSTGRES_PASSWORD");"
	if [[ "$REPLICATION_USER" != "$POSTGRES_USER" ]]; then
		sql+=$'\n'"CREATE ROLE $(sql_ident "$REPLICATION_USER") WITH LOGIN REPLICATION PASSWORD $(sql_literal "$REPLICATION_PASSWORD");"
	fi
	if [[ -n "${POSTGRES_DB:-}" && "$POSTGRES_DB" != postgres ]]; then
		sql+=$'\n'"CREATE DATABASE $(sql_ident "$POSTGRES_DB");"
	fi
	# SQL (with passwords) goes through stdin, not argv.
	if ! printf '%s\n' "$sql" | local_psql -f - >&2; then
		temp_stop || true
		die 4 "creating roles failed"
	fi
	temp_stop || die 4 "temporary server did not stop"
	rm -f "$INITDB_MARKER"
	log "bootstrap complete: superuser $POSTGRES_USER, replication role $REPLICATION_USER"
}

# A pod labelled primary whose data is still a standby: promote it locally
# (new timeline, like pg_promote) before serving.
promote_local_standby() {
	log "data directory is a standby but this pod is labelled primary: promoting it locally"
	write_config primary
	: >"$PGDATA/standby.signal" # start in recovery, then promote properly
	temp_start || die 4 "temporary standby did not start"
	if ! pg_ctl -D "$PGDATA" -w -t "$START_TIMEOUT_SECONDS" promote >&2; then
		temp_stop || true
		die 4 "local promotion failed"
	fi
	temp_stop || die 4 "temporary server did not stop after promotion"
	log "local promotion complete"
}

# Polls until PRIMARY_HOST:PRIMARY_PORT accepts a login and is not in recovery.
wait_for_writable_primary() {
	local deadline=$((SECONDS + $1)) attempt=0 out
	while :; do
		attempt=$((attempt + 1))
		if out=$(PGPASSWORD="$REPLICATION_PASSWORD" PGCONNECT_TIMEOUT=5 psql -X -A -t -q \
			-h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$REPLICATION_USER" -d postgres \
			-c 'SELECT pg_is_in_recovery()' 2>&1); then
			if [[ "$out" == f ]]; then
				log "primary $PRIMARY_HOST:$PRIMARY_PORT is up and writable (attempt $attempt)"
				return 0
			fi
			out="server is still in recovery"
		fi
		if ((SECONDS >= deadline)); then
			log "primary $PRIMARY_HOST:$PRIMARY_PORT not writable after $attempt attempts: ${out//$'\n'/ }"
			return 1
		fi
		log "waiting for primary $PRIMARY_HOST:$PRIMARY_PORT (attempt $attempt): ${out//$'\n'/ }"
		sleep "$RETRY_INTERVAL_SECONDS"
	done
}

clone_from_primary() {
	wait_for_writable_primary "$PRIMARY_WAIT_SECONDS" ||
		die 3 "gave up waiting ${PRIMARY_WAIT_SECONDS}s for primary $PRIMARY_HOST:$PRIMARY_PORT; cannot clone"
	local deadline=$((SECONDS + PRIMARY_WAIT_SECONDS)) attempt=0
	: >"$CLONE_MARKER"
	while :; do
		attempt=$((attempt + 1))
		dir_is_empty "$PGDATA" || wipe_pgdata
		log "cloning from $PRIMARY_HOST:$PRIMARY_PORT with pg_basebackup (attempt $attempt)"
		if PGPASSWORD="$REPLICATION_PASSWORD" PGAPPNAME="$APPLICATION_NAME" pg_basebackup \
			-h "$PRIMARY_HOST" -p "$PRIMARY_PORT" -U "$REPLICATION_USER" -w \
			-D "$PGDATA" -X stream -c fast -R >&2; then
			break
		fi
		((SECONDS < deadline)) || die 4 "pg_basebackup from $PRIMARY_HOST:$PRIMARY_PORT failed $attempt times"
		sleep "$RETRY_INTERVAL_SECONDS"
	done
	chmod 0700 "$PGDATA"
	rm -f "$CLONE_MARKER"
	log "clone complete"
}

cluster_state() {
	pg_controldata -D "$PGDATA" 2>/dev/null | sed -n 's/^Database cluster state:[[:space:]]*//p'
}

run_rewind() {
	local src
	src="host=$(conninfo_quote "$PRIMARY_HOST") port=$PRIMARY_PORT user=$(conninfo_quote "$POSTGRES_USER") dbname=postgres connect_timeout=10"
	# pg_rewind compares timelines from the source's pg_control, which a
	# freshly promoted primary only updates at its next checkpoint.
	PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=10 psql -X -q -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" \
		-U "$POSTGRES_USER" -d postgres -c CHECKPOINT >&2 ||
		log "WARNING: CHECKPOINT on $PRIMARY_HOST:$PRIMARY_PORT failed; pg_rewind may miss a recent promotion"
	log "running pg_rewind against $PRIMARY_HOST:$PRIMARY_PORT"
	# pg_rewind (13+) runs single-user crash recovery itself if the target
	# was not shut down cleanly. Password via env only.
	PGPASSWORD="$POSTGRES_PASSWORD" pg_rewind --target-pgdata="$PGDATA" --source-server="$src" --progress >&2
}

rejoin_as_standby() {
	if ! is_standby_data; then
		log "data directory was a primary (no standby.signal): rejoining as a standby of $PRIMARY_HOST:$PRIMARY_PORT"
		wait_for_writable_primary "$PRIMARY_WAIT_SECONDS" ||
			die 3 "gave up waiting ${PRIMARY_WAIT_SECONDS}s for primary $PRIMARY_HOST:$PRIMARY_PORT; cannot rewind a demoted primary without it"
		if run_rewind; then
			log "pg_rewind completed; starting as a standby"
			return 0
		fi
		if [[ "$RECLONE_ON_REWIND_FAILURE" != true ]]; then
			die 4 "pg_rewind failed and RECLONE_ON_REWIND_FAILURE=$RECLONE_ON_REWIND_FAILURE"
		fi
		log "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
		log "!!! pg_rewind FAILED: DISCARDING the local data directory $PGDATA"
		log "!!! and re-cloning it from $PRIMARY_HOST:$PRIMARY_PORT with pg_basebackup"
		log "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
		: >"$CLONE_MARKER"
		wipe_pgdata
		clone_from_primary
		return 0
	fi
	# An existing standby. If it was shut down cleanly and the primary is
	# reachable right now, pg_rewind it: a no-op ("no rewind required") unless
	# it streamed WAL past a failover's branch point. Otherwise just start;
	# the standby keeps retrying primary_conninfo by itself.
	local state
	state=$(cluster_state)
	if [[ "$state" == "shut down in recovery" ]] && wait_for_writable_primary 0; then
		run_rewind || log "WARNING: pg_rewind of the existing standby failed; starting it anyway"
	else
		log "existing standby (state: ${state:-unknown}); starting without rewind"
	fi
}

# --- the Lease (coordination.k8s.io/v1), through the API server -------------------

# Monotonic time in centiseconds (/proc/uptime: CLOCK_BOOTTIME, never set back).
mono_cs() {
	local up
	read -r up _ </proc/uptime
	up=${up/./}
	printf '%s' "$((10#$up))"
}

# curl against the API server with the pod's token; bounded to 1 s per request so
# that a hanging API server cannot hold the agent past its fence deadline. Prints the
# body, then a last line with the HTTP status.
api() {
	local method=$1 url=$2 body=${3:-}
	local args=(-sS --max-time "${LEASE_REQUEST_SECONDS:-1}" -X "$method" -w '\n%{http_code}')
	[[ "$url" != https://* ]] || args+=(--cacert "$CA_FILE")
	[[ -z "$body" ]] || args+=(-H 'Content-Type: application/json' --data-binary @-)
	local token=
	[[ ! -r "$TOKEN_FILE" ]] || token=$(<"$TOKEN_FILE")
	# The token goes through a header file descriptor, never argv.
	if [[ -n "$body" ]]; then
		printf '%s' "$body" | curl "${args[@]}" -H @<(printf 'Authorization: Bearer %s\n' "$token") "$url"
	else
		curl "${args[@]}" -H @<(printf 'Authorization: Bearer %s\n' "$token") "$url"
	fi
}

# lease_read: GET the Lease into LEASE_JSON, LEASE_HOLDER and RELEASED_LSN (the
# annotation lockstep.dev/released-lsn: the last WAL position of a primary that stopped
# cleanly on demotion, which whoever promotes next must have received); status 1 on
# failure.
RELEASED_LSN=
lease_read() {
	local out code
	out=$(api GET "$LEASE_URL" 2>/dev/null) || return 1
	code=${out##*$'\n'}
	[[ "$code" == 200 ]] || return 1
	LEASE_JSON=${out%$'\n'*}
	local fields
	fields=$(printf '%s' "$LEASE_JSON" | perl -MJSON::PP -0777 -ne 'my $l = decode_json($_);
		print(($l->{spec}{holderIdentity} // ""), "\t", ($l->{metadata}{annotations}{"lockstep.dev/released-lsn"} // ""))') || return 1
	# A tab between the two (neither holds one; $(...) would eat a trailing newline).
	LEASE_HOLDER=${fields%%$'\t'*}
	RELEASED_LSN=${fields#*$'\t'}
}

# lease_write MODE [LSN]: PUT LEASE_JSON back (its resourceVersion is the precondition:
# a 409 fails) with renewTime = now (MODE renew; MODE renew-writable also drops the
# released-lsn annotation: this server has moved past it) or without holder and with
# the released-by annotation, and the released-lsn annotation if LSN is given (MODE
# release). Status 0 iff the API server accepted it.
lease_write() {
	local mode=$1 lsn=${2:-} now body out
	now=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
	body=$(printf '%s' "$LEASE_JSON" | MODE="$mode" NOW="$now" ME="$ME" LSN="$lsn" perl -MJSON::PP -0777 -ne '
		my $l = decode_json($_);
		if ($ENV{MODE} =~ /^renew/) {
			$l->{spec}{renewTime} = $ENV{NOW};
			delete $l->{metadata}{annotations}{"lockstep.dev/released-lsn"}
				if $ENV{MODE} eq "renew-writable" && $l->{metadata}{annotations};
		} else {
			$l->{spec}{holderIdentity} = "";
			$l->{metadata}{annotations}{"lockstep.dev/released-by"} = $ENV{ME};
			$l->{metadata}{annotations}{"lockstep.dev/released-lsn"} = $ENV{LSN} if $ENV{LSN} ne "";
		}
		print encode_json($l)') || return 1
	out=$(api PUT "$LEASE_URL" "$body" 2>/dev/null) || return 1
	[[ "${out##*$'\n'}" == 200 ]]
}

# wait_for_lease: before a writable start, wait until the Lease names this pod and one
# renewal succeeded (LAST_RENEW_CS = its start). Status 1 if the role label stopped
# being primary meanwhile. No Lease configured: status 0 at once.
LAST_RENEW_CS=
wait_for_lease() {
	[[ -n "$LEASE_NAME" ]] || return 0
	local t0 role logged=
	while :; do
		role=$(role_from_file 2>/dev/null || true)
		[[ -n "${LOCKSTEP_ROLE:-}" || "$role" == primary ]] || return 1
		t0=$(mono_cs)
		if lease_read; then
			if [[ "$LEASE_HOLDER" == "$ME" ]]; then
				if lease_write renew; then
					LAST_RENEW_CS=$t0
					log "lease $LEASE_NAME held and renewed: starting as the primary"
					return 0
				fi
				log "renewing lease $LEASE_NAME failed (conflict or API error); retrying"
			elif [[ -z "$logged" || "$logged" != "$LEASE_HOLDER" ]]; then
				log "lease $LEASE_NAME is held by '${LEASE_HOLDER}', not $ME: waiting before starting a writable server"
				logged=${LEASE_HOLDER:-<none>}
			fi
		else
			[[ -n "$logged" ]] || log "cannot read lease $LEASE_NAME yet; waiting before starting a writable server"
			logged=${logged:-unreadable}
		fi
		sleep "$RENEW_SECONDS"
	done
}

# --- supervision ---------------------------------------------------------------------

PG_PID=
STOPPING=
STARTED_AS=
SERVED_AS_PRIMARY=

# The postmaster's children (backends, walsenders, ...), from /proc.
pg_children() {
	local stat pid rest
	for stat in /proc/[0-9]*/stat; do
		read -r pid rest <"$stat" 2>/dev/null || continue
		rest=${rest##*) }
		# shellcheck disable=SC2086 # split the fields: state, ppid, ...
		set -- $rest
		[[ "${2:-}" != "$PG_PID" ]] || printf '%s\n' "$pid"
	done
}

# fence REASON: stop the server now, whatever it is doing, and exit 5.
fence() {
	log "FENCING: $1; stopping postgres immediately"
	STOPPING=fence
	local children
	children=$(pg_children)
	if ! timeout 5 pg_ctl -D "$PGDATA" -m immediate -w -t 4 stop >&2; then
		log "immediate stop did not finish: SIGKILL to the postmaster and its children"
		kill -KILL "$PG_PID" 2>/dev/null || true
		# shellcheck disable=SC2086 # a list of pids
		[[ -z "$children" ]] || kill -KILL $children 2>/dev/null || true
	fi
	wait "$PG_PID" 2>/dev/null || true
	printf 'fenced\n' >"$PHASE_FILE" 2>/dev/null || true
	log "fenced: exiting 5"
	exit 5
}

# release_lease [LSN]: after a clean stop, hand the Lease back if this pod still holds
# it (with LSN, the stopped primary's last WAL position, for whoever promotes next).
release_lease() {
	[[ -n "$LEASE_NAME" ]] || return 0
	local attempt
	for attempt in 1 2 3 4 5; do
		lease_read || { sleep 1; continue; }
		[[ "$LEASE_HOLDER" == "$ME" ]] || return 0
		if lease_write release "${1:-}"; then
			log "lease $LEASE_NAME released (lockstep.dev/released-by=$ME${1:+, lockstep.dev/released-lsn=$1})"
			return 0
		fi
		sleep 1
	done
	log "WARNING: could not release lease $LEASE_NAME; the operator waits for it to expire"
}

# demote: a planned demotion. Clean stop (standbys receive all WAL), release, exit 0.
demote() {
	log "labelled $1 while writable: stopping cleanly (fast) to hand over"
	STOPPING=demote
	if ! pg_ctl -D "$PGDATA" -m fast -w -t "$START_TIMEOUT_SECONDS" stop >&2; then
		fence "clean stop on demotion failed"
	fi
	wait "$PG_PID" 2>/dev/null || true
	# The shutdown checkpoint is the last record this primary wrote: the next primary
	# must have received up to it (a planned switchover loses no acknowledged commit).
	local lsn
	lsn=$(pg_controldata -D "$PGDATA" 2>/dev/null | sed -n 's/^Latest checkpoint location: *//p') || lsn=
	release_lease "$lsn"
	printf 'demoted\n' >"$PHASE_FILE" 2>/dev/null || true
	log "stopped after demotion; exiting so the container restarts as a standby"
	exit 0
}

# promote_if_chosen ROLE: a standby labelled primary promotes itself once the Lease
# names this pod, right after a renewal of its own succeeded (Patroni's rule: only the
# holder of the leader key promotes, and only while it can renew it). From the request
# on, the server is guarded like a writable one: fenced T after that renewal unless it
# renews again, so it is never writable past renewTime + T + R + 1, before the operator
# may hand the Lease to anyone else (renewTime + L + S). Nothing else promotes a
# running server: one found writable without a renewal by this agent is fenced at once.
PROMOTE_SENT=
promote_if_chosen() {
	[[ "$1" == primary ]] || return 0
	if [[ -n "$LEASE_NAME" ]]; then
		local t0
		t0=$(mono_cs)
		lease_read || return 0
		[[ "$LEASE_HOLDER" == "$ME" ]] || return 0
		caught_up "$RELEASED_LSN" || return 0
		if ! lease_write renew; then
			log "renewing lease $LEASE_NAME before promoting failed (conflict or API error); retrying"
			return 0
		fi
		LAST_RENEW_CS=$t0
	fi
	log "labelled primary${LEASE_NAME:+ and holding lease $LEASE_NAME}: promoting this standby"
	GUARDED=1
	SERVED_AS_PRIMARY=1
	request_promotion
}

# caught_up LSN: whether this standby has received (or replayed) WAL up to LSN, the last
# position of a primary that stopped cleanly on demotion (none: yes). Until it has, it
# does not promote: promoting would discard commits that primary acknowledged. Logged
# once per LSN, with the escape hatch: removing the annotation from the Lease promotes
# without them.
CATCHUP_LOGGED=
caught_up() {
	[[ -n "$1" ]] || return 0
	local out
	if [[ ! "$1" =~ ^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$ ]]; then
		[[ "$CATCHUP_LOGGED" == "$1" ]] || log "the Lease's lockstep.dev/released-lsn '$1' is not an LSN: not promoting (remove it to promote)"
		CATCHUP_LOGGED=$1
		return 1
	fi
	out=$(psql -X -A -t -q -h "$PG_SOCKET_DIR" -p "$PGPORT" -U "$POSTGRES_USER" -d postgres -c \
		"SELECT pg_wal_lsn_diff(greatest(coalesce(pg_last_wal_receive_lsn(), '0/0'), coalesce(pg_last_wal_replay_lsn(), '0/0')), '$1') >= 0" 2>/dev/null) || out=
	[[ "$out" != t ]] || return 0
	if [[ "$CATCHUP_LOGGED" != "$1" ]]; then
		CATCHUP_LOGGED=$1
		log "chosen to promote, but not promoting before this standby has received up to $1, the last WAL of the primary that stopped cleanly before it (kubectl annotate lease $LEASE_NAME lockstep.dev/released-lsn- promotes it without them)"
	fi
	return 1
}

# request_promotion: ask the local standby to promote (pg_promote without waiting: the
# agent keeps its rounds, and with them its renewals, while the server finishes
# recovery). Repeated on the next round if the request did not get through.
request_promotion() {
	local out
	if out=$(psql -X -A -t -q -h "$PG_SOCKET_DIR" -p "$PGPORT" -U "$POSTGRES_USER" -d postgres \
		-c 'SELECT pg_promote(wait => false)' 2>&1) && [[ "$out" == t ]]; then
		PROMOTE_SENT=1
	else
		log "pg_promote did not get through (${out//$'\n'/ }); asking again next round"
	fi
}

# One round of the agent while postgres runs.
GUARDED=
agent_tick() {
	local writable role t0
	writable=$(psql -X -A -t -q -h "$PG_SOCKET_DIR" -p "$PGPORT" -U "$POSTGRES_USER" -d postgres \
		-c 'SELECT NOT pg_is_in_recovery()' 2>/dev/null) || writable=unknown
	if [[ "$writable" == unknown ]]; then
		# Not answering (starting, busy): a server started as a primary, seen writable
		# or asked to promote is guarded as writable; a standby cannot have become one
		# unseen (promotion is a request the agent's query would also get through).
		[[ -n "$GUARDED" || "$STARTED_AS" == primary ]] || return 0
	else
		printf 'running\n' >"$PHASE_FILE" 2>/dev/null || true
	fi
	role=$(role_from_file 2>/dev/null || true)
	[[ -n "${LOCKSTEP_ROLE:-}" ]] && role=$LOCKSTEP_ROLE
	# A standby cannot write: nothing to guard; but check that it follows, and promote
	# it when it is chosen.
	if [[ "$writable" == f && -z "$GUARDED" ]]; then
		standby_check
		promote_if_chosen "$role"
		return 0
	fi
	GUARDED=1
	# `demoted` orders a demotion only of a server that served as the primary (started
	# as one, promoted itself, or labelled primary while writable); a server promoted by
	# someone else without a Lease is left to its label.
	if [[ "$role" == primary && -z "$SERVED_AS_PRIMARY" ]]; then
		SERVED_AS_PRIMARY=1
		log "labelled primary while writable: serving as the primary"
	fi
	if [[ -z "$LEASE_NAME" ]]; then
		[[ "$role" != demoted || -z "$SERVED_AS_PRIMARY" ]] || demote "$role"
		return 0
	fi
	t0=$(mono_cs)
	if lease_read; then
		if [[ "$LEASE_HOLDER" != "$ME" ]]; then
			fence "lease $LEASE_NAME is held by '${LEASE_HOLDER}', not $ME"
		fi
		case "$role" in
		primary | replica) ;; # the lease is the authority; labels follow it
		demoted) [[ -z "$SERVED_AS_PRIMARY" ]] || demote "$role" ;;
		*) fence "role label is '$role'" ;;
		esac
		if lease_write "$([[ "$writable" == t && -n "$RELEASED_LSN" ]] && echo renew-writable || echo renew)"; then
			LAST_RENEW_CS=$t0
			# Still recovering after a promotion request that did not get through.
			[[ "$writable" != f || -n "$PROMOTE_SENT" || "$role" != primary ]] || request_promotion
		else
			log "renewing lease $LEASE_NAME failed (conflict or API error)"
		fi
	fi
	# No renewal by this agent for T seconds, counted from the start of the last
	# successful one, fences; a server that became writable without any (promoted by
	# someone else, while the Lease could not be read) at once.
	if [[ -z "$LAST_RENEW_CS" ]]; then
		fence "writable without a lease renewal by this pod (promoted by someone else)"
	fi
	if (($(mono_cs) - LAST_RENEW_CS > FENCE_SECONDS * 100)); then
		fence "no lease renewal for more than ${FENCE_SECONDS}s"
	fi
}

# The pause before the next round: R, or less when a guarded writable server's fence
# deadline (T after its last renewal) comes sooner, so that the round that fences starts
# at the deadline instead of up to R + 1 s (a failed request's bound) past it.
tick_seconds() {
	local left
	if [[ -n "$LEASE_NAME" && -n "$GUARDED" && -n "$LAST_RENEW_CS" && -z "$STOPPING" ]]; then
		left=$((LAST_RENEW_CS + FENCE_SECONDS * 100 + 1 - $(mono_cs)))
		if ((left < RENEW_SECONDS * 100)); then
			((left > 0)) || left=1
			printf '%d.%02d' $((left / 100)) $((left % 100))
			return
		fi
	fi
	printf '%s' "$RENEW_SECONDS"
}

# A standby that has not streamed for STANDBY_STALL_SECONDS while a writable primary
# answers at PRIMARY_HOST (typically: it received WAL of the old primary past the
# point where the new one was promoted, so it cannot follow the new timeline) stops
# cleanly and exits: the container restarts and the entrypoint rejoins it through
# pg_rewind ("no rewind required" when it had not diverged).
NOT_STREAMING_SINCE_CS=
standby_check() {
	local streaming
	streaming=$(psql -X -A -t -q -h "$PG_SOCKET_DIR" -p "$PGPORT" -U "$POSTGRES_USER" -d postgres \
		-c "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'" 2>/dev/null) || return 0
	if [[ "$streaming" != 0 ]]; then
		NOT_STREAMING_SINCE_CS=
		return 0
	fi
	[[ -n "$NOT_STREAMING_SINCE_CS" ]] || NOT_STREAMING_SINCE_CS=$(mono_cs)
	(($(mono_cs) - NOT_STREAMING_SINCE_CS > ${STANDBY_STALL_SECONDS:-20} * 100)) || return 0
	wait_for_writable_primary 0 >/dev/null 2>&1 || return 0
	log "not streaming for ${STANDBY_STALL_SECONDS:-20}s although $PRIMARY_HOST:$PRIMARY_PORT is a writable primary: restarting to rejoin it (pg_rewind)"
	STOPPING=rejoin
	pg_ctl -D "$PGDATA" -m fast -w -t "$START_TIMEOUT_SECONDS" stop >&2 || true
	wait "$PG_PID" 2>/dev/null || true
	exit 0
}

on_signal() {
	local sig=$1
	log "received SIG$sig: forwarding it to postgres"
	[[ -n "$STOPPING" ]] || STOPPING=signal
	[[ -z "$PG_PID" ]] || kill -"$sig" "$PG_PID" 2>/dev/null || true
}

# Run postgres as a child: forward signals, run the agent every R seconds, exit with
# postgres's exit code.
supervise() {
	trap 'on_signal TERM' TERM
	trap 'on_signal INT' INT
	trap 'on_signal QUIT' QUIT
	postgres -D "$PGDATA" &
	PG_PID=$!
	log "postgres running (pid $PG_PID)"
	local sleeper finished code
	while :; do
		if [[ -z "$STOPPING" ]]; then
			agent_tick
		fi
		sleep "$(tick_seconds)" &
		sleeper=$!
		finished=
		code=0
		wait -n -p finished "$PG_PID" "$sleeper" 2>/dev/null || code=$?
		if [[ "${finished:-}" == "$PG_PID" ]]; then
			kill "$sleeper" 2>/dev/null || true
			wait "$sleeper" 2>/dev/null || true
			log "postgres exited with code $code"
			if [[ "$code" == 0 && "$STOPPING" == signal ]]; then
				release_lease
			fi
			exit "$code"
		fi
		if [[ -z "${finished:-}" ]]; then
			# Interrupted by a signal: keep waiting for postgres.
			kill "$sleeper" 2>/dev/null || true
			wait "$sleeper" 2>/dev/null || true
		fi
	done
}

main() {
	local role
	printf 'starting\n' >"$PHASE_FILE" 2>/dev/null || true
	role=$(read_role)
	case "$role" in
	primary | replica) ;;
	demoted)
		log "role demoted: possibly an old primary; rejoining as a standby, like a replica"
		role=replica
		;;
	*) die 2 "unknown role '$role' (label $LOCKSTEP_ROLE_LABEL must be primary, replica or demoted)" ;;
	esac
	log "role=$role PGDATA=$PGDATA port=$PGPORT"
	prepare_pgdata
	if [[ -e "$CLONE_MARKER" ]]; then
		log "previous clone was interrupted; discarding partial data"
		wipe_pgdata
	fi

	if [[ "$role" == primary ]] && ! wait_for_lease; then
		log "the role label changed while waiting for the lease: starting as a standby"
		role=replica
	fi
	# Standby data, and the Lease carries the last position of a primary that stopped
	# cleanly before this one: start as a standby, keeping the Lease; the agent promotes
	# it once it has received that position (promote_if_chosen).
	local keep_lease=
	if [[ "$role" == primary && -n "$RELEASED_LSN" ]] && has_data && is_standby_data; then
		log "standby data, and the Lease names $RELEASED_LSN as the last position of the primary before: starting as a standby, promoted once it has received it"
		role=replica
		keep_lease=1
	fi
	if [[ "$role" == primary ]]; then
		if ! has_data; then
			bootstrap_primary
		elif is_standby_data; then
			promote_local_standby
		else
			[[ ! -e "$INITDB_MARKER" ]] || { log "previous bootstrap was interrupted"; wipe_pgdata; bootstrap_primary; }
			log "existing primary data directory"
		fi
		write_config primary
	else
		require PRIMARY_HOST
		# No server of this container has run yet: if the Lease still names this pod
		# (it was fenced, or demoted while not running), say that it is down.
		[[ -n "$keep_lease" ]] || release_lease
		if ! has_data; then
			clone_from_primary
		else
			rejoin_as_standby
		fi
		write_config replica
	fi

	if [[ "$role" == primary && -n "$LEASE_NAME" ]]; then
		# Preparing (initdb, local promotion) may have taken longer than T: renew
		# once more right before the server accepts connections.
		wait_for_lease || die 5 "the role label changed before the writable start; restarting to rejoin as a standby"
	fi
	log "starting postgres as $role"
	STARTED_AS=$role
	[[ "$role" != primary ]] || SERVED_AS_PRIMARY=1
	supervise
}

main "$@"
