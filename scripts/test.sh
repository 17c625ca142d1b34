#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every Rust test and every Python test.
# Runs both suites even if the first fails; exits non-zero if anything failed.
# The Python suite includes the MPI runtime's tests (python/tests/test_mpi_runtime.py, through
# mpirun); REDUCELAB_REQUIRE_MPI=1 makes a missing MPI build a failure instead of a skip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

status=0
echo "== cargo test --workspace --release"
cargo test --workspace --release || status=1
echo "== pytest python/tests"
REDUCELAB_REQUIRE_MPI=1 .venv/bin/pytest -q python/tests || status=1

if [ "$status" -ne 0 ]; then
    echo "test.sh: FAILED" >&2
fi
exit "$status"
