"""Node-to-node Raft traffic over gRPC: one long-lived stream per peer, many partitions per
envelope, heartbeats of all shared partitions coalesced (measured: a gRPC message costs
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

Sizes: a message no peer accepts breaks the stream, and everything queued behind it is lost with
it (under a burst of large produces that was enough for followers to miss heartbeats and elect).
So both ends take ``MAX_MESSAGE_BYTES`` (one maximal batch plus room; a Produce cannot bring a
larger batch), a frame holds at most ``COALESCE_BYTES`` of messages unless one message alone is
larger (an append of one oversized batch: Raft reads at least one batch), and queued frames are
joined only while the message stays within ``COALESCE_BYTES``. Every message therefore stays
under the limit without a check on the send path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator

import grpc
from google.protobuf.message import DecodeError

from tidelog.node.edge.malformed import reject_malformed
from tidelog.node.edge.security import PeerDialer
from tidelog.records import MAX_MESSAGE_BYTES
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
from tidelog.v1 import raft_pb2 as pb
from tidelog.wire import varint

log = logging.getLogger("tidelog.transport")

_QUEUE_LIMIT = 256
_RECONNECT_BACKOFF_S = (0.05, 0.1, 0.2, 0.5)
#: A link that keeps breaking (a peer that is down) says so at most this often.
_BREAK_LOG_EVERY_S = 30.0
#: What a frame, and a message of joined frames, holds at most unless a single core message is
#: larger: gRPC's own default message size. A message costs ~0.2 ms of CPU whatever its size, so
#: larger ones would save nothing, and they would hold everything queued behind them longer.
COALESCE_BYTES = 4 * 1024 * 1024
_SERVICE = pb.DESCRIPTOR.services_by_name["RaftTransport"].full_name
STREAM_METHOD = f"/{_SERVICE}/Stream"
WRITE_TXN_MARKERS_METHOD = f"/{_SERVICE}/WriteTxnMarkers"
FORWARD_METHOD = f"/{_SERVICE}/Forward"
#: How long a WriteTxnMarkers handler waits at most for its markers to commit.
DEFAULT_MARKERS_WAIT_S = 30.0
#: What a WriteTxnMarkers handler keeps of its caller's deadline to answer before it passes.
_DEADLINE_MARGIN_S = 0.2
_MESSAGE_LIMITS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
#: The node's gRPC servers (client and node-to-node listeners): peers' streams and clients'
#: requests may carry a batch of up to MAX_BATCH_BYTES (gRPC's default refuses over 4 MiB).
#: Clients ping every second to find out a stalled node (tidelog.transport.KEEPALIVE_TIME_MS),
#: also on connections with no call in flight; gRPC's defaults would take that for abuse (a
#: ping without data at most every 5 minutes, GOAWAY after two "strikes").
#: No BDP probing: it widens every stream's receive window, so the calls that wait for room in
#: the in-flight budget (node/edge/limits.py) would still stream megabytes each into the node's
#: buffers; without it a stream is let in as far as its handler asks to read (12 concurrent
#: 100 MiB requests on one connection peaked at 0.42 GB of RSS rather than 0.77 GB).
SERVER_OPTIONS = [
    *_MESSAGE_LIMITS,
    ("grpc.so_reuseport", 0),
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 500),
    ("grpc.http2.max_ping_strikes", 0),
]
#: A node's channels to its peers.
CHANNEL_OPTIONS = [*_MESSAGE_LIMITS, ("grpc.keepalive_time_ms", 10_000)]


def reconnect_backoff_s(breaks: int) -> float:
    """How long a stream to a peer waits before it is made again after `breaks` breaks in a
    row: soon after a single one, a little longer while the peer stays down."""
    return _RECONNECT_BACKOFF_S[min(breaks, len(_RECONNECT_BACKOFF_S) - 1)]

# Upper bounds of the protobuf bytes an item adds to an envelope beside its topic name (ASCII,
# so one byte a character) and its batches: a tag and a 10-byte varint per integer field, a tag
# and a 5-byte length per nested message. tests/replication/test_transport_frames.py checks them.
_ENVELOPE_ROOM = 32
_ITEM_ROOM = 128
_ENTRY_ROOM = 64
_ISR_ROOM = 10


# ---- conversions ---------------------------------------------------------------------------


def _group(tp: TopicPartition) -> pb.GroupId:
    return pb.GroupId(topic=tp.topic, partition=tp.partition)


class Outgoing:
    """What one round sends to one peer: frames, each an envelope and the batches that follow
    it. A frame is sealed and another begun before an item would take it past COALESCE_BYTES,
    so only an item larger than that alone makes a larger frame."""

    __slots__ = ("_bound", "_sealed", "dst", "env", "payload", "src")

    def __init__(self, src: int, dst: int) -> None:
        self.src = src
        self.dst = dst
        self._sealed: list[tuple[int, list[bytes | memoryview]]] = []
        self._begin()

    def _begin(self) -> None:
        self.env = pb.RaftEnvelope(src=self.src, dst=self.dst)
        self.payload: list[bytes | memoryview] = []
        self._bound = _ENVELOPE_ROOM

    def _make_room(self, size: int) -> None:
        if self._bound > _ENVELOPE_ROOM and self._bound + size > COALESCE_BYTES:
            self._sealed.append(self._seal())
            self._begin()
        self._bound += size

    def add(self, tp: TopicPartition, m: Message) -> None:
        size = len(tp.topic) + _ITEM_ROOM
        if isinstance(m, AppendRequest):
            for e in m.entries:
                size += _ENTRY_ROOM + len(e.data)
            if m.conf_state is not None:
                size += _ITEM_ROOM + _ISR_ROOM * len(m.conf_state.membership.members)
        self._make_room(size)
        add_message(self.env, self.payload, tp, m)

    def announce(self, tp: TopicPartition, epoch: int, isr: list[int], log_start: int) -> None:
        """That this node leads `tp` at `epoch` with these in-sync replicas, and its log
        starts at `log_start` (which the followers follow)."""
        self._make_room(len(tp.topic) + _ITEM_ROOM + _ISR_ROOM * len(isr))
        self.env.leaders.add(group=_group(tp), epoch=epoch, isr=isr,
                             log_start_offset=log_start)

    def offline(self, tp: TopicPartition) -> None:
        """That this node's replica of `tp` is out of service (node liveness)."""
        self._make_room(len(tp.topic) + _ITEM_ROOM)
        self.env.offline.append(_group(tp))

    def _seal(self) -> tuple[int, list[bytes | memoryview]]:
        header = self.env.SerializeToString()
        pieces = [varint(len(header)), header, *self.payload]
        return sum(len(piece) for piece in pieces), pieces

    def frames(self) -> list[tuple[int, list[bytes | memoryview]]]:
        """Each frame as (its size, its pieces: varint length, envelope, batches)."""
        return [*self._sealed, self._seal()]


def add_message(
    env: pb.RaftEnvelope, payload: list[bytes | memoryview], tp: TopicPartition, m: Message
) -> None:
    """Put one core message into an envelope (heartbeats into the coalesced list) and the
    batches of an append into `payload`."""
    if isinstance(m, Heartbeat):
        env.heartbeats.add(group=_group(tp), term=m.term, leader_hw=m.leader_hw,
                           read_ctx=m.read_ctx, quiesce=m.quiesce)
        return
    if isinstance(m, HeartbeatResponse):
        env.heartbeats.add(group=_group(tp), term=m.term, response=True, read_ctx=m.read_ctx,
                           resigned=m.resigned)
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
        if m.conf_state is not None:
            conf = m.conf_state
            req.conf_state.offset = conf.offset
            req.conf_state.voters.extend(conf.membership.voters)
            req.conf_state.learners.extend(conf.membership.learners)
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
            yield tp, HeartbeatResponse(hb.term, src, dst, hb.read_ctx, hb.resigned)
        else:
            yield tp, Heartbeat(hb.term, src, dst, hb.leader_hw, hb.read_ctx, hb.quiesce)
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
                term, src, dst, a.prev_offset, a.prev_epoch, tuple(entries), a.leader_hw,
                _conf_state(a.conf_state) if a.HasField("conf_state") else None,
            )
        elif kind == "append_response":
            r = pm.append_response
            yield tp, AppendResponse(
                term, src, dst, r.success, r.match_end, r.rejected_prev, r.hint_offset,
                r.hint_epoch, r.lost,
            )
        elif kind == "timeout_now":
            yield tp, TimeoutNow(term, src, dst)


def _conf_state(conf: pb.ConfState) -> ConfState:
    """ValueError (the frame is rejected) for a configuration no leader sends."""
    if conf.offset < -1 or not conf.voters:
        raise ValueError(f"configuration at offset {conf.offset} with voters {conf.voters}")
    return ConfState(conf.offset, Membership.of(conf.voters, conf.learners))


# ---- outbound ------------------------------------------------------------------------------


class PeerLink:
    """The outbound stream to one peer."""

    def __init__(self, node_id: int, peer_id: int, address: str, dialer: PeerDialer) -> None:
        self.node_id = node_id
        self.peer_id = peer_id
        self.address = address
        #: Opens channels to the peer's node-to-node listener (plaintext or mutual TLS).
        self._dialer = dialer
        self._queue: deque[tuple[int, list[bytes | memoryview]]] = deque()
        self._ready = asyncio.Event()
        #: The number of the stream being written (`_messages`).
        self._stream = 0
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self._breaks = 0
        self._break_logged_at = -_BREAK_LOG_EVERY_S
        #: The TLS reason of the last warning (None: plaintext, or TLS was not the cause).
        self._logged_refusal: str | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"link-{self.node_id}-{self.peer_id}")

    @property
    def losses(self) -> tuple[int, int]:
        """(streams opened, frames dropped for a full queue): it changes whenever something
        sent may not have reached the peer (a stream that breaks loses what it carried and
        what was queued), and only then."""
        return self._stream, self.dropped

    def send(self, outgoing: Outgoing) -> None:
        for frame in outgoing.frames():
            if len(self._queue) >= _QUEUE_LIMIT:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(frame)
        self._ready.set()

    async def _messages(self, stream: int) -> AsyncIterator[bytes]:
        """What was queued since the last write, joined into messages of up to COALESCE_BYTES
        (the stream is busy while gRPC has the previous one; a message costs ~0.2 ms of CPU on
        each side). A frame larger than that leaves alone. Only for the link's current
        `stream`: gRPC may leave the iterator of a broken stream waiting for the next frame,
        and woken with the next stream's, it took them into the dead one (a peer that
        restarted heard nothing on a link that carried only announcements)."""
        queue = self._queue
        while stream == self._stream:
            if queue:
                size, pieces = queue.popleft()
                while queue and size + queue[0][0] <= COALESCE_BYTES:
                    more, more_pieces = queue.popleft()
                    size += more
                    pieces.extend(more_pieces)
                yield b"".join(pieces)
                continue
            self._ready.clear()
            await self._ready.wait()

    def redirect(self, address: str) -> None:
        """The peer is at `address` now: the stream to the old one ends, and one to the new
        one begins (what was queued is stale either way; Raft resends)."""
        self.address = address
        if self._task is not None:
            self._task.cancel()
            self.start()

    async def _run(self) -> None:
        attempt = 0
        while True:
            channel = self._dialer.channel(self.address, CHANNEL_OPTIONS)
            try:
                stream = channel.stream_unary(
                    STREAM_METHOD, response_deserializer=pb.StreamSummary.FromString
                )
                self._stream += 1
                await stream(self._messages(self._stream))
                attempt = 0
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                await self._log_break(exc)
            finally:
                await channel.close()
            # Messages queued for a dead peer are stale by the time it returns; Raft resends.
            self._queue.clear()
            await asyncio.sleep(reconnect_backoff_s(attempt))
            attempt += 1

    async def _log_break(self, exc: grpc.aio.AioRpcError) -> None:
        """A break loses everything queued to the peer, so it is worth a warning with its cause
        (with TLS, why the handshake fails: gRPC's "Socket closed" does not say); a peer that
        stays down breaks every reconnect, so those are counted, not each logged, unless the
        TLS reason changed (a peer that was down is back but refuses this node)."""
        self._breaks += 1
        now = time.monotonic()
        refused = None
        if exc.code() is grpc.StatusCode.UNAVAILABLE:
            refused = await self._dialer.why_refused(self.address)
        if now - self._break_logged_at < _BREAK_LOG_EVERY_S and refused == self._logged_refusal:
            log.debug("link %d->%d broke: %s %s", self.node_id, self.peer_id, exc.code().name,
                      exc.details())
            return
        log.warning(
            "link %d->%d (%s) broke: %s %s%s (%d break(s) since the last warning)",
            self.node_id, self.peer_id, self.address, exc.code().name, exc.details(),
            f"; TLS: {refused}" if refused else "", self._breaks,
            extra={"event": "stream_broken", "peer": self.peer_id, "status": exc.code().name},
        )
        self._break_logged_at = now
        self._logged_refusal = refused
        self._breaks = 0

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def add_raft_transport(
    server: grpc.aio.Server,
    on_envelope: Callable[[pb.RaftEnvelope, memoryview], None],
    fetch_metadata: Callable[[pb.FetchMetadataRequest], pb.FetchMetadataResponse],
    write_txn_markers: Callable[
        [pb.WriteTxnMarkersRequest, float], Awaitable[pb.WriteTxnMarkersResponse]
    ],
    reassignment_done: Callable[
        [pb.ReassignmentDoneRequest], Awaitable[pb.ReassignmentDoneResponse]
    ],
    register_node: Callable[[pb.RegisterNodeRequest, float], Awaitable[pb.RegisterNodeResponse]],
    node_heartbeat: Callable[
        [pb.NodeHeartbeatRequest, float], Awaitable[pb.NodeHeartbeatResponse]
    ],
    forward: Callable[
        [pb.ForwardRequest, grpc.aio.ServicerContext], Awaitable[pb.ForwardResponse]
    ],
) -> Callable[[], None]:
    """Serve the RaftTransport service: Stream takes its messages as bytes (it parses the
    frames itself), FetchMetadata and WriteTxnMarkers are plain protobuf (the latter is given
    how long it may wait for its markers to commit: the caller's deadline, less a margin), and
    Forward answers a client request another node forwarded (`forwarding.answer_forwarded`).
    Who may call is the server's interceptors' business (`security.NodesOnly`).

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

    def wait_s(context: grpc.aio.ServicerContext) -> float:
        """How long a handler may wait: the caller's deadline less a margin, at most
        DEFAULT_MARKERS_WAIT_S."""
        remaining = context.time_remaining()
        wait = DEFAULT_MARKERS_WAIT_S if remaining is None else remaining - _DEADLINE_MARGIN_S
        return max(min(wait, DEFAULT_MARKERS_WAIT_S), 0.0)

    async def markers(
        request: pb.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteTxnMarkersResponse:
        return await write_txn_markers(request, wait_s(context))

    async def register(
        request: pb.RegisterNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.RegisterNodeResponse:
        return await register_node(request, wait_s(context))

    async def heartbeat(
        request: pb.NodeHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.NodeHeartbeatResponse:
        return await node_heartbeat(request, wait_s(context))

    async def done(
        request: pb.ReassignmentDoneRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReassignmentDoneResponse:
        return await reassignment_done(request)

    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(_SERVICE, {
        "Stream": grpc.stream_unary_rpc_method_handler(
            stream, response_serializer=pb.StreamSummary.SerializeToString
        ),
        "FetchMetadata": grpc.unary_unary_rpc_method_handler(
            fetch,
            request_deserializer=pb.FetchMetadataRequest.FromString,
            response_serializer=pb.FetchMetadataResponse.SerializeToString,
        ),
        "WriteTxnMarkers": grpc.unary_unary_rpc_method_handler(
            markers,
            request_deserializer=pb.WriteTxnMarkersRequest.FromString,
            response_serializer=pb.WriteTxnMarkersResponse.SerializeToString,
        ),
        "ReassignmentDone": grpc.unary_unary_rpc_method_handler(
            done,
            request_deserializer=pb.ReassignmentDoneRequest.FromString,
            response_serializer=pb.ReassignmentDoneResponse.SerializeToString,
        ),
        "RegisterNode": grpc.unary_unary_rpc_method_handler(
            register,
            request_deserializer=pb.RegisterNodeRequest.FromString,
            response_serializer=pb.RegisterNodeResponse.SerializeToString,
        ),
        "NodeHeartbeat": grpc.unary_unary_rpc_method_handler(
            heartbeat,
            request_deserializer=pb.NodeHeartbeatRequest.FromString,
            response_serializer=pb.NodeHeartbeatResponse.SerializeToString,
        ),
        "Forward": grpc.unary_unary_rpc_method_handler(
            forward,
            request_deserializer=pb.ForwardRequest.FromString,
            response_serializer=pb.ForwardResponse.SerializeToString,
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
