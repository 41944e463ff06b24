#!/usr/bin/env bash
# Import the locally built images (tools/images/build.sh) into the running real
# node's containerd (namespace k8s.io, where the kubelet looks), under the names
# the examples use. Pods then run them with imagePullPolicy: IfNotPresent.
#
#   tools/images/load.sh [IMAGE...]   build if needed, then import (default: all)
#   tools/images/load.sh --cached     import every image whose archive is already cached (no build)
#
# An image already present with the same manifest digest is skipped.
# Env: LOCKSTEP_CLUSTER_DIR (default <repo>/target/cluster), LOCKSTEP_CACHE.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
. "$HERE/../cluster/lib.sh"

if ! node_pid_alive node-containerd; then
  echo "load.sh: the real node's containerd is not running (make cluster-up; LOCKSTEP_REAL_NODE=0 has none)" >&2
  exit 1
fi

cached=0
names=()
for a in "$@"; do
  case "$a" in
    --cached) cached=1 ;;
    *) names+=("$a") ;;
  esac
done
[ ${#names[@]} -gt 0 ] || mapfile -t names < <("$HERE/build.sh" --list)

for n in "${names[@]}"; do
  ref="$("$HERE/build.sh" --name "$n")"
  if [ "$cached" = 1 ]; then
    tar="$("$HERE/build.sh" --path "$n")"
    [ -f "$tar" ] || continue
  else
    tar="$("$HERE/build.sh" "$n")"
  fi
  want="$(tar -xOf "$tar" index.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')"
  have="$(node_ctr images ls -q "name==$ref" 2>/dev/null | head -1 || true)"
  if [ -n "$have" ] && node_ctr images ls "name==$ref" | grep -q "$want"; then
    echo "load.sh: $ref already present ($want)"
    continue
  fi
  t0=$SECONDS
  # The archive is read from inside the node's mount namespace: same path.
  node_ctr images import "$tar" >/dev/null
  echo "load.sh: imported $ref ($want) in $((SECONDS - t0)) s"
done
