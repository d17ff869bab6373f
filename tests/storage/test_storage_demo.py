"""``tidelog storage-demo``: the storage tour runs end to end, tells the truth about the log it
wrote, and cleans up after itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tidelog.clock import wall_clock_ms
from tidelog.storage import Log

REPO = Path(__file__).resolve().parents[2]


def run_demo(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """With TMPDIR pointing at `tmp`, so the test sees whatever temporary files it leaves."""
    tmp.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "storage-demo", *args],
        capture_output=True, text=True, cwd=REPO, check=False,
        env={**os.environ, "TMPDIR": str(tmp)},
    )


def listed_files(out: str) -> set[str]:
    """The file names of section 4, one ``name  N bytes`` line each."""
    listing = out.split("== 4. Segment files ==", 1)[1]
    return {line.split()[0] for line in listing.splitlines() if line.endswith(" bytes")}


def test_tour_prints_each_section_and_removes_its_temporary_directory(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    result = run_demo(tmp)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    sections = ["== 1. Write ==", "== 2. Lookups ==", "== 3. Close and reopen ==",
                "== 4. Segment files =="]
    assert [out.index(s) for s in sections] == sorted(out.index(s) for s in sections)
    assert "wrote 6000/6000 records (100%)" in out
    lines = out.splitlines()

    def answer(label: str) -> str:
        return next(line for line in lines if line.strip().startswith(label))

    assert "offset 0, epoch 1" in answer("earliest (-2)")
    assert "offset 6000, epoch 2" in answer("latest (-1)")
    assert "offset 5999, timestamp 2024-01-01T01:39:59Z, epoch 2" in answer("max timestamp")
    # one record per second from midnight: 00:33:20.5 is first reached by offset 2001
    assert "offset 2001, timestamp 2024-01-01T00:33:21Z" in answer("by time 2024-01-01T00:33:20")
    assert "none (offset -1)" in answer("by time 2024-01-01T01:40:00Z")
    assert "[6000, 4800, 3600]" in answer("legacy offsets_before(latest, 3)")
    assert "all 9 lookups give the same answers after the reopen" in out
    files = listed_files(out)
    logs = sorted(name for name in files if name.endswith(".log"))
    assert len(logs) > 1 and logs[0] == f"{0:020d}.log"
    for suffix in (".index", ".timeindex", ".txnindex"):
        assert {name.replace(".log", suffix) for name in logs} <= files
    assert list(tmp.iterdir()) == []


def test_data_dir_keeps_a_log_that_reopens_with_what_the_tour_reported(tmp_path: Path) -> None:
    result = run_demo(tmp_path / "tmp", "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    directory = tmp_path / "data" / "demo-0"
    shown = listed_files(result.stdout)
    assert shown == {p.name for p in directory.iterdir()}
    log = Log.open(directory, clock=wall_clock_ms)
    try:
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 6000, 6000)
        assert len(log.segments) == len([n for n in shown if n.endswith(".log")]) > 1
    finally:
        log.close()

    again = run_demo(tmp_path / "tmp", "--data-dir", str(tmp_path / "data"))
    assert again.returncode == 2
    assert "already exists" in again.stderr and "Traceback" not in again.stderr
