#!/usr/bin/env bash
# How long CI takes on a new machine, measured on this one: `CI=true bash .ci/run` from a
# fresh clone of REV with every cache CI fills pointed at empty directories (cargo's
# registry, Go's module and build caches, ~/.cache/lockstep). Prints one line with rc and
# seconds to $LOG_DIR/cold-ci.summary; the run's output is $LOG_DIR/cold-ci.log.
#
#   tools/cold-ci.sh [REV] [--purge-debian]
#
# --purge-debian also removes the Debian packages CI installs (PostgreSQL's server,
# pgBackRest, shellcheck, mmdebstrap, runc, the CNI plugins, conntrack) and the pod-script
# tier's Python packages, so that CI installs them again as a new machine would. It
# changes this machine: use it on a machine that only runs Lockstep.
#
# What still differs from a new machine: the Rust toolchain, Go and Python are already
# here (a new machine has them too), and so are the operating system's page cache and
# whatever the packages above depend on.
set -u
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
rev=$(git -C "$repo" rev-parse --short "${1:-HEAD}")
purge=0
[ "${2:-}" = --purge-debian ] && purge=1
LOG_DIR=${LOG_DIR:-/tmp/lockstep-cold-ci}
mkdir -p "$LOG_DIR"
cold=$(mktemp -d /tmp/lockstep-cold-XXXXXX)
mkdir -p "$cold/cargo" "$cold/cache" "$cold/gocache" "$cold/gomodcache"
# The toolchain's proxies (cargo, rustc) stay where rustup put them.
ln -s "$HOME/.cargo/bin" "$cold/cargo/bin"

if [ "$purge" = 1 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq postgresql-15 postgresql pgbackrest \
    shellcheck mmdebstrap runc containernetworking-plugins conntrack >/dev/null 2>&1
  python3 -m pip uninstall -y -q moto boto3 pytest-xdist execnet >/dev/null 2>&1
fi

dir="$cold/clone"
git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$rev"
start=$SECONDS
(cd "$dir" && CI=true CARGO_HOME="$cold/cargo" LOCKSTEP_CACHE="$cold/cache" \
  GOCACHE="$cold/gocache" GOMODCACHE="$cold/gomodcache" bash .ci/run) >"$LOG_DIR/cold-ci.log" 2>&1
rc=$?
echo "cold run at $rev (purge-debian=$purge): rc=$rc in $((SECONDS - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" |
  tee -a "$LOG_DIR/cold-ci.summary"
# Go's module cache is read-only by design.
chmod -R u+w "$cold" 2>/dev/null
rm -rf "$cold"
exit "$rc"
