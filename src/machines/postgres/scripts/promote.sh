#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# lockstep PostgresCluster promote Job: waits until the standby at
# $TARGET_HOST:$TARGET_PORT has become the primary, then checkpoints it.
#
# It promotes nothing itself. The target's own agent (lockstep instance) promotes
# its server once the pod is labelled primary and the primary Lease names it,
# right after a renewal of its own, and guards it from then on. A promotion
# from outside could arrive late - after the operator gave up on this target
# and handed the Lease to another - and make a second writable server; this
# Job waiting instead of promoting is what rules that out.
#
# After the promotion it issues a CHECKPOINT, so that the new timeline is in
# pg_control, which pg_rewind of the old primary relies on. Idempotent: a
# target that is already a primary succeeds at once (and is checkpointed again).
#
# Needs: bash, psql. Connects as a superuser (CHECKPOINT needs one, or
# pg_checkpoint). The password is passed via PGPASSWORD in the environment only.
#
# Environment:
#   TARGET_HOST               required. Host of the standby being promoted (the
#                             pod's DNS name under the headless Service, e.g.
#                             <cluster>-1.<cluster>.<ns>.svc).
#   TARGET_PORT               port (default 5432).
#   POSTGRES_USER             superuser (default postgres).
#   POSTGRES_PASSWORD         required. Superuser password (Secret).
#   PROMOTE_DEADLINE_SECONDS  give up after this long (default 120).
#   RETRY_INTERVAL_SECONDS    pause between looks (default 2).
#   PG_BIN                    optional directory prepended to PATH.
#
# Exit codes: 0 the target is primary; 1 the deadline passed and it is not (or
# did not answer); 2 configuration error.
# Last line on success: `lockstep-promote: <host>:<port> is primary (...)`.
set -Eeuo pipefail

LOCKSTEP_SCRIPT=promote
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require TARGET_HOST POSTGRES_PASSWORD
TARGET_PORT=${TARGET_PORT:-5432}
PROMOTE_DEADLINE_SECONDS=${PROMOTE_DEADLINE_SECONDS:-120}
RETRY_INTERVAL_SECONDS=${RETRY_INTERVAL_SECONDS:-2}
require_uint TARGET_PORT PROMOTE_DEADLINE_SECONDS RETRY_INTERVAL_SECONDS

q() {
	PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=5 psql -X -A -t -q -v ON_ERROR_STOP=1 \
		-h "$TARGET_HOST" -p "$TARGET_PORT" -U "$POSTGRES_USER" -d postgres -c "$1" 2>&1
}

deadline=$((SECONDS + PROMOTE_DEADLINE_SECONDS))
look=0
while :; do
	look=$((look + 1))
	if out=$(q 'SELECT pg_is_in_recovery()'); then
		if [[ "$out" == f ]]; then
			# pg_rewind (rejoining old primaries) reads the timeline from
			# pg_control, which a promoted server only updates at its next
			# checkpoint: force one now.
			q 'CHECKPOINT' >/dev/null || log "WARNING: CHECKPOINT after promotion failed; a rejoining old primary's pg_rewind may see the old timeline"
			if ((look == 1)); then
				echo "lockstep-promote: $TARGET_HOST:$TARGET_PORT is primary (already)"
			else
				echo "lockstep-promote: $TARGET_HOST:$TARGET_PORT is primary (promoted by its agent)"
			fi
			exit 0
		fi
		out="still in recovery (its agent promotes it once it holds the Lease and is labelled primary)"
	fi
	if ((SECONDS >= deadline)); then
		die 1 "$TARGET_HOST:$TARGET_PORT did not become primary within ${PROMOTE_DEADLINE_SECONDS}s ($look looks); last: ${out//$'\n'/ }"
	fi
	((look > 1)) || log "waiting for $TARGET_HOST:$TARGET_PORT to be promoted by its agent"
	sleep "$RETRY_INTERVAL_SECONDS"
done
