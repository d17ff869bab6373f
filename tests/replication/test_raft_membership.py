"""Membership changes in the Raft core (`tidelog.replication.membership`): learners, one change
at a time as log entries, in effect on append and reverted by truncation, committed and
persisted, a removed leader stepping down, and the rules that refuse illegal changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from raft_helpers import ELECTION, Cluster, to

from tidelog.replication import (
    ConfChangeError,
    ConfState,
    Membership,
    NotLeaderError,
    OpaqueCodec,
    Role,
    VoteRequest,
)
from tidelog.replication.log_store import LogCodec, LogStore
from tidelog.replication.membership import decode_membership, majorities_intersect
from tidelog.replication.term_votes import TermVotes
from tidelog.storage import Log, LogConfig

M = Membership.of


def grown(n: int = 3) -> tuple[Cluster, int]:
    """A group of n voters led by 0 with a committed entry of its term, and a new empty
    replica (created as a learner, not yet added)."""
    c = Cluster(n)
    c.elect(0)
    c.propose(0, [b"a", b"b"])
    new = c.add_node().id
    return c, new


def test_a_learner_gets_the_log_but_no_say() -> None:
    c, new = grown()
    leader = c.cores[0]
    entry = leader.add_learner(new)
    assert leader.membership == M([0, 1, 2], [new])  # in effect on append
    c.settle()
    assert leader.high_watermark == entry.end_offset
    assert leader.conf_state == ConfState(entry.base_offset, M([0, 1, 2], [new]))
    assert c.cores[new].membership == leader.membership
    assert c.logs[new].log_end_offset == leader.log_end_offset  # replicated to the learner
    # Not in the commit quorum: with two voters cut off, the leader and the learner commit
    # nothing; with only the learner cut off, the voters commit.
    cut = lambda m: to(1)(m) or to(2)(m)  # noqa: E731
    (stuck,) = c.propose(0, [b"c"], drop=cut)
    assert c.logs[new].entry_at(stuck.base_offset) is not None
    assert leader.high_watermark <= stuck.base_offset
    c.settle()
    c.propose(0, [b"d"], drop=to(new))
    assert leader.high_watermark == leader.log_end_offset
    # Not in an election: it never campaigns, and nobody asks for its vote.
    for _ in range(10 * ELECTION):
        c.cores[new].tick()
    c.settle()
    assert c.cores[new].role is Role.FOLLOWER
    c.sent.clear()
    leader.transfer_leadership(1)
    c.settle()
    assert c.cores[1].role is Role.LEADER
    assert not [m for m in c.sent if isinstance(m, VoteRequest) and m.dst == new]
    with pytest.raises(ValueError, match="not another voter"):
        c.cores[1].transfer_leadership(new)


def test_promotion_makes_a_learner_count() -> None:
    c, new = grown()
    leader = c.cores[0]
    leader.add_learner(new)
    c.settle()
    leader.promote(new)
    assert leader.membership == M([0, 1, 2, new])
    c.settle()
    assert not leader.conf_change_pending
    # Four voters, quorum three: the leader and one other no longer commit.
    (stuck,) = c.propose(0, [b"c"], drop=lambda m: to(2)(m) or to(new)(m))
    assert leader.high_watermark <= stuck.base_offset
    c.settle()
    for _ in range(2):  # the appends are taken for lost once a heartbeat interval old
        c.heartbeat()
    assert leader.high_watermark == leader.log_end_offset


def test_one_change_at_a_time_and_illegal_changes_are_refused() -> None:
    c, new = grown()
    leader = c.cores[0]
    leader.add_learner(new)
    with pytest.raises(ConfChangeError, match="not committed yet") as pending:
        leader.promote(new)
    assert pending.value.retriable
    c.settle()
    for change, reason in ((lambda: leader.add_learner(1), "already a member"),
                           (lambda: leader.promote(2), "not a learner"),
                           (lambda: leader.remove(7), "not a member")):
        with pytest.raises(ConfChangeError, match=reason) as refused:
            change()
        assert not refused.value.retriable
    with pytest.raises(NotLeaderError):
        c.cores[1].add_learner(5)
    one = Cluster(1)
    one.elect(0)
    one.propose(0, [b"x"])
    with pytest.raises(ConfChangeError, match="last voter"):
        one.cores[0].remove(0)
    with pytest.raises(ValueError, match="propose_conf_change"):
        leader.propose(OpaqueCodec().membership(0, 1, M([0])), 1)


def test_a_new_leader_commits_an_entry_of_its_term_before_a_change() -> None:
    """Elected with HW == LEO it writes no marker (contract §7); a change asked for then writes
    it and is refused as retriable, and goes once the marker commits (§4.1's fix)."""
    c, new = grown()
    c.cores[0].transfer_leadership(1)
    c.settle()
    leader = c.cores[1]
    assert leader.role is Role.LEADER
    end = leader.log_end_offset
    assert leader.high_watermark == end
    with pytest.raises(ConfChangeError, match="not committed an entry of term") as early:
        leader.add_learner(new)
    assert early.value.retriable
    assert leader.log_end_offset == end + 1  # the marker
    with pytest.raises(ConfChangeError, match="not committed an entry of term"):
        leader.add_learner(new)
    assert leader.log_end_offset == end + 1  # one marker only
    c.settle()
    assert leader.add_learner(new).base_offset == end + 1


def test_a_configuration_reverts_when_its_entry_is_truncated() -> None:
    c = Cluster(5, check_quorum=False)
    c.elect(0)
    c.propose(0, [b"a"])
    new = c.add_node().id
    c.cores[0].add_learner(new)
    c.settle(drop=lambda m: m.dst not in (0, 1))  # 2 of 5 hold it: not committed
    assert c.cores[1].membership == M([0, 1, 2, 3, 4], [new])
    assert c.cores[1].conf_change_pending
    cut = lambda m: to(0)(m) or to(1)(m)  # noqa: E731
    c.elect(2, drop=cut)  # by 3 and 4, whose logs equal 2's
    c.propose(2, [b"over"], drop=cut)
    c.heartbeat()  # 0 learns of term 2 and steps down; 2 repairs 0's and 1's logs
    c.heartbeat()
    for i in (0, 1):
        assert c.cores[i].membership == M([0, 1, 2, 3, 4])
        assert not c.cores[i].conf_change_pending
    assert c.cores[2].add_learner(new).base_offset == c.cores[2].log_end_offset - 1


def test_a_removed_leader_steps_down_after_the_commit_and_hands_over() -> None:
    c, _ = grown()
    leader = c.cores[0]
    entry = leader.remove(0)
    assert leader.membership == M([1, 2])
    assert leader.role is Role.LEADER  # it leads the group it left until the change commits
    c.settle()
    assert leader.role is Role.FOLLOWER
    assert leader.conf_state.offset == entry.base_offset
    heirs = [i for i in (1, 2) if c.cores[i].role is Role.LEADER]
    assert len(heirs) == 1, "the removed leader handed over with TimeoutNow"
    heir = c.cores[heirs[0]]
    c.propose(heir.id, [b"after"])
    assert heir.high_watermark == heir.log_end_offset
    for _ in range(10 * ELECTION):
        leader.tick()
    c.settle()
    assert leader.role is Role.FOLLOWER and heir.role is Role.LEADER


def test_a_follower_removed_with_its_leader_alive() -> None:
    c, _ = grown()
    leader = c.cores[0]
    leader.remove(2)
    c.settle()
    assert leader.membership == M([0, 1])
    (e,) = c.propose(0, [b"two voters"], drop=to(2))
    assert leader.high_watermark == e.end_offset
    assert leader.match_of(2) == 0


def test_the_configuration_survives_restarts() -> None:
    c, new = grown()
    leader = c.cores[0]
    committed = leader.add_learner(new)
    c.settle()
    c.heartbeat()  # which tells the followers the HW, and so that the change committed
    assert c.confs[1] == ConfState(committed.base_offset, M([0, 1, 2], [new]))
    pending = leader.promote(new)
    c.flush(0)  # appended on the leader only
    for i in (0, 1, new):
        c.restart(i)
    assert c.cores[1].membership == M([0, 1, 2], [new])  # from its store
    # The leader's log holds the uncommitted promotion above its HW: read back from the log.
    assert c.cores[0].membership == M([0, 1, 2, new])
    assert c.cores[0].conf_change_pending and c.cores[0].conf_state.offset == \
        committed.base_offset
    assert c.cores[new].membership == M([0, 1, 2], [new])
    assert pending.base_offset > committed.base_offset


def test_a_learner_added_after_retention_gets_the_configuration_with_the_reset() -> None:
    c, new = grown()
    leader = c.cores[0]
    first = leader.add_learner(new)
    c.settle(drop=to(new))
    leader.remove(new)  # the learner never heard of either
    c.settle(drop=to(new))
    c.propose(0, [b"c", b"d"])
    end = leader.log_end_offset
    for i in (0, 1, 2):
        c.logs[i].advance_log_start(end - 1)
    leader.add_learner(new)
    c.settle()
    c.heartbeat()
    assert c.logs[new].log_start_offset == end - 1
    assert c.cores[new].membership == M([0, 1, 2], [new])
    assert first.base_offset < end - 1


def test_majorities_intersect() -> None:
    assert majorities_intersect(M([1, 2, 3]), M([1, 2, 3, 4]))
    assert majorities_intersect(M([1, 2, 3]), M([1, 2]))
    assert not majorities_intersect(M([1, 2, 3]), M([1, 2, 3, 4, 5]))
    assert not majorities_intersect(M([1, 2, 3]), M([3, 4, 5]))


def test_the_log_codec_and_store_keep_a_configuration(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "p", LogConfig(), clock=lambda: 0)
    codec = LogCodec(log)
    m = M([3, 1, 2], [9])
    batch = codec.membership(5, 2, m)
    assert codec.membership_of(batch) == m
    assert codec.membership_of(codec.marker(5, 2)) is None
    with pytest.raises(Exception, match="malformed configuration"):
        decode_membership(b"\x00\x00\x00\x00\x00\x02")
    book = TermVotes(tmp_path / "raft-states")
    store = LogStore(log, book)
    assert store.conf_state() is None
    from tidelog.replication import Ready
    rd = Ready(None, None, None, (), (), 0, Role.FOLLOWER, None, 0,
               conf_state=ConfState(5, m))
    store.apply(rd, None)
    assert LogStore(log, book).conf_state() == ConfState(5, m)
    (tmp_path / "p" / "raft-config").write_text("0\n2\noffset 5\nlearner 1\n")
    assert LogStore(log, book).conf_state() is None  # no voter: ignored, and said so
    log.close()
