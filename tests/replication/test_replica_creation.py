"""A running node opens the replicas of a new topic on its disk thread, never on its event loop:
the loop also answers Metadata and keeps node liveness, and a topic of 1,000 partitions opened
on it blocked it for 5-50 s (its peers took the node for dead, its leaderships were lost)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from waiting_helpers import async_wait_for

from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.config import NodeConfig
from tidelog.node.replicas import housekeeping as housekeeping_module
from tidelog.node.replicas import replica_set as replicas_module
from tidelog.node.replicas.housekeeping import Housekeeping
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.transport import Outgoing
from tidelog.records import RecordInput, build_batch
from tidelog.replication import Role, VoteRequest, VoteResponse
from tidelog.storage import Log, checkpoint
from tidelog.types import TopicPartition


def test_new_replicas_open_off_the_loop_and_a_removal_mid_open_leaves_no_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened_on: set[int] = set()
    original = Log.open.__func__  # type: ignore[attr-defined]

    def recording_open(cls: type[Log], *args: Any, **kwargs: Any) -> Log:
        opened_on.add(threading.get_ident())
        return original(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Log, "open", classmethod(recording_open))
    tps = [TopicPartition("t", p) for p in range(40)]

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        try:
            for tp in tps:
                replicas.add_replica(tp, (1,), {})
            assert not replicas.partitions, "a replica was opened on the loop"
            await async_wait_for(lambda: replicas._opening, 10, "the first slice being opened")
            # One removed while its log is being opened, one while it waits for its turn.
            removed = [next(iter(replicas._opening)), tps[-1]]
            for tp in removed:
                replicas.remove_replica(tp)
            await async_wait_for(lambda: len(replicas.partitions) == len(tps) - 2, 30,
                                 "every replica in service")
            await asyncio.get_running_loop().run_in_executor(replicas.disk, lambda: None)
            assert threading.get_ident() not in opened_on
            for tp in removed:
                assert tp not in replicas.partitions
                assert not (tmp_path / f"{tp.topic}-{tp.partition}").exists()
            # A new partition's only replica is its preferred one: it stood at once.
            assert all(r.core.term == 1 for r in replicas.partitions.values())
        finally:
            await replicas.close()

    asyncio.run(scenario())


def test_the_checkpoint_pass_leaves_logs_that_never_held_a_batch_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new topic's logs hold nothing to checkpoint: before, the first pass after a topic of
    1,000 partitions was created flushed each and replaced two files of each, holding the
    disk thread (and every round of writes) for tens of seconds. A log that took a batch is
    checkpointed as before. Only the logs the pass checkpoints go to the disk thread's
    helpers: a future per log of 5,000 idle ones, every pass, was a third of a loaded node's
    GIL time."""
    replaced: list[Path] = []
    original = os.replace

    def counting_replace(src: Any, dst: Any) -> None:
        replaced.append(Path(dst))
        original(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", counting_replace)
    config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path)
    replicas = ReplicaSet(config)
    handed: list[int] = []
    helpers_map = replicas.flushers.map

    def counting_map(fn: Any, items: Any) -> Any:
        items = list(items)
        handed.append(len(items))
        return helpers_map(fn, items)

    monkeypatch.setattr(replicas.flushers, "map", counting_map)
    try:
        for p in range(3):
            replicas.open_replica(TopicPartition("t", p), (2, 1, 3), {})
        housekeeping = Housekeeping(config, replicas, METADATA_TP)

        def checkpoint_pass() -> list[Any]:
            return asyncio.run(housekeeping._checkpoint_pass())

        assert checkpoint_pass() == []
        assert replaced == []
        written = replicas.partitions[TopicPartition("t", 1)].log
        written.append_as_leader(build_batch([RecordInput(b"v", None, 1)]), 0)
        assert checkpoint_pass() == []
        assert {path.parent for path in replaced} == {written.directory}
        assert checkpoint_pass() == []  # nothing changed since
        assert handed == [1]
    finally:
        asyncio.run(replicas.close())


def test_a_vote_request_for_a_replica_still_being_opened_is_answered_once_it_is(
    tmp_path: Path,
) -> None:
    """A new topic's preferred replica (node 1 here) stands as soon as its node opened it; this
    node, opening the same partitions a little later, answers the request once its replica is
    open instead of dropping it (before, the partition stayed leaderless until the candidate
    stood again, an election timeout later: minutes on a loaded node creating 5,000)."""
    tp = TopicPartition("t", 0)
    peers = {i: f"127.0.0.1:{i}" for i in (1, 2, 3)}

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=2, listen="127.0.0.1:0", data_dir=tmp_path,
                                         peers=peers, client_addresses=peers))
        try:
            replicas.add_replica(tp, (1, 2, 3), {})
            request = Outgoing(1, 2)
            request.add(tp, VoteRequest(1, 1, 2, 0, 0))
            replicas.step(request.env, memoryview(b""))
            await async_wait_for(lambda: tp in replicas.partitions, 20, "the replica open")
            core = replicas.partitions[tp].core
            assert (core.term, core.role) == (1, Role.FOLLOWER)
            rd = core.ready()
            assert rd.hard_state is not None and rd.hard_state.vote == 1
            assert [(type(m), m.dst, m.granted) for m in rd.messages
                    if isinstance(m, VoteResponse)] == [(VoteResponse, 1, True)]
        finally:
            await replicas.close()

    asyncio.run(scenario())


def test_a_new_topic_is_opened_in_waves_of_replicas_that_go_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The opener puts no more replicas in service while `_SETTLING_LIMIT` it opened are still
    awake: 5,000 electing groups at once saturated each node's loop and their elections fed
    themselves. Here the groups' peers never answer, so the first wave stays awake until it
    is removed."""
    monkeypatch.setattr(replicas_module, "_OPEN_SLICE", 4)
    monkeypatch.setattr(replicas_module, "_SETTLING_LIMIT", 4)
    monkeypatch.setattr(replicas_module, "_SETTLING_WAIT_S", 600.0)
    tps = [TopicPartition("t", p) for p in range(12)]

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        ticking = asyncio.create_task(replicas.tick_loop())
        try:
            for tp in tps:
                replicas.add_replica(tp, (1, 2, 3), {})
            await async_wait_for(lambda: len(replicas.partitions) == 4, 30, "the first wave")
            ticks = replicas._ticks
            await async_wait_for(lambda: replicas._ticks > ticks + 3 * 5, 30, "a few waits")
            assert set(replicas.partitions) == set(tps[:4])  # candidates, all awake
            for tp in tps[:4]:
                replicas.remove_replica(tp)
            await async_wait_for(lambda: set(replicas.partitions) == set(tps[4:8]), 30,
                                 "the second wave")
        finally:
            ticking.cancel()
            await replicas.close()

    asyncio.run(scenario())


def test_the_checkpoint_pass_takes_the_least_recently_checkpointed_logs_a_slice_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Produce over 1,000 partitions changes every log of every node within each interval, and
    a pass over all of them (seven fsyncs a log) held each node's disk thread 3.4 s of every 5,
    every round of writes behind it. A pass now takes a bounded number of changed logs, the
    least recently checkpointed first (so each gets its turn), more only when that is needed
    for each to be checkpointed within a number of passes; and it hands them to the disk
    thread a slice at a time, so a round of writes queued meanwhile waits for one slice, not
    for the pass. Before, one pass checkpointed every changed log in one trip."""
    monkeypatch.setattr(housekeeping_module, "_CHECKPOINT_LOGS_PER_PASS", 2)
    monkeypatch.setattr(housekeeping_module, "_CHECKPOINT_PASSES_MAX", 3)
    monkeypatch.setattr(housekeeping_module, "_CHECKPOINT_SLICE", 1)
    config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path)
    replicas = ReplicaSet(config)
    housekeeping = Housekeeping(config, replicas, METADATA_TP)
    trips: list[str] = []
    slice_of = housekeeping._checkpoint

    def recording_slice(logs: list[Any]) -> list[Any]:
        trips.append(",".join(str(r.tp.partition) for r in logs))
        if len(trips) == 1:  # a round of writes comes while the first slice is on the disk
            replicas.disk.submit(trips.append, "round")
        return slice_of(logs)

    monkeypatch.setattr(housekeeping, "_checkpoint", recording_slice)
    tps = [TopicPartition("t", p) for p in range(4)]
    batch = build_batch([RecordInput(b"v", None, 1)])

    def write(partitions: range) -> None:
        for p in partitions:
            log = replicas.partitions[tps[p]].log
            log.append_as_leader(batch, 0)

    def checkpoint_pass() -> list[str]:
        trips.clear()
        assert asyncio.run(housekeeping._checkpoint_pass()) == []
        return trips.copy()

    try:
        for tp in tps:
            replicas.open_replica(tp, (1,), {})
        write(range(4))
        assert checkpoint_pass() == ["0", "round", "1"]
        write(range(4))
        # Never checkpointed first, then the oldest checkpoint.
        assert checkpoint_pass() == ["2", "round", "3"]
        assert checkpoint_pass() == ["0", "round", "1"]
        write(range(4))
        # 2 and 3 were checkpointed longer ago than 0 and 1.
        assert checkpoint_pass() == ["2", "round", "3"]
        assert checkpoint_pass() == ["0", "round", "1"]
        assert checkpoint_pass() == []  # every change checkpointed
        for p in range(4, 7):
            replicas.open_replica(TopicPartition("t", p), (1,), {})
            tps.append(TopicPartition("t", p))
        write(range(7))
        # Seven changed logs, each within three passes: three a pass.
        assert checkpoint_pass() == ["4", "round", "5", "6"]
    finally:
        asyncio.run(replicas.close())
