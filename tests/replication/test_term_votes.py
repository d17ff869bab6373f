"""The node's one file of every group's term and vote (`tidelog.replication.term_votes`): a
crash at any point of its replacement loses no vote that was sent, one round of writes replaces
it once however many groups were elected in the round, and a sync that returns has made durable
every state set before it began, whatever other threads of the round do meanwhile."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from waiting_helpers import async_wait_for

from tests.replica_helpers import running
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.replication import Role
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes
from tidelog.storage import checkpoint
from tidelog.types import TopicPartition


class Crash(Exception):
    """The process died here."""


def _dies_at(monkeypatch: pytest.MonkeyPatch, point: str, data: Path, image: Path) -> None:
    """At `point` of the book's replacement, copy `data` as the disk holds it if the process
    dies there (every write before was fsynced by then), and die."""
    replace, fsync_dir = os.replace, checkpoint.fsync_dir

    def die() -> None:
        shutil.copytree(data, image)
        raise Crash

    def crashing_replace(src: Any, dst: Any) -> None:
        if point == "before the rename" and Path(dst).name == TERM_VOTES_FILE:
            die()
        replace(src, dst)

    def crashing_fsync_dir(path: Path) -> None:
        if point == "before the directory fsync":
            die()
        fsync_dir(path)

    monkeypatch.setattr(checkpoint.os, "replace", crashing_replace)
    monkeypatch.setattr(checkpoint, "fsync_dir", crashing_fsync_dir)


@pytest.mark.parametrize("point", ["before the rename", "before the directory fsync"])
def test_a_crash_while_the_book_is_replaced_keeps_every_vote_that_was_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    data, image = tmp_path / "data", tmp_path / "image"
    data.mkdir()
    book = TermVotes(data / TERM_VOTES_FILE)
    book.set("t-0", (5, 2))
    book.set("t-1", (3, None))
    book.sync()  # the votes of this round were sent after it
    book.set("t-0", (6, 3))  # the next round: its vote waits for the sync
    _dies_at(monkeypatch, point, data, image)
    with pytest.raises(Crash):
        book.sync()  # raised: the round fails, and its vote (6, 3) is never sent
    after = TermVotes(image / TERM_VOTES_FILE)
    if point == "before the rename":
        assert after.get("t-0") == (5, 2)  # the old file, whole: the new vote was not sent
    else:
        assert after.get("t-0") in {(5, 2), (6, 3)}  # either is sound: (6, 3) was not sent
    assert after.get("t-1") == (3, None)
    monkeypatch.undo()
    book.sync()  # the failed write left its states to the next sync
    assert TermVotes(data / TERM_VOTES_FILE).get("t-0") == (6, 3)


def test_a_sync_that_returns_holds_every_state_set_before_it_began(tmp_path: Path) -> None:
    """Eight threads set and sync at once, as the flush helpers of a round do: each finds its
    own state in the file as soon as its sync returns."""
    path = tmp_path / TERM_VOTES_FILE
    book = TermVotes(path)
    lost: list[str] = []

    def worker(w: int) -> None:
        for term in range(1, 16):
            name = f"t-{w}"
            book.set(name, (term, w))
            book.sync()
            if TermVotes(path).get(name) != (term, w):
                lost.append(f"{name} term {term}")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not lost


def test_forgotten_groups_and_invalid_entries_are_not_read_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / TERM_VOTES_FILE
    book = TermVotes(path)
    book.set("gone-0", (4, 1))
    book.set("kept-0", (2, None))
    book.sync()
    book.forget("gone-0")
    book.sync()
    assert TermVotes(path).get("gone-0") is None
    with pytest.raises(ValueError):
        book.set("a b", (1, 1))  # would not read back as one entry
    path.write_text("0\n4\nkept-0 2 -1\nneg-0 -1 1\nkept-0 9 9\nbad-0 1 -2\n")
    with caplog.at_level(logging.WARNING):
        reread = TermVotes(path)
    assert reread.get("kept-0") == (2, None)
    assert reread.get("neg-0") is None and reread.get("bad-0") is None
    assert caplog.text.count("ignoring the invalid entry") == 3


def test_one_round_electing_many_groups_replaces_the_book_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty single-replica partitions stand together in one round of the Ready loop: before,
    each replaced a file of its own (20 replacements and 40 fsyncs); now one for all."""
    replaced: list[str] = []
    original = os.replace

    def counting_replace(src: Any, dst: Any) -> None:
        if Path(dst).name.startswith("raft-state"):
            replaced.append(str(dst))
        original(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", counting_replace)
    tps = [TopicPartition("t", p) for p in range(20)]

    def durable() -> bool:
        book = TermVotes(tmp_path / TERM_VOTES_FILE)
        return all(book.get(f"{tp.topic}-{tp.partition}") == (1, 1) for tp in tps)

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        for tp in tps:
            replicas.open_replica(tp, (1,), {})
        async with running(replicas):
            await async_wait_for(durable, 20, "every partition's term and vote durable")
            assert all(replicas.partitions[tp].core.role is Role.LEADER for tp in tps)

    asyncio.run(scenario())
    assert len(replaced) == 1, replaced


def test_a_sync_formats_only_the_lines_of_states_set_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Formatting every group's line at each sync cost 15 ms of CPU per round with an election
    at 5,000 groups; the lines are kept, and what the file holds is the same."""
    book = TermVotes(tmp_path / TERM_VOTES_FILE)
    for i in range(100):
        book.set(f"t-{i}", (3, None if i % 2 else 2))
    book.sync()
    formatted: list[Any] = []
    original = checkpoint.CheckpointFile.write_lines

    def counting(self: checkpoint.CheckpointFile, rows: Any) -> None:
        formatted.append(rows)
        original(self, rows)

    monkeypatch.setattr(checkpoint.CheckpointFile, "write_lines", counting)
    monkeypatch.setattr(checkpoint.CheckpointFile, "write", None)  # entries formatted anew
    book.set("t-7", (4, 1))
    book.forget("t-8")
    book.sync()
    assert len(formatted) == 1 and len(formatted[0]) == 99
    reread = TermVotes(tmp_path / TERM_VOTES_FILE)
    assert [reread.get(f"t-{i}") for i in (0, 1, 7, 8)] == [(3, 2), (3, None), (4, 1), None]
