# shellcheck shell=bash
# lockstep PostgresCluster pod scripts: what they share. Sourced, never run:
#
#   LOCKSTEP_SCRIPT=backup                      # the tag in every log line
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It ships in the same ConfigMap as the scripts (`render::SCRIPTS`), so it is
# always next to them, at the same version.
#
# Logging and failure:
#   log MESSAGE...           one UTC-stamped line on stderr, tagged lockstep-$LOCKSTEP_SCRIPT
#   die CODE MESSAGE...      log "FATAL: ..." and exit CODE
#   require VAR...           die 2 unless every VAR is set and non-empty
#   require_uint VAR...      die 2 unless every VAR is a non-negative integer
#   require_tools TOOL...    die 2 unless every TOOL is on PATH
#
# Waiting for the database (backup.sh, restore.sh; PGPASSWORD set):
#   await_primary HOST PORT SECONDS SETTING
#                            return once HOST:PORT lets POSTGRES_USER in as a
#                            writable primary; logs once while it waits. Prints
#                            the reason on stdout and returns 1 at once when the
#                            password is refused, else after SECONDS (SETTING
#                            names them): why=$(await_primary ...) || die N "$why"
#                            A cluster that has just turned Ready, or just failed
#                            over, is routed by its -rw Service a moment later.
# An ERR trap logs failures not handled explicitly (exit 1 or > 5) with the
# command's unexpanded source text, so no secret value is ever printed.
# PG_BIN, when set, is prepended to PATH; POSTGRES_USER defaults to postgres.
#
# S3 through `curl --aws-sigv4` (no AWS CLI), for backup.sh and restore.sh:
#   s3_configure             defaults and checks of S3_* (see backup.sh's header)
#   s3_put_file KEY FILE     upload; s3_get_file KEY FILE download;
#   s3_size KEY              print the stored object's Content-Length.
# They need $WORK (a private temp dir) for responses and headers. Credentials
# reach curl on stdin (curl -K -), never in argv.

log() { printf '%s lockstep-%s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${LOCKSTEP_SCRIPT:-script}" "$*" >&2; }
die() {
	local code=$1
	shift
	log "FATAL: $*"
	exit "$code"
}
on_err() { (($1 >= 2 && $1 <= 5)) || log "FATAL: unexpected failure (exit $1) at line $2: $3"; }
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR
require() {
	local v
	for v in "$@"; do
		[[ -n "${!v:-}" ]] || die 2 "required environment variable $v is not set"
	done
}
require_uint() {
	local v
	for v in "$@"; do
		[[ "${!v}" =~ ^[0-9]+$ ]] || die 2 "$v must be a non-negative integer, got '${!v}'"
	done
}
require_tools() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || die 2 "required tool '$t' not found in the image (lockstep-$LOCKSTEP_SCRIPT needs: $*)"
	done
}

await_primary() {
	local host=$1 port=$2 seconds=$3 setting=$4 attempt=0 out
	local deadline=$((SECONDS + seconds))
	while :; do
		attempt=$((attempt + 1))
		if out=$(PGCONNECT_TIMEOUT=10 psql -X -A -t -q -w -h "$host" -p "$port" -U "$POSTGRES_USER" \
			-d postgres -c 'SELECT pg_is_in_recovery()' 2>&1); then
			[[ "$out" != f ]] || return 0
			out="the server is in recovery (a standby), not a writable primary"
		fi
		out=${out//$'\n'/ }
		if [[ "$out" == *"authentication failed"* ]]; then
			echo "$host:$port refused $POSTGRES_USER: $out"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			echo "$host:$port not writable after ${seconds}s ($setting, $attempt attempts): $out"
			return 1
		fi
		((attempt > 1)) || log "waiting up to ${seconds}s for $host:$port to accept writes: $out"
		sleep 2
	done
}

[[ -z "${PG_BIN:-}" ]] || export PATH="$PG_BIN:$PATH"
# The superuser every script connects as.
POSTGRES_USER=${POSTGRES_USER:-postgres}

s3_configure() {
	require S3_ENDPOINT S3_BUCKET AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	S3_REGION=${S3_REGION:-${AWS_REGION:-us-east-1}}
	S3_FORCE_PATH_STYLE=${S3_FORCE_PATH_STYLE:-true}
	S3_TIMEOUT_SECONDS=${S3_TIMEOUT_SECONDS:-3600}
	require_uint S3_TIMEOUT_SECONDS
	[[ "$S3_ENDPOINT" =~ ^https?://[^/]+/?$ ]] || die 2 "S3_ENDPOINT must look like http(s)://host[:port], got '$S3_ENDPOINT'"
	[[ "$S3_BUCKET" =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ ]] || die 2 "S3_BUCKET '$S3_BUCKET' is not a valid bucket name"
	S3_PREFIX=${S3_PREFIX:-}
	S3_PREFIX=${S3_PREFIX#/}
	S3_PREFIX=${S3_PREFIX%/}
}
curl_cfg_escape() {
	local v=$1 bs='\' dq='"'
	v=${v//"$bs"/"$bs$bs"}
	v=${v//"$dq"/"$bs$dq"}
	printf '%s' "$v"
}
s3_url() {
	local endpoint=${S3_ENDPOINT%/}
	if [[ "$S3_FORCE_PATH_STYLE" == true ]]; then
		printf '%s/%s/%s' "$endpoint" "$S3_BUCKET" "$1"
	else
		printf '%s://%s.%s/%s' "${endpoint%%://*}" "$S3_BUCKET" "${endpoint#*://}" "$1"
	fi
}
# s3_request METHOD KEY BODY_OUT [curl args...]; prints the HTTP status code.
s3_request() {
	local request=(-X "$1") key=$2 out=$3
	[[ "$1" != HEAD ]] || request=(-I)
	shift 3
	{
		printf 'user = "%s:%s"\n' "$(curl_cfg_escape "$AWS_ACCESS_KEY_ID")" "$(curl_cfg_escape "$AWS_SECRET_ACCESS_KEY")"
		if [[ -n "${AWS_SESSION_TOKEN:-}" ]]; then
			printf 'header = "x-amz-security-token: %s"\n' "$(curl_cfg_escape "$AWS_SESSION_TOKEN")"
		fi
	} | curl -K - --silent --show-error --aws-sigv4 "aws:amz:$S3_REGION:s3" \
		--connect-timeout 10 --max-time "$S3_TIMEOUT_SECONDS" --retry 2 \
		"${request[@]}" -o "$out" -w '%{http_code}' "$@" "$(s3_url "$key")"
}
s3_empty_sha() { printf '' | sha256sum | cut -d' ' -f1; }
s3_put_file() { # KEY FILE
	local sha code
	sha=$(sha256sum "$2" | cut -d' ' -f1)
	code=$(s3_request PUT "$1" "$WORK/response" -T "$2" \
		-H "x-amz-content-sha256: $sha" -H "Content-Type: application/octet-stream") || {
		log "curl failed uploading to s3://$S3_BUCKET/$1 (endpoint $S3_ENDPOINT)"
		return 1
	}
	if [[ "$code" != 2?? ]]; then
		log "upload of s3://$S3_BUCKET/$1 failed: HTTP $code: $(head -c 2000 "$WORK/response" 2>/dev/null | tr '\n' ' ')"
		return 1
	fi
}
s3_get_file() { # KEY FILE
	local code
	code=$(s3_request GET "$1" "$2" -H "x-amz-content-sha256: $(s3_empty_sha)") || {
		log "curl failed downloading s3://$S3_BUCKET/$1 (endpoint $S3_ENDPOINT)"
		return 1
	}
	if [[ "$code" != 2?? ]]; then
		log "download of s3://$S3_BUCKET/$1 failed: HTTP $code: $(head -c 2000 "$2" 2>/dev/null | tr '\n' ' ')"
		return 1
	fi
}
s3_size() { # KEY -> prints Content-Length of the stored object
	local code
	code=$(s3_request HEAD "$1" /dev/null -D "$WORK/headers" -H "x-amz-content-sha256: $(s3_empty_sha)") || return 1
	[[ "$code" == 2?? ]] || {
		log "HEAD s3://$S3_BUCKET/$1 returned HTTP $code"
		return 1
	}
	tr -d '\r' <"$WORK/headers" | sed -n 's/^[Cc]ontent-[Ll]ength:[[:space:]]*//p' | tail -n 1
}
