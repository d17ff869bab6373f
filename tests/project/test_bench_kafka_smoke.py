"""The Kafka-path benchmark is not a test, but it must keep running: ``--quick`` produces and
consumes through confluent-kafka and through Tidelog's gRPC client on one node, two rounds of
a few thousand records, and prints the same lines as a full run. Its figures are never
checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_quick_kafka_benchmark_runs_and_prints_its_ratios() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "kafka.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=100,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for what in ("produce", "consume"):
        assert len(re.findall(rf"^round \d {what} .*; ratio \d+\.\d+$", out, re.M)) == 2, out
        assert re.search(rf"^ratio Kafka/gRPC {what}: \d+\.\d+ \(goal >= 0\.9\)", out, re.M), out
