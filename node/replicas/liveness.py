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
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

from tidelog.node.edge.security import PeerDialer
from tidelog.node.replicas.transport import Outgoing, PeerLink

#: How long a stalled main loop is still vouched for (Kafka's broker.session.timeout.ms).
LOOP_STALL_LIMIT_S = 9.0


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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._begun = False
        self._links: dict[int, PeerLink] = {}
        #: Links of removed peers while they close (the loop keeps only weak references).
        self._closing: set[asyncio.Task[None]] = set()
        #: Envelopes sent (handed to the links) and intervals skipped for a stalled loop.
        self.sent = 0
        self.withheld = 0

    def start(self) -> None:
        self._begun = True
        if not self._peers:
            return
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._run(),), daemon=True,
            name=f"liveness-{self._node_id}",
        )
        self._thread.start()
        self._started.wait()

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
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # its loop already ended
            self._loop.call_soon_threadsafe(self._link, peer, address)

    def remove_peer(self, peer: int) -> None:
        """A peer that left the cluster for good (unregistered): its link is closed, so it
        does not retry, and warn that it broke, for as long as this node runs."""
        if self._peers.pop(peer, None) is None or self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # its loop already ended
            self._loop.call_soon_threadsafe(self._unlink, peer)

    def _unlink(self, peer: int) -> None:
        """On the beacon's loop: close the link to `peer`."""
        link = self._links.pop(peer, None)
        if link is not None:
            task = asyncio.get_running_loop().create_task(link.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _link(self, peer: int, address: str) -> None:
        """On the beacon's loop: the link to `peer` at `address`."""
        link = self._links.get(peer)
        if link is None:
            link = self._links[peer] = PeerLink(self._node_id, peer, address, self._dialer)
            link.start()
        elif link.address != address:
            link.redirect(address)

    def stop(self) -> None:
        """Stop sending and close the links; returns once the thread is gone."""
        if self._thread is None:
            return
        assert self._loop is not None and self._stop is not None
        with contextlib.suppress(RuntimeError):  # its loop already ended
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        self._thread = None

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for peer, address in self._peers.items():  # `start` waits: nobody adds meanwhile
            self._link(peer, address)
        self._started.set()
        links = self._links
        try:
            while not self._stop.is_set():
                self.beat(links)
                # A plain sleep, `stop` seen within an interval: waiting for the stop event
                # with a timeout made a task each interval, and the thread's wake-ups cost
                # twice the CPU (0.0055 core against 0.003 alone, 20 a second).
                await asyncio.sleep(self._interval_s)
        finally:
            for link in links.values():
                await link.close()

    def beat(self, links: dict[int, PeerLink]) -> None:
        """One interval: an envelope to every peer, unless the main loop stalled too long."""
        if time.monotonic() - self._loop_turned() > self._stall_limit_s:
            self.withheld += 1
            return
        ticks = self._ticks()
        for peer, link in links.items():
            outgoing = Outgoing(self._node_id, peer)
            outgoing.env.ticks = ticks
            link.send(outgoing)
            self.sent += 1
