#!/usr/bin/env bash
# Runs the fuzz tests (tests/*/test_fuzz_*.py) for longer than CI does: the "long" profile of
# tests/fuzz_helpers.py, 100 times the examples of each test (CI: about a minute for all).
# Extra arguments go to pytest (e.g. scripts/fuzz.sh -k records). TIDELOG_FUZZ_PROFILE=ci
# runs exactly what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export TIDELOG_FUZZ_PROFILE="${TIDELOG_FUZZ_PROFILE:-long}"
exec .venv/bin/python -m pytest --timeout=0 tests/*/test_fuzz_*.py "$@"
