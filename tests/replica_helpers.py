"""A `ReplicaSet` run in-process for a test, without a node around it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.transport import Outgoing
from tidelog.records import RecordInput, build_batch
from tidelog.replication import Heartbeat, PreVoteResponse, RaftCore, VoteResponse
from tidelog.types import TopicPartition


@contextlib.asynccontextmanager
async def running(replicas: ReplicaSet, *, tick: bool = False) -> AsyncIterator[ReplicaSet]:
    """Run the set's Ready loop (and its tick loop with ``tick``: groups with peers need
    elections and heartbeats; a single-node group elects itself without) for the block, then
    stop the loops and close the set, whatever the block raised."""
    loops = [replicas.ready_loop(), *([replicas.tick_loop()] if tick else [])]
    tasks = [asyncio.create_task(loop) for loop in loops]
    try:
        yield replicas
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await replicas.close()


def follow_and_lead(
    replicas: ReplicaSet, follows: TopicPartition, leads: TopicPartition
) -> tuple[RaftCore, RaftCore]:
    """On node 1's `replicas`: a replica of `follows` that node 2's heartbeat made its
    follower, and one of `leads` that won node 2's votes and holds a write nobody acknowledged
    (so it never goes quiet). Returns (the follower's core, the leader's core)."""
    replicas.open_replica(follows, (2, 1, 3), {})
    replicas.open_replica(leads, (1, 2, 3), {})
    beat = Outgoing(2, 1)
    beat.add(follows, Heartbeat(1, 2, 1, 0, 0, False))
    replicas.step(beat.env, memoryview(b""))
    leader = replicas.partitions[leads].core
    leader.campaign()
    for response in (PreVoteResponse(1, 2, 1, True), VoteResponse(1, 2, 1, True)):
        answer = Outgoing(2, 1)
        answer.add(leads, response)
        replicas.step(answer.env, memoryview(b""))
    leader.propose(build_batch([RecordInput(b"v", None, 1)]), 1)
    return replicas.partitions[follows].core, leader
