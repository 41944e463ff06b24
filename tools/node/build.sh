#!/usr/bin/env bash
# Build the real node's binaries from Go modules into a cache directory outside
# the clone, keyed by a hash of their inputs (separate from the control plane's
# cluster-<hash> entry, so each stays valid when the other changes):
#
#   lockstep-node            kubelet + kube-proxy (k8s.io/kubernetes, tools/node/kube)
#   containerd, containerd-shim-runc-v2, ctr   (github.com/containerd/containerd/v2, tools/node/containerd)
#   coredns                  minimal CoreDNS (github.com/coredns/coredns, tools/node/coredns)
#
#   tools/node/build.sh            build if needed, print the bin dir on stdout
#   tools/node/build.sh --print    only print the bin dir (no build)
#
# Env:
#   LOCKSTEP_CACHE   cache root (default: $HOME/.cache/lockstep)
set -euo pipefail

command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE_ROOT="${LOCKSTEP_CACHE:-${HOME:-/root}/.cache/lockstep}"
BINARIES=(lockstep-node containerd containerd-shim-runc-v2 ctr coredns)

input_files() {
  (
    cd "$ROOT"
    {
      echo tools/node/build.sh
      for m in kube containerd coredns; do
        echo "tools/node/$m/go.mod"
        echo "tools/node/$m/go.sum"
        find "tools/node/$m" -type f -name '*.go'
      done
    } | LC_ALL=C sort
  )
}

build_hash() {
  (
    cd "$ROOT"
    echo "go=$(go env GOVERSION) arch=$(go env GOOS)/$(go env GOARCH)"
    input_files | while read -r f; do
      [ -f "$f" ] && echo "$f $(sha256sum <"$f" | cut -d' ' -f1)"
    done
  ) | sha256sum | cut -c1-16
}

HASH="$(build_hash)"
OUT="$CACHE_ROOT/node-$HASH"
BIN="$OUT/bin"

if [ "${1:-}" = "--print" ]; then
  echo "$BIN"
  exit 0
fi

complete() {
  local b
  [ -f "$OUT/.complete" ] || return 1
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}
if complete; then
  touch "$OUT/.complete" 2>/dev/null || true # last use, for pruning
  echo "$BIN"
  exit 0
fi

log() { echo "[node-build] $*" >&2; }

mkdir -p "$CACHE_ROOT"
# Shares the control plane's lock: two kube builds at once would only thrash.
exec 9>"$CACHE_ROOT/.build.lock"
if ! flock -n 9; then
  log "waiting for another build to finish (lock $CACHE_ROOT/.build.lock)"
  flock 9
fi
if complete; then
  echo "$BIN"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.build-node-$HASH.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly"

# kubelet + kube-proxy, stamped like the control plane (tools/cluster/build.sh).
K8S_VERSION="$(cd "$HERE/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
K8S_MAJOR="$(echo "$K8S_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/')"
K8S_MINOR="$(echo "$K8S_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')"
vflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  vflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR"
  vflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
log "building lockstep-node (kubelet, kube-proxy $K8S_VERSION)"
(cd "$HERE/kube" && go build -trimpath -ldflags "-s -w$vflags" -o "$TMP/bin/lockstep-node" ./cmd/lockstep-node)

CTRD_VERSION="$(cd "$HERE/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
log "building containerd $CTRD_VERSION (containerd, containerd-shim-runc-v2, ctr)"
(cd "$HERE/containerd" && go build -trimpath -tags no_btrfs \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CTRD_VERSION -X github.com/containerd/containerd/v2/version.Revision=module" \
  -o "$TMP/bin/" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr)

COREDNS_VERSION="$(cd "$HERE/coredns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)"
log "building coredns $COREDNS_VERSION (minimal)"
(cd "$HERE/coredns" && go build -trimpath -ldflags "-s -w" -o "$TMP/bin/coredns" .)

ln -sf lockstep-node "$TMP/bin/kubelet"
ln -sf lockstep-node "$TMP/bin/kube-proxy"
touch "$TMP/.complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
# Prune entries beyond the three most recently used, unused for a day.
for c in "$CACHE_ROOT"/node-*/.complete; do
  [ -f "$c" ] && echo "$(stat -c %Y "$c") ${c%/.complete}"
done | sort -rn | tail -n +4 | while read -r mtime old; do
  if [ $(($(date +%s) - mtime)) -gt 86400 ]; then
    log "pruning old build $old"
    rm -rf -- "$old"
  fi
done
log "done"
echo "$BIN"
