"""`tidelog demo`, the README's main job: it must run start to finish on a fresh machine and
show what it promises (lookups under both isolation levels, LSO < HW while a transaction is
open and LSO = HW once it commits, a failover without errors, a committed offset read back from
a new coordinator)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_demo_runs_the_whole_tour_and_stops_every_node() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "demo"],
        capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for section in (
        "Starting a local cluster",
        "ListOffsets with read_uncommitted",
        "ListOffsets with read_committed",
        "A transaction over the 3 partitions: read_committed stops at it while open",
        "open       p0: LSO 120 HW 121  p1: LSO 120 HW 121  p2: LSO 120 HW 121",
        "committed: the markers are written, LSO = HW, read_committed reads all",
        "Killing the leader of partition 0",
        "Consumer offsets: commit, kill the coordinator, read the commit back",
        "the same offsets: nothing committed was lost",
        "done: every node stopped",
    ):
        assert section in out, section
    assert "latest         p0=120  p1=120  p2=120" in out
    assert "30 min ago     p0=60  p1=60  p2=60" in out
    assert "no error" in out
    assert "Traceback" not in done.stderr
