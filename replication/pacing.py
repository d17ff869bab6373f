"""Pacing: the election timers that wait on a peer run no faster than that peer's node ticks.

Node liveness (`tidelog.node.replicas.liveness`) has each node tell its peers, a few times an
election timeout, how many ticks its tick loop has run. A node whose loop is slow (hundreds of
ms per tick under load) is not dead, but its peers, ticking on time, used to take it for so:
their followers stood against its leaders, its leaders stepped down for answers that came late
from its followers, and the elections fed themselves (5,000 partitions on the shared 2-core VM
were never all led). So a node runs at a peer's pace the timers that wait on it, within a
heartbeat interval of ticks either way (or the ticks between two reports, when more):

* a follower whose leader is on a lagging peer is not ticked (its election timer stands still);
* a leader whose voters are mostly on lagging peers ticks with ``quorum_paced=False``: its
  heartbeats still go, its check-quorum window stands still (`RaftCore.tick`).

A peer that reported nothing for an election timeout, or that node liveness found silent, is
not waited on: liveness decides for it (`RaftCore.peer_down`), so a dead node fails over as
before. Safety does not rest on timers. Leases lose nothing: followers only refuse votes for
longer, and a leader's lease rests on confirmed rounds and on those refusals.

The node (`tidelog.node.replicas.replica_set`) and the simulator (`tidelog.replication.sim`,
whose nodes' clocks run at skewed rates) run this same code.
"""

from __future__ import annotations

from collections.abc import Collection

from tidelog.replication.raft import RaftConfig, RaftCore


class PeerPacing:
    """What the peers said of their tick counts, in this node's ticks."""

    __slots__ = ("_at", "_config", "_credit", "_reported", "_slack")

    def __init__(self, config: RaftConfig, report_ticks: int | None = None) -> None:
        """`report_ticks`: how many ticks apart the peers report (a heartbeat interval when
        None). A peer runs that many ticks behind between two reports without lagging."""
        self._config = config
        self._slack = max(config.heartbeat_ticks, report_ticks or 0)
        #: The tick count each peer last reported, and this node's tick when it came.
        self._reported: dict[int, int] = {}
        self._at: dict[int, int] = {}
        #: Each peer's ticks not yet matched by this node's (negative: this node ran ahead),
        #: within +-``_slack``.
        self._credit: dict[int, int] = {}

    def report(self, peer: int, ticks: int, now: int) -> bool:
        """`peer` said at this node's tick `now` that its loop has run `ticks` ticks. True
        when it counts fewer than it said before: its node restarted, and support for the
        leaders it had is over (`RaftCore.peer_down`, "Fortification")."""
        last = self._reported.get(peer)
        self._reported[peer] = ticks
        self._at[peer] = now
        if last is None or ticks < last:  # its first report, or it restarted
            self._credit[peer] = 0
            return last is not None
        slack = self._slack
        self._credit[peer] = min(slack, self._credit[peer] + ticks - last)
        return False

    def lagging(self, now: int, silent: Collection[int]) -> set[int]:
        """At this node's tick `now` (called once a tick): the peers that reported lately,
        are not `silent`, and ran more than ``_slack`` ticks fewer than this node since they
        began reporting."""
        if not self._credit:
            return set()
        slack = self._slack
        stale = now - self._config.election_ticks
        lagging = set()
        for peer, credit in self._credit.items():
            if peer in silent or self._at[peer] <= stale:
                continue
            if credit > -slack:
                self._credit[peer] = credit - 1
            else:
                lagging.add(peer)
        return lagging


def tick_paced(
    core: RaftCore, lagging: Collection[int], down: Collection[int] = (), ticks: int = 1
) -> bool:
    """`RaftCore.tick` of a core on a node whose `lagging` peers (`PeerPacing.lagging`) may
    not be empty; `down` and `ticks` as `RaftCore.tick` takes them."""
    leader = core.leader_id
    if leader is not None and leader in lagging:
        return False  # its leader's node is slow: its election timer waits for it
    if leader != core.id:
        return core.tick(ticks=ticks)
    if not lagging:
        return core.tick(True, down, ticks)
    voters = core.conf_state.membership.voters
    paced = sum(1 for voter in voters if voter not in lagging)
    return core.tick(2 * paced > len(voters), down, ticks)
