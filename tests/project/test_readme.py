"""The README's client example must work as printed: it is the first code a newcomer copies.

The test runs the README's Python block against a real cluster, with only the bootstrap address
changed, and checks what it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tidelog import Client
from tidelog.testing import LocalCluster

README = Path(__file__).resolve().parents[2] / "README.md"
README_BOOTSTRAP = "127.0.0.1:7420"


def readme_client_example() -> str:
    """The README's one Python block (the client example)."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    assert len(blocks) == 1, f"README has {len(blocks)} Python blocks, the test expects one"
    return str(blocks[0])


@pytest.mark.timeout(180)
def test_readme_client_example_runs_against_a_cluster(cluster: LocalCluster) -> None:
    code = readme_client_example()
    assert README_BOOTSTRAP in code
    # The example's consumer stops after a few seconds without a record; the first group
    # lookup creates __consumer_offsets, which on a loaded machine can take longer than that,
    # so the coordinator is found first (a wait on a condition, with its own deadline).
    with Client(cluster.bootstrap) as client:
        client.admin.find_coordinator("readers", timeout_ms=60_000)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace(README_BOOTSTRAP, cluster.bootstrap), str(README), "exec"), {})
    printed = out.getvalue()
    stored = re.search(r"stored at events-(\d+) offset 0", printed)
    assert stored, printed
    assert f"{stored.group(1)} 0 b'user-1' b'hello'" in printed, printed
    assert "ListOffsetsResult(offset=0" in printed, printed
