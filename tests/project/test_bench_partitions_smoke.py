"""The partitions benchmark is not a test, but it must keep running: ``--quick`` exercises
every part of it (creation until led, idle CPU from /proc, produce spread over the partitions
against 6) on a tiny topic and prints the same lines as a full run. Its figures are never
checked here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_quick_partitions_benchmark_runs_and_prints_its_figures(tmp_path: Path) -> None:
    """With ``--data-dir``, where its clusters keep their data (as a run on /dev/shm does)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "partitions.py"), "--quick",
         "--data-dir", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=160,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    assert re.search(rf"^# data under {re.escape(str(tmp_path))} \(\w+\)$", out, re.M), out
    assert re.search(rf"^create \+ every partition led: {number} s \(\d+/4 on their preferred",
                     out, re.M), out
    assert re.search(rf"^idle CPU over 1 s, fraction of a core per node: node 1: {number}",
                     out, re.M), out
    assert re.search(rf"^produce 2 MiB acks=all: 6 partitions {number} MiB/s, 4 partitions "
                     rf"{number} MiB/s; ratio {number}", out, re.M), out
    assert list(tmp_path.iterdir()) == [], "the benchmark left files behind"
