"""A leader's read lease: the time after a confirmed ReadIndex round during which no other
leader can exist, so a read is answered from the leader's HW without a round of its own.

The argument (docs/architecture/replication.md, "Reads and the lease"): a round confirmed by a
quorum proves that each of its followers heard this leader after the round was sent, and each
then refuses votes (`RaftCore._in_lease`) until at least an election timeout of its own ticks
after it last heard the leader, less the tick that may come at once: fortified, longer, for as
long as the leader's node is heard and the leader leads (`RaftConfig.fortify`). No election
can be won without one of them, so for ``duration`` after the round was sent (the caller
derives it from ``election_ticks - 2`` ticks, with a margin for clock rates), this replica's HW
covers every committed entry, as long as it still leads the term the round confirmed.

A lease is never extended by node liveness alone: liveness is one-way (a node hears its peers'
envelopes, not whether they hear its own), so the leader cannot know from it that its
followers still hear it. Only a confirmed round renews the lease; a leader whose node went
unheard, or stalled, finds the lease run out on its own clock and goes back to rounds.

The node (`tidelog.node.replicas.reads`, on a clock that counts suspended time) and the
simulator (`tidelog.replication.sim`, on its virtual clock) use this same class.
"""

from __future__ import annotations

from tidelog.replication.raft import RaftConfig, RaftCore, Role

#: The share of the followers' minimum vote refusal a lease lasts: a margin for the rates of
#: the leader's and the followers' clocks (see `tidelog.node.replicas.reads`).
LEASE_MARGIN = 0.9


def lease_seconds(config: RaftConfig, tick_s: float) -> float:
    """How long after a confirmed round was sent its lease lasts, for ticks of `tick_s` (the
    shortest any voter's clock runs); 0 when leases are off (no check-quorum: followers then
    refuse nothing)."""
    if not config.check_quorum:
        return 0.0
    return max(0, config.election_ticks - 2) * tick_s * LEASE_MARGIN


class ReadLease:
    """The lease of one leader replica: the term of the rounds that confirmed it, and until
    when it holds (in the owner's clock)."""

    __slots__ = ("_duration", "_term", "_until")

    def __init__(self, duration: float) -> None:
        #: How long after a confirmed round was sent its lease holds; 0: leases are off.
        self._duration = duration
        self._term = -1
        self._until = 0.0

    def confirmed(self, term: int, sent_at: float) -> None:
        """A round sent at `sent_at` by the leader of `term`, with no transfer under way or
        begun in the term, was confirmed by a quorum."""
        if self._duration <= 0:
            return
        if term != self._term:
            self._term, self._until = term, 0.0
        self._until = max(self._until, sent_at + self._duration)

    def holds(self, core: RaftCore, now: float) -> bool:
        """Whether a read may be answered from `core`'s HW at `now` without a round: it still
        leads the term the lease was confirmed in, no transfer began in that term (the
        target's forced election ignores the followers' refusals), and the lease has not run
        out."""
        return (core.role is Role.LEADER and core.term == self._term
                and not core.transferred_this_term and now < self._until)

    def remaining(self, now: float) -> float:
        """How long the lease still holds after `now` (negative once it ran out)."""
        return self._until - now

    def end(self) -> None:
        """This replica stopped leading, or its core was replaced: nothing it held holds."""
        self._term = -1
