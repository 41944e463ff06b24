#!/usr/bin/env bash
# Flaky is failing: run `CI=true bash .ci/run` from a fresh clone of REV, N times in a
# row (default 3), with a busy loop holding one core throughout; stop at the first
# failure. One line per run in $LOG_DIR/loaded-ci.summary (rc, seconds, load average);
# each run's output in $LOG_DIR/loaded-ci-<i>.log.
#
#   tools/loaded-ci.sh [REV] [N]      (REV: default HEAD of this checkout)
set -u
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
rev=$(git -C "$repo" rev-parse --short "${1:-HEAD}")
runs=${2:-3}
LOG_DIR=${LOG_DIR:-/tmp/lockstep-loaded-ci}
mkdir -p "$LOG_DIR"
( while :; do :; done ) &
hog=$!
trap 'kill $hog 2>/dev/null' EXIT
for i in $(seq 1 "$runs"); do
  dir=$(mktemp -d /tmp/lockstep-loaded-ci-XXXXXX)
  git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$rev"
  start=$SECONDS
  (cd "$dir" && CI=true bash .ci/run) >"$LOG_DIR/loaded-ci-$i.log" 2>&1
  rc=$?
  echo "run $i of $runs at $rev: rc=$rc in $((SECONDS - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG_DIR/loaded-ci.summary"
  rm -rf "$dir"
  [ "$rc" = 0 ] || exit "$rc"
done
