#!/usr/bin/env bash
# Entry point for CI / the Makefile: install prerequisites, then run the real
# PostgreSQL + S3 tests of src/machines/postgres/scripts and of `lockstep
# instance`. Extra arguments go to pytest (e.g. -k rewind). Set
# LOCKSTEP_KEEP_TEST_DIRS=1 to keep data dirs/logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/pg_scripts/setup.sh
# test_instance.py runs `lockstep instance` (LOCKSTEP_BIN, else the debug build).
[[ -n "${LOCKSTEP_BIN:-}" ]] || cargo build --quiet --bin lockstep
# The tests mostly wait on their servers (a tenth of two cores in all): PG_SCRIPTS_WORKERS
# (2) run at once, each on ports of its own (pg_harness.free_port).
exec python3 -m pytest -q -p no:cacheprovider -n "${PG_SCRIPTS_WORKERS:-2}" tests/pg_scripts "$@"
