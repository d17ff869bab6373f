"""One scenario per Raft rule, driven by hand: which messages arrive, and when, is chosen by the
scenario, so each rule is exercised in isolation and a regression names the rule it broke.

The scenarios are transcripts in raft_scenarios/ beside this file (the notation:
tests/raft_transcript.py): each command's output is compared with the one written below it.
``REWRITE=1`` rewrites the outputs instead; read the diff before committing it, since it is the
change in behaviour."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
from raft_transcript import render, replay

SCENARIOS = sorted((Path(__file__).parent / "raft_scenarios").glob("*.txt"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    blocks, outputs, tail = replay(path)
    for block, output in zip(blocks, outputs, strict=True):
        assert all(line.strip() for line in output), f"{path.name}:{block.line}: blank output"
    if os.environ.get("REWRITE"):
        path.write_text(render(blocks, outputs, tail))
        return
    failures = [
        f"{path.name}:{block.line}: {block.command}\n"
        + "\n".join(difflib.unified_diff(block.expected, output, "expected", "got", lineterm=""))
        for block, output in zip(blocks, outputs, strict=True)
        if output != block.expected
    ]
    assert not failures, "\n\n".join(failures)


def test_there_are_scenarios() -> None:
    assert len(SCENARIOS) >= 12
