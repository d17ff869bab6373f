"""The node-to-node framing (raft.proto's Stream): every core message survives a round trip,
append entries come back as views of the received message, a malformed frame is refused
with an error instead of being half-applied, and no stream message outgrows what a peer
accepts."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
import pytest

from tidelog.node.config import NodeConfig
from tidelog.node.edge.security import PeerDialer
from tidelog.node.replicas.transport import (
    COALESCE_BYTES,
    SERVER_OPTIONS,
    Outgoing,
    PeerLink,
    add_raft_transport,
    frames,
    messages_of,
)
from tidelog.records import MAX_BATCH_BYTES, MAX_MESSAGE_BYTES, RecordInput, build_batch
from tidelog.replication import (
    AppendRequest,
    AppendResponse,
    ConfState,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    Membership,
    Message,
    PreVoteRequest,
    PreVoteResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

#: Links of node 1 over plaintext (the node-to-node listener's default).
PLAINTEXT = PeerDialer(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=Path("unused")))

A, B = TopicPartition("a", 0), TopicPartition("b", 3)


def _entry(base: int, count: int, epoch: int) -> Entry:
    data = build_batch([RecordInput(b"v%d" % i, None, i) for i in range(count)],
                       base_offset=base, partition_leader_epoch=epoch)
    return Entry(base, base + count - 1, epoch, data)


def _round_trip(outgoings: list[Outgoing]) -> list[tuple[TopicPartition, object]]:
    message = b"".join(
        piece for o in outgoings for _, pieces in o.frames() for piece in pieces
    )
    return [item for env, payload in frames(message) for item in messages_of(env, payload)]


def test_every_message_kind_round_trips_with_its_batches() -> None:
    first = Outgoing(1, 2)
    sent = [
        (A, AppendRequest(5, 1, 2, 9, 4, (_entry(10, 3, 5), _entry(13, 1, 5)), 11)),
        (B, AppendRequest(2, 1, 2, -1, -1, (), 0)),
        (B, AppendRequest(2, 1, 2, 0, 2, (_entry(1, 2, 2),), 1)),
        (A, AppendRequest(5, 1, 2, 6, -1, (_entry(7, 1, 5),), 9,
                          ConfState(4, Membership.of([1, 2, 3], [7])))),
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
    heartbeats = [(A, Heartbeat(5, 1, 2, 12)), (B, HeartbeatResponse(3, 1, 2)),
                  (B, Heartbeat(3, 1, 2, 4, read_ctx=9)), (A, HeartbeatResponse(5, 1, 2, 9))]
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
    message = b"".join(piece for _, pieces in outgoing.frames() for piece in pieces)
    with pytest.raises(ValueError):
        list(frames(message[:cut]))


@pytest.mark.parametrize(("offset", "voters", "learners"),
                         [(-2, [1], []), (3, [], [1]), (3, [1], [1]), (3, [-4], [])])
def test_a_configuration_no_leader_sends_is_refused(
        offset: int, voters: list[int], learners: list[int]) -> None:
    env = rpb.RaftEnvelope(src=1, dst=2)
    pm = env.messages.add(group=rpb.GroupId(topic="t", partition=0), term=3)
    pm.append_request.prev_offset = 5
    pm.append_request.prev_epoch = -1
    pm.append_request.conf_state.offset = offset
    pm.append_request.conf_state.voters.extend(voters)
    pm.append_request.conf_state.learners.extend(learners)
    with pytest.raises(ValueError):
        list(messages_of(env, memoryview(b"")))


# ---- sizes -----------------------------------------------------------------------------------

LONGEST = TopicPartition("t" * 249, 2**31 - 1)  # Kafka's longest topic name
NEG = -(2**62)  # every integer field at its widest varint (10 bytes)


def _worst_case_items() -> list[tuple[str, Message | None]]:
    big_entry = Entry(NEG, NEG, NEG, b"")
    return [
        ("heartbeat", Heartbeat(NEG, -1, -2, NEG, NEG)),
        ("heartbeat response", HeartbeatResponse(NEG, -1, -2, NEG)),
        ("append", AppendRequest(NEG, -1, -2, NEG, NEG, (big_entry,) * 3, NEG,
                                 ConfState(NEG, Membership.of(range(2**31 - 5, 2**31))))),
        ("append response", AppendResponse(NEG, -1, -2, True, NEG, NEG, NEG, NEG)),
        ("vote request", VoteRequest(NEG, -1, -2, NEG, NEG, True)),
        ("announcement", None),
    ]


@pytest.mark.parametrize(("kind", "message"), _worst_case_items(),
                         ids=[kind for kind, _ in _worst_case_items()])
def test_frames_stay_within_the_coalescing_size(kind: str, message: Message | None) -> None:
    """Filled with many worst-case items, every frame stays within COALESCE_BYTES: the bounds an
    Outgoing counts per item are upper bounds of what protobuf writes (else frames would overflow
    here), so only an item alone can make a frame larger."""
    outgoing = Outgoing(-1, -2)
    for _ in range(3 * COALESCE_BYTES // 200):
        if message is None:
            outgoing.announce(LONGEST, NEG, [-1, -2, -3], NEG)
        else:
            outgoing.add(LONGEST, message)
    sealed = outgoing.frames()
    assert len(sealed) >= 3
    for size, pieces in sealed:
        assert size == sum(len(p) for p in pieces) <= COALESCE_BYTES


def _link_messages(link: PeerLink) -> list[bytes]:
    """What the link's sender would write to the stream for everything queued now."""

    async def drain() -> list[bytes]:
        messages = link._messages(link._stream)
        out = []
        while link._queue:
            out.append(await anext(messages))
        return out

    return asyncio.run(drain())


def test_a_peer_link_never_writes_a_message_its_peer_refuses() -> None:
    """Rounds of appends of every size, among them one maximal batch: the link joins frames
    into messages of at most COALESCE_BYTES, except a frame that holds one larger append alone,
    and none reaches MAX_MESSAGE_BYTES. Everything arrives, in order."""
    maximal = memoryview(bytes(MAX_BATCH_BYTES))
    sizes = [100, 300_000, 1 << 20, 3 << 20, 900_000, MAX_BATCH_BYTES, 2000, 5 << 20, 10]
    link = PeerLink(1, 2, "127.0.0.1:1", PLAINTEXT)
    sent: list[Message] = []
    for round_ in range(3):
        outgoing = Outgoing(1, 2)
        for i, size in enumerate(sizes):
            if size == MAX_BATCH_BYTES and round_:
                continue  # one maximal batch is enough memory for a unit test
            data = maximal[:size]
            message = AppendRequest(1, 1, 2, i, 1, (Entry(i, i, 1, data),), 0)
            outgoing.add(TopicPartition("t", i), message)
            outgoing.add(TopicPartition("t", i), Heartbeat(1, 1, 2, i))
            sent += [message, Heartbeat(1, 1, 2, i)]
        link.send(outgoing)
    written = _link_messages(link)
    assert max(len(m) for m in written) <= MAX_MESSAGE_BYTES
    for m in written:
        envelopes = list(frames(m))
        if len(m) > COALESCE_BYTES:
            assert len(envelopes) == 1 and len(envelopes[0][0].messages) == 1
    received = [msg for m in written for env, payload in frames(m)
                for _, msg in messages_of(env, payload)]
    assert sorted(map(_summary, received)) == sorted(map(_summary, sent))


def test_a_maximal_batch_crosses_a_real_stream() -> None:
    """A node's server (SERVER_OPTIONS) takes the largest append a leader can send, and what
    follows it on the same stream: the limit is set on both ends."""
    batch = build_batch([RecordInput(bytes(MAX_BATCH_BYTES - 200), None, 0)])
    assert len(batch) <= MAX_BATCH_BYTES

    async def run() -> list[tuple[TopicPartition, object]]:
        received: list[tuple[TopicPartition, object]] = []
        done = asyncio.Event()

        def on_envelope(env: rpb.RaftEnvelope, payload: memoryview) -> None:
            for tp, message in messages_of(env, payload):
                # Keep sizes, not views: the payload is only valid during the call.
                received.append((tp, _summary(message)))
                if isinstance(message, Heartbeat):
                    done.set()

        server = grpc.aio.server(options=SERVER_OPTIONS)
        add_raft_transport(server, on_envelope, lambda _: rpb.FetchMetadataResponse(),
                           *_QUIET_HANDLERS)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        link = PeerLink(1, 2, f"127.0.0.1:{port}", PLAINTEXT)
        link.start()
        try:
            outgoing = Outgoing(1, 2)
            outgoing.add(A, AppendRequest(1, 1, 2, -1, -1, (Entry(0, 0, 1, batch),), 0))
            outgoing.add(B, Heartbeat(1, 1, 2, 0))
            link.send(outgoing)
            await asyncio.wait_for(done.wait(), timeout=60)
        finally:
            await link.close()
            await server.stop(0)
        return received

    received = asyncio.run(run())
    assert received == [(A, ("append", -1, len(batch))), (B, ("heartbeat", 0, 0))]


#: The unary RaftTransport handlers, answering nothing (these tests are about streams).
_QUIET_HANDLERS = (
    lambda _, wait: asyncio.sleep(0, rpb.WriteTxnMarkersResponse()),
    lambda _: asyncio.sleep(0, rpb.ReassignmentDoneResponse()),
    lambda _, wait: asyncio.sleep(0, rpb.RegisterNodeResponse()),
    lambda _, wait: asyncio.sleep(0, rpb.NodeHeartbeatResponse()),
    lambda _, context: asyncio.sleep(0, rpb.ForwardResponse()),
)


def _summary(message: object) -> tuple[str, int, int]:
    """A comparable digest: (kind, prev offset or HW, bytes of batches)."""
    if isinstance(message, AppendRequest):
        return "append", message.prev_offset, sum(len(e.data) for e in message.entries)
    assert isinstance(message, Heartbeat)
    return "heartbeat", message.leader_hw, 0


def test_a_broken_stream_is_a_warning_with_its_cause_once_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer that refuses a message (here a server left at gRPC's 4 MiB default) breaks the
    stream: the link says so at WARNING with gRPC's code and details (it said nothing above
    DEBUG before), and a break that repeats soon after is counted at DEBUG instead of flooding
    the log."""
    caplog.set_level(logging.DEBUG, logger="tidelog.transport")
    too_big = bytes(5 << 20)

    def breaks() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "broke" in r.getMessage()]

    async def run() -> None:
        server = grpc.aio.server()  # gRPC's default receive limit
        add_raft_transport(server, lambda env, payload: None,
                           lambda _: rpb.FetchMetadataResponse(), *_QUIET_HANDLERS)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        link = PeerLink(1, 2, f"127.0.0.1:{port}", PLAINTEXT)
        link.start()
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while len(breaks()) < 2:  # the link drops what was queued when its stream broke
                assert asyncio.get_running_loop().time() < deadline, "no second break logged"
                outgoing = Outgoing(1, 2)
                outgoing.add(A, AppendRequest(1, 1, 2, -1, -1, (Entry(0, 0, 1, too_big),), 0))
                link.send(outgoing)
                await asyncio.sleep(0.1)
        finally:
            await link.close()
            await server.stop(0)

    asyncio.run(run())
    first, second = breaks()[:2]
    assert first.levelno == logging.WARNING
    # gRPC's cause: RESOURCE_EXHAUSTED "Received message larger than max", or INTERNAL when
    # the server's GOAWAY wins the race.
    assert any(f"broke: {code.name} " in first.getMessage() for code in grpc.StatusCode)
    assert second.levelno == logging.DEBUG
