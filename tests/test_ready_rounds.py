"""The Ready loop keeps a second round going while one is on the disk thread
(`ReplicaSet.ready_loop`): a partition's Ready is taken, and what it owes sent, without waiting for
another partition's fsync. One round at a time, a proposal, a follower's append or the
acknowledgement that commits a batch, arriving during an fsync, waited for that fsync before it
was even looked at."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

from tidelog.errors import NotEnoughReplicasError
from tidelog.node.config import NodeConfig
from tidelog.node.partition import PartitionReplica
from tidelog.node.replicas import ReplicaSet
from tidelog.testing import async_wait_for, make_batch
from tidelog.types import TopicPartition


def test_a_round_is_taken_while_another_waits_for_the_disk(tmp_path: Path) -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        loops = [asyncio.create_task(replicas.tick_loop()),
                 asyncio.create_task(replicas.ready_loop())]
        gate = threading.Event()
        try:
            for tp in (a, b):
                replicas.open_replica(tp, (1,), {})
            replicas.wake()
            first, second = replicas.partitions[a], replicas.partitions[b]
            await async_wait_for(lambda: first.is_leader and second.is_leader, 10, "leaders")
            # A first batch each, committed: every round so far is complete.
            for replica in (first, second):
                done = await async_wait_for(lambda r=replica: _propose(r), 10, "a settled leader")
                await asyncio.wait_for(done, 10)
            await async_wait_for(lambda: not first.core.has_ready()
                                 and not second.core.has_ready(), 10, "idle cores")
            # The disk thread is held: the round that takes a's write waits behind it.
            replicas.disk.submit(gate.wait)
            on_a = first.propose(make_batch([b"a"]), -1).done
            replicas.wake_touched()
            await async_wait_for(lambda: not first.core.has_ready(), 10, "a's Ready taken")
            on_b = second.propose(make_batch([b"b"]), -1).done
            replicas.wake_touched()
            # b's Ready is taken into a second round (queued behind the first) at once.
            await async_wait_for(lambda: not second.core.has_ready(), 10, "b's Ready taken")
            assert on_a is not None and on_b is not None
            assert not on_a.done() and not on_b.done()  # nothing is durable yet
            gate.set()
            await asyncio.wait_for(asyncio.gather(on_a, on_b), 10)
            assert first.high_watermark == 2 and second.high_watermark == 2
        finally:
            gate.set()
            for task in loops:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await replicas.close()

    asyncio.run(scenario())


def _propose(replica: PartitionReplica) -> asyncio.Future[None] | None:
    """A first batch's acks=all future; None while the new leader settles its log."""
    try:
        return replica.propose(make_batch([b"0"]), -1).done
    except NotEnoughReplicasError:
        return None
