#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# lockstep PostgresCluster survey Job: before a failover, the operator asks every
# instance how far it got, to promote the most advanced standby (issue 12).
#
# Connects to each `pod-name=host` of SURVEY_HOSTS as the superuser and prints ONE
# line of JSON to stdout and to the termination log (the operator reads it from the
# Job pod's terminated state):
#
#   {"<pod-name>": {"receive": "<lsn>", "replay": "<lsn>", "timeline": <n>,
#                   "inRecovery": true}, ...}
#
# receive = pg_last_wal_receive_lsn() (the last WAL position received and flushed
# from a primary; a standby that never streamed has none: its replay position is
# used), replay = pg_last_wal_replay_lsn(). A server not in recovery (a primary)
# reports pg_current_wal_lsn() for both with "inRecovery": false. Pods that do not
# answer within CONNECT_TIMEOUT_SECONDS are omitted.
#
# timeline = the timeline of the WAL at the receive position: the newest timeline
# whose segment file in pg_wal holds the byte before it (the WAL receiver names each
# segment by the timeline it streamed it on). PostgreSQL gives a standby's timeline
# through SQL only while its WAL receiver runs (pg_stat_wal_receiver), and not at all
# once its primary is gone, which is when a failover surveys; the checkpoint's
# timeline lags a switch until the next restartpoint. Those two still count, as
# lower bounds, when no segment file is found.
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

# One row: in_recovery|receive|replay|timeline (a primary: f|current|current|its own).
SQL="WITH s AS (
	SELECT pg_is_in_recovery() AS rec,
		CASE WHEN pg_is_in_recovery()
			THEN coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
			ELSE pg_current_wal_lsn() END AS receive,
		CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS replay,
		(SELECT setting::numeric FROM pg_settings WHERE name = 'wal_segment_size') AS seg
), f AS (
	SELECT *, floor(greatest(receive - '0/1'::pg_lsn, 0) / seg) AS segno, 4294967296 / seg AS per_id FROM s
), n AS (
	SELECT *, lpad(upper(to_hex(floor(segno / per_id)::bigint)), 8, '0')
		|| lpad(upper(to_hex(mod(segno, per_id)::bigint)), 8, '0') AS suffix FROM f
)
SELECT rec, receive, replay, greatest(
	(SELECT max(('x' || substr(name, 1, 8))::bit(32)::bigint) FROM pg_ls_waldir()
		WHERE name ~ '^[0-9A-F]{24}\$' AND substr(name, 9) = n.suffix),
	(SELECT timeline_id FROM pg_control_checkpoint()),
	(SELECT received_tli FROM pg_stat_wal_receiver LIMIT 1))
FROM n"

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
	IFS='|' read -r rec receive replay timeline <<<"$row"
	[[ "$timeline" =~ ^[0-9]+$ ]] || timeline=null
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
	log "$pod ($host): receive $receive replay $replay timeline $timeline inRecovery $in_recovery"
	out+="$sep$(json_string "$pod"): {\"receive\": $(json_string "$receive"), \"replay\": $(json_string "$replay"), \"timeline\": $timeline, \"inRecovery\": $in_recovery}"
	sep=", "
done
out+="}"
printf '%s\n' "$out"
if [[ -w "$TERMINATION_LOG" ]] || { [[ ! -e "$TERMINATION_LOG" ]] && [[ -w "$(dirname "$TERMINATION_LOG")" ]]; }; then
	printf '%s\n' "$out" >"$TERMINATION_LOG" || log "WARNING: cannot write $TERMINATION_LOG"
fi
((standbys > 0)) || die 1 "no standby answered"
