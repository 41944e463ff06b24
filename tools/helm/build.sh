#!/usr/bin/env bash
# Build helm from Go modules (helm.sh/helm/v4, through the Go module proxy; no release
# binary) into a cache directory outside the clone, keyed by its version.
#
#   tools/helm/build.sh            build if needed, print the path of the helm binary
#   tools/helm/build.sh --print    only print that path (no build)
#
# The module's own go.mod and go.sum pin every dependency, and the checksum database
# verifies them, so one version always builds the same program.
#
# Env:
#   LOCKSTEP_CACHE   cache root (default: $HOME/.cache/lockstep)
set -euo pipefail

# The chart is linted and rendered with this version (charts/lockstep, make chart).
HELM_VERSION=v4.3.2

command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
CACHE_ROOT="${LOCKSTEP_CACHE:-${HOME:-/root}/.cache/lockstep}"
OUT="$CACHE_ROOT/helm-$HELM_VERSION"
BIN="$OUT/bin/helm"

if [ "${1:-}" = "--print" ]; then
  echo "$BIN"
  exit 0
fi

if [ -x "$BIN" ] && [ -f "$OUT/.complete" ]; then
  echo "$BIN"
  exit 0
fi

log() { echo "[helm-build] $*" >&2; }

mkdir -p "$CACHE_ROOT"
# One build at a time per cache and version (a dev shell and CI may race); re-check
# after. Its own lock: the control plane's build does not hold this one up.
exec 9>"$CACHE_ROOT/.helm-$HELM_VERSION.lock"
if ! flock -n 9; then
  log "waiting for another build to finish (lock $CACHE_ROOT/.helm-$HELM_VERSION.lock)"
  flock 9
fi
if [ -x "$BIN" ] && [ -f "$OUT/.complete" ]; then
  echo "$BIN"
  exit 0
fi
TMP="$(mktemp -d "$CACHE_ROOT/.helm-$HELM_VERSION.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

# `helm version` reports what the release's own Makefile stamps in.
vflags="-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
log "building helm $HELM_VERSION -> $BIN (a few minutes on a cold cache)"
GOBIN="$TMP/bin" nice -n 10 go install -trimpath -ldflags "-s -w $vflags" \
  "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"

"$TMP/bin/helm" version --short >&2
touch "$TMP/.complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
log "done"
echo "$BIN"
