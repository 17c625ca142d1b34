#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs the main job: every implemented paper figure at small
# scale (`reducelab reproduce all --scale small`), writing per figure a CSV, a plot and a claims
# table (paper value, measured value, pass/fail), and one HTML report over all of them:
#   results/reproduce-small/index.html
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

.venv/bin/reducelab reproduce all --scale small --out results/reproduce-small
echo "report: results/reproduce-small/index.html"
