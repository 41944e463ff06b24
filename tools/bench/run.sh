#!/usr/bin/env bash
# `make bench`: criterion micro-benchmarks of the pure core, then Lockstep at scale on a
# local control plane of its own (tools/bench/bench.py). Outside `make test`; bounded by
# BENCH_TIMEOUT. See tools/bench/README.md.
#
# Env (all optional):
#   BENCH_SIZES          cluster counts, space-separated (default "100 500 1000")
#   BENCH_PHASES         scale phases to run (default "create idle resync upgrade delete")
#   BENCH_QUICK=1        a quick check: BENCH_SIZES=20, 20 s idle, short criterion runs
#   BENCH_IDLE           seconds of the idle phase (default 300; 20 when quick)
#   BENCH_FLOOR_TRIALS   interleaved floor/Lockstep 3-pod upgrades each (default 3; 0: skip)
#   BENCH_READY_DELAY_MS KWOK ready delay of the floor comparison's pods (default 2000)
#   BENCH_MICRO=0        skip the criterion micro-benchmarks
#   BENCH_CLUSTER=0      skip everything that needs the control plane
#   BENCH_TIMEOUT        seconds for the control-plane part (default 7200)
#   BENCH_PROXY_TLS=0    the operator speaks plain HTTP to the counting proxy (before
#                        default 1: TLS, as to an API server)
#   BENCH_RESYNC_PERIOD  the operator's --resync-period in seconds (default 0: none)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
CARGO="${CARGO:-cargo}"
log() { echo "[bench] $*" >&2; }

if [ "${BENCH_QUICK:-0}" = 1 ]; then
  export BENCH_SIZES="${BENCH_SIZES:-20}"
fi
export BENCH_QUICK="${BENCH_QUICK:-0}"

args=()
if [ "${BENCH_MICRO:-1}" = 1 ]; then
  log "criterion micro-benchmarks (cargo bench --bench engine)"
  # Stale results of benchmarks that no longer exist must not reach the report.
  rm -rf target/criterion
  "$CARGO" bench --bench engine
  log "heap bytes per cached object (cargo bench --bench memory)"
  mkdir -p target/bench
  "$CARGO" bench --bench memory | tee target/bench/memory.txt
  args+=(--micro)
fi
if [ "${BENCH_CLUSTER:-1}" != 1 ]; then
  args+=(--sizes "" --floor-trials 0)
fi

if [ "${BENCH_CLUSTER:-1}" = 1 ]; then
  log "release build of the operator"
  "$CARGO" build --release --bin lockstep
fi
exec timeout --signal=TERM --kill-after=120 "${BENCH_TIMEOUT:-7200}" \
  python3 tools/bench/bench.py --lockstep "$ROOT/target/release/lockstep" "${args[@]}" "$@"
