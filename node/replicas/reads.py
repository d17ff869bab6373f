"""Linearizable reads on a partition leader (issue 14's Seam 3): the offset a read must wait
for, proven by a quorum that this replica still leads.

Slow path: a ReadIndex round of the Raft core (`RaftCore.read_index`: heartbeats carrying a
read context, a quorum's answers). One round is in flight at a time; callers that arrive
meanwhile wait together for the next, which starts when it ends, so any number of concurrent
readers costs one heartbeat per follower per round trip. A caller never joins a round already
under way: that round noted its HW before the caller arrived, and may miss a write
acknowledged in between.

Fast path: a lease. Every confirmed round proves that a quorum heard from this leader after
the round was sent, and each of those followers then refuses votes (`RaftCore._in_lease`)
until its election timer runs out: at least ``(election_ticks - 2)`` ticks later on its own
clock, since its timer restarts when the heartbeat arrives, and its tick loop never runs
ticks closer together than one interval on average (missed ticks are dropped, not replayed:
after the first tick, which may come at once, each further one comes at least an interval
after the previous one was due). No other leader can be elected without one of them, so until
then this replica's HW covers every committed entry, and a read is answered at once from it.

The lease runs from when the round was SENT (before any follower received it, so network
delay only shortens it) for 0.9 of that minimum. The 10 % margin is for clock rates: the lease
is measured on this node's clock and the followers' refusal on theirs, and Linux clocks differ
in rate by at most a few hundred ppm (NTP slews CLOCK_MONOTONIC by at most 500 ppm), so 10 %
leaves a large safety factor without costing much lease. The clock is CLOCK_BOOTTIME where
the system has it: a monotonic clock that also counts time the machine was suspended (a
paused VM), during which CLOCK_MONOTONIC stands still while the followers' clocks run on. A
process paused with SIGSTOP finds the lease expired when it runs again, goes the slow path,
and fails there if the others elected a new leader meanwhile.

The lease's bookkeeping is `tidelog.replication.lease.ReadLease`, which the simulator runs
too, and the argument is written out in docs/architecture/replication.md ("Reads and the
lease"): fortified followers (`RaftConfig.fortify`) refuse votes for longer, never for less.

No lease is trusted while a leadership transfer is or was under way in the term (the target's
forced election ignores the followers' refusal), nor when the Raft config has no check-quorum
(followers then refuse nothing). A follower that restarted forgets whom it heard from: the
node drops vote requests for a replica's first election timeout (`ReplicaSet.step`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tidelog import errors
from tidelog.replication import NotLeaderError, RaftCore, Ready
from tidelog.replication.lease import ReadLease

_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds on a monotonic clock that counts suspended time (CLOCK_BOOTTIME) when the
    system has one."""
    if _BOOTTIME is None:  # pragma: no cover - not Linux
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


@dataclass(slots=True)
class _Round:
    ctx: int
    term: int
    sent_at: float
    #: Whether a confirmation may extend the lease (no transfer under way when it was sent).
    renews: bool
    waiters: list[asyncio.Future[int]] = field(default_factory=list)


class LeaderReads:
    """The reads of one partition replica. Runs on the node's event loop; the owner passes the
    replica's current core (it changes when the replica restarts) and forwards each published
    Ready (`on_ready`) and every loss of leadership or of the core (`fail_all`)."""

    def __init__(self, lease_s: float, clock: Callable[[], float] = lease_clock) -> None:
        self._lease_s = lease_s
        self._clock = clock
        self._ctx = 0
        self._lease = ReadLease(lease_s)
        self._round: _Round | None = None
        self._next: list[asyncio.Future[int]] = []
        #: Rounds started (a read answered by the lease starts none).
        self.rounds = 0

    def leased_index(self, core: RaftCore) -> int | None:
        """The HW, when the lease proves that no other leader can exist now; else None. A
        lease half spent is renewed by a round in the background, so steady reads stay on
        the fast path."""
        now = self._clock()
        if not self._lease.holds(core, now):
            return None
        if self._round is None and self._lease.remaining(now) < self._lease_s / 2:
            self._start(core)
        return core.high_watermark

    def join(self, core: RaftCore) -> asyncio.Future[int]:
        """A future of the offset of the next round that starts from now (now if none is in
        flight); it fails with NOT_LEADER_OR_FOLLOWER when this replica stops leading."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._next.append(future)
        if self._round is None:
            self._start(core)
        return future

    def _start(self, core: RaftCore) -> None:
        waiters, self._next = self._next, []
        self.rounds += 1
        self._ctx += 1
        sent_at = self._clock()
        try:
            core.read_index(self._ctx)
        except NotLeaderError as exc:
            _fail(waiters, errors.NotLeaderOrFollowerError(str(exc)))
            return
        renews = core.transferring_to is None and not core.transferred_this_term
        self._round = _Round(self._ctx, core.term, sent_at, renews, waiters)

    def on_ready(self, rd: Ready, core: RaftCore) -> None:
        """A Ready of this replica was published: settle the round it answers, then start the
        next one if callers wait for it."""
        rnd = self._round
        if rnd is None:
            return
        for state in rd.read_states:
            if state.ctx == rnd.ctx:
                self._round = None
                if rnd.renews:
                    self._lease.confirmed(rnd.term, rnd.sent_at)
                for future in rnd.waiters:
                    if not future.done():
                        future.set_result(state.index)
        if rnd.ctx in rd.failed_reads:
            self.fail_all(errors.NotLeaderOrFollowerError("leadership moved"))
        if self._round is None and self._next:
            self._start(core)

    def fail_all(self, exc: errors.TidelogError) -> None:
        """This replica stopped leading, or its core was replaced: no read can be confirmed."""
        waiters = self._next
        if self._round is not None:
            waiters = self._round.waiters + waiters
        self._round = None
        self._next = []
        self._lease.end()
        _fail(waiters, exc)


def _fail(waiters: list[asyncio.Future[int]], exc: errors.TidelogError) -> None:
    for future in waiters:
        if not future.done():
            future.set_exception(exc)
            # Its callers may all have timed out: retrieving the exception here keeps asyncio
            # from logging it as never retrieved; a caller still waiting gets it all the same.
            future.exception()


async def wait_read(future: asyncio.Future[int], timeout_s: float) -> int:
    """Await a shared round's offset for one caller: its timeout must not cancel the round
    that other callers wait for."""
    try:
        return await asyncio.wait_for(asyncio.shield(future), timeout_s)
    except TimeoutError:
        raise errors.RequestTimedOutError(
            f"no quorum confirmed this leader within {timeout_s:.3f}s"
        ) from None
