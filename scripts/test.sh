#!/usr/bin/env bash
# Sets up the environment and runs every check: ruff, mypy, then the whole pytest suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k storage).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== import layers"
.venv/bin/lint-imports
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
