# shellcheck shell=bash disable=SC2034
# Shared settings for tools/cluster/{up,down,status}.sh. Source, don't run.

CLUSTER_TOOLS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_TOOLS/../.." && pwd)"
# All state of the running cluster lives here; cluster-down removes it.
CLUSTER_DIR="${LOCKSTEP_CLUSTER_DIR:-$REPO_ROOT/target/cluster}"
PKI="$CLUSTER_DIR/pki"
LOGS="$CLUSTER_DIR/logs"
PIDS="$CLUSTER_DIR/pids"
KUBECONFIG_ADMIN="$CLUSTER_DIR/kubeconfig"
# Processes in stop order (reverse of start order).
COMPONENTS_STOP_ORDER=(kwok local-provisioner scheduler controller-manager apiserver)
# The hostpath provisioner of kube-controller-manager always writes here.
HOSTPATH_PV_ROOT=/tmp/hostpath_pv
# The volumes of the StorageClass "local" (provisioner/): removed with the cluster.
LOCAL_PV_ROOT="$CLUSTER_DIR/volumes"

log() { echo "[cluster] $*" >&2; }

# proc_start_time PID: the process's start time in clock ticks since boot
# (field 22 of /proc/PID/stat); fails if PID is gone or a zombie. exec keeps
# it, so it names one process across the setsid/nsenter/env chain a start
# goes through, and a recycled pid gets a different one.
proc_start_time() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }" # the command name may hold spaces and parentheses
  # shellcheck disable=SC2086 # split the fields on purpose
  set -- $stat
  [ "$1" != Z ] || return 1
  echo "${20}"
}

# pid_record NAME PID: remember PID (pids/NAME.pid) and its start time
# (pids/NAME.start) the moment it is forked, so that liveness never depends on
# how far the child has got in exec'ing its program.
pid_record() {
  echo "$2" >"$PIDS/$1.pid"
  proc_start_time "$2" >"$PIDS/$1.start" || : >"$PIDS/$1.start"
}

# pid_alive NAME: the process recorded in pids/NAME.pid is alive, not a zombie,
# and the same process (same start time) as when it was recorded.
pid_alive() {
  local f="$PIDS/$1.pid" pid want got
  [ -f "$f" ] || return 1
  pid="$(cat "$f")"
  [ -n "$pid" ] || return 1
  got="$(proc_start_time "$pid")" || return 1
  want="$(cat "$PIDS/$1.start" 2>/dev/null)" || return 1
  [ -n "$want" ] && [ "$got" = "$want" ]
}

kctl() {
  "$CLUSTER_DIR/bin/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"
}

# stop NAME: SIGTERM the process in pids/NAME.pid (if still ours), SIGKILL it
# after 10 s, remove the pid file.
stop() {
  local name="$1" f="$PIDS/$1.pid" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if pid_alive "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      pid_alive "$name" || break
      sleep 0.1
    done
    if pid_alive "$name"; then
      log "$name (pid $pid) ignored SIGTERM; killing"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        [ -d "/proc/$pid" ] || break
        sleep 0.1
      done
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$f" "$PIDS/$name.start"
}

# The real node (kubelet + containerd); LOCKSTEP_REAL_NODE=0 leaves it out.
# shellcheck source=../node/node.sh
. "$CLUSTER_TOOLS/../node/node.sh"
# Its image registry, a host process started with it.
# shellcheck source=../registry/lib.sh
. "$CLUSTER_TOOLS/../registry/lib.sh"
