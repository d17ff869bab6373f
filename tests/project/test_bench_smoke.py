"""The storage benchmark is not a test, but it must keep running: ``--quick`` exercises every
part of it on tiny sizes and prints the same summary lines as a full run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_storage_benchmark_runs_and_prints_its_ratios(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "storage.py"), "--quick", "--dir", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^ratio append/raw-write: \d+\.\d+ \(goal >= 0\.5\)", out, re.M)
    assert re.search(r"^ratio lookup latency 10000/1000 records: \d+\.\d+ \(goal <= 2\)", out,
                     re.M)
    assert re.search(r"^reopen clean \(worst of warm/cold\): \d+\.\d+ s \(goal < 1 s\)", out,
                     re.M)
    for label in ("clean, warm page cache", "clean, cold page cache", "unclean: no marker"):
        assert re.search(rf"^{re.escape(label)}.* \d+\.\d ms$", out, re.M), label
    assert list(tmp_path.iterdir()) == [], "the benchmark left files behind"


def test_quick_validation_benchmark_runs_and_prints_its_ratios() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "validation.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO, check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("no header", "one header"):
        assert re.search(rf"^ratio validate_batch/check_crc \({label}\): \d+\.\d$",
                         result.stdout, re.M), result.stdout


def test_quick_offset_table_benchmark_runs_and_prints_its_figures() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "offset_table.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO, check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^worst bytes per entry: \d+\.\d \(goal <= 64\)$", out, re.M), out
    for label in ("get (present)", "get (absent group)", "put (overwrite)", "put (new group)"):
        assert re.search(rf"^ +{re.escape(label)} +\d+ +\d+ +\d+\.\d$", out, re.M), label
