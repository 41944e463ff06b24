# shellcheck shell=bash
# What hack/demo.sh (make demo: DistributedDB on etcd) and hack/demo-postgres.sh
# (make demo-postgres: PostgresCluster) share: the narration, waits with deadlines, the
# operator and the narrator in the background (stopped by pid on exit), the images, the
# in-cluster S3 server and the teardown. Sourced, after `set -euo pipefail`.
#
# The sourcing script sets, before calling these functions:
#   DEMO_DIR   where logs go (the operator's: $DEMO_DIR/operator.log)
#   NS         the demo's namespace
#   TIMEOUT    seconds each wait may take
#   EXAMPLE    the example file (example_field reads it)
#   TEARDOWN   1: maybe_teardown tears the control plane down
# and may define demo_on_fail, which fail calls (its output goes to stderr) before it
# exits: what to look at when a step did not finish.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

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
show() { sed "s/^/   /"; }
fail() {
  if declare -F demo_on_fail >/dev/null; then demo_on_fail >&2 || true; fi
  printf '\ndemo failed: %s\n   operator log: %s\n' "$*" "$DEMO_DIR/operator.log" >&2
  exit 1
}

# demo_args ARGS...: --teardown sets TEARDOWN=1; --help prints the script's header
# comment (the comment lines after the #! line) and exits.
demo_args() {
  local arg
  for arg in "$@"; do
    case "$arg" in
      --teardown) TEARDOWN=1 ;;
      -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
      *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
  done
}

# timed_step TITLE: step, and remember how long each such step took (step_times prints
# them).
STEP_TITLES=()
STEP_SECONDS=()
STEP_T0=""
step_close() {
  if [ -n "$STEP_T0" ]; then STEP_SECONDS+=("$((SECONDS - STEP_T0))"); fi
  STEP_T0=""
}
timed_step() {
  step_close
  STEP_T0=$SECONDS
  STEP_TITLES+=("$*")
  step "$*"
}
step_times() {
  step_close
  local i
  for i in "${!STEP_SECONDS[@]}"; do
    printf '   %5ss  %s\n' "${STEP_SECONDS[$i]}" "${STEP_TITLES[$i]}"
  done
  printf '   %5ss  total\n' "$SECONDS"
}

# wait_until DESCRIPTION COMMAND...: poll COMMAND (every half second) until it succeeds,
# at most TIMEOUT seconds (once the operator runs, also fail as soon as it exits). Every
# wait of the demo goes through here: a first read that fails (an object not created
# yet, a status not written yet) is only a reason to look again.
wait_until() {
  local what="$1" deadline=$((SECONDS + TIMEOUT))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "timed out after ${TIMEOUT}s waiting for $what"
    if [ -n "$OPERATOR_PID" ] && ! kill -0 "$OPERATOR_PID" 2>/dev/null; then
      fail "the operator exited while waiting for $what"
    fi
    sleep 0.5
  done
}

k() { "$KUBECTL" "$@"; }
# plugin ARGS: `kubectl lockstep ARGS` in the demo's namespace (the lockstep binary, with
# the cluster's kubectl on PATH for `psql`); its exit status is the command's.
plugin() { PATH="$(dirname "$KUBECTL"):$PATH" "$LOCKSTEP" kubectl -n "$NS" "$@" </dev/null; }
# condition_true TYPE OBJECT [kubectl args...]: OBJECT's condition TYPE is True. Unlike
# `kubectl wait --for=condition=...`, which errors out on an object the server has not
# yet given conditions (".status.conditions accessor error: <nil>"), this only reads, so
# wait_until polls it until the deadline.
condition_true() {
  local type="$1"
  shift
  [ "$(k get "$@" -o "jsonpath={.status.conditions[?(@.type==\"$type\")].status}" 2>/dev/null)" = True ]
}

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

# install_crd FILE NAME: apply the CRD in FILE and wait until NAME is Established.
install_crd() {
  # (kubectl's warnings about schema formats go to the log, not the narration.)
  k apply --server-side --field-manager=lockstep-demo -f "$1" \
    >"$DEMO_DIR/crd-apply.log" 2>&1 || fail "installing the CRD failed: $(cat "$DEMO_DIR/crd-apply.log")"
  wait_until "the CRD to be Established" condition_true Established "crd/$2"
}

# load_images IMAGE...: build (or reuse) the images and import them into the real node.
load_images() {
  explain "Images (no registry: built here as OCI archives, imported into the node's containerd):"
  tools/images/load.sh "$@" >"$DEMO_DIR/images.log" 2>&1 ||
    fail "building/importing the images failed: $(tail -5 "$DEMO_DIR/images.log")"
  local i
  for i in "$@"; do explain "  $(tools/images/build.sh --name "$i")"; done
}

# start_s3: the in-cluster S3 server (tools/node/s3.sh); exports S3_ENDPOINT (from pods),
# S3_HOST_ENDPOINT (from here) and the AWS_* credentials.
start_s3() {
  local env
  env="$(tools/node/s3.sh 2>>"$DEMO_DIR/images.log")" || fail "the S3 server did not start"
  set -a; eval "$env"; set +a
  explain "S3 (versitygw) runs as a pod: $S3_ENDPOINT from pods, $S3_HOST_ENDPOINT from here."
}
# s3 on this machine (tools/images/backup/s3), against the S3 pod.
s3() { S3_ENDPOINT="$S3_HOST_ENDPOINT" tools/images/backup/s3 "$@"; }

# start_operator MACHINE [ARG...]: create the namespace (where the API server admits
# only pods that meet the `restricted` Pod Security Standard), run `lockstep run` for MACHINE
# in it in the background (log: $DEMO_DIR/operator.log; extra ARGs go to `run`) and
# wait until it is ready. Sets OPERATOR_PID and PORT (its /metrics).
start_operator() {
  local machine="$1"
  shift
  k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
  k label --overwrite namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null
  PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "$LOCKSTEP" --log-format json run --namespace "$NS" --machines "$machine" \
    --metrics-addr "127.0.0.1:$PORT" "$@" >"$DEMO_DIR/operator.log" 2>&1 &
  OPERATOR_PID=$!
  wait_until "the operator to be ready" curl -sf "http://127.0.0.1:$PORT/readyz"
  explain "lockstep run (pid $OPERATOR_PID) watches namespace $NS; logs (JSON) in ${DEMO_DIR#"$ROOT"/}/operator.log;"
  explain "health and metrics on http://127.0.0.1:$PORT/{healthz,readyz,metrics}."
  explain "Every reconcile reads the state persisted in .status.machine, decides one declared"
  explain "transition (or none), acts, and writes the new state with one fenced status patch."
}

# start_narrator KIND/NAME: `lockstep narrate` in the background, one line per
# transition (stderr: $DEMO_DIR/narrate.log). It ends by itself once the object is gone.
start_narrator() {
  explain "The narrator below prints one line per transition, as the operator persists it:"
  explain "  time  name  from → to  reason: message"
  "$LOCKSTEP" narrate "$1" -n "$NS" 2>>"$DEMO_DIR/narrate.log" | sed -u "s/^/   ${CYAN}▸${RESET} /" &
  NARRATOR_PID=$!
}
# narrator_finish: wait (at most 30 s) for the narrator to print the deletion and end.
narrator_finish() {
  local deadline=$((SECONDS + 30))
  while kill -0 "$NARRATOR_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  NARRATOR_PID=""
}

# example_field KIND PATH: a field (dotted PATH) of the object of KIND in $EXAMPLE (the
# file holds other objects too, such as a Secret); empty when absent.
example_field() {
  k create --dry-run=client -o json -f "$EXAMPLE" | python3 -c '
import json, sys
text, decoder, items, at = sys.stdin.read(), json.JSONDecoder(), [], 0
while text[at:].strip():
    at += len(text[at:]) - len(text[at:].lstrip())
    doc, at = decoder.raw_decode(text, at)
    items += doc["items"] if doc.get("kind") == "List" else [doc]
obj = next(i for i in items if i.get("kind") == sys.argv[1])
value = obj
for key in sys.argv[2].split("."):
    value = value.get(key, "") if isinstance(value, dict) else ""
print(value)' "$1" "$2"
}

# operator_metrics: the operator's counters (transitions, reconciles, errors, states).
operator_metrics() {
  curl -sf "http://127.0.0.1:$PORT/metrics" |
    grep -E '^lockstep_(transitions_total|reconciles_total|reconcile_errors_total|state_duration_seconds_count)' |
    show || true
}

# maybe_teardown: with TEARDOWN=1, tear the control plane down and exit.
maybe_teardown() {
  if [ "$TEARDOWN" = 1 ]; then
    step "Tearing the control plane down"
    make --no-print-directory cluster-down
    exit 0
  fi
}
