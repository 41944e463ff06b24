#!/usr/bin/env bash
# Build the local cluster's image registry (the CNCF distribution registry,
# github.com/distribution/distribution/v3) and `crane` (github.com/google/go-containerregistry,
# the client tools/registry/push.sh pushes with) from Go modules, into a cache
# directory outside the clone, keyed by a hash of their inputs.
#
#   tools/registry/build.sh            build if needed, print the bin dir (registry, crane)
#   tools/registry/build.sh --print    only print the bin dir (no build)
#
# go.mod names both programs as tools (`go get -tool`), and go.mod and go.sum pin
# every dependency, so one commit always builds the same programs.
#
# Env:
#   LOCKSTEP_CACHE   cache root (default: $HOME/.cache/lockstep)
set -euo pipefail

command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${LOCKSTEP_CACHE:-${HOME:-/root}/.cache/lockstep}"

build_hash() {
  (
    cd "$HERE"
    echo "go=$(go env GOVERSION) arch=$(go env GOOS)/$(go env GOARCH)"
    for f in build.sh go.mod go.sum; do echo "$f $(sha256sum <"$f" | cut -d' ' -f1)"; done
  ) | sha256sum | cut -c1-16
}

HASH="$(build_hash)"
OUT="$CACHE_ROOT/registry-$HASH"
BIN="$OUT/bin"

if [ "${1:-}" = "--print" ]; then
  echo "$BIN"
  exit 0
fi

built() { [ -x "$BIN/registry" ] && [ -x "$BIN/crane" ] && [ -f "$OUT/.complete" ]; }
if built; then
  echo "$BIN"
  exit 0
fi

log() { echo "[registry-build] $*" >&2; }

mkdir -p "$CACHE_ROOT"
# One build at a time per cache (a dev shell and CI may race); re-check after.
# Its own lock: the control plane's build does not hold this one up.
exec 9>"$CACHE_ROOT/.registry.lock"
if ! flock -n 9; then
  log "waiting for another build to finish (lock $CACHE_ROOT/.registry.lock)"
  flock 9
fi
if built; then
  echo "$BIN"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.registry-$HASH.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=readonly"

REGISTRY_VERSION="$(cd "$HERE" && go list -m -f '{{.Version}}' github.com/distribution/distribution/v3)"
CRANE_VERSION="$(cd "$HERE" && go list -m -f '{{.Version}}' github.com/google/go-containerregistry)"
log "building registry $REGISTRY_VERSION and crane $CRANE_VERSION -> $BIN (a minute or two on a cold cache)"
# `registry --version` reports what the release's own Makefile stamps in.
(cd "$HERE" && nice -n 10 go build -trimpath \
  -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION" \
  -o "$TMP/bin/" github.com/distribution/distribution/v3/cmd/registry github.com/google/go-containerregistry/cmd/crane)

touch "$TMP/.complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
# Older builds go unless used in the last day (a running cluster may still use one).
for c in "$CACHE_ROOT"/registry-*/.complete; do
  [ -f "$c" ] || continue
  old="${c%/.complete}"
  [ "$old" = "$OUT" ] && continue
  if [ $(($(date +%s) - $(stat -c %Y "$c"))) -gt 86400 ]; then
    log "pruning old build $old"
    rm -rf -- "$old"
  fi
done
log "done"
echo "$BIN"
