#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# lockstep PostgresCluster base-backup Job (spec.backup.method BaseBackup): asks the
# primary's instance manager to take a pgBackRest base backup, and waits for its
# outcome. The manager runs `pgbackrest backup` next to the data directory; this Job
# only asks and reports, so its exit code is the backup's outcome and the operator
# counts it like any backup Job.
#
# The request is idempotent per BACKUP_NAME (the Job's name): asking again while it
# runs, or after it finished, answers the same backup, and a manager that restarted
# finds a finished one in the repository by its annotation (lockstep-token).
#
# Image requirements: bash, curl.
#
# Environment:
#   MANAGER_URL             required. http://<cluster>-rw.<ns>.svc:9187
#   BACKUP_NAME             required. The token (the Job's name, downward API).
#   LOCKSTEP_ENDPOINT_TOKEN required. The cluster's endpoint token (secretKeyRef of
#                           <cluster>-endpoint-token, key token): sent as
#                           `Authorization: Bearer`, handed to curl on stdin (-K -),
#                           never in argv, never printed.
#   BACKUP_TIMEOUT_SECONDS  how long the backup may run (default 3600).
#   BACKUP_RETENTION        optional: retention-count=N or retention-days=N.
#   BACKUP_WAIT_SECONDS     how long a refusal (no primary behind the Service, a
#                           standby, another backup running) or an unreachable
#                           manager is waited out (default 120).
#   BACKUP_POLL_SECONDS     between two asks (default 5).
#   TERMINATION_LOG         where the last line also goes, for the operator to read
#                           the first recoverable point (default /dev/termination-log;
#                           skipped if not writable).
#
# Exit codes: 0 taken; 2 configuration error / missing tool / the manager refused the
# endpoint token (401); 3 no primary took the request within BACKUP_WAIT_SECONDS; 4 the
# backup failed.
# Last line on success (stdout):
#   lockstep-backup: base backup <label> (<what the repository holds>)
set -Eeuo pipefail

LOCKSTEP_SCRIPT=basebackup
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require MANAGER_URL BACKUP_NAME
[[ -n "${LOCKSTEP_ENDPOINT_TOKEN:-}" ]] ||
	die 2 "LOCKSTEP_ENDPOINT_TOKEN is not set: the Secret <cluster>-endpoint-token (key token) is missing"
require_tools curl
BACKUP_TIMEOUT_SECONDS=${BACKUP_TIMEOUT_SECONDS:-3600}
BACKUP_WAIT_SECONDS=${BACKUP_WAIT_SECONDS:-120}
BACKUP_POLL_SECONDS=${BACKUP_POLL_SECONDS:-5}
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
require_uint BACKUP_TIMEOUT_SECONDS BACKUP_WAIT_SECONDS BACKUP_POLL_SECONDS
[[ "$BACKUP_NAME" =~ ^[A-Za-z0-9.-]+$ ]] || die 2 "BACKUP_NAME may only contain A-Z a-z 0-9 . -"
# A bearer token's characters (RFC 6750), so it cannot break out of curl's config line.
[[ "$LOCKSTEP_ENDPOINT_TOKEN" =~ ^[A-Za-z0-9._~+/=-]+$ ]] ||
	die 2 "LOCKSTEP_ENDPOINT_TOKEN may only contain A-Z a-z 0-9 - . _ ~ + / ="
case ${BACKUP_RETENTION:-} in
"" | retention-count=[1-9]* | retention-days=[1-9]*) ;;
*) die 2 "BACKUP_RETENTION must be retention-count=N or retention-days=N, not '$BACKUP_RETENTION'" ;;
esac

url="$MANAGER_URL/backup?token=$BACKUP_NAME&timeout=$BACKUP_TIMEOUT_SECONDS${BACKUP_RETENTION:+&$BACKUP_RETENTION}"
log "asking $MANAGER_URL for a base backup ($BACKUP_NAME)"
waited_since=$SECONDS
said=""
while :; do
	# The header on stdin (curl's config), so the token is in no process's argv.
	answer=$(curl -sS --max-time 10 -X POST -K - "$url" 2>&1 <<<"header = \"Authorization: Bearer $LOCKSTEP_ENDPOINT_TOKEN\"") ||
		answer="unreachable ${answer##*curl: }"
	answer=${answer%%$'\n'*}
	case $answer in
	running*)
		waited_since=$SECONDS
		[[ $said == running ]] || log "the primary's manager runs the backup"
		said=running
		;;
	succeeded\ *)
		out="lockstep-backup: base backup ${answer#succeeded }"
		echo "$out"
		if [[ -w "$TERMINATION_LOG" ]] || { [[ ! -e "$TERMINATION_LOG" ]] && [[ -w "$(dirname "$TERMINATION_LOG")" ]]; }; then
			printf '%s\n' "$out" >"$TERMINATION_LOG" || log "WARNING: cannot write $TERMINATION_LOG"
		fi
		exit 0
		;;
	failed\ *) die 4 "the base backup failed: ${answer#failed }" ;;
	unauthorized*) die 2 "the primary's manager refused this Job's endpoint token: ${answer#unauthorized }" ;;
	*)
		# refused (a standby behind the Service for a moment, another backup) or
		# unreachable: waited out within BACKUP_WAIT_SECONDS of the last progress.
		[[ $said == "$answer" ]] || log "$answer"
		said=$answer
		((SECONDS - waited_since < BACKUP_WAIT_SECONDS)) ||
			die 3 "no primary took the base backup within ${BACKUP_WAIT_SECONDS}s: $answer"
		;;
	esac
	sleep "$BACKUP_POLL_SECONDS"
done
