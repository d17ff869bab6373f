"""Moving a Raft group to a target set of voters, one membership change at a time, on its leader.

`MembershipMover.step` looks at the leader's core and takes the next step toward the target, or
says why it waits; called again and again (each tick, by whoever drives the group: a partition's
reassignment in `tidelog.node.cluster.reassignment`, and the controller's own group the same
way), it brings the group to the target, or back to where a new target says. The order of the steps:

1. a learner the target does not name is removed (an add that a new target cancelled);
2. every node of the target that is not a member is added as a **learner**: it receives the
   log but counts in no quorum, so a replica that holds nothing never weighs on a commit or an
   election;
3. a learner of the target is **promoted** once it has caught up: its match reaches the high
   watermark (everything committed), so the voter it becomes does not hold commits back;
4. only then are the voters the target leaves out **removed**, one at a time, each once the
   voters that stay hold everything committed; a leaving **leader** first hands leadership to a
   caught-up voter of the target (the target's first, its preferred leader, when it can), which
   removes it as the next step.

**Why a partition is never left without a majority.** Each change moves the voter set by one
node (`tidelog.replication.membership`: one change at a time, committed before the next, so
every majority of one configuration meets every majority of the next). Adds come before removes,
so a replacement passes through the larger set (two voters to three and back to two, never to
one) and a removal happens only when the voters that stay have the log: the group's quorum after
the removal is made of replicas that hold every committed entry.

**Failover mid-change.** The mover keeps no state: every step is decided from the core alone,
whose configuration is the newest in its log (in effect on append), and from the target. A new
leader elected mid-change has in its log every committed configuration and perhaps a newer one
that it commits with its first entry; it simply goes on from there, toward the target the
controller holds. A cancelled or changed target is the same thing: the steps lead from whatever
the log says to the new target (removing a learner, re-adding a node that was removed). Nothing
is rolled back behind Raft's back: what the log says is the truth, and the target says where
to go from it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from tidelog.replication.membership import ConfChangeError
from tidelog.replication.raft import NotLeaderError, RaftCore, Role


class Step(enum.Enum):
    """What one call did, or why it did nothing."""

    NOT_LEADER = "not the leader"
    #: A change is in the log but not committed, or leadership is being transferred.
    PENDING = "a change is pending"
    ADDED_LEARNER = "added a learner"
    #: A learner of the target has not caught up yet.
    CATCHING_UP = "a learner is catching up"
    PROMOTED = "promoted a learner"
    #: A voter that stays has not caught up yet: no removal until it has.
    SYNCING = "a staying voter is catching up"
    TRANSFERRING = "moving leadership off a leaving replica"
    REMOVED = "removed a member"
    #: The committed configuration is the target, with no learner and nothing pending.
    DONE = "done"

    @property
    def changed(self) -> bool:
        """Whether the step changed the core (its Ready has something to send)."""
        return self in (Step.ADDED_LEARNER, Step.PROMOTED, Step.TRANSFERRING, Step.REMOVED)


class MembershipMover:
    """Drives one group toward ``target`` (voters, the preferred leader first) from its leader."""

    def __init__(self, target: Sequence[int]) -> None:
        if not target or len(set(target)) != len(target):
            raise ValueError(f"a target is a non-empty list of distinct nodes, not {target}")
        self.target = tuple(target)

    def step(self, core: RaftCore) -> Step:
        """Take the next step on ``core`` if it leads (see the module docstring)."""
        if core.role is not Role.LEADER:
            return Step.NOT_LEADER
        if core.conf_change_pending or core.transferring_to is not None:
            return Step.PENDING
        membership = core.membership
        voters, learners = set(membership.voters), set(membership.learners)
        target = set(self.target)
        try:
            for node in sorted(learners - target):
                core.remove(node)
                return Step.REMOVED
            for node in self.target:
                if node not in voters and node not in learners:
                    core.add_learner(node)
                    return Step.ADDED_LEARNER
            hw = core.high_watermark
            for node in self.target:
                if node in learners:
                    if core.match_of(node) < hw:
                        return Step.CATCHING_UP
                    core.promote(node)
                    return Step.PROMOTED
            leaving = sorted(voters - target)
            if not leaving:
                return Step.DONE
            staying = [n for n in self.target if n != core.id]
            if any(core.match_of(n) < hw for n in staying):
                return Step.SYNCING
            if core.id in leaving:
                core.transfer_leadership(staying[0])
                return Step.TRANSFERRING
            core.remove(leaving[0])
            return Step.REMOVED
        except ConfChangeError as exc:
            if exc.retriable:
                return Step.PENDING
            raise
        except NotLeaderError:
            return Step.NOT_LEADER
