#!/usr/bin/env bash
# Sets up the environment and runs every check: ruff, mypy, the import layers, the docs site
# (mkdocs --strict), then the whole pytest suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k storage).
#
# scripts/test.sh --fast runs ruff and the unit tier alone (no process, no socket; about a
# minute): the tiers are in tests/conftest_tiers.py, and docs/testing.md says how to pick one.
set -euo pipefail
cd "$(dirname "$0")/.."
# Python caches compiled modules in __pycache__ unless told not to. Some environments set
# PYTHONDONTWRITEBYTECODE, and then every node and CLI process the suite starts compiles the
# project again: 0.3 CPU-s of a CLI command's 0.6 (tests/cli/test_cli_no_traceback.py: 39
# CPU-s with it set, 27 without).
unset PYTHONDONTWRITEBYTECODE
if [ "${1:-}" = "--fast" ]; then
  shift
  [ -x .venv/bin/python ] || scripts/setup.sh
  echo "== ruff"
  .venv/bin/ruff check .
  echo "== pytest: the unit tier"
  exec .venv/bin/python -m pytest -m "unit and not slow" -q "$@"
fi
scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== import layers"
.venv/bin/lint-imports
echo "== docs"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir build/site
echo "== pytest"
# Test modules run in parallel, each whole on one worker (its module cluster shared by its
# tests, its order kept): much of a cluster test's time is spent waiting on elections,
# timeouts and other processes rather than computing. Three workers keep two cores busy; a
# fourth only adds contention (docs/testing.md has the figures). TIDELOG_TEST_WORKERS=0 runs
# everything in this one process.
exec .venv/bin/python -m pytest -n "${TIDELOG_TEST_WORKERS:-3}" --dist loadfile "$@"
