#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
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
#   RESTORE_WAIT_SECONDS    how long to wait for TARGET_HOST to accept
#                           connections as a writable primary (default 300): a
#                           cluster that has just turned Ready is routed by its
#                           -rw Service a moment later. A refused password is
#                           not waited for.
#   PG_BIN                  optional directory prepended to PATH.
#
# Exit codes: 0 restored; 2 configuration error / missing tool; 4 download
# failed (including: key or latest pointer not found); 5 the target was not
# reachable and writable within RESTORE_WAIT_SECONDS, refused the password, or
# pg_restore failed.
# Last line on success (stdout):
#   lockstep-restore: restored s3://<bucket>/<key> into <host>:<port>/<db> (<N> bytes)
set -Eeuo pipefail
umask 0077

LOCKSTEP_SCRIPT=restore
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require TARGET_HOST POSTGRES_PASSWORD
require_tools psql pg_restore curl sha256sum
TARGET_PORT=${TARGET_PORT:-5432}
RESTORE_DATABASE=${RESTORE_DATABASE:-${POSTGRES_DB:-postgres}}
RESTORE_KEY=${RESTORE_KEY:-}
RESTORE_ARGS=${RESTORE_ARGS:-}
RESTORE_TMPDIR=${RESTORE_TMPDIR:-${TMPDIR:-/tmp}}
RESTORE_WAIT_SECONDS=${RESTORE_WAIT_SECONDS:-300}
require_uint TARGET_PORT RESTORE_WAIT_SECONDS
s3_configure
if [[ -z "$RESTORE_KEY" ]]; then
	require CLUSTER_NAME
	[[ "$S3_PREFIX$CLUSTER_NAME" =~ ^[A-Za-z0-9._/-]+$ ]] || die 2 "S3_PREFIX/CLUSTER_NAME may only contain A-Z a-z 0-9 . _ / -"
fi
[[ "$RESTORE_KEY" =~ ^[A-Za-z0-9._/-]*$ ]] || die 2 "RESTORE_KEY may only contain A-Z a-z 0-9 . _ / -"

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
why=$(await_primary "$TARGET_HOST" "$TARGET_PORT" "$RESTORE_WAIT_SECONDS" RESTORE_WAIT_SECONDS) || die 5 "$why"
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
