#!/usr/bin/env bash
# make demo: the DistributedDB lifecycle on a real 3-member etcd cluster, narrated one
# line per transition as it happens.
#
#   create -> 3 members healthy -> a writer writes through the Service
#          -> upgrade etcd 3.6 -> 3.7, pod by pod, with pre/post hooks (leader moved away,
#             new member caught up) -> the writer's tally (acknowledged, failed, lost)
#          -> on-demand backup (annotation) to S3 -> delete, with a final backup to S3
#
# It brings the control plane up with its real node (make cluster-up: kubelet +
# containerd next to the KWOK nodes), builds and imports the images (tools/images),
# starts the in-cluster S3 server (tools/node/s3.sh), installs the CRDs, runs the
# operator in the background (log: target/demo/operator.log), applies
# examples/etcd.yaml and drives the lifecycle with kubectl, while `lockstep narrate`
# prints each transition the machine persists in status.machine.history. The database
# is checked with etcdctl (kubectl exec) at every step.
#
# With LOCKSTEP_REAL_NODE=0 (no real node) it falls back to the KWOK-only walk-through
# of examples/distributeddb-full.yaml: the same transitions, but no container runs,
# so there is no database, writer or snapshot to show. It says so.
#
# At the end the cluster stays up (and the script says how to look at it), unless
# DEMO_TEARDOWN=1 or --teardown.
#
# Env:
#   DEMO_TEARDOWN=1        tear the control plane down at the end
#   DEMO_NAMESPACE         namespace of the demo (default lockstep-demo)
#   DEMO_UPGRADE_IMAGE     the image to upgrade to (default: etcd 3.7; KWOK: next minor)
#   DEMO_TIMEOUT           seconds each step may take (default 300)
#   LOCKSTEP_REAL_NODE=0   the KWOK-only fallback
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=demo-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/demo-lib.sh"

TEARDOWN="${DEMO_TEARDOWN:-0}"
demo_args "$@"

NS="${DEMO_NAMESPACE:-lockstep-demo}"
TIMEOUT="${DEMO_TIMEOUT:-300}"
REAL=1
[ "${LOCKSTEP_REAL_NODE:-1}" != 0 ] || REAL=0
if [ "$REAL" = 1 ]; then EXAMPLE="examples/etcd.yaml"; else EXAMPLE="examples/distributeddb-full.yaml"; fi
DEMO_DIR="$ROOT/target/demo"

field() { k get distributeddb "$NAME" -n "$NS" -o "jsonpath=$1" 2>/dev/null; }

[ -f "$EXAMPLE" ] || fail "$EXAMPLE is missing"
mkdir -p "$DEMO_DIR"

# ----------------------------------------------------------------------------------
if [ "$REAL" = 1 ]; then
  step "0. A Kubernetes control plane on this machine, with one real node"
  explain "kube-apiserver, controller-manager and scheduler built from Go modules; the real"
  explain "node lockstep-node-0 (kubelet + containerd, in its own mount and network namespaces)"
  explain "runs the containers; 3 KWOK nodes stand by for simulated workloads."
else
  step "0. A Kubernetes control plane on this machine (KWOK ONLY: LOCKSTEP_REAL_NODE=0)"
  explain "FALLBACK: no real node, so no container runs. KWOK plays the kubelets of 3 fake"
  explain "nodes (pods become Ready, Jobs complete): the operator's transitions are real, the"
  explain "database is not. Run without LOCKSTEP_REAL_NODE=0 to see a real etcd cluster."
fi
make --no-print-directory cluster-up
if [ "$REAL" = 1 ]; then
  k get nodes -o custom-columns='NODE:.metadata.name,TYPE:.metadata.labels.type,READY:.status.conditions[?(@.type=="Ready")].status' | show
fi

step "1. Build lockstep and install the CRDs"
cargo build --quiet --bins
install_crd crds/distributeddbs.lockstep.dev.yaml distributeddbs.lockstep.dev
explain "crds/ is generated from the Rust types (lockstep crds); the statechart the"
explain "operator enforces is in machines/distributeddb.md (lockstep machines)."
if [ "$REAL" = 1 ]; then
  load_images etcd-3.6 etcd-3.7 backup
  start_s3
fi

step "2. Start the operator"
start_operator distributeddb

# A field of the example's DistributedDB; empty when absent.
ddb_field() { example_field DistributedDB "$1"; }
NAME="$(ddb_field metadata.name)"
FROM_IMAGE="$(ddb_field spec.image)"
if [ "$REAL" = 1 ]; then
  DEFAULT_NEXT="$(tools/images/build.sh --name etcd-3.7)"
else
  # The next minor version of an `x.y` tag (registry.example/db:1.4 -> 1.5), else tag-next.
  TAG="${FROM_IMAGE##*:}"
  if [ "$TAG" != "$FROM_IMAGE" ] && [[ "$TAG" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
    DEFAULT_NEXT="${FROM_IMAGE%:*}:${BASH_REMATCH[1]}.$((BASH_REMATCH[2] + 1))"
  elif [ "$TAG" != "$FROM_IMAGE" ]; then
    DEFAULT_NEXT="${FROM_IMAGE}-next"
  else
    DEFAULT_NEXT="${FROM_IMAGE}:next"
  fi
fi
TO_IMAGE="${DEMO_UPGRADE_IMAGE:-$DEFAULT_NEXT}"
BUCKET="$(ddb_field spec.backupPolicy.bucket)"
PREFIX="$(ddb_field spec.backupPolicy.prefix)"

# Anything left from an earlier run goes first (the operator finalizes it).
if k get distributeddb "$NAME" -n "$NS" >/dev/null 2>&1; then
  explain "removing distributeddb/$NAME left from an earlier run (without a final backup)"
  k annotate distributeddb "$NAME" -n "$NS" --overwrite lockstep.dev/skip-final-backup=true >/dev/null 2>&1 || true
  k delete distributeddb "$NAME" -n "$NS" --ignore-not-found --wait=true --timeout="${TIMEOUT}s" >/dev/null
fi
k delete pod writer -n "$NS" --ignore-not-found --wait=true >/dev/null 2>&1 || true
# The volume claims stay after a DistributedDB is deleted (the StatefulSet's default
# retention): a new cluster must not start from an earlier run's data.
k delete pvc -n "$NS" -l "app.kubernetes.io/instance=$NAME" --wait=true >/dev/null 2>&1 || true

# etcdctl in member 0 (the etcd images carry it), after the image's etcd-lib.sh: with
# spec.tls (examples/etcd.yaml sets it) etcdctl presents the client certificate the
# operator issued, and the members' URLs are https.
etcdctl() { k exec -n "$NS" "$NAME-0" -c db -- bash -c '. /usr/local/bin/etcd-lib.sh && etcdctl "$@"' etcdctl "$@"; }
in_member() { k exec -n "$NS" "$NAME-0" -c db -- bash -c ". /usr/local/bin/etcd-lib.sh && $1"; }
members() { echo "https://$NAME-0.$NAME.$NS.svc:2379,https://$NAME-1.$NAME.$NS.svc:2379,https://$NAME-2.$NAME.$NS.svc:2379"; }

step "3. Create distributeddb/$NAME ($EXAMPLE)"
start_narrator "distributeddb/$NAME"
k apply -n "$NS" -f "$EXAMPLE" >/dev/null
explain "Creating: a headless Service and a StatefulSet; Ready once every pod is Ready."
if [ "$REAL" = 1 ]; then
  explain "spec.placement puts the pods on the real node; spec.readinessProbe (/readyz) makes"
  explain "Ready mean \"this member serves\", not \"its process started\"."
fi
wait_until "distributeddb/$NAME to be Ready" condition_true Ready "distributeddb/$NAME" -n "$NS"
k get distributeddb "$NAME" -n "$NS" | show
if [ "$REAL" = 1 ]; then
  explain "The pods run etcd on the real node; each derives its flags from its name and the"
  explain "headless Service. spec.tls: the operator issued a CA and the certificates (Secret"
  explain "$NAME-tls); clients and peers speak https and must present a certificate of that CA."
  explain "Asked of etcd itself (etcdctl endpoint health / status):"
  healthy() { [ "$(etcdctl --endpoints="$(members)" endpoint health 2>/dev/null | grep -c 'is healthy')" = 3 ]; }
  wait_until "3 healthy etcd members" healthy
  etcdctl --endpoints="$(members)" endpoint health 2>&1 | show
  etcdctl --endpoints="$(members)" endpoint status -w table 2>&1 | show

  step "4. A writer: one key per put, through the Service $NAME.$NS.svc, over TLS"
  WRITER_IMAGE="$(tools/images/build.sh --name backup)"
  k apply -n "$NS" -f - >/dev/null <<WRITER
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {lockstep.dev/real-node: "true"}
  tolerations: [{key: lockstep.dev/real-node, operator: Exists, effect: NoSchedule}]
  # restricted, as the namespace enforces.
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: writer
    image: $WRITER_IMAGE
    imagePullPolicy: IfNotPresent
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    # The client certificate of the cluster's CA (etcd-lib.sh hands it to etcdctl).
    env: [{name: DB_TLS_DIR, value: /etc/lockstep/tls}]
    volumeMounts: [{name: tls, mountPath: /etc/lockstep/tls, readOnly: true}]
    command: [/bin/bash, -c]
    args:
    - |
      . /usr/local/bin/etcd-lib.sh
      i=0
      while [ ! -f /tmp/stop ]; do
        i=\$((i + 1))
        if etcdctl --endpoints=https://$NAME.$NS.svc:2379 --dial-timeout=1s --command-timeout=3s put key-\$i v\$i >/dev/null 2>&1; then
          echo "ack \$i"
        else
          echo "err \$i"
        fi
        sleep 0.05
      done
      echo done
      sleep infinity
  volumes:
  - name: tls
    secret:
      secretName: $NAME-tls
      defaultMode: 0440
      items: [{key: ca.crt, path: ca.crt}, {key: client.crt, path: client.crt}, {key: client.key, path: client.key}]
WRITER
  wait_until "the writer pod to be Ready" condition_true Ready pod/writer -n "$NS"
  acks() { k logs -n "$NS" writer 2>/dev/null | grep -c '^ack'; }
  some_acks() { [ "$(acks)" -ge 20 ]; }
  wait_until "the writer's first writes" some_acks
  explain "writer running: $(acks) writes acknowledged so far"
fi

UPSTEP=4
[ "$REAL" = 0 ] || UPSTEP=5
step "$UPSTEP. Upgrade the image: $FROM_IMAGE -> $TO_IMAGE"
explain "One pod at a time, highest ordinal first: pre-hook Job, delete the pod, wait for its"
explain "replacement to be Ready at the new image, post-hook Job, then the next pod."
explain "Each step is a transition persisted before the next action, so a restarted"
explain "operator resumes exactly where the status says."
if [ "$REAL" = 1 ]; then
  explain "The pre-hook (etcd-pre-hook) refuses unless the other members are a quorum and moves"
  explain "the leadership away; the post-hook (etcd-post-hook) waits until the new member is"
  explain "healthy and has applied the leader's commit index. Their output (│):"
fi
k patch distributeddb "$NAME" -n "$NS" --type merge -p "{\"spec\":{\"image\":\"$TO_IMAGE\"}}" >/dev/null
upgraded() {
  [ "$(field '{.status.version}')" = "$TO_IMAGE" ] &&
    [ "$(field '{.status.conditions[?(@.type=="Ready")].status}')" = True ] &&
    [ "$(field '{.status.observedGeneration}')" = "$(field '{.metadata.generation}')" ]
}
# The hook pods' logs, each once, as they finish (the Jobs are pruned at rest).
declare -A SHOWN=()
show_hooks() {
  [ "$REAL" = 1 ] || return 0
  local pod
  for pod in $(k get pods -n "$NS" -l lockstep.dev/component=hook --field-selector=status.phase=Succeeded -o name 2>/dev/null); do
    [ -z "${SHOWN[$pod]:-}" ] || continue
    SHOWN[$pod]=1
    k logs -n "$NS" "$pod" 2>/dev/null | sed "s/^/   ${DIM}│ ${pod#pod/}: /;s/$/${RESET}/" >&3 || true
  done
}
upgraded_showing_hooks() { show_hooks; upgraded; }
exec 3>&1
wait_until "the upgrade to finish" upgraded_showing_hooks
show_hooks
k get pods -n "$NS" -l "app.kubernetes.io/instance=$NAME,lockstep.dev/component=database" \
  -o custom-columns='POD:.metadata.name,IMAGE:.spec.containers[0].image,READY:.status.conditions[?(@.type=="Ready")].status,NODE:.spec.nodeName' | show

if [ "$REAL" = 1 ]; then
  explain "etcd after the upgrade:"
  cluster_37() { in_member 'etcd_curl version' | grep -q '"etcdcluster":"3.7'; }
  wait_until "the cluster version to reach 3.7" cluster_37
  etcdctl --endpoints="$(members)" endpoint status -w table 2>&1 | show
  explain "version: $(in_member 'etcd_curl version')"
  k exec -n "$NS" writer -- touch /tmp/stop
  writer_done() { k logs -n "$NS" writer | grep -qx 'done'; }
  wait_until "the writer to stop" writer_done
  k logs -n "$NS" writer >"$DEMO_DIR/writer.log"
  ACKED="$(grep -c '^ack' "$DEMO_DIR/writer.log" || true)"
  FAILED="$(grep -c '^err' "$DEMO_DIR/writer.log" || true)"
  etcdctl get --prefix key- --keys-only --consistency=l | grep . | sort -u >"$DEMO_DIR/stored.keys"
  grep '^ack' "$DEMO_DIR/writer.log" | awk '{print "key-" $2}' | sort -u >"$DEMO_DIR/acked.keys"
  LOST="$(comm -23 "$DEMO_DIR/acked.keys" "$DEMO_DIR/stored.keys" | wc -l)"
  TALLY="writer: $ACKED writes acknowledged, $FAILED failed, $LOST lost ($(wc -l <"$DEMO_DIR/stored.keys") keys stored)"
  step "6. The writer's tally"
  explain "$TALLY"
  explain "(failed = puts refused or timed out while a member restarted; every acknowledged"
  explain "key was read back from etcd: lost must be 0)"
  [ "$LOST" = 0 ] || fail "$LOST acknowledged writes lost"
fi

BKSTEP=5
[ "$REAL" = 0 ] || BKSTEP=7
step "$BKSTEP. Back up on demand (annotation lockstep.dev/backup-now)"
explain "The annotation's value is a token: the machine runs one backup Job per new token."
BEFORE="$(field '{.status.lastBackup.time}')"
k annotate distributeddb "$NAME" -n "$NS" --overwrite "lockstep.dev/backup-now=demo-$(date +%s)" >/dev/null
backed_up() {
  local now
  now="$(field '{.status.lastBackup.time}')"
  [ -n "$now" ] && [ "$now" != "$BEFORE" ] &&
    [ "$(field '{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_until "the on-demand backup" backed_up
BACKUP_JOB="$(field '{.status.lastBackup.job}')"
explain "status.lastBackup: $BACKUP_JOB — $(field '{.status.lastBackup.outcome}')"
if [ "$REAL" = 1 ]; then
  ON_DEMAND="$(s3 ls "$BUCKET" "$PREFIX$BACKUP_JOB-" | tail -1)"
  [ -n "$ON_DEMAND" ] || fail "no snapshot of $BACKUP_JOB in s3://$BUCKET/$PREFIX"
  explain "etcdctl snapshot save, uploaded: s3://$BUCKET/$ON_DEMAND"
fi

DELSTEP=6
[ "$REAL" = 0 ] || DELSTEP=8
step "$DELSTEP. Delete distributeddb/$NAME"
explain "The finalizer holds the object while the machine runs a final backup; it is released"
explain "only once the final state is persisted."
k delete distributeddb "$NAME" -n "$NS" --wait=true --timeout="${TIMEOUT}s" >/dev/null
# The narrator ends by itself when the object is gone.
narrator_finish
if [ "$REAL" = 1 ]; then
  FINAL="$(s3 ls "$BUCKET" "$PREFIX$NAME-final-backup-" | tail -1)"
  [ -n "$FINAL" ] || fail "no final snapshot in s3://$BUCKET/$PREFIX"
  explain "final snapshot (taken before the finalizer was released): s3://$BUCKET/$FINAL"
  k delete pod writer -n "$NS" --wait=false >/dev/null 2>&1 || true
fi

step "$((DELSTEP + 1)). What the operator counted (http://127.0.0.1:$PORT/metrics)"
operator_metrics
explain "Events (one per transition): kubectl get events -n $NS --field-selector involvedObject.name=$NAME"

cleanup
OPERATOR_PID=""
trap - EXIT

if [ "$REAL" = 1 ]; then
  step "Summary"
  explain "$TALLY"
  explain "this run's snapshots: s3://$BUCKET/$ON_DEMAND (on demand), s3://$BUCKET/$FINAL (final)"
  explain "all snapshots under s3://$BUCKET/$PREFIX, newest $(ddb_field spec.backupPolicy.retention) kept ($S3_ENDPOINT from pods, $S3_HOST_ENDPOINT from here):"
  s3 lsl "$BUCKET" "$PREFIX" | sed "s#^\([^ ]*\) #   \1  s3://$BUCKET/#"
else
  step "Summary (KWOK-only fallback: no container ran, so no database, writer or snapshot)"
fi

maybe_teardown

step "Done. The control plane is still up:"
cat <<EOF
   export KUBECONFIG=$KUBECONFIG
   $KUBECTL get events -n $NS --sort-by=.metadata.creationTimestamp
   $KUBECTL get jobs,pods,statefulsets -n $NS
   less $DEMO_DIR/operator.log          # the operator's JSON log

   Run it again yourself:
   $LOCKSTEP run --namespace $NS --metrics-addr 127.0.0.1:8080 &
   $KUBECTL apply -n $NS -f $EXAMPLE
   $LOCKSTEP narrate distributeddb/$NAME -n $NS

   make cluster-down                    # when you are finished
EOF
