#!/usr/bin/env bash
# The default experiment of the README's quick start: installs what is missing, then runs
# experiments/quickstart.yaml end to end and prints where the results are.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
exec .venv/bin/testbed run "${1:-experiments/quickstart.yaml}"
