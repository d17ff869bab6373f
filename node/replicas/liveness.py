"""Node liveness's own heartbeat: an envelope to every peer a few times an election timeout,
sent by a thread with an event loop and links of its own, so that a node whose main loop is
busy (a burst of rounds, thousands of replicas opened or electing) is not taken for dead.

The peers count silence in ticks of their own tick loops (`ReplicaSet._liveness`), so a node
whose own loop stalled does not take its peers for dead. The other half is this: a node whose
loop stalls must not fall silent. When its liveness envelopes left from the main loop, a loop
held for an election timeout (300 ms; on the shared 2-core VM, a tick of 5,000 electing groups
took longer) silenced the node, its peers woke every quiet group it led and elected elsewhere,
and the elections fed themselves: 5,000 partitions were never all led, and leaders moved under
produce over 1,000.

What the envelope vouches for is a process that runs and a main loop that turned lately: it is
sent only while the tick loop turned within ``LOOP_STALL_LIMIT_S`` (Kafka's
``broker.session.timeout.ms``, 9 s, bounds how long a broker may go unheard the same way), so
a loop wedged for good still lets the quiet groups it leads fail over. A killed or stopped
process (SIGKILL, SIGSTOP) stops this thread too: failover is what it was. Awake groups are
held by it as well (`RaftConfig.fortify`): their followers' election timers stand still while
the leader's node is heard, and a leader's check-quorum counts the voters whose nodes are.

Raft's safety does not rest on liveness, and leases stay sound: a quiet follower refuses votes
for as long as liveness hears its leader's node (`RaftCore._in_lease`), so an envelope heard
for longer only makes it refuse for longer, never for less than an awake follower would.

The beacon speaks gRPC's blocking API, not asyncio's. grpcio hands every completion of the
process's asyncio gRPC to every event loop that ever made an asyncio call, through one socket
they all watch: a beacon with an event loop of its own woke for every message the node sent or
received, raced the main loop for the interpreter lock, and sometimes took the main loop's
completions and handed them back through its queue. At 100 produce requests a second that
was a tenth of the nodes' CPU and half their p99 latency (`docs/performance.md`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import grpc

from tidelog.node.edge.security import PeerDialer
from tidelog.node.replicas.transport import (
    CHANNEL_OPTIONS,
    STREAM_METHOD,
    Outgoing,
    reconnect_backoff_s,
)
from tidelog.v1 import raft_pb2 as pb

log = logging.getLogger("tidelog.liveness")

#: How long a stalled main loop is still vouched for (Kafka's broker.session.timeout.ms).
LOOP_STALL_LIMIT_S = 9.0
#: A stream that carried envelopes this long broke by accident: the next one starts at once.
_STEADY_S = 1.0
#: Envelopes queued to a stream gRPC does not take (a peer stopped by SIGSTOP): the newer
#: are dropped, an envelope only matters while it is fresh.
_QUEUE_LIMIT = 16


class Sender(Protocol):
    """What takes a peer's envelopes: the beacon's stream, or the main loop's link."""

    def send(self, outgoing: Outgoing) -> None: ...


class LivenessBeacon:
    """Sends each peer an envelope every ``interval_s`` from a thread of its own while
    ``loop_turned()`` (the `time.monotonic` of the main loop's last tick) is recent. It says
    ``ticks()``, how many ticks the main loop has run: a peer runs the timers that wait on
    this node no faster than that (`tidelog.replication.pacing`)."""

    def __init__(self, node_id: int, peers: dict[int, str], dialer: PeerDialer,
                 interval_s: float, loop_turned: Callable[[], float],
                 ticks: Callable[[], int], stall_limit_s: float = LOOP_STALL_LIMIT_S) -> None:
        self._node_id = node_id
        self._peers = peers
        self._dialer = dialer
        self._interval_s = interval_s
        self._loop_turned = loop_turned
        self._ticks = ticks
        self._stall_limit_s = stall_limit_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._begun = False
        #: Peers added (with their address) or removed (None) since the thread last looked,
        #: handed over from the main loop.
        self._changes: queue.SimpleQueue[tuple[int, str | None]] = queue.SimpleQueue()
        #: The beacon thread's own: a stream to each peer.
        self._streams: dict[int, _BeaconStream] = {}
        #: Envelopes sent (handed to the streams) and intervals skipped for a stalled loop.
        self.sent = 0
        self.withheld = 0

    @property
    def thread(self) -> threading.Thread | None:
        """The beacon's thread while it runs."""
        return self._thread

    def start(self) -> None:
        self._begun = True
        if not self._peers:
            return
        for peer, address in self._peers.items():
            self._changes.put((peer, address))
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"liveness-{self._node_id}"
        )
        self._thread.start()

    def add_peer(self, peer: int, address: str) -> None:
        """A peer learned after the start (a node that joined the cluster), or one that
        moved: it gets the envelopes too. Before `start`, only noted."""
        if self._peers.get(peer) == address:
            return
        self._peers[peer] = address
        if not self._begun:
            return
        if self._thread is None:
            self.start()
            return
        self._changes.put((peer, address))

    def remove_peer(self, peer: int) -> None:
        """A peer that left the cluster for good (unregistered): its stream is closed, so it
        is not made again for as long as this node runs."""
        if self._peers.pop(peer, None) is None or self._thread is None:
            return
        self._changes.put((peer, None))

    def stop(self) -> None:
        """Stop sending and close the streams; returns once the thread is gone."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        try:
            while True:
                self._follow_changes()
                self.beat(self._streams)
                if self._stop.wait(self._interval_s):
                    break
        finally:
            for stream in self._streams.values():
                stream.close()
            self._streams.clear()

    def _follow_changes(self) -> None:
        while True:
            try:
                peer, address = self._changes.get_nowait()
            except queue.Empty:
                return
            stream = self._streams.pop(peer, None)
            if stream is not None and stream.address == address:
                self._streams[peer] = stream
                continue
            if stream is not None:
                stream.close()
            if address is not None:
                self._streams[peer] = _BeaconStream(self._node_id, peer, address, self._dialer)

    def beat(self, streams: Mapping[int, Sender]) -> None:
        """One interval: an envelope to every peer, unless the main loop stalled too long."""
        if time.monotonic() - self._loop_turned() > self._stall_limit_s:
            self.withheld += 1
            return
        ticks = self._ticks()
        for peer, stream in streams.items():
            outgoing = Outgoing(self._node_id, peer)
            outgoing.env.ticks = ticks
            stream.send(outgoing)
            self.sent += 1


class _BeaconStream:
    """The beacon's stream to one peer: a blocking-API call that takes its messages from a
    queue, on a thread gRPC runs for the call. A call that ended (the peer went down, or it
    refused this node) is made again on a later beat, after a backoff while it keeps
    breaking; what the peer missed meanwhile is stale anyway. The main loop's link to the
    same peer warns of breaks, with their TLS reason, so this one only logs them for
    debugging."""

    def __init__(self, node_id: int, peer_id: int, address: str, dialer: PeerDialer) -> None:
        self.node_id = node_id
        self.peer_id = peer_id
        self.address = address
        self._dialer = dialer
        self._channel: grpc.Channel | None = None
        self._call: grpc.Future | None = None
        self._frames: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._opened_at = 0.0
        self._retry_at = 0.0
        self._breaks = 0
        self.dropped = 0

    def send(self, outgoing: Outgoing) -> None:
        now = time.monotonic()
        if self._call is not None and self._call.done():
            self._broke(now)
        if self._call is None:
            if now < self._retry_at:
                return
            self._open(now)
        for _, pieces in outgoing.frames():
            if self._frames.qsize() >= _QUEUE_LIMIT:
                self.dropped += 1
                continue
            self._frames.put(b"".join(pieces))

    def _open(self, now: float) -> None:
        """A call on a channel of its own: gRPC waits longer and longer (up to minutes)
        before it dials again on a channel whose peer was down, and a peer that restarted
        must hear this node at once."""
        self._channel = self._dialer.blocking_channel(self.address, CHANNEL_OPTIONS)
        stream = self._channel.stream_unary(
            STREAM_METHOD, response_deserializer=pb.StreamSummary.FromString
        )
        self._frames = queue.SimpleQueue()
        self._call = stream.future(_drain(self._frames))
        self._opened_at = now

    def _broke(self, now: float) -> None:
        assert self._call is not None
        self._frames.put(None)  # ends the call's iterator, if gRPC still waits on it
        if now - self._opened_at >= _STEADY_S:
            self._breaks = 0
        self._retry_at = now + reconnect_backoff_s(self._breaks)
        self._breaks += 1
        error = self._call.exception()
        log.debug("liveness stream %d->%d (%s) ended: %s", self.node_id, self.peer_id,
                  self.address, error.code().name if isinstance(error, grpc.Call) else error)
        self._call = None
        self._close_channel()

    def close(self) -> None:
        self._frames.put(None)
        if self._call is not None:
            self._call.cancel()
        self._close_channel()

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def _drain(frames: queue.SimpleQueue[bytes | None]) -> Iterator[bytes]:
    """The messages of one call, until the stream that queued them puts None."""
    while (frame := frames.get()) is not None:
        yield frame
