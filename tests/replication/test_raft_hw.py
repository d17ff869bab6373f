"""How a leader's HW reaches its followers (`tidelog.replication.raft`, "Carrying the HW"):
with the appends that go anyway and the heartbeats, not by an empty append to every follower
on every commit, each answered (half of a loaded leader's Raft messages, bench/README)."""

from __future__ import annotations

from raft_helpers import Cluster, to

from tidelog.replication import Role
from tidelog.replication.messages import AppendRequest


def _empty_appends(c: Cluster, since: int) -> int:
    return sum(1 for m in c.sent[since:] if isinstance(m, AppendRequest) and not m.entries)


def test_a_leader_under_steady_proposals_sends_no_append_without_entries() -> None:
    c = Cluster(3)
    leader = c.elect(0)
    since = len(c.sent)
    for i in range(20):
        c.propose(0, [b"x%d" % i])
    assert _empty_appends(c, since) == 0
    end = leader.log_end_offset
    assert leader.high_watermark == end == 20
    # Each follower has the HW its last append carried: all but that append's own batch...
    assert [c.cores[f].high_watermark for f in (1, 2)] == [end - 1, end - 1]
    # ...and the next heartbeat brings the rest.
    c.heartbeat()
    assert [c.cores[f].high_watermark for f in (1, 2)] == [end, end]


def test_an_eager_hw_group_tells_its_followers_at_once() -> None:
    """The metadata log's setting: its followers apply what commits as it commits."""
    c = Cluster(3, eager_hw=True)
    leader = c.elect(0)
    since = len(c.sent)
    c.propose(0, [b"x"])
    assert [c.cores[i].high_watermark for i in c.ids] == [leader.log_end_offset] * 3
    assert _empty_appends(c, since) == 2


def test_a_transfer_target_is_sent_the_hw_and_writes_no_marker() -> None:
    """A target elected with its HW at its log end writes no marker, as before."""
    c = Cluster(3)
    c.elect(0)
    c.propose(0, [b"a", b"b"])
    end = c.cores[0].log_end_offset
    assert c.cores[1].high_watermark < end  # the last commit has not reached it yet
    c.cores[0].transfer_leadership(1)
    c.settle()
    assert c.cores[1].role is Role.LEADER
    assert (c.cores[1].log_end_offset, c.cores[1].high_watermark) == (end, end)

    # A target that lacks entries catches up first; the HW moves meanwhile.
    c.cores[1].propose(b"c", 1)
    c.settle(drop=to(2))
    c.cores[1].propose(b"d", 1)
    c.settle(drop=to(0))  # committed with node 2 while node 0 lacks it
    end = c.cores[1].log_end_offset
    c.cores[1].transfer_leadership(0)
    c.settle()
    assert c.cores[0].role is Role.LEADER
    assert (c.cores[0].log_end_offset, c.cores[0].high_watermark) == (end, end)


def test_a_heartbeat_answer_brings_an_empty_append_once_appends_are_a_heartbeat_old() -> None:
    """Under load appends are nearly always in flight when a heartbeat is answered (its answer
    overtakes theirs, which wait for the follower's fsync); only those a heartbeat interval old
    may be lost, so only then does the leader send an append the follower must answer."""
    c = Cluster(3)
    leader = c.elect(0)
    c.heartbeat()
    c.propose(0, [b"x"], drop=lambda m: isinstance(m, AppendRequest) and m.dst == 1)
    since = len(c.sent)
    c.heartbeat()
    assert _empty_appends(c, since) == 0 and c.logs[1].log_end_offset == 0
    c.heartbeat()  # now it is a heartbeat interval old: taken for lost
    assert _empty_appends(c, since) == 1
    assert c.logs[1].log_end_offset == leader.log_end_offset
