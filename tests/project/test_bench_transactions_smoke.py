"""The transactions benchmark is not a test, but it must keep running: ``--quick`` exercises every
part of it on one 3-node cluster (a producer committing every 100 ms against the idempotent one;
transactional, idempotent and flushed produce rounds at 1 and at 4 producers, with the nodes'
CPU; then a log with aborted transactions written through WriteTxnMarkers and read under both
isolation levels, every committed record checked) on tiny sizes and prints the same summary
lines as a full run. Its figures are never checked here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_quick_transactions_benchmark_runs_and_prints_its_ratios() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "transactions.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=160,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    assert re.search(rf"^transactional, commit every 100 ms: median [\d,]+ records/s "
                     rf"\({number} MiB/s\); nodes [\d,]+ us CPU/record; rounds", out, re.M), out
    assert re.search(rf"^ratio transactional \(commit every 100 ms\)/idempotent produce: "
                     rf"{number} \(goal >= 0\.95\) (met|missed); per round median {number}",
                     out, re.M), out
    for producers in (1, 4):
        for kind in ("transactional", "idempotent", "flushed"):
            assert re.search(rf"^{producers} {kind} producer\(s\): median [\d,]+ records/s .*; "
                             rf"nodes [\d,]+ us CPU/record$", out, re.M), out
        assert re.search(rf"^ratio transactional/idempotent produce at {producers} "
                         rf"producer\(s\): {number} \(goal >= 0\.7\)", out, re.M), out
        assert re.search(rf"^  ceiling flushed/idempotent: {number}; transactional/flushed: "
                         rf"{number}", out, re.M), out
    assert len(re.findall(rf"^  nodes' CPU per record, idempotent/transactional: ({number}|nan); "
                          rf"flushed/transactional: ({number}|nan)$", out, re.M)) == 2, out
    assert len(re.findall(rf"^  per round, transactional over the idempotent round right after "
                          rf"it: median {number} \(", out, re.M)) == 2, out
    assert len(re.findall(r"^  requests the nodes answered per 10 transactional records: .*"
                          r"EndTxn [\d.]+, Produce [\d.]+, WriteTxnMarkers [\d.]+$",
                          out, re.M)) == 2, out
    assert re.search(rf"^goal >= 0\.7 judged at 4 producers: {number} \((met|missed)\); "
                     rf"1: {number}$", out, re.M), out
    assert re.search(rf"^ratio read_committed/read_uncommitted consume speed: {number} "
                     rf"\(goal >= 0\.9\)", out, re.M), out
    assert re.search(rf"^  per round, read_committed over the read_uncommitted read beside it: "
                     rf"median {number} .*; CPU a log record, read_uncommitted/read_committed: "
                     rf"({number}|nan); load", out, re.M), out
