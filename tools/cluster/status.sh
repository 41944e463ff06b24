#!/usr/bin/env bash
# Print the state of the local test cluster; exit 0 only if it is up and ready.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ ! -d "$CLUSTER_DIR" ]; then
  echo "cluster: down (no $CLUSTER_DIR)"
  exit 1
fi
rc=0
for c in apiserver controller-manager scheduler local-provisioner kwok; do
  if pid_alive "$c"; then
    echo "$c: running (pid $(cat "$PIDS/$c.pid"))"
  else
    echo "$c: NOT running"
    rc=1
  fi
done
if [ -f "$PIDS/node-holder.pid" ]; then
  node_env || true
  for c in node-holder node-containerd node-kubelet node-kube-proxy node-coredns; do
    if pid_alive "$c"; then
      echo "$c: running (pid $(cat "$PIDS/$c.pid"))"
    else
      echo "$c: NOT running"
      rc=1
    fi
  done
  if pid_alive registry; then
    echo "registry: running (pid $(cat "$PIDS/registry.pid")) at $(registry_address)"
  else
    echo "registry: NOT running"
    rc=1
  fi
  echo "real node $NODE_NAME: $NODE_IP on ${NODE_IFACE:-?} (host ${HOST_IP:-?}), pods ${POD_CIDR:-?}, taint $NODE_TAINT"
elif real_node_enabled && [ -d "$CLUSTER_DIR" ]; then
  echo "real node: not started (LOCKSTEP_REAL_NODE=0 when the cluster came up?)"
fi
if [ "$(kctl get --raw /readyz 2>/dev/null)" = ok ]; then
  echo "apiserver /readyz: ok ($(kctl config view -o jsonpath='{.clusters[0].cluster.server}'))"
  kctl get nodes -o wide 2>/dev/null || rc=1
else
  echo "apiserver /readyz: not ok"
  rc=1
fi
echo "KUBECONFIG=$KUBECONFIG_ADMIN"
echo "kubectl: $CLUSTER_DIR/bin/kubectl"
exit $rc
