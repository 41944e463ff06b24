#!/usr/bin/env bash
# Build the local control-plane binaries (lockstep-cluster, kwok) from Go modules
# into a cache directory outside the clone, keyed by a hash of their inputs.
#
#   tools/cluster/build.sh            build if needed, print the bin dir on stdout
#   tools/cluster/build.sh --print    only print the bin dir (no build)
#
# Env:
#   LOCKSTEP_CACHE   cache root (default: $HOME/.cache/lockstep)
set -euo pipefail

command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
KWOK_DIR="$ROOT/tools/kwok"
CACHE_ROOT="${LOCKSTEP_CACHE:-${HOME:-/root}/.cache/lockstep}"

# Inputs of the build: module files, main sources, this script.
input_files() {
  (
    cd "$ROOT"
    {
      echo tools/cluster/build.sh
      echo tools/cluster/go.mod
      echo tools/cluster/go.sum
      find tools/cluster/cmd -type f -name '*.go'
      echo tools/cluster/provisioner/go.mod
      echo tools/cluster/provisioner/go.sum
      find tools/cluster/provisioner -type f -name '*.go'
      if [ -d tools/kwok ]; then
        echo tools/kwok/go.mod
        echo tools/kwok/go.sum
        find tools/kwok -type f -name '*.go'
      fi
    } | LC_ALL=C sort
  )
}

build_hash() {
  (
    cd "$ROOT"
    go_version="$(go env GOVERSION)"
    echo "go=$go_version arch=$(go env GOOS)/$(go env GOARCH)"
    input_files | while read -r f; do
      [ -f "$f" ] && echo "$f $(sha256sum <"$f" | cut -d' ' -f1)"
    done
  ) | sha256sum | cut -c1-16
}

HASH="$(build_hash)"
OUT="$CACHE_ROOT/cluster-$HASH"
BIN="$OUT/bin"

if [ "${1:-}" = "--print" ]; then
  echo "$BIN"
  exit 0
fi

if [ -x "$BIN/lockstep-cluster" ] && [ -x "$BIN/lockstep-local-provisioner" ] && [ -x "$BIN/kwok" ] && [ -f "$OUT/.complete" ]; then
  touch "$OUT/.complete" 2>/dev/null || true # last use, for pruning
  echo "$BIN"
  exit 0
fi

log() { echo "[cluster-build] $*" >&2; }

mkdir -p "$CACHE_ROOT"
# One build at a time per cache (a dev shell and CI may race); re-check after.
exec 9>"$CACHE_ROOT/.build.lock"
if ! flock -n 9; then
  log "waiting for another build to finish (lock $CACHE_ROOT/.build.lock)"
  flock 9
fi
if [ -x "$BIN/lockstep-cluster" ] && [ -x "$BIN/lockstep-local-provisioner" ] && [ -x "$BIN/kwok" ] && [ -f "$OUT/.complete" ]; then
  echo "$BIN"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.build-$HASH.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly"

# Version stamping, as kube's hack/lib/version.sh does.
K8S_VERSION="$(cd "$HERE" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
K8S_MAJOR="$(echo "$K8S_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/')"
K8S_MINOR="$(echo "$K8S_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')"
BUILD_DATE="$(cd "$HERE" && go mod download -json k8s.io/kubernetes | sed -n 's/.*"Time": "\(.*\)".*/\1/p' | head -1)"
BUILD_DATE="${BUILD_DATE:-1970-01-01T00:00:00Z}"
vflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  vflags+=" -X $pkg.gitVersion=$K8S_VERSION"
  vflags+=" -X $pkg.gitMajor=$K8S_MAJOR"
  vflags+=" -X $pkg.gitMinor=$K8S_MINOR"
  vflags+=" -X $pkg.gitTreeState=clean"
  vflags+=" -X $pkg.buildDate=$BUILD_DATE"
done

log "building lockstep-cluster (kube $K8S_VERSION) -> $BIN (this takes a while on a cold cache)"
(cd "$HERE" && go build -trimpath -ldflags "-s -w$vflags" -o "$TMP/bin/lockstep-cluster" ./cmd/lockstep-cluster)

log "building lockstep-local-provisioner"
(cd "$HERE/provisioner" && go build -trimpath -ldflags "-s -w" -o "$TMP/bin/lockstep-local-provisioner" .)

if [ -d "$KWOK_DIR" ]; then
  KWOK_VERSION="$(cd "$KWOK_DIR" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
  log "building kwok $KWOK_VERSION"
  (cd "$KWOK_DIR" && go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
    -o "$TMP/bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
fi

ln -sf lockstep-cluster "$TMP/bin/kubectl"
touch "$TMP/.complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
# Prune builds beyond the three most recently used that have not been used
# for a day (a running cluster or an older clone may still use one); each
# entry is ~210 MB.
for c in "$CACHE_ROOT"/cluster-*/.complete; do
  [ -f "$c" ] && echo "$(stat -c %Y "$c") ${c%/.complete}"
done | sort -rn | tail -n +4 | while read -r mtime old; do
  if [ $(($(date +%s) - mtime)) -gt 86400 ]; then
    log "pruning old build $old"
    rm -rf -- "$old"
  fi
done
log "done"
echo "$BIN"
