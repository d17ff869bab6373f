#!/usr/bin/env bash
# Regenerates the Python modules of every proto/ file into the tidelog package
# (proto/tidelog/v1/x.proto -> tidelog/v1/x_pb2.py, x_pb2.pyi, x_pb2_grpc.py).
# tests/records/test_generated_code.py fails when the committed modules differ from a fresh run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
PY=${PY:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -Iproto --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  $(cd proto && find . -name '*.proto' | sed 's|^\./||' | sort)
