"""The consume benchmark is not a test, but it must keep running: ``--latency-only --quick``
exercises its end-to-end part (the producer's maximum, a consumer process tailing the topic,
the replication floor at the same rate, and the CPU each side spent) on tiny sizes and prints
the same lines as a full run, at half the maximum and at each other fraction asked for. Its
figures are never checked here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_quick_latency_benchmark_runs_and_prints_its_figures() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "consume.py"), "--quick", "--latency-only",
         "--fractions", "0.5,0.25"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=160,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    for label in ("tidelog send\\(\\) -> poll\\(\\)", "  of which send\\(\\) -> acknowledged",
                  "replication floor round trip"):
        assert re.search(rf"^{label} +{number} +{number} +{number} +\d+$", out, re.M), out
    assert re.search(r"^  of which in the nodes \(Produce arrival to answer, their histogram\): "
                     r"p50 <= [\d.]+ ms, p99 (<= [\d.]+ ms|> 30 s)", out, re.M), out
    assert re.search(rf"^CPU, tidelog's run: nodes {number} cores \({number} ms a request, \d+ "
                     rf"requests/s\); the machine {number} of \d+ cores busy", out, re.M), out
    assert re.search(rf"^CPU, the floor's run: floor processes {number} cores \({number} ms a "
                     rf"request, \d+ requests/s\); the machine {number} of \d+ cores busy",
                     out, re.M), out
    assert re.search(rf"^ratio p99 tidelog end-to-end / replication floor round trip: {number} "
                     r"\(goal <= 3\)", out, re.M), out
    # The other fraction's run: its own heading and ratio, reported beside no goal.
    assert re.search(r"at \d+ records/s .* = 0\.25 of its maximum of \d+ in this run", out), out
    assert re.search(rf"^ratio p99 tidelog end-to-end / replication floor round trip: {number} "
                     r"\(report\)", out, re.M), out


@pytest.mark.parametrize("fractions", ["0", "0.5,x", "1.5", ""])
def test_fractions_out_of_range_or_not_numbers_are_refused_before_any_cluster_starts(
    fractions: str,
) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "consume.py"), "--latency-only",
         "--fractions", fractions],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--fractions" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "tidelog consume benchmark" not in result.stdout
