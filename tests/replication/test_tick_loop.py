"""The tick loop of a node (`ReplicaSet.tick_loop`): while no core here is awake it wakes once
a heartbeat interval, not once a tick, and still counts every tick (node liveness and pacing
count in them); a core that wakes is ticked on every tick again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from pathlib import Path

import pytest
from replica_helpers import follow_and_lead, running
from waiting_helpers import async_wait_for

from tidelog.node.config import NodeConfig
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.transport import Outgoing
from tidelog.records import RecordInput, build_batch
from tidelog.replication import RaftCore, Role
from tidelog.types import TopicPartition


def _recording(replicas: ReplicaSet, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Each call of the set's `tick`: (ticks counted, cores awake then)."""
    calls: list[tuple[int, int]] = []
    original = replicas.tick

    def tick(ticks: int = 1) -> None:
        calls.append((ticks, len(replicas.awake())))
        original(ticks)

    monkeypatch.setattr(replicas, "tick", tick)
    return calls


def test_an_idle_loop_wakes_once_a_heartbeat_interval_and_an_awake_core_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the loop woke (and counted one tick) 100 times a second whatever it had to do:
    the first assertion failed."""

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        heartbeat = replicas.raft_config.heartbeat_ticks
        calls = _recording(replicas, monkeypatch)
        ticking = asyncio.create_task(replicas.tick_loop())
        try:
            await async_wait_for(lambda: replicas._ticks >= 8 * heartbeat, 30, "idle ticks")
            idle = list(calls)
            assert all(ticks == heartbeat for ticks, _ in idle), idle
            assert sum(ticks for ticks, _ in idle) == replicas._ticks <= replicas.tick_count()
            # A replica whose peers never answer: its core campaigns, and stays awake.
            tp = TopicPartition("t", 0)
            replicas.open_replica(tp, (1, 2, 3), {})
            assert replicas.awake()
            woke = len(calls)
            await async_wait_for(lambda: len(calls) >= woke + 3 * heartbeat, 30, "awake ticks")
            assert all(ticks == 1 for ticks, _ in calls[woke + 1:]), calls[woke:]
            replicas.remove_replica(tp)
            quiet = len(calls) + 1
            await async_wait_for(lambda: len(calls) >= quiet + 4, 30, "idle again")
            assert all(ticks == heartbeat for ticks, _ in calls[quiet + 1:]), calls[quiet:]
            assert sum(ticks for ticks, _ in calls) == replicas._ticks
        finally:
            ticking.cancel()
            await replicas.close()

    asyncio.run(scenario())


def test_the_tick_count_between_wake_ups_is_what_a_loop_waking_each_tick_would_say(
    tmp_path: Path,
) -> None:
    """A peer heard while the loop sleeps over idle ticks is heard at the tick a loop that
    woke for each would have counted (never beyond the sleep's last but one, which the loop
    counts when it wakes), so its silence is not counted from an earlier tick."""
    replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
    interval = replicas.config.raft_tick_ms / 1000
    now = time.monotonic()
    replicas._window = (10, now - 1000 * interval, 5)  # a loop long late
    assert replicas.tick_count() == 14
    replicas._window = (10, now + 1000 * interval, 5)  # asleep since its last tick
    assert replicas.tick_count() == 10
    replicas._window = (10, now - 1000 * interval, 1)  # ticking every tick: what it counted
    assert replicas.tick_count() == 10
    replicas._window = (10, time.monotonic() - 2.5 * interval, 5)
    assert 12 <= replicas.tick_count() <= 14


def test_a_group_that_goes_quiet_as_its_ready_is_advanced_leaves_the_awake_set(
    tmp_path: Path,
) -> None:
    """A single replica's write commits, and its group goes quiet, when its Ready is advanced
    (no follower answers): it was left among the awake cores, and kept the tick loop waking
    every tick for good (the last assertion failed)."""

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        async with running(replicas, tick=True):
            tp = TopicPartition("t", 0)
            replicas.open_replica(tp, (1,), {})
            replica = replicas.partitions[tp]
            await async_wait_for(lambda: replica.is_leader and replica.core.quiesced, 30,
                                 "a leader gone quiet")
            produced = replica.propose(build_batch([RecordInput(b"v", None, 1)]), -1)
            assert produced.done is not None
            await asyncio.wait_for(produced.done, 30)
            await async_wait_for(lambda: replica.core.quiesced, 30, "quiet again")
            assert replicas.awake() == []

    asyncio.run(scenario())


def test_steady_leaders_are_ticked_once_a_heartbeat_interval_followers_once_an_election_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An awake leader and a follower that supports its heard leader only count between two
    heartbeat intervals (`RaftCore.steady`): the leader is ticked once an interval with the
    ticks since, the follower, whose timer only counts toward the stall question, once an
    election timeout; neither each tick. Once the leader's node falls silent the follower is
    ticked each tick again, and stands. Before, every awake core was ticked each tick: 150-250
    awake groups a node during a produce over 1,000 partitions, up to a fifth of the main
    thread; and then every steady follower each interval (the follower's assertion failed),
    two in three of the visits."""

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        heartbeat = replicas.raft_config.heartbeat_ticks
        election = replicas.raft_config.election_ticks
        given: dict[int, list[int]] = {}
        original = RaftCore.tick

        def tick(core: RaftCore, quorum_paced: bool = True, down: Collection[int] = (),
                 ticks: int = 1) -> bool:
            given.setdefault(id(core), []).append(ticks)
            return original(core, quorum_paced, down, ticks)

        monkeypatch.setattr(RaftCore, "tick", tick)
        follows, leads = TopicPartition("f", 0), TopicPartition("l", 0)
        try:
            follower, leader = follow_and_lead(replicas, follows, leads)
            assert follower.steady and leader.steady and not leader.quiesced
            given.clear()
            for _ in range(4 * election):
                replicas.step(Outgoing(2, 1).env, memoryview(b""))  # nodes 2 and 3 are heard
                replicas.step(Outgoing(3, 1).env, memoryview(b""))
                replicas.tick()
            assert (follower.role, follower.leader_id, leader.role) == (
                Role.FOLLOWER, 2, Role.LEADER)
            for core, every in ((leader, heartbeat), (follower, election)):
                ticks = given[id(core)]
                assert len(ticks) <= 4 * election // every + 1, ticks
                assert all(1 <= n <= every for n in ticks) and sum(ticks) > 3 * election
            given.clear()
            for _ in range(3 * election):  # nodes 2 and 3 fall silent
                replicas.tick()
            assert follower.role is not Role.FOLLOWER and not follower.steady
            assert given[id(follower)][-election:] == [1] * election
        finally:
            await replicas.close()

    asyncio.run(scenario())
