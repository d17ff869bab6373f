"""Node-to-node Raft traffic over gRPC: one long-lived stream per peer, many partitions per
envelope, heartbeats of all shared partitions coalesced (design-notes: a gRPC message costs
~190 µs of CPU whatever its size).

The record batches of appends travel beside the envelope, not inside it (see raft.proto's
Stream): a leader joins envelope and batches into one stream message, and a follower hands the
batches on as views of the message it received, so a batch is copied only by gRPC and the
kernel between the leader's memory and the follower's file.

Raft tolerates loss, duplication and reordering, so the transport is deliberately simple: a
bounded outbound queue per peer that drops the oldest frame when full, and a sender task that
reconnects with backoff when the stream breaks; frames queued while the stream was busy leave
together, as one message. What it must never do is block the event loop or let one slow peer
delay the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

import grpc
from google.protobuf.message import DecodeError

from tidelog.node.malformed import reject_malformed
from tidelog.replication import (
    AppendRequest,
    AppendResponse,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    Message,
    PreVoteRequest,
    PreVoteResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as pb
from tidelog.wire import varint

log = logging.getLogger("tidelog.transport")

_QUEUE_LIMIT = 256
_RECONNECT_BACKOFF_S = (0.05, 0.1, 0.2, 0.5)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_SERVICE = pb.DESCRIPTOR.services_by_name["RaftTransport"].full_name
STREAM_METHOD = f"/{_SERVICE}/Stream"
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),
]


# ---- conversions ---------------------------------------------------------------------------


def _group(tp: TopicPartition) -> pb.GroupId:
    return pb.GroupId(topic=tp.topic, partition=tp.partition)


class Outgoing:
    """An envelope being filled for one peer, and the batches that will follow it."""

    __slots__ = ("env", "payload")

    def __init__(self, src: int, dst: int) -> None:
        self.env = pb.RaftEnvelope(src=src, dst=dst)
        self.payload: list[bytes | memoryview] = []

    def add(self, tp: TopicPartition, m: Message) -> None:
        add_message(self.env, self.payload, tp, m)

    def frame(self) -> list[bytes | memoryview]:
        """The frame's pieces: varint length, envelope, batches."""
        header = self.env.SerializeToString()
        return [varint(len(header)), header, *self.payload]


def add_message(
    env: pb.RaftEnvelope, payload: list[bytes | memoryview], tp: TopicPartition, m: Message
) -> None:
    """Put one core message into an envelope (heartbeats into the coalesced list) and the
    batches of an append into `payload`."""
    if isinstance(m, Heartbeat):
        env.heartbeats.add(group=_group(tp), term=m.term, leader_hw=m.leader_hw)
        return
    if isinstance(m, HeartbeatResponse):
        env.heartbeats.add(group=_group(tp), term=m.term, response=True)
        return
    pm = env.messages.add(group=_group(tp), term=m.term)
    if isinstance(m, PreVoteRequest):
        pm.pre_vote_request.log_end_offset = m.log_end_offset
        pm.pre_vote_request.last_epoch = m.last_epoch
    elif isinstance(m, VoteRequest):
        pm.vote_request.log_end_offset = m.log_end_offset
        pm.vote_request.last_epoch = m.last_epoch
        pm.vote_request.transfer = m.transfer
    elif isinstance(m, PreVoteResponse):
        pm.pre_vote_response.granted = m.granted
    elif isinstance(m, VoteResponse):
        pm.vote_response.granted = m.granted
    elif isinstance(m, AppendRequest):
        req = pm.append_request
        req.prev_offset = m.prev_offset
        req.prev_epoch = m.prev_epoch
        req.leader_hw = m.leader_hw
        for e in m.entries:
            req.entries.add(
                base_offset=e.base_offset, last_offset=e.last_offset, epoch=e.epoch,
                size=len(e.data),
            )
            payload.append(e.data)
    elif isinstance(m, AppendResponse):
        resp = pm.append_response
        resp.success = m.success
        resp.match_end = m.match_end
        resp.rejected_prev = m.rejected_prev
        resp.hint_offset = m.hint_offset
        resp.hint_epoch = m.hint_epoch
        resp.lost = m.lost
    elif isinstance(m, TimeoutNow):
        pm.timeout_now.SetInParent()
    else:  # pragma: no cover - the Message union is closed
        raise TypeError(f"unknown message {m!r}")


def frames(message: bytes) -> Iterator[tuple[pb.RaftEnvelope, memoryview]]:
    """The frames of one stream message: each envelope with the batches that follow it."""
    view = memoryview(message)
    pos = 0
    while pos < len(view):
        size, pos = _read_varint(view, pos)
        if size > len(view) - pos:
            raise ValueError(f"a frame announces a {size}-byte envelope, {len(view) - pos} follow")
        env = pb.RaftEnvelope.FromString(view[pos : pos + size].tobytes())  # small
        pos += size
        payload_size = sum(
            e.size for pm in env.messages if pm.HasField("append_request")
            for e in pm.append_request.entries
        )
        if payload_size > len(view) - pos:
            raise ValueError(f"a frame announces {payload_size} bytes of batches, "
                             f"{len(view) - pos} follow")
        yield env, view[pos : pos + payload_size]
        pos += payload_size


def messages_of(
    env: pb.RaftEnvelope, payload: memoryview
) -> Iterable[tuple[TopicPartition, Message]]:
    """The core messages an envelope carries, with their partitions; the entries' data are
    views of `payload` (of the received message: nothing is copied)."""
    src, dst = env.src, env.dst
    pos = 0
    for hb in env.heartbeats:
        tp = TopicPartition(hb.group.topic, hb.group.partition)
        if hb.response:
            yield tp, HeartbeatResponse(hb.term, src, dst)
        else:
            yield tp, Heartbeat(hb.term, src, dst, hb.leader_hw)
    for pm in env.messages:
        tp = TopicPartition(pm.group.topic, pm.group.partition)
        term = pm.term
        kind = pm.WhichOneof("body")
        if kind == "pre_vote_request":
            v = pm.pre_vote_request
            yield tp, PreVoteRequest(term, src, dst, v.log_end_offset, v.last_epoch)
        elif kind == "vote_request":
            v = pm.vote_request
            yield tp, VoteRequest(term, src, dst, v.log_end_offset, v.last_epoch, v.transfer)
        elif kind == "pre_vote_response":
            yield tp, PreVoteResponse(term, src, dst, pm.pre_vote_response.granted)
        elif kind == "vote_response":
            yield tp, VoteResponse(term, src, dst, pm.vote_response.granted)
        elif kind == "append_request":
            a = pm.append_request
            entries = []
            for e in a.entries:
                entries.append(
                    Entry(e.base_offset, e.last_offset, e.epoch, payload[pos : pos + e.size])
                )
                pos += e.size
            yield tp, AppendRequest(
                term, src, dst, a.prev_offset, a.prev_epoch, tuple(entries), a.leader_hw
            )
        elif kind == "append_response":
            r = pm.append_response
            yield tp, AppendResponse(
                term, src, dst, r.success, r.match_end, r.rejected_prev, r.hint_offset,
                r.hint_epoch, r.lost,
            )
        elif kind == "timeout_now":
            yield tp, TimeoutNow(term, src, dst)


# ---- outbound ------------------------------------------------------------------------------


class PeerLink:
    """The outbound stream to one peer."""

    def __init__(self, node_id: int, peer_id: int, address: str) -> None:
        self.node_id = node_id
        self.peer_id = peer_id
        self.address = address
        self._queue: deque[list[bytes | memoryview]] = deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self.dropped = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"link-{self.node_id}-{self.peer_id}")

    def send(self, outgoing: Outgoing) -> None:
        if len(self._queue) >= _QUEUE_LIMIT:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(outgoing.frame())
        self._ready.set()

    async def _messages(self) -> AsyncIterator[bytes]:
        """Everything queued since the last write, as one message (the stream is busy while
        gRPC has the previous one; a message costs ~0.2 ms of CPU on each side)."""
        while True:
            if self._queue:
                pieces = [piece for frame in self._queue for piece in frame]
                self._queue.clear()
                yield b"".join(pieces)
                continue
            self._ready.clear()
            await self._ready.wait()

    async def _run(self) -> None:
        attempt = 0
        while True:
            self._channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
            try:
                stream = self._channel.stream_unary(
                    STREAM_METHOD, response_deserializer=pb.StreamSummary.FromString
                )
                await stream(self._messages())
                attempt = 0
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                log.debug("link %d->%d broke: %s", self.node_id, self.peer_id, exc.code())
            finally:
                await self._channel.close()
            # Messages queued for a dead peer are stale by the time it returns; Raft resends.
            self._queue.clear()
            await asyncio.sleep(_RECONNECT_BACKOFF_S[min(attempt, len(_RECONNECT_BACKOFF_S) - 1)])
            attempt += 1

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def add_raft_transport(
    server: grpc.aio.Server,
    on_envelope: Callable[[pb.RaftEnvelope, memoryview], None],
    fetch_metadata: Callable[[pb.FetchMetadataRequest], pb.FetchMetadataResponse],
) -> Callable[[], None]:
    """Serve the RaftTransport service: Stream takes its messages as bytes (it parses the
    frames itself), FetchMetadata is plain protobuf.

    Returns the function that ends the inbound streams before the server stops: a peer's
    stream never ends by itself, and one that the server cancels at the end of its grace
    period is logged by gRPC as an unhandled error with a traceback."""
    inbound: set[asyncio.Task[object]] = set()
    closing = False

    async def stream(
        messages: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> pb.StreamSummary:
        count = 0
        task = asyncio.current_task()
        assert task is not None
        inbound.add(task)
        try:
            async for message in messages:
                try:
                    for env, payload in frames(message):
                        count += 1
                        on_envelope(env, payload)
                except (DecodeError, ValueError) as exc:  # a peer's bug must not crash this node
                    await reject_malformed(context, f"/{_SERVICE}/Stream", exc)
        except asyncio.CancelledError:
            if not closing:
                raise
        finally:
            inbound.discard(task)
        return pb.StreamSummary(envelopes=count)

    def close_inbound() -> None:
        nonlocal closing
        closing = True
        for task in list(inbound):
            task.cancel()

    async def fetch(
        request: pb.FetchMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchMetadataResponse:
        return fetch_metadata(request)

    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(_SERVICE, {
        "Stream": grpc.stream_unary_rpc_method_handler(
            stream, response_serializer=pb.StreamSummary.SerializeToString
        ),
        "FetchMetadata": grpc.unary_unary_rpc_method_handler(
            fetch,
            request_deserializer=pb.FetchMetadataRequest.FromString,
            response_serializer=pb.FetchMetadataResponse.SerializeToString,
        ),
    })])
    return close_inbound


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(view) or shift > 63:
            raise ValueError("truncated or oversized frame length")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
