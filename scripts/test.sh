#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every Rust test and every Python test.
# Runs both suites even if the first fails; exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

status=0
echo "== cargo test --workspace --release"
cargo test --workspace --release || status=1
echo "== pytest python/tests"
.venv/bin/pytest -q python/tests || status=1

if [ "$status" -ne 0 ]; then
    echo "test.sh: FAILED" >&2
fi
exit "$status"
