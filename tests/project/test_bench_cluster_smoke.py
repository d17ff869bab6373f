"""The cluster benchmark is not a test, but it must keep running: ``--quick`` exercises every part
of it (baseline server, relay and replication floors, produce, ListOffsets, failover with kills
and restarts) on tiny sizes and prints the same summary lines as a full run; so must the client
benchmark, which measures against the cluster benchmark's raw produce. Their figures are never
checked here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_quick_cluster_benchmark_runs_and_prints_its_ratios() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cluster.py"), "--quick"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=220,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    number = r"\d+\.\d+"
    assert re.search(rf"^baseline gRPC bidi stream.* {number} MiB/s", out, re.M)
    assert re.search(rf"^relay floor: .* {number} MiB/s, {number} of the baseline, "
                     rf"{number} CPU ms per MiB", out, re.M)
    assert re.search(rf"^replication floor: .*fdatasync'd by all 3: +{number} MiB/s, {number} "
                     rf"of the baseline, {number} CPU ms per MiB", out, re.M)
    assert re.search(rf"^ratio produce MiB/s tidelog/replication floor: {number} "
                     rf"\(goal >= 0\.85\)", out, re.M)
    assert re.search(rf"^ratio CPU per MiB nodes/replication floor processes: {number} "
                     rf"\(goal <= 1\.3\)", out, re.M)
    assert re.search(r"^# event loop: auto \((uvloop|asyncio)\)$", out, re.M)
    assert re.search(rf"^tidelog acks=all.* {number} MiB/s +\d+ records/s, {number} nodes' CPU",
                     out, re.M)
    assert re.search(rf"^ratio produce MiB/s tidelog/relay floor: {number} \(goal >= 0\.7\)",
                     out, re.M)
    assert re.search(rf"^ratio CPU per MiB nodes/relay processes: {number} \(goal <= 1\.5\)",
                     out, re.M)
    assert re.search(rf"^ratio produce MiB/s tidelog/baseline: {number} \(goal >= 0\.25\)",
                     out, re.M)
    assert re.search(rf"^ratio ListOffsets/health check p50: {number} \(goal <= 1\.5\)",
                     out, re.M)
    assert re.search(r"^failover p50: \d+ ms, p99: \d+ ms, max: \d+ ms over 2 kills", out, re.M)


@pytest.mark.timeout(240)
def test_quick_client_benchmark_runs_and_prints_its_ratio() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "client.py"), "--quick", "--rounds", "2"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=220,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert len(re.findall(r"^round \d \((raw then client|client then raw)\): raw Produce", out,
                          re.M)) == 2
    assert re.search(r"^ratio client/raw: \d+\.\d+ \(goal >= 0\.8\)", out, re.M)


@pytest.mark.timeout(240)
def test_quick_tls_benchmark_runs_and_prints_its_ratio() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cluster.py"), "--quick", "--tls"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=220,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^0 +TLS +\d+\.\d+ +\d+ +\d+\.\d+ +\d+\.\d+ +\d+\.\d+$", out, re.M)
    assert re.search(r"^median CPU ms per MiB, nodes \+ client: plaintext \d", out, re.M)
    assert re.search(r"^ratio produce MiB/s TLS/plaintext: \d+\.\d+ \(goal >= 0\.8\)", out, re.M)
