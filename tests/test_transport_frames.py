"""The node-to-node framing (raft.proto's Stream): every core message survives a round trip,
append entries come back as views of the received message, and a malformed frame is refused
with an error instead of being half-applied."""

from __future__ import annotations

import pytest

from tidelog.node.transport import Outgoing, frames, messages_of
from tidelog.records import RecordInput, build_batch
from tidelog.replication import (
    AppendRequest,
    AppendResponse,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    PreVoteRequest,
    PreVoteResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.types import TopicPartition

A, B = TopicPartition("a", 0), TopicPartition("b", 3)


def _entry(base: int, count: int, epoch: int) -> Entry:
    data = build_batch([RecordInput(b"v%d" % i, None, i) for i in range(count)],
                       base_offset=base, partition_leader_epoch=epoch)
    return Entry(base, base + count - 1, epoch, data)


def _round_trip(outgoings: list[Outgoing]) -> list[tuple[TopicPartition, object]]:
    message = b"".join(piece for o in outgoings for piece in o.frame())
    return [item for env, payload in frames(message) for item in messages_of(env, payload)]


def test_every_message_kind_round_trips_with_its_batches() -> None:
    first = Outgoing(1, 2)
    sent = [
        (A, AppendRequest(5, 1, 2, 9, 4, (_entry(10, 3, 5), _entry(13, 1, 5)), 11)),
        (B, AppendRequest(2, 1, 2, -1, -1, (), 0)),
        (B, AppendRequest(2, 1, 2, 0, 2, (_entry(1, 2, 2),), 1)),
        (A, AppendResponse(5, 1, 2, False, 0, 9, 7, 4)),
        (A, PreVoteRequest(6, 1, 2, 14, 5)),
        (B, VoteRequest(3, 1, 2, 3, 2, True)),
        (A, PreVoteResponse(6, 1, 2, True)),
        (B, VoteResponse(3, 1, 2, False)),
        (A, TimeoutNow(5, 1, 2)),
    ]
    for tp, message in sent:
        first.add(tp, message)
    second = Outgoing(1, 2)  # a second frame in the same stream message
    heartbeats = [(A, Heartbeat(5, 1, 2, 12)), (B, HeartbeatResponse(3, 1, 2))]
    late = (B, AppendRequest(3, 1, 2, 2, 2, (_entry(3, 5, 3),), 3))
    for tp, message in [*heartbeats, late]:
        second.add(tp, message)
    received = _round_trip([first, second])
    # heartbeats come first within their frame
    assert received == [*sent, *heartbeats, late]
    append = received[0][1]
    assert isinstance(append, AppendRequest)
    assert all(isinstance(e.data, memoryview) for e in append.entries)


@pytest.mark.parametrize("cut", [1, 5, -1])
def test_a_truncated_frame_is_refused(cut: int) -> None:
    outgoing = Outgoing(1, 2)
    outgoing.add(A, AppendRequest(5, 1, 2, 9, 4, (_entry(10, 3, 5),), 11))
    message = b"".join(outgoing.frame())
    with pytest.raises(ValueError):
        list(frames(message[:cut]))
