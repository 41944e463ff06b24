#!/usr/bin/env bash
# Cut (or restore) pods' network path to the API server, on the real node of the
# local cluster: an nftables set of pod IPs, and a rule in the node's network
# namespace that drops what they forward to the API server's address and port
# (after kube-proxy's DNAT of the `kubernetes` Service). Everything else - pod to
# pod (replication), kubelet to the API server, exec and logs - is untouched.
# Used by tests/e2e/postgres_real.rs to cut a primary off from its Lease.
#
#   tools/node/api-cut.sh add POD_IP    drop POD_IP -> API server from now on
#   tools/node/api-cut.sh del POD_IP    stop dropping it
#   tools/node/api-cut.sh list          the rule set, with its counters
#
# Needs root (nsenter); LOCKSTEP_CLUSTER_DIR as for the other tools. The rules go
# with the node's network namespace (`make cluster-down`).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
. "$HERE/../cluster/lib.sh"

usage() {
  echo "usage: $0 add|del POD_IP | list" >&2
  exit 2
}
node_pid_alive node-holder || { echo "api-cut.sh: no real node running (make cluster-up)" >&2; exit 1; }
node_env
# shellcheck disable=SC1091
. "$CLUSTER_DIR/ports.env"
TABLE=lockstep_api_cut
ensure_table() {
  in_node nft -f - <<EOF
table inet $TABLE {
  set cut { type ipv4_addr; }
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    ip saddr @cut ip daddr $HOST_IP tcp dport $APISERVER_PORT counter drop
  }
}
EOF
}
case "${1:-}" in
  add)
    [ $# -eq 2 ] || usage
    # `nft -f` with an existing table only adds what is missing; flush the chain so
    # that the rule exists once.
    in_node nft list table inet "$TABLE" >/dev/null 2>&1 && in_node nft flush chain inet "$TABLE" forward
    ensure_table
    in_node nft add element inet "$TABLE" cut "{ $2 }"
    ;;
  del)
    [ $# -eq 2 ] || usage
    in_node nft delete element inet "$TABLE" cut "{ $2 }"
    ;;
  list) in_node nft list table inet "$TABLE" ;;
  *) usage ;;
esac
