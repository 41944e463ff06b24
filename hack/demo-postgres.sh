#!/usr/bin/env bash
# make demo-postgres: the PostgresCluster lifecycle on real PostgreSQL 15 on the local
# control plane's real node, narrated one line per transition as it happens (make demo
# runs it after the DistributedDB part, hack/demo.sh).
#
#   create: 3 instances, synchronous replication (ANY 1, Required) -> Ready
#     -> a writer inserts numbered rows through the Service <name>-rw
#     -> a switchover on demand (lockstep.dev/switchover), under the writer
#     -> settings: work_mem by a reload, shared_buffers by a rolling restart
#     -> a failover: the primary's postmaster killed, the most advanced standby promoted
#     -> the writer's tally (acknowledged, rows present, lost: must be 0)
#     -> an on-demand base backup (lockstep.dev/backup-now), the WAL archived all along
#        (pgBackRest, to the in-cluster S3 over TLS)
#     -> a moment to recover to, between two marked rows, archived
#     -> delete, with a final base backup
#     -> point-in-time recovery: a new cluster from the deleted one's backups, to that
#        moment, holding exactly the rows committed before it
#
# It uses the control plane that is up (make cluster-up if none is: it needs the real
# node), builds and imports the images (tools/images: postgres-15, postgres-15-next, s3
# and lockstep, the operator's image the pods copy their instance manager from), starts
# the in-cluster S3 server (tools/node/s3.sh) and makes the bucket, installs the CRD,
# runs the operator in the background (log: target/demo/postgres/operator.log), applies
# examples/postgrescluster.yaml and drives the lifecycle with kubectl, while `lockstep
# narrate` prints each transition. The databases are checked with psql at each step.
#
# With LOCKSTEP_REAL_NODE=0 (no real node) there is no container to run PostgreSQL in:
# it says so and exits 0.
#
# At the end the cluster stays up (the script says how to look at it), unless
# DEMO_TEARDOWN=1 or --teardown. It exits non-zero if a step misses its deadline or an
# acknowledged row is lost.
#
# Env:
#   DEMO_TEARDOWN=1         tear the control plane down at the end
#   DEMO_PG_NAMESPACE       namespace of the demo (default lockstep-demo-pg)
#   DEMO_TIMEOUT            seconds each step may take (default 300)
#   LOCKSTEP_IMAGE_PROFILE  cargo profile of the lockstep image (default image-test, as in
#                           make e2e-postgres-real; release is what ships, slower to build)
#   LOCKSTEP_REAL_NODE=0    skip: no real node
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=demo-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/demo-lib.sh"

TEARDOWN="${DEMO_TEARDOWN:-0}"
demo_args "$@"

NS="${DEMO_PG_NAMESPACE:-lockstep-demo-pg}"
TIMEOUT="${DEMO_TIMEOUT:-300}"
EXAMPLE="examples/postgrescluster.yaml"
DEMO_DIR="$ROOT/target/demo/postgres"
ROLE=lockstep.dev/role

if [ "${LOCKSTEP_REAL_NODE:-1}" = 0 ]; then
  step "PostgresCluster demo: skipped (LOCKSTEP_REAL_NODE=0)"
  explain "It needs the real node: PostgreSQL runs in real containers, and KWOK's nodes run none."
  explain "Run it with the real node (the default): make demo-postgres."
  maybe_teardown
  exit 0
fi

[ -f "$EXAMPLE" ] || fail "$EXAMPLE is missing"
mkdir -p "$DEMO_DIR"

# What a person would look at when a step did not finish (fail prints it to stderr).
demo_on_fail() {
  [ -n "${NAME:-}" ] || return 0
  echo
  echo "--- pgc/$NAME in $NS ---"
  k get pgc "$NAME" -n "$NS" 2>&1
  k get pgc "$NAME" -n "$NS" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' 2>&1
  k get pods -n "$NS" -L "$ROLE" -o wide 2>&1
  k get events -n "$NS" --sort-by=.lastTimestamp 2>&1 | tail -15
}

# ----------------------------------------------------------------------------------
timed_step "0. A Kubernetes control plane on this machine, with one real node"
if tools/cluster/status.sh >/dev/null 2>&1; then
  explain "The control plane is up (tools/cluster/status.sh): the demo runs on it."
else
  make --no-print-directory cluster-up
fi
[ -n "$(k get nodes -l lockstep.dev/real-node=true -o name 2>/dev/null)" ] ||
  fail "the control plane has no real node (it came up with LOCKSTEP_REAL_NODE=0): make cluster-down, then run this again"
k get nodes -o custom-columns='NODE:.metadata.name,TYPE:.metadata.labels.type,READY:.status.conditions[?(@.type=="Ready")].status' | show
explain "PostgreSQL runs on the real node lockstep-node-0 (spec.placement: its label and taint);"
explain "its volumes come from the StorageClass local (node-local, the pod's fsGroup applies)."

timed_step "1. Build lockstep, install the CRD, load the images, start S3"
cargo build --quiet --bin lockstep
install_crd crds/postgresclusters.lockstep.dev.yaml postgresclusters.lockstep.dev
explain "crds/ is generated from the Rust types (lockstep crds); the statechart the"
explain "operator enforces is in machines/postgrescluster.md (lockstep machines)."
# The lockstep image: the pods' init container copies the instance manager (`lockstep
# instance`, PID 1 of each PostgreSQL container) from it. image-test is the profile the
# real-node e2e tier loads (the same reference, so the two never fight over it).
export LOCKSTEP_IMAGE_PROFILE="${LOCKSTEP_IMAGE_PROFILE:-image-test}"
load_images postgres-15 postgres-15-next lockstep s3
INSTANCE_IMAGE="$(tools/images/build.sh --name lockstep)"
explain "(the instance manager the pods run comes from $INSTANCE_IMAGE, profile $LOCKSTEP_IMAGE_PROFILE;"
explain " postgres-15-next is the upgrade target of the example's comments)"
start_s3

# The example's names and settings.
pg_spec() { example_field PostgresCluster "$1"; }
NAME="$(pg_spec metadata.name)"
DB="$(pg_spec spec.database)"
DB="${DB:-postgres}"
REPLICAS="$(pg_spec spec.replicas)"
REPLICAS="${REPLICAS:-3}"
BUCKET="$(pg_spec spec.backup.bucket)"
PREFIX="$(pg_spec spec.backup.prefix)"
CA_SECRET="$(pg_spec spec.backup.walArchive.caSecret)"
COPY="$NAME-copy"
# pgBackRest's repositories: <prefix>/<cluster>/ in the bucket (stanza: the cluster's name).
REPO="${PREFIX:+$PREFIX/}$NAME/"
COPY_REPO="${PREFIX:+$PREFIX/}$COPY/"
SELECTOR="app.kubernetes.io/instance=$NAME,lockstep.dev/component=database"
s3 mb "$BUCKET" || fail "cannot create the bucket $BUCKET"
explain "bucket s3://$BUCKET (pgBackRest archives and backs up into it; it does not create it)"
# An earlier run's repositories go: a new cluster's WAL must not meet another's history.
# (A listing holds up to 1,000 keys: list again until none is left.)
keys() { s3 ls "$BUCKET" "$1" || true; }
for repo in "$REPO" "$COPY_REPO"; do
  while [ -n "$(keys "$repo")" ]; do
    keys "$repo" | while read -r key; do s3 rm "$BUCKET/$key"; done
  done
done

timed_step "2. Start the operator"
start_operator postgrescluster --instance-image "$INSTANCE_IMAGE"

# Anything left from an earlier run goes first (the operator finalizes it).
if k get pgc "$NAME" -n "$NS" >/dev/null 2>&1; then
  explain "removing pgc/$NAME left from an earlier run (without a final backup)"
  k annotate pgc "$NAME" -n "$NS" --overwrite lockstep.dev/skip-final-backup=true >/dev/null 2>&1 || true
  k delete pgc "$NAME" -n "$NS" --ignore-not-found --wait=true --timeout="${TIMEOUT}s" >/dev/null
fi
if k get pgc "$COPY" -n "$NS" >/dev/null 2>&1; then
  k annotate pgc "$COPY" -n "$NS" --overwrite lockstep.dev/skip-final-backup=true >/dev/null 2>&1 || true
  k delete pgc "$COPY" -n "$NS" --ignore-not-found --wait=true --timeout="${TIMEOUT}s" >/dev/null
fi
k delete pod writer -n "$NS" --ignore-not-found --wait=true >/dev/null 2>&1 || true
# The volume claims and the generated credentials stay after a PostgresCluster is
# deleted: a new cluster must not start from an earlier run's data.
for cluster in "$NAME" "$COPY"; do
  k delete pvc -n "$NS" -l "app.kubernetes.io/instance=$cluster" --wait=true >/dev/null 2>&1 || true
  k delete secret "$cluster-credentials" -n "$NS" --ignore-not-found >/dev/null 2>&1 || true
done
# pgBackRest verifies the S3 server's TLS certificate with the CA tools/node/s3.sh made.
k create secret generic "$CA_SECRET" -n "$NS" --from-file=ca.crt="$S3_CA_FILE" \
  --dry-run=client -o yaml | k apply -f - >/dev/null
explain "Secret $CA_SECRET: the CA of the S3 server's TLS port ($S3_TLS_ENDPOINT), which pgBackRest verifies"

pg_field() { k get pgc "$NAME" -n "$NS" -o "jsonpath=$1" 2>/dev/null; }
# at_rest: Ready (phase and condition) for the latest spec, with a primary, which it
# puts in AT_REST_PRIMARY.
AT_REST_PRIMARY=""
at_rest() {
  local phase ready observed generation primary
  read -r phase ready observed generation primary < <(pg_field '{.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.status.observedGeneration} {.metadata.generation} {.status.primaryPod}{"\n"}') || return 1
  [ "$phase" = Ready ] && [ "$ready" = True ] && [ "$observed" = "$generation" ] && [ -n "${primary:-}" ] || return 1
  AT_REST_PRIMARY="$primary"
}
# ready_with PRIMARY: at rest with PRIMARY as its primary.
ready_with() { at_rest && [ "$AT_REST_PRIMARY" = "$1" ]; }
# failed_over FROM: at rest with a primary other than FROM.
failed_over() { at_rest && [ "$AT_REST_PRIMARY" != "$1" ]; }
# settled PRIMARY: every instance Ready, PRIMARY labelled primary and the others replica
# (none demoted, none terminating).
settled() {
  local pods
  pods="$(k get pods -n "$NS" -l "$SELECTOR" -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.labels.lockstep\.dev/role} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}')" || return 1
  [ "$(grep -c . <<<"$pods")" = "$REPLICAS" ] || return 1
  awk -v p="$1" 'NF != 3 || $3 != "True" || ($1 == p && $2 != "primary") || ($1 != p && $2 != "replica") { bad = 1 } END { exit bad }' <<<"$pods"
}
roles() { k get pods -n "$NS" -l "$SELECTOR" -L "$ROLE" | show; }
# psql_on POD SQL [psql options]: psql as the superuser on POD's own socket.
psql_on() {
  local pod="$1" sql="$2"
  shift 2
  k exec -n "$NS" "$pod" -c postgres -- psql -X -q -v ON_ERROR_STOP=1 -h /var/run/postgresql -U postgres -d postgres "$@" -c "$sql"
}
replication() {
  psql_on "$1" "SELECT application_name AS standby, state, sync_state FROM pg_stat_replication ORDER BY 1" 2>&1 | grep . | show
  explain "synchronous_standby_names on $1: $(psql_on "$1" "SHOW synchronous_standby_names" -A -t 2>&1)"
}
# quorum PRIMARY: both other members stream and count towards the quorum a commit waits for.
quorum() { [ "$(psql_on "$1" "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'quorum'" -A -t)" = "$((REPLICAS - 1))" ]; }

timed_step "3. Create pgc/$NAME ($EXAMPLE)"
start_narrator "postgrescluster/$NAME"
k apply -n "$NS" -f "$EXAMPLE" >/dev/null
explain "Creating: the credentials Secret, the scripts ConfigMap, the Services $NAME-rw (primary)"
explain "and $NAME-ro (replicas), a PodDisruptionBudget, the primary Lease and a StatefulSet."
explain "$NAME-0 is labelled primary and runs initdb; the others clone it (pg_basebackup) and stream."
wait_until "pgc/$NAME to be Ready" at_rest
PRIMARY="$AT_REST_PRIMARY"
wait_until "every instance of $NAME to be Ready with its role" settled "$PRIMARY"
k get pgc "$NAME" -n "$NS" | show
roles
explain "Replication as the primary sees it (spec.synchronous: a commit waits for 1 of the others):"
wait_until "both standbys in the synchronous quorum of $PRIMARY" quorum "$PRIMARY"
replication "$PRIMARY"
explain "kubectl lockstep status $NAME (the plugin: the lockstep binary installed as kubectl-lockstep):"
plugin status "$NAME" | show
wait_until "the primary to archive its WAL (condition ContinuousArchiving)" condition_true ContinuousArchiving "pgc/$NAME" -n "$NS"
explain "ContinuousArchiving: $(pg_field '{.status.conditions[?(@.type=="ContinuousArchiving")].message}')"
explain "(pgBackRest's archive_command pushes every completed WAL file to s3://$BUCKET/$REPO over TLS)"

timed_step "4. A writer: one row per transaction, through the Service $NAME-rw"
WRITER_IMAGE="$(tools/images/build.sh --name postgres-15)"
k apply -n "$NS" -f - >/dev/null <<WRITER
apiVersion: v1
kind: Pod
# A client of the cluster: its NetworkPolicy (spec.networkPolicy) lets this label in.
metadata: {name: writer, labels: {lockstep.dev/client: $NAME}}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {lockstep.dev/real-node: "true"}
  tolerations: [{key: lockstep.dev/real-node, operator: Exists, effect: NoSchedule}]
  # restricted, as the namespace enforces.
  securityContext: {runAsNonRoot: true, runAsUser: 999, runAsGroup: 999, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: writer
    image: $WRITER_IMAGE
    imagePullPolicy: IfNotPresent
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    env:
    # The application role, from $NAME-app (as an application would): no superuser.
    - {name: PGUSER, valueFrom: {secretKeyRef: {name: $NAME-app, key: username}}}
    - {name: PGPASSWORD, valueFrom: {secretKeyRef: {name: $NAME-app, key: password}}}
    - {name: PGDATABASE, valueFrom: {secretKeyRef: {name: $NAME-app, key: dbname}}}
    - {name: PGHOST, value: $NAME-rw}
    - {name: PGCONNECT_TIMEOUT, value: "3"}
    # TLS, verified: the server's certificate must chain to the cluster's CA and name
    # $NAME-rw (the CA's certificate only; its key never leaves the Secret).
    - {name: PGSSLMODE, value: verify-full}
    - {name: PGSSLROOTCERT, value: /etc/pg-ca/ca.crt}
    volumeMounts: [{name: ca, mountPath: /etc/pg-ca, readOnly: true}]
    readinessProbe:
      exec: {command: [test, -f, /tmp/ready]}
      periodSeconds: 1
    command: [/bin/bash, -c]
    args:
    - |
      until psql -X -q -c "CREATE TABLE IF NOT EXISTS writes (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())" 2>/dev/null; do sleep 0.5; done
      touch /tmp/ready
      i=0
      while [ ! -f /tmp/stop ]; do
        i=\$((i + 1))
        if timeout 10 psql -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO writes (id) VALUES (\$i)" >/dev/null 2>&1; then
          echo "ack \$i"
        else
          echo "err \$i"
        fi
        sleep 0.05
      done
      echo stopped
      exec sleep infinity
  volumes:
  - {name: ca, secret: {secretName: $NAME-tls, items: [{key: ca.crt, path: ca.crt}]}}
WRITER
explain "The writer connects as the application role, from Secret $NAME-app (no superuser),"
explain "with sslmode=verify-full against the cluster's CA (Secret $NAME-tls):"
explain "the operator issued it with the server's and the replication role's certificates."
explain "Each INSERT is its own transaction (psql, at most 10 s); the writer logs \"ack <id>\" only"
explain "for a commit the server acknowledged, which with spec.synchronous means a standby has it."
wait_until "the writer to reach $NAME-rw" condition_true Ready pod/writer -n "$NS"
acks() { k logs -n "$NS" writer 2>/dev/null | grep -c '^ack'; }
ACKS=0
# acks_grow N: N more acknowledged rows than ACKS (then ACKS is the new count).
acks_grow() {
  local from="$ACKS" now
  grown() { now="$(acks)" && [ "$now" -ge $((from + $1)) ]; }
  wait_until "$1 more acknowledged rows (from $from)" grown "$1"
  ACKS="$now"
}
acks_grow 20
explain "writer running: $ACKS rows acknowledged so far"

timed_step "5. Switchover on demand (kubectl lockstep switchover)"
TARGET="$(pg_field '{.status.replicaPods[*]}' | tr ' ' '\n' | sort -V | tail -1)"
[ -n "$TARGET" ] || fail "pgc/$NAME names no replica"
explain "kubectl lockstep switchover $NAME $TARGET (sets lockstep.dev/switchover=$TARGET:<token>, waits)"
explain "The same fenced switchover an upgrade runs: Demote (the primary is labelled demoted, so"
explain "neither Service selects it, and stops cleanly, releasing the Lease with its last WAL"
explain "position), Fence, Promote (the target's own manager promotes once it has that position)."
SO_T0=$SECONDS
plugin switchover "$NAME" "$TARGET" --timeout "$TIMEOUT" | show ||
  fail "kubectl lockstep switchover $NAME $TARGET did not end with $TARGET primary"
wait_until "pgc/$NAME to be Ready with $TARGET as its primary" ready_with "$TARGET"
explain "Ready (every instance Ready) with $TARGET primary $((SECONDS - SO_T0))s after the request."
wait_until "every instance Ready again ($PRIMARY rejoined as a replica)" settled "$TARGET"
roles
acks_grow 20
explain "writer: $ACKS rows acknowledged so far"
OLD="$TARGET"

timed_step "6. Settings: work_mem by a reload, shared_buffers by a rolling restart"
explain "spec.postgresql.parameters reach each instance through its pod's annotation; its manager"
explain "writes them and reloads the server (no restart), and says on its pod what the server made"
explain "of them; the cluster's SettingsApplied condition gathers that."
k patch pgc "$NAME" -n "$NS" --type merge -p '{"spec":{"postgresql":{"parameters":{"work_mem":"16MB"}}}}' >/dev/null
shows_everywhere() {
  local pod
  for pod in $(k get pods -n "$NS" -l "$SELECTOR" -o name); do
    [ "$(psql_on "${pod#pod/}" "SHOW $1" -A -t 2>/dev/null)" = "$2" ] || return 1
  done
}
wait_until "every instance to show work_mem = 16MB" shows_everywhere work_mem 16MB
explain "every instance: work_mem = 16MB, by a reload"
explain "shared_buffers applies only at a start: each instance reports it pending, and the operator"
explain "restarts them as an upgrade replaces pods (replicas first, then the same fenced switchover,"
explain "then the old primary), under the writer."
k patch pgc "$NAME" -n "$NS" --type merge -p '{"spec":{"postgresql":{"parameters":{"shared_buffers":"64MB"}}}}' >/dev/null
# Every server runs the new value only once the last one restarted; Ready and
# SettingsApplied=True then say the machine is done with it.
restarted() {
  shows_everywhere shared_buffers 64MB && at_rest &&
    [ "$(pg_field '{.status.conditions[?(@.type=="SettingsApplied")].status}')" = True ]
}
wait_until "the rolling restart to apply shared_buffers everywhere" restarted
explain "SettingsApplied: $(pg_field '{.status.conditions[?(@.type=="SettingsApplied")].message}')"
OLD="$AT_REST_PRIMARY"
wait_until "every instance Ready again" settled "$OLD"
wait_until "both standbys in the synchronous quorum of $OLD" quorum "$OLD"
roles
acks_grow 20
explain "writer: $ACKS rows acknowledged so far"

timed_step "7. Failover: kill the primary's postmaster ($OLD), again whenever it comes back"
explain "spec.failoverDelaySeconds: 0 for the demo. A primary whose server crashes once comes back"
explain "in place within seconds, still holding the Lease, and keeps its role (PrimaryLost -> Ready,"
explain "PrimaryRecovered: nothing moves), which is what the delay is for. A primary that keeps"
explain "dying is failed over: the demo kills its postmaster each time its container restarts it."
k patch pgc "$NAME" -n "$NS" --type merge -p '{"spec":{"failoverDelaySeconds":0}}' >/dev/null
wait_until "the operator to see failoverDelaySeconds: 0" ready_with "$OLD"
explain "kubectl exec $OLD -c postgres -- kill -KILL <postmaster pid>  (SIGKILL: no clean stop, no release)"
FO_T0=$SECONDS
KILLS=0
failover_begun() { pg_field '{.status.machine.history[*].reason}' | tr ' ' '\n' | grep -qx FailoverStarted; }
kill_until_failover() {
  failover_begun && return 0
  # shellcheck disable=SC2016 # $PGDATA is the container's
  if k exec -n "$NS" "$OLD" -c postgres -- bash -c 'kill -KILL "$(head -1 "$PGDATA/postmaster.pid")"' >/dev/null 2>&1; then
    KILLS=$((KILLS + 1))
  fi
  return 1
}
wait_until "a failover to begin" kill_until_failover
[ "$KILLS" -gt 0 ] || fail "a failover began before $OLD was killed"
explain "the postmaster of $OLD killed $KILLS time(s) before the failover began"
explain "Not Ready -> PrimaryLost; the old primary is labelled demoted and deleted; once it is"
explain "certainly fenced, a survey Job reads every standby's WAL position; with spec.synchronous"
explain "(Required) it must read both, and the most advanced one is promoted."
wait_until "pgc/$NAME to be Ready with a new primary" failed_over "$OLD"
NEW="$AT_REST_PRIMARY"
explain "Ready (every instance Ready) with $NEW primary $((SECONDS - FO_T0))s after the kill."
explain "status.lastFailover: $(pg_field '{.status.lastFailover.message}')"
wait_until "every instance Ready again ($OLD rejoined as a replica)" settled "$NEW"
roles
wait_until "both standbys in the synchronous quorum of $NEW" quorum "$NEW"
replication "$NEW"
acks_grow 20
explain "writer: $ACKS rows acknowledged so far"

timed_step "8. The writer's tally"
k exec -n "$NS" writer -- touch /tmp/stop
writer_done() { k logs -n "$NS" writer | grep -qx stopped; }
wait_until "the writer to stop" writer_done
k logs -n "$NS" writer >"$DEMO_DIR/writer.log"
ACKED="$(grep -c '^ack' "$DEMO_DIR/writer.log" || true)"
FAILED="$(grep -c '^err' "$DEMO_DIR/writer.log" || true)"
k exec -n "$NS" writer -- psql -X -A -t -q -v ON_ERROR_STOP=1 -c 'SELECT id FROM writes' >"$DEMO_DIR/rows.unsorted" ||
  fail "cannot read the rows back through $NAME-rw"
sort -u "$DEMO_DIR/rows.unsorted" | grep . >"$DEMO_DIR/rows" || true
grep '^ack' "$DEMO_DIR/writer.log" | awk '{print $2}' | sort -u >"$DEMO_DIR/acked"
ROWS="$(wc -l <"$DEMO_DIR/rows")"
LOST="$(comm -23 "$DEMO_DIR/acked" "$DEMO_DIR/rows" | wc -l)"
TALLY="writer: $ACKED rows acknowledged, $FAILED failed, $ROWS present in $NAME, $LOST lost"
explain "$TALLY"
explain "(failed = refused or timed out while the primary moved: never acknowledged, so never"
explain "promised; present counts every row read back through $NAME-rw from the new primary;"
explain "lost = acknowledged but absent, which synchronous replication (Required) must keep at 0)"
[ "$LOST" = 0 ] || fail "$LOST acknowledged rows lost: $(comm -23 "$DEMO_DIR/acked" "$DEMO_DIR/rows" | head -20 | tr '\n' ' ')"

timed_step "9. Back up on demand (kubectl lockstep backup)"
explain "The annotation's value is a token: the machine runs one backup Job per new token. With"
explain "spec.backup.walArchive it is a pgBackRest base backup, which the primary's instance manager"
explain "takes (the Job only asks it and reports); retention keeps the newest 2 with their WAL."
BEFORE="$(pg_field '{.status.lastBackup.time}')"
explain "kubectl lockstep backup $NAME (sets lockstep.dev/backup-now=<token>, waits for its outcome)"
plugin backup "$NAME" --timeout "$TIMEOUT" | show || fail "kubectl lockstep backup $NAME did not succeed"
backed_up() {
  local now
  now="$(pg_field '{.status.lastBackup.time}')"
  [ -n "$now" ] && [ "$now" != "$BEFORE" ] && at_rest
}
wait_until "the on-demand backup" backed_up
BACKUP_JOB="$(pg_field '{.status.lastBackup.job}')"
OUTCOME="$(pg_field '{.status.lastBackup.outcome}')"
explain "status.lastBackup: $BACKUP_JOB — $OUTCOME"
[ "$OUTCOME" = Succeeded ] || fail "the on-demand backup did not succeed: $OUTCOME"
k logs -n "$NS" "job/$BACKUP_JOB" 2>/dev/null | grep '^lockstep-backup: base backup' | show || true
FIRST_POINT="$(pg_field '{.status.firstRecoverabilityPoint}')"
[ -n "$FIRST_POINT" ] || fail "status.firstRecoverabilityPoint is empty after a base backup"
explain "status.firstRecoverabilityPoint: $FIRST_POINT (no recovery can target an earlier moment)"
# backups: the labels of the base backups in the repository, one a line, as pgBackRest's
# backup.info lists them (its [backup:current] section).
backups() {
  { s3 get "$BUCKET/${REPO}backup/$NAME/backup.info" /dev/stdout 2>/dev/null || true; } |
    sed -n 's/^\([0-9]\{8\}-[0-9]\{6\}F[0-9DI_-]*\)=.*/\1/p' | sort -u
}
ON_DEMAND="$(backups | tail -1)"
[ -n "$ON_DEMAND" ] || fail "no base backup in s3://$BUCKET/${REPO}backup/$NAME/"
explain "s3://$BUCKET/${REPO}backup/$NAME/$ON_DEMAND/ holds it (pgBackRest's manifest and files)"

timed_step "10. A moment to recover to"
explain "pgBackRest restores to a time only from a backup that ended before it, to the second:"
explain "the moment comes 2 s after the backup. A row 'before', the moment (the server's clock,"
explain "read between the two commits), a row 'after'; then the WAL holding both is archived."
# writer_sql SQL: psql through $NAME-rw in the writer pod (database $DB), unaligned.
writer_sql() { k exec -n "$NS" writer -- psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }
sleep 2
writer_sql "CREATE TABLE marks (name text PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())" >/dev/null ||
  fail "cannot create the table marks through $NAME-rw"
writer_sql "INSERT INTO marks (name) VALUES ('before')" >/dev/null || fail "cannot insert the row 'before'"
MOMENT="$(writer_sql "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")" ||
  fail "cannot read the server's clock"
writer_sql "INSERT INTO marks (name) VALUES ('after')" >/dev/null || fail "cannot insert the row 'after'"
# pg_switch_wal() is the superuser's: on the primary's own socket.
LAST_WAL="$(psql_on "$(pg_field '{.status.primaryPod}')" "SELECT pg_walfile_name(pg_switch_wal())" -A -t)" ||
  fail "cannot switch the WAL file"
explain "'before' committed, the moment $MOMENT, 'after' committed; pg_switch_wal() (the superuser's, on the primary) completes $LAST_WAL"
archived_last() {
  local wal
  wal="$(pg_field '{.status.lastArchived.wal}')"
  [ -n "$wal" ] && [[ "$wal" > "$LAST_WAL" || "$wal" == "$LAST_WAL" ]]
}
explain "status.lastArchived follows the primary's report (a newer file at most once a minute):"
wait_until "status.lastArchived to reach $LAST_WAL" archived_last
explain "status.lastArchived: $(pg_field '{.status.lastArchived.wal} at {.status.lastArchived.time}, by {.status.lastArchived.pod}')"

timed_step "11. Delete pgc/$NAME"
explain "The finalizer holds the object while the machine runs a final base backup; it is"
explain "released only once the backup succeeded and the final state is persisted."
BEFORE_DELETE="$(backups)"
k delete pgc "$NAME" -n "$NS" --wait=false >/dev/null
gone() { local out; out="$(k get pgc "$NAME" -n "$NS" --ignore-not-found -o name)" && [ -z "$out" ]; }
wait_until "pgc/$NAME to be gone (after its final backup)" gone
# The narrator ends by itself when the object is gone.
narrator_finish
FINAL="$(comm -13 <(printf '%s\n' "$BEFORE_DELETE") <(backups) | grep . | tail -1 || true)"
[ -n "$FINAL" ] || fail "no final base backup in s3://$BUCKET/${REPO}backup/$NAME/"
explain "final base backup (taken before the finalizer was released): $FINAL"
explain "the repository s3://$BUCKET/$REPO stays: backups $(backups | tr '\n' ' ')and the archived WAL"
k delete pod writer -n "$NS" --wait=false >/dev/null 2>&1 || true

timed_step "12. Point-in-time recovery: pgc/$COPY from $NAME's backups, to the moment"
explain "spec.bootstrap.recovery {source: $NAME, target: {time: $MOMENT}}: the first instance"
explain "restores the newest base backup that ended before the moment (pgBackRest), replays the"
explain "archived WAL up to it, promotes, and only then serves; it archives to its own repository."
SC="$(pg_spec spec.storageClassName)"
k apply -n "$NS" -f - >/dev/null <<COPY_SPEC
apiVersion: lockstep.dev/v1alpha1
kind: PostgresCluster
metadata: {name: $COPY}
spec:
  version: "$(pg_spec spec.version)"
  replicas: 1
  storageSize: $(pg_spec spec.storageSize)
  ${SC:+storageClassName: $SC}
  database: $DB
  placement:
    nodeSelector: {lockstep.dev/real-node: "true"}
    tolerations: [{key: lockstep.dev/real-node, operator: Exists, effect: NoSchedule}]
  resources: {requests: {cpu: 100m, memory: 256Mi}, limits: {memory: 1Gi}}
  backup:
    s3Endpoint: $(pg_spec spec.backup.s3Endpoint)
    bucket: $BUCKET
    ${PREFIX:+prefix: $PREFIX}
    credentialsSecret: $(pg_spec spec.backup.credentialsSecret)
    image: $(pg_spec spec.backup.image)
    walArchive:
      s3Endpoint: $(pg_spec spec.backup.walArchive.s3Endpoint)
      caSecret: $CA_SECRET
  bootstrap:
    recovery:
      source: $NAME
      target: {time: "$MOMENT"}
COPY_SPEC
copy_ready() {
  [ "$(k get pgc "$COPY" -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null)" = Ready ] &&
    condition_true Ready "pgc/$COPY" -n "$NS"
}
COPY_T0=$SECONDS
wait_until "pgc/$COPY to be Ready (restored and recovered)" copy_ready
explain "Ready $((SECONDS - COPY_T0))s after it was created"
copy_sql() { psql_on "$COPY-0" "$1" -d "$DB" -A -t; }
MARKS="$(copy_sql "SELECT string_agg(name, ',' ORDER BY name) FROM marks")" || fail "cannot read marks on $COPY-0"
COPIED="$(copy_sql "SELECT count(*) FROM writes")" || fail "cannot read writes on $COPY-0"
explain "$COPY-0: marks = {$MARKS}; writes: $COPIED rows (the writer's $ROWS, all committed before)"
[ "$MARKS" = before ] || fail "$COPY holds marks {$MARKS}, not exactly {before}: the recovery missed its target"
[ "$COPIED" = "$ROWS" ] || fail "$COPY holds $COPIED rows of writes, $NAME held $ROWS"
copy_sql "INSERT INTO marks (name) VALUES ('written on the copy')" >/dev/null ||
  fail "$COPY-0 is not writable after its recovery"
explain "$COPY-0 is writable: a new timeline, no recovery target left ($(copy_sql "SHOW recovery_target_time" | grep . || echo none))"
k annotate pgc "$COPY" -n "$NS" --overwrite lockstep.dev/skip-final-backup=true >/dev/null
k delete pgc "$COPY" -n "$NS" --wait=false >/dev/null
copy_gone() { local out; out="$(k get pgc "$COPY" -n "$NS" --ignore-not-found -o name)" && [ -z "$out" ]; }
wait_until "pgc/$COPY to be gone (lockstep.dev/skip-final-backup)" copy_gone

timed_step "13. What the operator counted (http://127.0.0.1:$PORT/metrics)"
operator_metrics
explain "Events (one per transition): kubectl get events -n $NS --field-selector involvedObject.name=$NAME"

cleanup
OPERATOR_PID=""
trap - EXIT

step "Summary"
explain "$TALLY"
explain "switchover to $TARGET, then failover from $OLD to $NEW: 0 acknowledged rows lost"
explain "base backups of $NAME: $ON_DEMAND (on demand), $FINAL (final), in s3://$BUCKET/$REPO"
explain "($S3_TLS_ENDPOINT from pods, pgBackRest; $S3_HOST_ENDPOINT from here)"
explain "point-in-time recovery to $MOMENT: $COPY held exactly the rows committed before it"
explain "time per step:"
step_times

maybe_teardown

step "Done. The control plane is still up:"
cat <<EOF
   export KUBECONFIG=$KUBECONFIG
   $KUBECTL get events -n $NS --sort-by=.metadata.creationTimestamp
   $KUBECTL get pvc -n $NS              # the volumes stay after a delete (as does $NAME-credentials)
   less $DEMO_DIR/operator.log          # the operator's JSON log

   Run it again yourself (examples/postgrescluster.yaml says what else to try):
   $LOCKSTEP run --namespace $NS --metrics-addr 127.0.0.1:8080 &
   $KUBECTL apply -n $NS -f $EXAMPLE
   $LOCKSTEP narrate postgrescluster/$NAME -n $NS

   make cluster-down                    # when you are finished
EOF
