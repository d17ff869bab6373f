"""The reassignment benchmark is not a test, but it must keep running: ``--quick`` moves a
replica of a 4 MiB partition on a real cluster and prints the same lines as a full run. Its
figures are never checked here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_quick_reassignment_benchmark_runs_and_prints_its_figures() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "reassign.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=100,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    assert re.search(rf"^plain fetch from the leader: +{number} s \({number} MiB/s\)", out,
                     re.M), out
    assert re.search(rf"^reassignment, call to done: +{number} s \({number} MiB/s\)", out,
                     re.M), out
    assert re.search(rf"^ratio move/fetch: {number} \(goal >= 0.5\)", out, re.M), out
