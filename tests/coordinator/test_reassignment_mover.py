"""The leader-side driver of a reassignment (`tidelog.replication.mover`) as a state machine,
over a hand-driven group of cores: a move's steps in order (learner, catch-up, promotion,
leadership off the leaving replica, removal), a failover mid-change that the new leader
finishes from its log, a cancelled add rolled back, and never fewer voters than a majority
of the configuration before each change needs."""

from __future__ import annotations

import pytest
from raft_helpers import Cluster, Filter, to

from tidelog.replication import Role
from tidelog.replication.mover import MembershipMover, Step


def leader_of(c: Cluster) -> int | None:
    """The leader of the newest term (a deposed one cut off may not know yet)."""
    leaders = [i for i, core in c.cores.items() if core.role is Role.LEADER]
    return max(leaders, key=lambda i: c.cores[i].term, default=None)


def drive(c: Cluster, mover: MembershipMover, rounds: int = 200,
          drop: Filter = lambda m: False, until: Step = Step.DONE) -> list[Step]:
    """Step the mover on whoever leads, let messages flow and heartbeats answer, until
    ``until``; the steps taken (waits collapsed). Checks after every round that the leader's
    configurations (committed and in effect) keep two voters at least: a group of two moved
    elsewhere never passes through one."""
    steps: list[Step] = []
    for _ in range(rounds):
        leader = leader_of(c)
        step = Step.NOT_LEADER if leader is None else mover.step(c.cores[leader])
        if not steps or steps[-1] is not step:
            steps.append(step)
        c.settle(drop)
        c.heartbeat(drop)
        now = leader_of(c)
        if now is not None:
            assert len(c.cores[now].conf_state.membership.voters) >= 2
            assert len(c.cores[now].membership.voters) >= 2
        if step is until:
            return steps
    raise AssertionError(f"not {until.value} after {rounds} rounds: {steps}")


def two_voters_and_a_new_node() -> Cluster:
    """Voters 0 and 1 (0 leads, with entries), and node 2 created as a learner, as the
    controller's record makes its node open it."""
    c = Cluster(2)
    c.elect(0)
    c.propose(0, [b"x" * 100 for _ in range(50)])
    c.add_node()
    return c


def test_a_move_adds_a_learner_promotes_it_moves_leadership_then_removes() -> None:
    c = two_voters_and_a_new_node()
    steps = drive(c, MembershipMover([1, 2]))
    changes = [s for s in steps if s.changed or s is Step.DONE]
    assert changes == [Step.ADDED_LEARNER, Step.PROMOTED, Step.TRANSFERRING, Step.REMOVED,
                       Step.DONE]
    leader = c.cores[1]
    assert leader.role is Role.LEADER  # the target's first replica, its preferred leader
    assert leader.conf_state.membership.voters == (1, 2) and not leader.conf_change_pending
    assert c.logs[2].log_end_offset == leader.log_end_offset
    # Node 0 is out: the group commits without it.
    (entry,) = c.propose(1, [b"after"], drop=to(0))
    assert leader.high_watermark == entry.end_offset


def test_a_lagging_learner_is_not_promoted_until_it_caught_up() -> None:
    c = two_voters_and_a_new_node()
    mover = MembershipMover([0, 1, 2])
    cut = to(2)
    steps = drive(c, mover, rounds=30, drop=cut, until=Step.CATCHING_UP)
    assert Step.ADDED_LEARNER in steps
    for _ in range(20):
        assert mover.step(c.cores[0]) is Step.CATCHING_UP
        c.settle(cut)
        c.heartbeat(cut)
    assert drive(c, mover)[-1] is Step.DONE
    assert c.cores[0].conf_state.membership.voters == (0, 1, 2)


def test_a_leader_lost_mid_change_is_succeeded_by_one_that_finishes_from_its_log() -> None:
    c = two_voters_and_a_new_node()
    mover = MembershipMover([1, 2])
    drive(c, mover, until=Step.PROMOTED)
    c.settle()
    c.heartbeat()
    assert c.cores[1].membership.voters == (0, 1, 2)
    # The leader dies: 1 and 2 (two of three voters) elect one of them, which goes on.
    dead = to(0)
    for _ in range(100):
        if leader_of(c) in (1, 2):
            break
        for i in (1, 2):
            c.cores[i].tick()
        c.settle(dead)
    assert leader_of(c) in (1, 2)
    drive(c, mover, drop=dead)
    survivor = c.cores[leader_of(c) or 1]
    assert survivor.conf_state.membership.voters == (1, 2)


def test_a_cancelled_add_removes_the_learner() -> None:
    c = two_voters_and_a_new_node()
    cut = to(2)  # the learner never catches up
    drive(c, MembershipMover([1, 2]), rounds=30, drop=cut, until=Step.CATCHING_UP)
    assert c.cores[0].membership.learners == (2,)
    steps = drive(c, MembershipMover([0, 1]), drop=cut)
    assert [s for s in steps if s.changed] == [Step.REMOVED]
    assert c.cores[0].conf_state.membership.voters == (0, 1)
    assert c.cores[0].conf_state.membership.learners == ()


def test_a_removal_waits_for_the_staying_voters() -> None:
    c = Cluster(3)
    c.elect(0)
    c.propose(0, [b"a"])
    mover = MembershipMover([0, 1])
    # Voter 1 misses the entries: 0 and 2 commit them, and 2 is not removed until 1 has them.
    c.propose(0, [b"b", b"c"], drop=to(1))
    assert mover.step(c.cores[0]) is Step.SYNCING
    assert drive(c, mover)[-1] is Step.DONE
    assert c.cores[0].conf_state.membership.voters == (0, 1)


def test_a_target_is_a_list_of_distinct_nodes() -> None:
    with pytest.raises(ValueError, match="distinct"):
        MembershipMover([1, 1])
    with pytest.raises(ValueError, match="distinct"):
        MembershipMover([])
