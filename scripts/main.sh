#!/usr/bin/env bash
# Sets up (scripts/setup.sh), runs the example scenario and plots its link utilisation:
#   results/example/{summary.json,messages.csv,links.csv,link_utilization.png}
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh

.venv/bin/reducelab run scenarios/example.toml --out results/example
.venv/bin/reducelab plot links results/example
