#!/usr/bin/env bash
# lockstep PostgresCluster pod entrypoint (the container's main command).
#
# Decides from the pod's role label and the state of $PGDATA what to do, then
# execs `postgres` in the foreground:
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
#
# Exit codes (only reached before exec; afterwards postgres's own):
#   2 configuration error (missing/invalid variable, unknown role, PGDATA
#     non-empty but not a data directory)
#   3 the primary did not become reachable+writable within PRIMARY_WAIT_SECONDS
#   4 bootstrap / clone / rewind / local promotion failed
set -Eeuo pipefail
umask 0077

log() { printf '%s lockstep-entrypoint: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
die() { local code=$1; shift; log "FATAL: $*"; exit "$code"; }
# Failures not handled explicitly (exit 1) still get a line naming the command
# (unexpanded source text, so no secret values).
on_err() { (($1 >= 2 && $1 <= 5)) || log "FATAL: unexpected failure (exit $1) at line $2: $3"; }
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR
require() {
	local v
	for v in "$@"; do
		[[ -n "${!v:-}" ]] || die 2 "required environment variable $v is not set"
	done
}
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

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
[[ -n "${PG_BIN:-}" ]] && export PATH="$PG_BIN:$PATH"
[[ "$(id -u)" != 0 ]] || die 2 "must not run as root; run as the postgres user (runAsUser: 999)"

require PGDATA
PGDATA=${PGDATA%/}
PGPORT=${PGPORT:-5432}
POSTGRES_USER=${POSTGRES_USER:-postgres}
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
for v in PGPORT PRIMARY_PORT PRIMARY_WAIT_SECONDS RETRY_INTERVAL_SECONDS START_TIMEOUT_SECONDS MAX_WAL_SENDERS ROLE_WAIT_SECONDS; do
	is_uint "${!v}" || die 2 "$v must be a non-negative integer, got '${!v}'"
done
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
	mkdir -p "$PGDATA"
	chmod 0700 "$PGDATA" || die 2 "cannot chmod 0700 $PGDATA (owned by $(stat -c %u "$PGDATA"), running as $(id -u))"
	mkdir -p "$PG_SOCKET_DIR" 2>/dev/null || true
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

main() {
	local role
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
		if ! has_data; then
			clone_from_primary
		else
			rejoin_as_standby
		fi
		write_config replica
	fi

	log "starting postgres as $role"
	exec postgres -D "$PGDATA"
}

main "$@"
