#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# lockstep PostgresCluster backup Job: pg_dump one database of the primary in
# custom format (-Fc: compressed, restorable with pg_restore --clean, single
# transaction, selectively) and upload it to S3-compatible storage with
# `curl --aws-sigv4` (no AWS CLI needed).
#
# Object layout (keys relative to the bucket; PREFIX part omitted when empty):
#   <S3_PREFIX>/<CLUSTER_NAME>/<UTC yyyymmddThhmmssZ>.dump   the dump
#   <S3_PREFIX>/<CLUSTER_NAME>/latest                        text: key of the
#                                                            newest dump
# The `latest` pointer is written only after the dump upload succeeded and was
# verified (HEAD size matches), so it never points at a partial object.
# Roles / globals are not included (pg_dump is per database); the operator's
# bootstrap recreates the superuser and replication roles.
#
# Image requirements: bash, psql, pg_dump (same or newer major as the server), curl
# >= 7.75 (for --aws-sigv4), sha256sum, date, stat. The stock postgres:<major>
# image has no curl: use an image built FROM postgres:<major> plus
# `apt-get install curl` (see README.md).
#
# Secrets: the AWS secret key and session token are handed to curl on stdin
# (curl -K -), the database password via PGPASSWORD; none of them is ever in
# argv or printed.
#
# Environment:
#   CLUSTER_NAME            required. Used in the object key.
#   PRIMARY_HOST            required. Host to dump from (the -rw Service).
#   PRIMARY_PORT            port (default 5432).
#   POSTGRES_USER           user for pg_dump (default postgres).
#   POSTGRES_PASSWORD       required. Its password (Secret).
#   BACKUP_DATABASE         database to dump (default $POSTGRES_DB, else postgres).
#   BACKUP_DATABASE_FALLBACK  optional: the database to dump instead when
#                           BACKUP_DATABASE does not exist (a cluster created before
#                           its application database was; said in the log).
#   S3_ENDPOINT             required. e.g. https://s3.eu-west-1.amazonaws.com
#                           or http://minio.minio:9000 .
#   S3_BUCKET               required. Bucket name.
#   S3_PREFIX               optional key prefix (no leading/trailing slash needed).
#   S3_REGION               signing region (default $AWS_REGION, else us-east-1).
#   S3_FORCE_PATH_STYLE     true (default): <endpoint>/<bucket>/<key>;
#                           false: <scheme>://<bucket>.<endpoint host>/<key>.
#   AWS_ACCESS_KEY_ID       required (Secret).
#   AWS_SECRET_ACCESS_KEY   required (Secret).
#   AWS_SESSION_TOKEN       optional (temporary credentials).
#   S3_TIMEOUT_SECONDS      max time for one transfer (default 3600).
#   BACKUP_TMPDIR           where the dump is staged (default $TMPDIR or /tmp;
#                           mount an emptyDir big enough for one dump).
#   BACKUP_WAIT_SECONDS     how long to wait for PRIMARY_HOST to accept
#                           connections as a writable primary (default 60): a
#                           cluster that has just turned Ready, or just failed
#                           over, is routed by its -rw Service a moment later. A
#                           refused password is not waited for.
#   PG_BIN                  optional directory prepended to PATH.
#
# Exit codes: 0 uploaded; 2 configuration error / missing tool; 3 the primary
# was not reachable and writable within BACKUP_WAIT_SECONDS, refused the
# password, or pg_dump failed; 4 upload or verification failed.
# Last line on success (stdout):
#   lockstep-backup: uploaded s3://<bucket>/<key> (<N> bytes)
set -Eeuo pipefail
umask 0077

LOCKSTEP_SCRIPT=backup
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require CLUSTER_NAME PRIMARY_HOST POSTGRES_PASSWORD
require_tools psql pg_dump curl sha256sum
PRIMARY_PORT=${PRIMARY_PORT:-5432}
BACKUP_DATABASE=${BACKUP_DATABASE:-${POSTGRES_DB:-postgres}}
BACKUP_TMPDIR=${BACKUP_TMPDIR:-${TMPDIR:-/tmp}}
BACKUP_WAIT_SECONDS=${BACKUP_WAIT_SECONDS:-60}
require_uint PRIMARY_PORT BACKUP_WAIT_SECONDS
s3_configure
[[ "$S3_PREFIX$CLUSTER_NAME" =~ ^[A-Za-z0-9._/-]+$ ]] || die 2 "S3_PREFIX/CLUSTER_NAME may only contain A-Z a-z 0-9 . _ / -"

WORK=$(mktemp -d "$BACKUP_TMPDIR/lockstep-backup.XXXXXX") || die 2 "cannot create a temp dir in BACKUP_TMPDIR=$BACKUP_TMPDIR"
trap 'rm -rf "$WORK"' EXIT

base="${S3_PREFIX:+$S3_PREFIX/}$CLUSTER_NAME"
ts=$(date -u +%Y%m%dT%H%M%SZ)
key="$base/$ts.dump"
dump="$WORK/$ts.dump"

export PGPASSWORD="$POSTGRES_PASSWORD"
why=$(await_primary "$PRIMARY_HOST" "$PRIMARY_PORT" "$BACKUP_WAIT_SECONDS" BACKUP_WAIT_SECONDS) || die 3 "$why"
if [[ -n "${BACKUP_DATABASE_FALLBACK:-}" ]]; then
	exists=$(PGCONNECT_TIMEOUT=10 psql -X -A -t -q -w -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" \
		-U "$POSTGRES_USER" -d postgres -v db="$BACKUP_DATABASE" \
		<<<"SELECT count(*) FROM pg_database WHERE datname = :'db'") ||
		die 3 "could not ask $PRIMARY_HOST:$PRIMARY_PORT whether database '$BACKUP_DATABASE' exists"
	if [[ "$exists" == 0 ]]; then
		log "database '$BACKUP_DATABASE' does not exist (a cluster created before its application database); dumping '$BACKUP_DATABASE_FALLBACK' instead"
		BACKUP_DATABASE=$BACKUP_DATABASE_FALLBACK
	fi
fi
log "dumping database '$BACKUP_DATABASE' from $PRIMARY_HOST:$PRIMARY_PORT as $POSTGRES_USER"
PGCONNECT_TIMEOUT=10 pg_dump -h "$PRIMARY_HOST" -p "$PRIMARY_PORT" \
	-U "$POSTGRES_USER" -w -d "$BACKUP_DATABASE" -Fc -f "$dump" >&2 ||
	die 3 "pg_dump of '$BACKUP_DATABASE' from $PRIMARY_HOST:$PRIMARY_PORT failed"
size=$(stat -c %s "$dump")
((size > 0)) || die 3 "pg_dump produced an empty file"
log "dump is $size bytes; uploading to s3://$S3_BUCKET/$key"

s3_put_file "$key" "$dump" || die 4 "upload failed"
stored=$(s3_size "$key") || die 4 "could not verify s3://$S3_BUCKET/$key after upload"
[[ "$stored" == "$size" ]] || die 4 "verification failed: s3://$S3_BUCKET/$key is ${stored:-?} bytes, expected $size"

printf '%s\n' "$key" >"$WORK/latest"
s3_put_file "$base/latest" "$WORK/latest" || die 4 "dump uploaded but updating the pointer s3://$S3_BUCKET/$base/latest failed"
log "updated s3://$S3_BUCKET/$base/latest"

echo "lockstep-backup: uploaded s3://$S3_BUCKET/$key ($size bytes)"
