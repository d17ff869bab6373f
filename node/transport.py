"""Node-to-node Raft traffic over gRPC: one long-lived stream per peer, many partitions per
envelope, heartbeats of all shared partitions coalesced (design-notes: a gRPC message costs
~190 µs of CPU whatever its size).

Raft tolerates loss, duplication and reordering, so the transport is deliberately simple: a
bounded outbound queue per peer that drops the oldest envelope when full, and a sender task that
reconnects with backoff when the stream breaks. What it must never do is block the event loop
or let one slow peer delay the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable

import grpc

from replication import (
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
from tidelog.v1 import raft_pb2_grpc

log = logging.getLogger("tidelog.transport")

_QUEUE_LIMIT = 256
_RECONNECT_BACKOFF_S = (0.05, 0.1, 0.2, 0.5)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),
]


# ---- conversions ---------------------------------------------------------------------------


def _group(tp: TopicPartition) -> pb.GroupId:
    return pb.GroupId(topic=tp.topic, partition=tp.partition)


def add_message(env: pb.RaftEnvelope, tp: TopicPartition, m: Message) -> None:
    """Put one core message into an envelope (heartbeats into the coalesced list)."""
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
                base_offset=e.base_offset, last_offset=e.last_offset, epoch=e.epoch, data=e.data
            )
    elif isinstance(m, AppendResponse):
        resp = pm.append_response
        resp.success = m.success
        resp.match_end = m.match_end
        resp.rejected_prev = m.rejected_prev
        resp.hint_offset = m.hint_offset
        resp.hint_epoch = m.hint_epoch
    elif isinstance(m, TimeoutNow):
        pm.timeout_now.SetInParent()
    else:  # pragma: no cover - the Message union is closed
        raise TypeError(f"unknown message {m!r}")


def messages_of(env: pb.RaftEnvelope) -> Iterable[tuple[TopicPartition, Message]]:
    """The core messages an envelope carries, with their partitions."""
    src, dst = env.src, env.dst
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
            entries = tuple(
                Entry(e.base_offset, e.last_offset, e.epoch, e.data) for e in a.entries
            )
            yield tp, AppendRequest(
                term, src, dst, a.prev_offset, a.prev_epoch, entries, a.leader_hw
            )
        elif kind == "append_response":
            r = pm.append_response
            yield tp, AppendResponse(
                term, src, dst, r.success, r.match_end, r.rejected_prev, r.hint_offset,
                r.hint_epoch,
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
        self._queue: deque[pb.RaftEnvelope] = deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None
        self.dropped = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"link-{self.node_id}-{self.peer_id}")

    def send(self, env: pb.RaftEnvelope) -> None:
        if len(self._queue) >= _QUEUE_LIMIT:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(env)
        self._ready.set()

    async def _envelopes(self) -> AsyncIterator[pb.RaftEnvelope]:
        while True:
            while self._queue:
                yield self._queue.popleft()
            self._ready.clear()
            await self._ready.wait()

    async def _run(self) -> None:
        attempt = 0
        while True:
            self._channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
            try:
                stub = raft_pb2_grpc.RaftTransportStub(self._channel)
                await stub.Stream(self._envelopes())
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


class RaftTransportServicer(raft_pb2_grpc.RaftTransportServicer):
    """Inbound side: hands every envelope to the runtime."""

    def __init__(
        self,
        on_envelope: Callable[[pb.RaftEnvelope], None],
        fetch_metadata: Callable[[pb.FetchMetadataRequest], pb.FetchMetadataResponse],
    ) -> None:
        self._on_envelope = on_envelope
        self._fetch_metadata = fetch_metadata

    async def Stream(
        self, request_iterator: AsyncIterator[pb.RaftEnvelope], context: grpc.aio.ServicerContext
    ) -> pb.StreamSummary:
        count = 0
        async for env in request_iterator:
            count += 1
            self._on_envelope(env)
        return pb.StreamSummary(envelopes=count)

    async def FetchMetadata(
        self, request: pb.FetchMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchMetadataResponse:
        return self._fetch_metadata(request)
