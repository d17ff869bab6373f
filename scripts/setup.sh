#!/usr/bin/env bash
# Creates .venv (if missing) and installs Tidelog with its dev tools into it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,spark]'
# Kafka clients outside Python, for the Kafka listener's cross-client tests (tests/kafka/):
# kcat from the distribution (as root with apt-get; ~7 s), kafkajs from npm (~2 s). Without
# them those tests skip locally and fail in CI (CI=true), saying how to install them; a failed
# install here only warns.
if ! command -v kcat >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -qq --no-install-recommends kcat >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends kcat; } ||
    echo "setup.sh: kcat could not be installed" >&2
fi
if command -v npm >/dev/null &&
    ! grep -qs '"version": "2.2.4"' .venv/node/node_modules/kafkajs/package.json; then
  npm install --silent --no-audit --no-fund --save-exact --prefix .venv/node \
    kafkajs@2.2.4 kafkajs-snappy@1.1.0 || echo "setup.sh: kafkajs could not be installed" >&2
fi
