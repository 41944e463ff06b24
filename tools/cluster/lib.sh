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
