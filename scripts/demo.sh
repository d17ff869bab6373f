#!/usr/bin/env bash
# Sets up the environment and runs the main job on embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/tidelog demo "$@"
