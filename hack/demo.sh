#!/usr/bin/env bash
# make demo: the DistributedDB lifecycle on the local control plane, narrated one line
# per transition as it happens.
#
#   create -> Ready -> image upgrade, pod by pod, with pre/post hooks
#          -> on-demand backup (annotation) -> delete, with a final backup
#
# It brings the control plane up (make cluster-up), installs the CRDs, runs the
# operator in the background (log: target/demo/operator.log), applies
# examples/distributeddb-full.yaml and drives the lifecycle with kubectl, while
# `lockstep narrate` prints each transition the machine persists in
# status.machine.history.
#
# At the end the cluster stays up (and the script says how to look at it), unless
# DEMO_TEARDOWN=1 or --teardown.
#
# Env:
#   DEMO_TEARDOWN=1        tear the control plane down at the end
#   DEMO_NAMESPACE         namespace of the demo (default lockstep-demo)
#   DEMO_UPGRADE_IMAGE     the image to upgrade to (default: the example's, next minor)
#   DEMO_TIMEOUT           seconds each step may take (default 180)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TEARDOWN="${DEMO_TEARDOWN:-0}"
for arg in "$@"; do
  case "$arg" in
    --teardown) TEARDOWN=1 ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

NS="${DEMO_NAMESPACE:-lockstep-demo}"
TIMEOUT="${DEMO_TIMEOUT:-180}"
EXAMPLE="examples/distributeddb-full.yaml"
DEMO_DIR="$ROOT/target/demo"
KUBECTL="$ROOT/target/cluster/bin/kubectl"
LOCKSTEP="$ROOT/target/debug/lockstep"
export KUBECONFIG="$ROOT/target/cluster/kubeconfig"

if [ -t 1 ]; then
  BOLD=$'\033[1m'; DIM=$'\033[2m'; CYAN=$'\033[36m'; RESET=$'\033[0m'
else
  BOLD=""; DIM=""; CYAN=""; RESET=""
fi
step() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$RESET"; }
explain() { printf '%s   %s%s\n' "$DIM" "$*" "$RESET"; }
fail() { printf '\ndemo failed: %s\n   operator log: %s\n' "$*" "$DEMO_DIR/operator.log" >&2; exit 1; }

# wait_until DESCRIPTION COMMAND...: poll COMMAND (every half second) until it succeeds,
# at most TIMEOUT seconds.
wait_until() {
  local what="$1" deadline=$((SECONDS + TIMEOUT))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "timed out after ${TIMEOUT}s waiting for $what"
    kill -0 "$OPERATOR_PID" 2>/dev/null || fail "the operator exited while waiting for $what"
    sleep 0.5
  done
}

k() { "$KUBECTL" "$@"; }
field() { k get distributeddb "$NAME" -n "$NS" -o "jsonpath=$1" 2>/dev/null; }

OPERATOR_PID=""
NARRATOR_PID=""
cleanup() {
  # Stop what this script started, by pid: the narrator, then the operator (SIGTERM:
  # it drains in-flight reconciles and exits).
  if [ -n "$NARRATOR_PID" ] && kill -0 "$NARRATOR_PID" 2>/dev/null; then kill "$NARRATOR_PID" 2>/dev/null || true; fi
  if [ -n "$OPERATOR_PID" ] && kill -0 "$OPERATOR_PID" 2>/dev/null; then
    kill -TERM "$OPERATOR_PID" 2>/dev/null || true
    wait "$OPERATOR_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

[ -f "$EXAMPLE" ] || fail "$EXAMPLE is missing"
mkdir -p "$DEMO_DIR"

# ----------------------------------------------------------------------------------
step "0. A Kubernetes control plane on this machine"
explain "kube-apiserver, controller-manager and scheduler built from Go modules, with KWOK"
explain "playing the kubelets of 3 fake nodes (pods become Ready; no container runs)."
make --no-print-directory cluster-up

step "1. Build lockstep and install the CRDs"
cargo build --quiet --bins
# (kubectl's warnings about schema formats go to the log, not the narration.)
k apply --server-side --field-manager=lockstep-demo -f crds/distributeddbs.lockstep.dev.yaml \
  >"$DEMO_DIR/crd-apply.log" 2>&1 || fail "installing the CRD failed: $(cat "$DEMO_DIR/crd-apply.log")"
k wait --for=condition=Established crd/distributeddbs.lockstep.dev --timeout=60s >/dev/null
explain "crds/ is generated from the Rust types (lockstep crds); the statechart the"
explain "operator enforces is in machines/distributeddb.md (lockstep machines)."

step "2. Start the operator"
k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$LOCKSTEP" --log-format json run --namespace "$NS" --machines distributeddb \
  --metrics-addr "127.0.0.1:$PORT" >"$DEMO_DIR/operator.log" 2>&1 &
OPERATOR_PID=$!
wait_until "the operator to be ready" curl -sf "http://127.0.0.1:$PORT/readyz"
explain "lockstep run (pid $OPERATOR_PID) watches namespace $NS; logs (JSON) in target/demo/operator.log;"
explain "health and metrics on http://127.0.0.1:$PORT/{healthz,readyz,metrics}."
explain "Every reconcile reads the state persisted in .status.machine, decides one declared"
explain "transition (or none), acts, and writes the new state with one fenced status patch."

# The example's DistributedDB (the file may hold other objects too, such as a Secret).
ddb_field() {
  k create --dry-run=client -o json -f "$EXAMPLE" | python3 -c '
import json, sys
text, decoder, items, at = sys.stdin.read(), json.JSONDecoder(), [], 0
while text[at:].strip():
    at += len(text[at:]) - len(text[at:].lstrip())
    doc, at = decoder.raw_decode(text, at)
    items += doc["items"] if doc.get("kind") == "List" else [doc]
ddb = next(i for i in items if i.get("kind") == "DistributedDB")
value = ddb
for key in sys.argv[1].split("."):
    value = value[key]
print(value)' "$1"
}
NAME="$(ddb_field metadata.name)"
FROM_IMAGE="$(ddb_field spec.image)"
# The next minor version of an `x.y` tag (registry.example/db:1.4 -> 1.5), else tag-next.
TAG="${FROM_IMAGE##*:}"
if [ "$TAG" != "$FROM_IMAGE" ] && [[ "$TAG" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
  DEFAULT_NEXT="${FROM_IMAGE%:*}:${BASH_REMATCH[1]}.$((BASH_REMATCH[2] + 1))"
elif [ "$TAG" != "$FROM_IMAGE" ]; then
  DEFAULT_NEXT="${FROM_IMAGE}-next"
else
  DEFAULT_NEXT="${FROM_IMAGE}:next"
fi
TO_IMAGE="${DEMO_UPGRADE_IMAGE:-$DEFAULT_NEXT}"

# Anything left from an earlier run goes first (the operator finalizes it).
if k get distributeddb "$NAME" -n "$NS" >/dev/null 2>&1; then
  explain "removing distributeddb/$NAME left from an earlier run"
  k delete distributeddb "$NAME" -n "$NS" --wait=true --timeout="${TIMEOUT}s" >/dev/null
fi

step "3. Create distributeddb/$NAME ($EXAMPLE)"
explain "The narrator below prints one line per transition, as the operator persists it:"
explain "  time  name  from → to  reason: message"
"$LOCKSTEP" narrate "distributeddb/$NAME" -n "$NS" 2>>"$DEMO_DIR/narrate.log" | sed -u "s/^/   ${CYAN}▸${RESET} /" &
NARRATOR_PID=$!
k apply -n "$NS" -f "$EXAMPLE" >/dev/null
explain "Creating: a headless Service and a StatefulSet; Ready once every pod is Ready."
k wait --for=condition=Ready "distributeddb/$NAME" -n "$NS" --timeout="${TIMEOUT}s" >/dev/null
k get distributeddb "$NAME" -n "$NS"

step "4. Upgrade the image: $FROM_IMAGE -> $TO_IMAGE"
explain "One pod at a time, highest ordinal first: pre-hook Job, delete the pod, wait for its"
explain "replacement to be Ready at the new image, post-hook Job, then the next pod."
explain "Each step is a transition persisted before the next action, so a restarted"
explain "operator resumes exactly where the status says."
k patch distributeddb "$NAME" -n "$NS" --type merge -p "{\"spec\":{\"image\":\"$TO_IMAGE\"}}" >/dev/null
upgraded() {
  [ "$(field '{.status.version}')" = "$TO_IMAGE" ] &&
    [ "$(field '{.status.conditions[?(@.type=="Ready")].status}')" = True ] &&
    [ "$(field '{.status.observedGeneration}')" = "$(field '{.metadata.generation}')" ]
}
wait_until "the upgrade to finish" upgraded
k get pods -n "$NS" -l "app.kubernetes.io/instance=$NAME" \
  -o custom-columns='POD:.metadata.name,IMAGE:.spec.containers[0].image,READY:.status.conditions[?(@.type=="Ready")].status'

step "5. Back up on demand (annotation lockstep.dev/backup-now)"
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
explain "status.lastBackup: $(field '{.status.lastBackup.job}') — $(field '{.status.lastBackup.outcome}')"

step "6. Delete distributeddb/$NAME"
explain "The finalizer holds the object while the machine runs a final backup; it is released"
explain "only once the final state is persisted."
k delete distributeddb "$NAME" -n "$NS" --wait=true --timeout="${TIMEOUT}s" >/dev/null
# The narrator ends by itself when the object is gone.
deadline=$((SECONDS + 30))
while kill -0 "$NARRATOR_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
NARRATOR_PID=""

step "7. What the operator counted (http://127.0.0.1:$PORT/metrics)"
curl -sf "http://127.0.0.1:$PORT/metrics" |
  grep -E '^lockstep_(transitions_total|reconciles_total|reconcile_errors_total|state_duration_seconds_count)' |
  sed 's/^/   /' || true
explain "Events (one per transition): kubectl get events -n $NS --field-selector involvedObject.name=$NAME"

cleanup
OPERATOR_PID=""
trap - EXIT

if [ "$TEARDOWN" = 1 ]; then
  step "Tearing the control plane down"
  make --no-print-directory cluster-down
  exit 0
fi

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
