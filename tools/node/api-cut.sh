#!/usr/bin/env bash
# Cut (or restore) pods' network path to the API server, and to chosen peers, on the
# real node of the local cluster: nftables sets in the node's network namespace, with
# rules that drop what a cut pod forwards to the API server's address and port (after
# kube-proxy's DNAT of the `kubernetes` Service), and what goes either way between a
# pod and a peer it is cut from (the node bridges pod-to-pod traffic through its
# netfilter hooks, as kube-proxy needs). Everything else - other pods, the kubelet to
# the API server, exec and logs - is untouched. Used by tests/e2e/postgres_real.rs to
# cut a primary off from its Lease, and from its standbys.
#
#   tools/node/api-cut.sh add POD_IP              drop POD_IP -> API server from now on
#   tools/node/api-cut.sh del POD_IP              stop dropping it
#   tools/node/api-cut.sh peers POD_IP PEER_IP... drop POD_IP <-> each PEER_IP
#   tools/node/api-cut.sh unpeer POD_IP PEER_IP.. stop dropping those
#   tools/node/api-cut.sh list                    the rule set, with its counters
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
  set pairs { type ipv4_addr . ipv4_addr; }
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    ip saddr @cut ip daddr $HOST_IP tcp dport $APISERVER_PORT counter drop
    ip saddr . ip daddr @pairs counter drop
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
  peers | unpeer)
    [ $# -ge 3 ] || usage
    op=$1 pod=$2
    shift 2
    pairs=""
    for peer in "$@"; do pairs="${pairs:+$pairs, }$pod . $peer, $peer . $pod"; done
    if [ "$op" = peers ]; then
      in_node nft list table inet "$TABLE" >/dev/null 2>&1 && in_node nft flush chain inet "$TABLE" forward
      ensure_table
      in_node nft add element inet "$TABLE" pairs "{ $pairs }"
    else
      in_node nft delete element inet "$TABLE" pairs "{ $pairs }"
    fi
    ;;
  list) in_node nft list table inet "$TABLE" ;;
  *) usage ;;
esac
