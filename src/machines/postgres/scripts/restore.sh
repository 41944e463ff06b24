#!/usr/bin/env bash
# lockstep PostgresCluster restore Job: download a dump written by backup.sh
# from S3-compatible storage (a given key, or the one the `latest` pointer
# names) and pg_restore it into a running instance.
#
# The database is created if it does not exist. pg_restore runs with
# --clean --if-exists --single-transaction --exit-on-error: objects in the dump
# replace existing ones of the same name, and a failure leaves the database as
# it was. Objects keep their owners, so roles owning objects must exist in the
# target (add "--no-owner --no-privileges" to RESTORE_ARGS to restore everything
# as POSTGRES_USER instead).
#
# Image requirements: bash, psql and pg_restore (same or newer major as the
# dump), curl >= 7.75, sha256sum. Same image as backup.sh.
# Secrets: AWS keys go to curl on stdin, the DB password via PGPASSWORD; never
# in argv, never printed.
#
# Environment:
#   TARGET_HOST             required. Instance to restore into (normally the
#                           primary / -rw Service of the target cluster).
#   TARGET_PORT             port (default 5432).
#   POSTGRES_USER           user (default postgres); must be able to create
#                           the database and own/replace the objects.
#   POSTGRES_PASSWORD       required (Secret).
#   RESTORE_DATABASE        target database (default $POSTGRES_DB, else postgres).
#   RESTORE_KEY             object key relative to the bucket, e.g.
#                           backups/pg1/20250101T000000Z.dump. If empty, the key
#                           is read from <S3_PREFIX>/<CLUSTER_NAME>/latest.
#   CLUSTER_NAME            required when RESTORE_KEY is empty: the cluster
#                           whose backups to use (the *source* cluster).
#   S3_ENDPOINT, S3_BUCKET, S3_PREFIX, S3_REGION, S3_FORCE_PATH_STYLE,
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
#   S3_TIMEOUT_SECONDS      as for backup.sh.
#   RESTORE_ARGS            extra pg_restore arguments, word-split (default empty).
#   RESTORE_TMPDIR          where the dump is staged (default $TMPDIR or /tmp).
#   PG_BIN                  optional directory prepended to PATH.
#
# Exit codes: 0 restored; 2 configuration error / missing tool; 4 download
# failed (including: key or latest pointer not found); 5 pg_restore failed.
# Last line on success (stdout):
#   lockstep-restore: restored s3://<bucket>/<key> into <host>:<port>/<db> (<N> bytes)
set -Eeuo pipefail
umask 0077

log() { printf '%s lockstep-restore: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
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
require_tools() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || die 2 "required tool '$t' not found in the image (restore image must contain psql, pg_restore, curl, sha256sum)"
	done
}

[[ -n "${PG_BIN:-}" ]] && export PATH="$PG_BIN:$PATH"
require TARGET_HOST POSTGRES_PASSWORD S3_ENDPOINT S3_BUCKET AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
require_tools psql pg_restore curl sha256sum
TARGET_PORT=${TARGET_PORT:-5432}
POSTGRES_USER=${POSTGRES_USER:-postgres}
RESTORE_DATABASE=${RESTORE_DATABASE:-${POSTGRES_DB:-postgres}}
RESTORE_KEY=${RESTORE_KEY:-}
RESTORE_ARGS=${RESTORE_ARGS:-}
S3_REGION=${S3_REGION:-${AWS_REGION:-us-east-1}}
S3_FORCE_PATH_STYLE=${S3_FORCE_PATH_STYLE:-true}
S3_TIMEOUT_SECONDS=${S3_TIMEOUT_SECONDS:-3600}
RESTORE_TMPDIR=${RESTORE_TMPDIR:-${TMPDIR:-/tmp}}
[[ "$TARGET_PORT" =~ ^[0-9]+$ ]] || die 2 "TARGET_PORT must be a number, got '$TARGET_PORT'"
[[ "$S3_TIMEOUT_SECONDS" =~ ^[0-9]+$ ]] || die 2 "S3_TIMEOUT_SECONDS must be a number"
[[ "$S3_ENDPOINT" =~ ^https?://[^/]+/?$ ]] || die 2 "S3_ENDPOINT must look like http(s)://host[:port], got '$S3_ENDPOINT'"
[[ "$S3_BUCKET" =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ ]] || die 2 "S3_BUCKET '$S3_BUCKET' is not a valid bucket name"
S3_PREFIX=${S3_PREFIX:-}
S3_PREFIX=${S3_PREFIX#/}
S3_PREFIX=${S3_PREFIX%/}
if [[ -z "$RESTORE_KEY" ]]; then
	require CLUSTER_NAME
	[[ "$S3_PREFIX$CLUSTER_NAME" =~ ^[A-Za-z0-9._/-]+$ ]] || die 2 "S3_PREFIX/CLUSTER_NAME may only contain A-Z a-z 0-9 . _ / -"
fi
[[ "$RESTORE_KEY" =~ ^[A-Za-z0-9._/-]*$ ]] || die 2 "RESTORE_KEY may only contain A-Z a-z 0-9 . _ / -"

# ---- S3 via curl --aws-sigv4 (shared with backup.sh; keep in sync) ----------
curl_cfg_escape() { local v=$1 bs='\' dq='"'; v=${v//"$bs"/"$bs$bs"}; v=${v//"$dq"/"$bs$dq"}; printf '%s' "$v"; }
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
	local method=(-X "$1") key=$2 out=$3
	[[ "$1" != HEAD ]] || method=(-I)
	shift 3
	{
		printf 'user = "%s:%s"\n' "$(curl_cfg_escape "$AWS_ACCESS_KEY_ID")" "$(curl_cfg_escape "$AWS_SECRET_ACCESS_KEY")"
		if [[ -n "${AWS_SESSION_TOKEN:-}" ]]; then
			printf 'header = "x-amz-security-token: %s"\n' "$(curl_cfg_escape "$AWS_SESSION_TOKEN")"
		fi
	} | curl -K - --silent --show-error --aws-sigv4 "aws:amz:$S3_REGION:s3" \
		--connect-timeout 10 --max-time "$S3_TIMEOUT_SECONDS" --retry 2 \
		"${method[@]}" -o "$out" -w '%{http_code}' "$@" "$(s3_url "$key")"
}
s3_get_file() { # KEY FILE
	local code empty
	empty=$(printf '' | sha256sum | cut -d' ' -f1)
	code=$(s3_request GET "$1" "$2" -H "x-amz-content-sha256: $empty") || {
		log "curl failed downloading s3://$S3_BUCKET/$1 (endpoint $S3_ENDPOINT)"
		return 1
	}
	if [[ "$code" != 2?? ]]; then
		log "download of s3://$S3_BUCKET/$1 failed: HTTP $code: $(head -c 2000 "$2" 2>/dev/null | tr '\n' ' ')"
		return 1
	fi
}
# -----------------------------------------------------------------------------

WORK=$(mktemp -d "$RESTORE_TMPDIR/lockstep-restore.XXXXXX") || die 2 "cannot create a temp dir in RESTORE_TMPDIR=$RESTORE_TMPDIR"
trap 'rm -rf "$WORK"' EXIT

if [[ -z "$RESTORE_KEY" ]]; then
	pointer="${S3_PREFIX:+$S3_PREFIX/}$CLUSTER_NAME/latest"
	s3_get_file "$pointer" "$WORK/latest" || die 4 "no latest-backup pointer at s3://$S3_BUCKET/$pointer (pass RESTORE_KEY explicitly?)"
	RESTORE_KEY=$(head -n 1 "$WORK/latest" | tr -d '\r')
	[[ "$RESTORE_KEY" =~ ^[A-Za-z0-9._/-]+$ ]] || die 4 "pointer s3://$S3_BUCKET/$pointer holds an invalid key"
	log "latest backup per s3://$S3_BUCKET/$pointer is $RESTORE_KEY"
fi

dump="$WORK/restore.dump"
log "downloading s3://$S3_BUCKET/$RESTORE_KEY"
s3_get_file "$RESTORE_KEY" "$dump" || die 4 "download of s3://$S3_BUCKET/$RESTORE_KEY failed"
size=$(stat -c %s "$dump")
((size > 0)) || die 4 "downloaded object is empty"

export PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=10
q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$TARGET_HOST" -p "$TARGET_PORT" -U "$POSTGRES_USER" -w -d postgres "$@"; }
exists=$(q -v db="$RESTORE_DATABASE" <<<"SELECT count(*) FROM pg_database WHERE datname = :'db'") ||
	die 5 "cannot connect to $TARGET_HOST:$TARGET_PORT as $POSTGRES_USER"
if [[ "$exists" == 0 ]]; then
	log "creating database '$RESTORE_DATABASE'"
	q -v db="$RESTORE_DATABASE" <<<'CREATE DATABASE :"db"' || die 5 "could not create database '$RESTORE_DATABASE'"
fi

log "restoring $size bytes into $TARGET_HOST:$TARGET_PORT/$RESTORE_DATABASE"
# shellcheck disable=SC2086 # RESTORE_ARGS is deliberately word-split
pg_restore -h "$TARGET_HOST" -p "$TARGET_PORT" -U "$POSTGRES_USER" -w -d "$RESTORE_DATABASE" \
	--clean --if-exists --single-transaction --exit-on-error $RESTORE_ARGS "$dump" >&2 ||
	die 5 "pg_restore into $TARGET_HOST:$TARGET_PORT/$RESTORE_DATABASE failed"

echo "lockstep-restore: restored s3://$S3_BUCKET/$RESTORE_KEY into $TARGET_HOST:$TARGET_PORT/$RESTORE_DATABASE ($size bytes)"
