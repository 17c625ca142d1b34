#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then checks the code's habits (Rust formatting, clippy, MSRV,
# ruff; docs/development.md) and runs every Rust test and every Python test.
# Runs every step even if an earlier one fails; exits non-zero if anything failed.
# The Python suite includes the MPI runtime's tests (python/tests/test_mpi_runtime.py, through
# mpirun); REDUCELAB_REQUIRE_MPI=1 makes a missing MPI build a failure instead of a skip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

status=0
# cargo fmt and cargo clippy are rustup components (scripts/setup.sh adds them when it can).
has() {
    cargo "$1" --version >/dev/null 2>&1 && return 0
    echo "test.sh: 'cargo $1' is not installed: rustup component add $2" >&2
    return 1
}
echo "== cargo fmt --all --check"
{ has fmt rustfmt && cargo fmt --all --check; } || status=1
echo "== cargo clippy --workspace --all-targets -- -D warnings"
{ has clippy clippy && cargo clippy --workspace --all-targets -- -D warnings; } || status=1
echo "== rust-version covers Cargo.lock"
cargo metadata --format-version 1 --locked --filter-platform x86_64-unknown-linux-gnu \
    | .venv/bin/python scripts/check_msrv.py || status=1
echo "== ruff check python"
.venv/bin/ruff check python || status=1
echo "== cargo test --workspace --release"
cargo test --workspace --release || status=1
echo "== pytest python/tests"
REDUCELAB_REQUIRE_MPI=1 .venv/bin/pytest -q python/tests || status=1

if [ "$status" -ne 0 ]; then
    echo "test.sh: FAILED" >&2
fi
exit "$status"
