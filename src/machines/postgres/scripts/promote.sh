#!/usr/bin/env bash
# lockstep PostgresCluster promote Job: promotes the standby at
# $TARGET_HOST:$TARGET_PORT to primary over the network with
# `SELECT pg_promote(wait => true)`, retrying until $PROMOTE_DEADLINE_SECONDS.
#
# Idempotent: if the target is already out of recovery
# (pg_is_in_recovery() = false) it succeeds without promoting again, so the Job
# can be retried safely. After promotion it issues a CHECKPOINT so that the new
# timeline is in pg_control, which pg_rewind of the old primary relies on. It does not fence the old primary; the operator must
# relabel / stop it (a relabelled old primary rejoins via entrypoint.sh's
# pg_rewind path).
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
#
# Exit codes: 0 target is primary (promoted now or already); 1 deadline passed
# without a successful promotion; 2 configuration error.
# Last line on success: `lockstep-promote: <host>:<port> is primary (...)`.
set -Eeuo pipefail

log() { printf '%s lockstep-promote: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
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

[[ -n "${PG_BIN:-}" ]] && export PATH="$PG_BIN:$PATH"
require TARGET_HOST POSTGRES_PASSWORD
TARGET_PORT=${TARGET_PORT:-5432}
POSTGRES_USER=${POSTGRES_USER:-postgres}
PROMOTE_DEADLINE_SECONDS=${PROMOTE_DEADLINE_SECONDS:-120}
PROMOTE_WAIT_SECONDS=${PROMOTE_WAIT_SECONDS:-60}
RETRY_INTERVAL_SECONDS=${RETRY_INTERVAL_SECONDS:-2}
for v in TARGET_PORT PROMOTE_DEADLINE_SECONDS PROMOTE_WAIT_SECONDS RETRY_INTERVAL_SECONDS; do
	[[ "${!v}" =~ ^[0-9]+$ ]] || die 2 "$v must be a non-negative integer, got '${!v}'"
done

q() {
	PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=5 psql -X -A -t -q -v ON_ERROR_STOP=1 \
		-h "$TARGET_HOST" -p "$TARGET_PORT" -U "$POSTGRES_USER" -d postgres -c "$1" 2>&1
}

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
