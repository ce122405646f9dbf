#!/usr/bin/env bash
# The project's tests: install what is missing, then ruff, the lit pass tests and pytest (one
# worker per core: PYTEST_WORKERS sets another count, 0 runs in this process).
# Without a GPU, GPU tests skip; the CPU tests still compile every kernel ahead of time for sm_90.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=${PYTHON:-python3}
echo "== ruff"
$PY -m ruff check .
echo "== lit"
lit -q lit_tests
echo "== pytest"
$PY -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-auto}" "$@"
