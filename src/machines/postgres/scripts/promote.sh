#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# lockstep PostgresCluster promote Job: promotes the standby at
# $TARGET_HOST:$TARGET_PORT to primary over the network with
# `SELECT pg_promote(wait => true)`, retrying until $PROMOTE_DEADLINE_SECONDS.
#
# Idempotent: if the target is already out of recovery
# (pg_is_in_recovery() = false) it succeeds without promoting again, so the Job
# can be retried safely. After promotion it issues a CHECKPOINT so that the new
# timeline is in pg_control, which pg_rewind of the old primary relies on.
#
# A planned switchover names the old primary (OLD_PRIMARY_HOST): before
# promoting, its client sessions are terminated (the operator has already moved
# the -rw Service away from it, so they cannot come back through it) and the
# target must have replayed everything the old primary wrote, so that no commit
# acknowledged before the switchover is lost. An unreachable old primary (a
# failover) skips this. The old primary is not stopped here: the operator
# restarts it, and entrypoint.sh rejoins it as a standby (pg_rewind).
#
# Needs: bash, psql. Connects as a superuser (pg_promote is superuser-only by
# default). The password is passed via PGPASSWORD in the environment only.
#
# Environment:
#   TARGET_HOST               required. Host of the standby to promote (the
#                             pod's DNS name under the headless Service, e.g.
#                             <cluster>-1.<cluster>.<ns>.svc).
#   TARGET_PORT               port (default 5432).
#   POSTGRES_USER             superuser (default postgres).
#   POSTGRES_PASSWORD         required. Superuser password (Secret).
#   PROMOTE_DEADLINE_SECONDS  give up after this long (default 120).
#   PROMOTE_WAIT_SECONDS      wait_seconds passed to pg_promote (default 60).
#   RETRY_INTERVAL_SECONDS    pause between attempts (default 2).
#   PG_BIN                    optional directory prepended to PATH.
#   OLD_PRIMARY_HOST          optional. The primary being switched away from.
#   OLD_PRIMARY_PORT          its port (default 5432).
#   CATCHUP_SECONDS           how long the target may take to replay the old
#                             primary's WAL (default 60).
#
# Exit codes: 0 target is primary (promoted now or already); 1 deadline passed
# without a successful promotion; 2 configuration error; 3 the target did not
# catch up with the old primary within CATCHUP_SECONDS (nothing was promoted).
# Last line on success: `lockstep-promote: <host>:<port> is primary (...)`.
set -Eeuo pipefail

LOCKSTEP_SCRIPT=promote
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require TARGET_HOST POSTGRES_PASSWORD
TARGET_PORT=${TARGET_PORT:-5432}
PROMOTE_DEADLINE_SECONDS=${PROMOTE_DEADLINE_SECONDS:-120}
PROMOTE_WAIT_SECONDS=${PROMOTE_WAIT_SECONDS:-60}
RETRY_INTERVAL_SECONDS=${RETRY_INTERVAL_SECONDS:-2}
OLD_PRIMARY_PORT=${OLD_PRIMARY_PORT:-5432}
CATCHUP_SECONDS=${CATCHUP_SECONDS:-60}
require_uint TARGET_PORT PROMOTE_DEADLINE_SECONDS PROMOTE_WAIT_SECONDS RETRY_INTERVAL_SECONDS OLD_PRIMARY_PORT CATCHUP_SECONDS

q() {
	PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=5 psql -X -A -t -q -v ON_ERROR_STOP=1 \
		-h "$TARGET_HOST" -p "$TARGET_PORT" -U "$POSTGRES_USER" -d postgres -c "$1" 2>&1
}

# The same against the old primary.
q_old() {
	PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=5 psql -X -A -t -q -v ON_ERROR_STOP=1 \
		-h "$OLD_PRIMARY_HOST" -p "$OLD_PRIMARY_PORT" -U "$POSTGRES_USER" -d postgres -c "$1" 2>&1
}

# A planned switchover: stop the old primary's writers, then wait for the
# target to replay up to the old primary's last WAL position.
fence_old_primary() {
	local state lsn replayed behind deadline=$((SECONDS + CATCHUP_SECONDS))
	if ! state=$(q_old 'SELECT pg_is_in_recovery()') || [[ "$state" != f ]]; then
		log "old primary $OLD_PRIMARY_HOST:$OLD_PRIMARY_PORT is not a reachable primary (${state//$'\n'/ }); promoting without waiting for it"
		return 0
	fi
	state=$(q_old "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()") ||
		log "WARNING: terminating the old primary's sessions failed: ${state//$'\n'/ }"
	log "terminated ${state:-0} client session(s) on the old primary $OLD_PRIMARY_HOST:$OLD_PRIMARY_PORT"
	lsn=$(q_old 'SELECT pg_current_wal_lsn()') || die 1 "cannot read the old primary's WAL position: ${lsn//$'\n'/ }"
	log "waiting up to ${CATCHUP_SECONDS}s for $TARGET_HOST:$TARGET_PORT to replay up to $lsn"
	while :; do
		if replayed=$(q "SELECT pg_last_wal_replay_lsn()") &&
			behind=$(q "SELECT pg_wal_lsn_diff('$lsn', pg_last_wal_replay_lsn()) > 0") &&
			[[ "$behind" == f ]]; then
			log "target replayed $replayed, at or past $lsn"
			return 0
		fi
		((SECONDS < deadline)) ||
			die 3 "$TARGET_HOST:$TARGET_PORT did not replay up to $lsn within ${CATCHUP_SECONDS}s (at ${replayed:-unknown}); not promoting it"
		sleep "$RETRY_INTERVAL_SECONDS"
	done
}

if [[ -n "${OLD_PRIMARY_HOST:-}" ]] && [[ "$(q 'SELECT pg_is_in_recovery()' || true)" == t ]]; then
	fence_old_primary
fi

deadline=$((SECONDS + PROMOTE_DEADLINE_SECONDS))
attempt=0
while :; do
	attempt=$((attempt + 1))
	if out=$(q 'SELECT pg_is_in_recovery()'); then
		if [[ "$out" == f ]]; then
			# pg_rewind (rejoining old primaries) reads the timeline from
			# pg_control, which a promoted server only updates at its next
			# checkpoint: force one now.
			q 'CHECKPOINT' >/dev/null || log "WARNING: CHECKPOINT after promotion failed; a rejoining old primary's pg_rewind may see the old timeline"
			if ((attempt == 1)); then
				echo "lockstep-promote: $TARGET_HOST:$TARGET_PORT is primary (already, nothing to do)"
			else
				echo "lockstep-promote: $TARGET_HOST:$TARGET_PORT is primary (promoted)"
			fi
			exit 0
		fi
		log "promoting $TARGET_HOST:$TARGET_PORT (attempt $attempt)"
		if out=$(q "SELECT pg_promote(wait => true, wait_seconds => $PROMOTE_WAIT_SECONDS)"); then
			if [[ "$out" == t ]]; then
				log "pg_promote returned true"
				continue # re-check pg_is_in_recovery() and report
			fi
			out="pg_promote returned '$out' (not promoted within ${PROMOTE_WAIT_SECONDS}s)"
		fi
	fi
	if ((SECONDS >= deadline)); then
		die 1 "could not promote $TARGET_HOST:$TARGET_PORT within ${PROMOTE_DEADLINE_SECONDS}s after $attempt attempts; last error: ${out//$'\n'/ }"
	fi
	log "attempt $attempt failed: ${out//$'\n'/ }; retrying in ${RETRY_INTERVAL_SECONDS}s"
	sleep "$RETRY_INTERVAL_SECONDS"
done
