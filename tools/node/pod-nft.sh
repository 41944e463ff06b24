#!/usr/bin/env bash
# Add (or remove) an nftables rule inside one pod's own network namespace on the real
# node of the local cluster: what the pod's kernel receives, on any interface,
# loopback included, before any process of the pod sees it. Unlike api-cut.sh (the
# node's namespace, so only what crosses the node's bridge), this reaches what a pod
# says to itself: an exec readiness probe on 127.0.0.1, or the replies of one server
# it connects to. Used by tests/e2e/postgres_real/zero_loss.rs to drop a standby's
# WAL stream while it stays Ready, and to fail a standby's readiness probe while it
# keeps streaming.
#
#   tools/node/pod-nft.sh add POD_UID NAME RULE   a table `lockstep_NAME` whose input
#                                                 chain holds RULE (nft syntax, with
#                                                 its verdict; replaces one of that name)
#   tools/node/pod-nft.sh del POD_UID NAME        remove that table
#   tools/node/pod-nft.sh list POD_UID            the pod's tables, with their counters
#
# For example, a standby's WAL stream dropped, its own probe untouched:
#   tools/node/pod-nft.sh add "$UID" wal_in 'iifname != "lo" tcp sport 5432 counter drop'
#
# The pod is found by its UID through its freezer cgroup (the real node runs cgroup
# v1; the kubelet's root is /lockstep-node-<N>): any process of any of its containers
# shares the pod's network namespace, which `nsenter -n` enters. Needs root and `nft`
# (the node's nftables package, installed by `make cluster-up`). The rules go with the
# pod's sandbox (a deleted or recreated pod starts without them).
set -euo pipefail

FREEZER=/sys/fs/cgroup/freezer

usage() {
  echo "usage: $0 add POD_UID NAME RULE | del POD_UID NAME | list POD_UID" >&2
  exit 2
}
die() {
  echo "pod-nft.sh: $*" >&2
  exit 1
}

# pod_pid UID: a process of the pod with that UID on the real node.
pod_pid() {
  local dir="" node f pid=""
  for node in "$FREEZER"/lockstep-node-*; do
    [ -d "$node" ] || continue
    dir="$(find "$node" -maxdepth 4 -type d -name "pod$1" -print -quit 2>/dev/null || true)"
    [ -n "$dir" ] && break
  done
  [ -n "$dir" ] || die "no cgroup pod$1 under $FREEZER/lockstep-node-* (is the pod on the real node, and running?)"
  for f in "$dir"/*/cgroup.procs; do
    [ -f "$f" ] || continue
    read -r pid <"$f" || true
    [ -n "$pid" ] && break
  done
  [ -n "$pid" ] || die "pod$1 has no process ($dir)"
  echo "$pid"
}

in_pod() {
  local pid="$1"
  shift
  nsenter -t "$pid" -n -- "$@"
}

command -v nft >/dev/null || die "nft is not installed (make cluster-up installs the node's nftables)"
[ $# -ge 2 ] || usage
op=$1 uid=$2
case "$op" in
  add | del)
    [ $# -ge 3 ] || usage
    name=$3
    [[ "$name" =~ ^[a-z][a-z0-9_]*$ ]] || die "NAME must be lower case letters, digits and _: $name"
    table="lockstep_$name"
    ;;
esac
pid="$(pod_pid "$uid")"
case "$op" in
  add)
    [ $# -eq 4 ] || usage
    # One table per NAME, replaced whole, so that adding twice leaves one rule.
    in_pod "$pid" nft list table inet "$table" >/dev/null 2>&1 && in_pod "$pid" nft delete table inet "$table"
    in_pod "$pid" nft -f - <<EOF
table inet $table {
  chain input {
    type filter hook input priority filter - 10; policy accept;
    $4
  }
}
EOF
    ;;
  del)
    [ $# -eq 3 ] || usage
    in_pod "$pid" nft delete table inet "$table"
    ;;
  list)
    [ $# -eq 2 ] || usage
    in_pod "$pid" nft list ruleset
    ;;
  *) usage ;;
esac
