"""min.insync.replicas at a partition's leader: a real replica (storage log, Raft core, the one
driver) leading a group of three whose followers are played by the test, which answers their
appends only when it says so. acks=all is refused before anything is written while fewer
replicas than the config are in sync (19), waits until that many hold the write when the config
is above a majority, and a write committed while too few are in sync gets 20."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import pytest

from tidelog import errors
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.replication import (
    AppendRequest,
    AppendResponse,
    Message,
    PreVoteRequest,
    PreVoteResponse,
    RaftConfig,
    Ready,
    VoteRequest,
    VoteResponse,
)
from tidelog.replication.driver import Driver, Leadership
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes
from tidelog.storage import LogConfig
from tidelog.testing import make_batch
from tidelog.types import TopicPartition

TP = TopicPartition("guarded", 0)
#: In sync for the whole test once caught up; a test makes a follower fall out by time.
LAG_MS = 60_000


class _Group:
    """Node 1's replica and the followers 2 and 3 as the test plays them."""

    def __init__(self, tmp_path: Path, min_insync: int, lag_ms: int = LAG_MS) -> None:
        self.replica = PartitionReplica(
            TP, 1, (1, 2, 3), tmp_path / "guarded-0", LogConfig(min_insync_replicas=min_insync),
            RaftConfig(), seed=1, term_votes=TermVotes(tmp_path / TERM_VOTES_FILE),
            replica_lag_max_ms=lag_ms,
        )
        self.driver: Driver[PartitionReplica] = Driver(self)
        self.out: list[Message] = []

    # the driver's port
    def send(self, key: PartitionReplica, message: Message) -> None:
        self.out.append(message)

    def flush(self) -> None:
        pass

    def publish(self, key: PartitionReplica, rd: Ready) -> None:
        key.publish(rd)

    def publish_hw(self, key: PartitionReplica, high_watermark: int) -> None:
        key.publish_hw(high_watermark)

    def leadership(self, key: PartitionReplica, change: Leadership) -> None:
        key.on_leadership(change)

    def drive(self) -> None:
        """Run rounds until the replica has nothing more to write or publish."""
        while (rnd := self.driver.begin([(self.replica, self.replica.driven)])) is not None:
            for write in rnd.writes:
                write.persist()
            self.driver.complete(rnd)

    def exchange(self, answering: Iterable[int]) -> None:
        """Deliver what node 1 sent: votes are granted, appends acknowledged by `answering`."""
        answering = set(answering)
        for _ in range(10):
            self.drive()
            out, self.out = self.out, []
            if not out:
                return
            for m in out:
                answer: Message
                if isinstance(m, PreVoteRequest):
                    answer = PreVoteResponse(m.term, m.dst, m.src, True)
                elif isinstance(m, VoteRequest):
                    answer = VoteResponse(m.term, m.dst, m.src, True)
                elif isinstance(m, AppendRequest) and m.dst in answering:
                    end = m.entries[-1].end_offset if m.entries else m.prev_offset + 1
                    answer = AppendResponse(m.term, m.dst, m.src, True, match_end=end)
                else:
                    continue
                self.replica.core.step(answer)
                if isinstance(answer, AppendResponse):
                    self.replica.record_follower(answer.src)

    def ack(self, follower: int, end: int | None = None) -> None:
        """`follower` acknowledges the leader's log up to `end` (all of it when None)."""
        self.drive()
        self.out.clear()
        replica = self.replica
        replica.core.step(AppendResponse(replica.core.term, follower, 1, True,
                                         match_end=replica.log.log_end_offset if end is None
                                         else end))
        replica.record_follower(follower)
        self.drive()

    def lead(self) -> None:
        self.replica.core.campaign()
        self.exchange({2, 3})
        assert self.replica.is_leader and self.replica.leader_epoch_start_offset is not None

    def produce(self, acks: int = -1) -> asyncio.Future[None]:
        produced = self.replica.propose(make_batch([b"v"]), acks)
        assert produced.done is not None
        return produced.done


def test_acks_all_is_refused_while_too_few_replicas_are_in_sync(tmp_path: Path) -> None:
    async def run() -> None:
        group = _Group(tmp_path, min_insync=2)
        group.lead()
        group.exchange({2, 3})
        done = group.produce()
        group.exchange({2, 3})
        assert done.done() and done.exception() is None
        # Both followers last caught up more than replica.lag.max.ms ago, as time would make it.
        group.replica._caught_up_ms.clear()
        with pytest.raises(errors.NotEnoughReplicasError):
            group.produce()
        assert group.replica.log.log_end_offset == group.replica.high_watermark  # not written
        assert group.produce(acks=1) is not None  # acks=1 is not concerned

    asyncio.run(run())


def test_above_a_majority_acks_all_waits_for_that_many_replicas_to_hold_the_write(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        group = _Group(tmp_path, min_insync=3)
        group.lead()
        group.exchange({2, 3})
        done = group.produce()
        group.exchange({2})  # committed by the leader and node 2: a majority
        assert group.replica.high_watermark == group.replica.log.log_end_offset
        assert not done.done()
        group.ack(3)
        assert done.done() and done.exception() is None

    asyncio.run(run())


def test_a_write_committed_while_too_few_are_in_sync_is_not_enough_after_append(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        group = _Group(tmp_path, min_insync=2)
        group.lead()
        group.exchange({2, 3})
        first = group.produce()  # both followers in sync when it was written
        group.drive()
        first_end = group.replica.log.log_end_offset
        second = group.produce()
        # Node 2 holds the first write only, so it is not caught up: out of the ISR (and node
        # 3 too, as replica.lag.max.ms after their last catch-up would make them).
        group.replica._caught_up_ms.clear()
        group.ack(2, first_end)
        assert group.replica.high_watermark == first_end
        assert first.done() and not second.done()
        assert isinstance(first.exception(), errors.NotEnoughReplicasAfterAppendError)

    asyncio.run(run())


def test_a_write_waiting_for_a_replica_that_falls_out_of_sync_is_not_enough_after_append(
    tmp_path: Path,
) -> None:
    """Above a majority, a committed write waits for the third replica; when that replica stops
    answering, the write must not wait for it forever (nothing else would wake it: no new write,
    no answer). Once it has lagged replica.lag.max.ms it is out of the ISR and the write gets
    20, as Kafka's purgatory answers a produce when the ISR shrinks below min.insync.replicas."""
    async def run() -> None:
        group = _Group(tmp_path, min_insync=3, lag_ms=200)
        group.lead()
        group.exchange({2, 3})
        done = group.produce()
        group.exchange({2})  # committed by the leader and node 2; node 3 is silent from now on
        assert group.replica.high_watermark == group.replica.log.log_end_offset
        assert not done.done()
        with pytest.raises(errors.NotEnoughReplicasAfterAppendError):
            await asyncio.wait_for(done, 10)

    asyncio.run(run())
