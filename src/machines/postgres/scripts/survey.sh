#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# lockstep PostgresCluster survey Job: before a failover, the operator asks every
# instance how far it got, to promote the most advanced standby (issue 12).
#
# Connects to each `pod-name=host` of SURVEY_HOSTS as the superuser and prints ONE
# line of JSON to stdout and to the termination log (the operator reads it from the
# Job pod's terminated state):
#
#   {"<pod-name>": {"receive": "<lsn>", "replay": "<lsn>", "inRecovery": true}, ...}
#
# receive = pg_last_wal_receive_lsn() (the last WAL position received and flushed
# from a primary; a standby that never streamed has none: its replay position is
# used), replay = pg_last_wal_replay_lsn(). A server not in recovery (a primary)
# reports pg_current_wal_lsn() for both with "inRecovery": false. Pods that do not
# answer within CONNECT_TIMEOUT_SECONDS are omitted.
#
# Needs: bash, psql. The password goes through PGPASSWORD only.
#
# Environment:
#   SURVEY_HOSTS             required. Space-separated pod-name=host pairs, e.g.
#                            "pg-1=pg-1.pg.ns.svc pg-2=pg-2.pg.ns.svc"; a host may
#                            end in :<port> (else SURVEY_PORT).
#   SURVEY_PORT              port (default 5432).
#   POSTGRES_USER            superuser (default postgres).
#   POSTGRES_PASSWORD        required. Superuser password (Secret).
#   CONNECT_TIMEOUT_SECONDS  per host (default 5).
#   TERMINATION_LOG          where the line also goes (default
#                            /dev/termination-log; skipped if not writable).
#   PG_BIN                   optional directory prepended to PATH.
#
# Exit codes: 0 at least one standby answered; 1 none did (the line is still
# printed); 2 configuration error.
set -Eeuo pipefail

LOCKSTEP_SCRIPT=survey
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SURVEY_PORT=${SURVEY_PORT:-5432}
CONNECT_TIMEOUT_SECONDS=${CONNECT_TIMEOUT_SECONDS:-5}
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
require SURVEY_HOSTS POSTGRES_PASSWORD
require_uint SURVEY_PORT CONNECT_TIMEOUT_SECONDS

json_string() {
	local v=$1
	v=${v//\\/\\\\}
	v=${v//\"/\\\"}
	printf '"%s"' "$v"
}

# One row: in_recovery|receive|replay (a primary: f|current|current).
SQL="SELECT pg_is_in_recovery(),
	CASE WHEN pg_is_in_recovery()
		THEN coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
		ELSE pg_current_wal_lsn() END,
	CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END"

out="{" sep="" standbys=0
for pair in $SURVEY_HOSTS; do
	[[ "$pair" == *=* ]] || die 2 "SURVEY_HOSTS entry '$pair' is not pod-name=host"
	pod=${pair%%=*}
	host=${pair#*=}
	[[ -n "$pod" && -n "$host" ]] || die 2 "SURVEY_HOSTS entry '$pair' is not pod-name=host"
	port=$SURVEY_PORT
	if [[ "$host" =~ ^(.+):([0-9]+)$ ]]; then
		host=${BASH_REMATCH[1]}
		port=${BASH_REMATCH[2]}
	fi
	if ! row=$(PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT="$CONNECT_TIMEOUT_SECONDS" \
		timeout "$((CONNECT_TIMEOUT_SECONDS * 2))" psql -X -A -t -q -v ON_ERROR_STOP=1 \
		-h "$host" -p "$port" -U "$POSTGRES_USER" -d postgres -c "$SQL" 2>&1); then
		log "$pod ($host): no answer: ${row//$'\n'/ }"
		continue
	fi
	IFS='|' read -r rec receive replay <<<"$row"
	if [[ -z "$receive" || -z "$replay" ]]; then
		log "$pod ($host): no WAL position (${row//$'\n'/ }); omitted"
		continue
	fi
	if [[ "$rec" == t ]]; then
		in_recovery=true
		standbys=$((standbys + 1))
	else
		in_recovery=false
	fi
	log "$pod ($host): receive $receive replay $replay inRecovery $in_recovery"
	out+="$sep$(json_string "$pod"): {\"receive\": $(json_string "$receive"), \"replay\": $(json_string "$replay"), \"inRecovery\": $in_recovery}"
	sep=", "
done
out+="}"
printf '%s\n' "$out"
if [[ -w "$TERMINATION_LOG" ]] || { [[ ! -e "$TERMINATION_LOG" ]] && [[ -w "$(dirname "$TERMINATION_LOG")" ]]; }; then
	printf '%s\n' "$out" >"$TERMINATION_LOG" || log "WARNING: cannot write $TERMINATION_LOG"
fi
((standbys > 0)) || die 1 "no standby answered"
