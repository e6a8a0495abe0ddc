#!/usr/bin/env bash
# The test command of the README's quick start: installs what is missing, runs the linter
# (ruff) and the type checker (mypy, on the layers pyproject.toml names), then the unit tests
# and (as root, with OVS and Mininet) the integration tests.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/bootstrap.sh" --test
cd "$ROOT"
.venv/bin/ruff check .
.venv/bin/mypy  # strict, on the layers pyproject.toml names
# and every module, leniently: a name that does not exist (a moved constant, a misspelt
# attribute of a module or class) fails here instead of in a run
.venv/bin/mypy --follow-imports=silent --allow-untyped-defs --allow-incomplete-defs \
  --no-check-untyped-defs --no-warn-unused-ignores --disable-error-code union-attr \
  --disable-error-code arg-type --disable-error-code assignment --disable-error-code operator \
  --disable-error-code misc --disable-error-code var-annotated --disable-error-code list-item \
  --disable-error-code return-value --disable-error-code index testbed controllers topologies
targets=(tests/unit)
if [ "$(id -u)" -eq 0 ]; then
  targets+=(tests/integration)
  .venv/bin/testbed clean >/dev/null  # leftovers of an interrupted earlier run, only those
fi
set +e
.venv/bin/python -m pytest -p no:cacheprovider --durations=25 "${targets[@]}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
