"""The ACL benchmark is not a test, but it must keep running: ``--quick`` exercises every part
of it (ListOffsets without ACLs, 1,000 ACLs created and deleted, the in-process decision) on
tiny sizes and prints the same summary lines as a full run. Its figures are never checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_quick_acls_benchmark_runs_and_prints_its_ratio() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "acls.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=280,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^ratio ListOffsets p50 1000 ACLs/no ACLs: \d+\.\d+$", out, re.M), out
    assert re.search(r"^one decision over 1000 ACLs, in process: \d+ ns$", out, re.M), out
