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
COMPONENTS_STOP_ORDER=(kwok scheduler controller-manager apiserver)
# The hostpath provisioner of kube-controller-manager always writes here.
HOSTPATH_PV_ROOT=/tmp/hostpath_pv

log() { echo "[cluster] $*" >&2; }

# pid_alive NAME: the process recorded in pids/NAME.pid is still ours and alive.
pid_alive() {
  case "$1" in node-*) node_pid_alive "$1"; return ;; esac
  local f="$PIDS/$1.pid" pid
  [ -f "$f" ] || return 1
  pid="$(cat "$f")"
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  # Guard against a recycled pid: it must still be one of our binaries.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -e lockstep-cluster -e '/kwok '
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
  rm -f "$f"
}

# The real node (kubelet + containerd); LOCKSTEP_REAL_NODE=0 leaves it out.
# shellcheck source=../node/node.sh
. "$CLUSTER_TOOLS/../node/node.sh"
