#!/usr/bin/env bash
# The running local cluster's image registry (started by `make cluster-up` with
# the real node; tools/registry/lib.sh).
#
#   tools/registry/registry.sh address   print its host:port (e.g. 10.250.0.1:12345)
#   tools/registry/registry.sh ca-dir    print a directory holding only the CA that
#                                        signed its certificate (for SSL_CERT_DIR)
#
# Images are named $(tools/registry/registry.sh address)/lockstep-dev/NAME:TAG.
# Fails (exit 1, with a message) when the cluster or its registry is not up.
# Env: LOCKSTEP_CLUSTER_DIR (default <repo>/target/cluster).
set -euo pipefail
# shellcheck source=../cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"

up() {
  pid_alive registry && registry_address >/dev/null && return 0
  echo "registry.sh: no registry running for $CLUSTER_DIR (make cluster-up; LOCKSTEP_REAL_NODE=0 starts none)" >&2
  exit 1
}

case "${1:-}" in
  address) up; registry_address ;;
  ca-dir) up; echo "$REGISTRY_STATE/ca" ;;
  *)
    echo "usage: $0 address|ca-dir" >&2
    exit 2
    ;;
esac
