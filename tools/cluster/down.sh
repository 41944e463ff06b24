#!/usr/bin/env bash
# Stop every process tools/cluster/up.sh started (by the pids it recorded) and
# remove the cluster state (target/cluster) and the hostpath volumes it made.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ ! -d "$CLUSTER_DIR" ]; then
  log "no cluster state at $CLUSTER_DIR: nothing to do"
  exit 0
fi

# Volumes provisioned by the hostpath provisioner: ask the API while it is up,
# and remember them in case the API is not reachable next time.
if [ -f "$KUBECONFIG_ADMIN" ] && [ -x "$CLUSTER_DIR/bin/kubectl" ] && pid_alive apiserver; then
  kctl get pv -o jsonpath='{range .items[*]}{.spec.hostPath.path}{"\n"}{end}' --request-timeout=5s \
    >>"$CLUSTER_DIR/hostpath-volumes" 2>/dev/null || true
fi

# The real node's processes first (its kubelet talks to the API server), then
# the registry (it binds the veth address too) and the control plane, then the node's namespaces and veth (the API server binds
# the veth address: without it, it cannot shut down cleanly).
node_stop
stop registry
for c in "${COMPONENTS_STOP_ORDER[@]}"; do stop "$c"; done
node_stop_net

if [ -f "$CLUSTER_DIR/hostpath-volumes" ]; then
  sort -u "$CLUSTER_DIR/hostpath-volumes" | while read -r p; do
    case "$p" in
      "$HOSTPATH_PV_ROOT"/?*) rm -rf -- "$p" ;;
    esac
  done
  rmdir "$HOSTPATH_PV_ROOT" 2>/dev/null || true
fi

rm -rf -- "$CLUSTER_DIR"
log "cluster down; removed $CLUSTER_DIR"
