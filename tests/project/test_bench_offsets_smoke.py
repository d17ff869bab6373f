"""The consumer-offsets benchmark is not a test, but it must keep running: ``--quick`` exercises
every part of it (commit and produce sides of every configuration, OffsetFetch beside the health
check, coordinator kills and restarts, the table's memory) on tiny sizes and prints the same
summary lines as a full run. Its figures are never checked here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_quick_offsets_benchmark_runs_and_prints_its_ratios() -> None:
    result = subprocess.run(
        # Five offsets partitions rather than fifty: the same paths, a fraction of the elections;
        # one slice per side of each commit configuration rather than two, after its warm-up.
        [sys.executable, str(REPO / "bench" / "offsets.py"), "--quick",
         "--offsets-partitions", "5", "--slices", "1"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=280,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    for committers in (1, 8, 64):
        for partitions in (1, 100):
            assert re.search(
                rf"^ratio commit/produce \({committers} committers x {partitions} partitions\): "
                rf"{number} \(goal >= 0\.8\)", out, re.M), out
    assert re.search(rf"^ratio OffsetFetch/health check p50: {number} \(goal <= 1\.5\)", out,
                     re.M), out
    assert re.search(r"^failover: \d+ samples from 2 kills .* the produce baseline: p50 \d+ ms",
                     out, re.M), out
    assert re.search(r"^failover p50: \d+ ms, p99: \d+ ms, max: \d+ ms over \d+ commits \(goal",
                     out, re.M), out
    assert len(re.findall(rf"^table memory, .*: {number} bytes/entry \(goal <= 64\)", out,
                          re.M)) == 2, out
