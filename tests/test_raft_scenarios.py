"""One scenario per Raft rule, driven by hand: which messages arrive, and when, is chosen by the
test, so each rule is exercised in isolation and a regression names the rule it broke."""

from __future__ import annotations

import pytest
from raft_helpers import ELECTION, Cluster, batches, to

from tidelog.replication import (
    NO_EPOCH,
    AppendRequest,
    AppendResponse,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    Message,
    NotLeaderError,
    PreVoteRequest,
    PreVoteResponse,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tidelog.replication.driver import Leadership


def test_stale_term_is_rejected_and_deposes_the_stale_leader() -> None:
    c = Cluster()
    leader = c.elect(0)
    term = leader.term
    follower = c.cores[1]
    stale = AppendRequest(term - 1, 2, 1, -1, NO_EPOCH, tuple(batches([term - 1])), 1)
    follower.step(stale)
    replies = c.flush(1)
    assert follower.log_end_offset == 0 and follower.leader_id == 0
    assert replies == [HeartbeatResponse(term, 1, 2)]
    leader.step(HeartbeatResponse(term + 3, 2, 0))
    assert leader.role is Role.FOLLOWER and leader.term == term + 3


def test_one_vote_per_term_survives_a_restart() -> None:
    c = Cluster()
    voter = c.cores[2]
    voter.step(VoteRequest(1, 0, 2, 0, NO_EPOCH))
    rnd = c.driver.begin([(2, c.replicas[2])])
    assert rnd is not None
    (write,) = rnd.writes
    # The grant leaves only once the vote is durable (persist before send).
    assert write.term_vote == (1, 0) and c.port.out == []
    write.persist()
    c.driver.complete(rnd)
    assert c.flush(2) == [VoteResponse(1, 2, 0, True)]
    voter.step(VoteRequest(1, 1, 2, 0, NO_EPOCH))
    assert c.flush(2) == [VoteResponse(1, 2, 1, False)]
    restarted = c.restart(2)
    restarted.step(VoteRequest(1, 1, 2, 0, NO_EPOCH))
    assert c.flush(2) == [VoteResponse(1, 2, 1, False)]
    restarted.step(VoteRequest(1, 0, 2, 0, NO_EPOCH))
    assert c.flush(2) == [VoteResponse(1, 2, 0, True)]


def test_leader_appends_leave_before_its_fsync_acknowledgements_after() -> None:
    c = Cluster()
    leader = c.elect(0)
    leader.propose(b"x", 1)
    rnd = c.driver.begin([(0, c.replicas[0])])
    assert rnd is not None and len(rnd.writes) == 1
    appends = [m for m in c.port.out if isinstance(m, AppendRequest)]
    assert {m.dst for m in appends} == {1, 2}  # sent while the leader's write is not durable
    c.port.out.clear()
    c.cores[1].step(appends[0] if appends[0].dst == 1 else appends[1])
    follower = c.driver.begin([(1, c.replicas[1])])
    assert follower is not None and c.port.out == []  # the acknowledgement waits for the disk
    for write in follower.writes:
        write.persist()
    c.driver.complete(follower)
    assert c.port.out == [AppendResponse(leader.term, 1, 0, True, match_end=1)]


@pytest.mark.parametrize(
    ("last_epoch", "log_end", "granted"),
    [(1, 10, False), (2, 4, False), (2, 5, True), (2, 9, True), (3, 1, True)],
)
def test_vote_needs_a_log_at_least_as_up_to_date(last_epoch: int, log_end: int,
                                                 granted: bool) -> None:
    c = Cluster(logs={2: batches([1, 1, 2, 2, 2])}, hard={2: HardState(2, None, 0)})
    c.cores[2].step(VoteRequest(3, 0, 2, log_end, last_epoch))
    assert c.flush(2) == [VoteResponse(3, 2, 0, granted)]


def test_pre_vote_is_refused_while_the_leader_is_alive() -> None:
    c = Cluster()
    leader = c.elect(0)
    term = leader.term
    isolated = c.cores[2]
    for _ in range(2 * ELECTION):  # cut off: it hears nothing and campaigns alone
        isolated.tick()
    assert isolated.role is Role.PRE_CANDIDATE and isolated.term == term
    requests = [m for m in c.flush(2) if isinstance(m, PreVoteRequest)]
    assert {m.dst for m in requests} == {0, 1} and all(m.term == term + 1 for m in requests)
    c.cores[1].step(requests[0] if requests[0].dst == 1 else requests[1])
    assert c.flush(1) == [PreVoteResponse(term, 1, 2, False)]
    assert c.cores[1].term == term and leader.role is Role.LEADER
    # Once the lease has run out (no leader heard for an election timeout) it is granted.
    for _ in range(ELECTION):
        c.cores[1].tick()
    c.cores[1].step(PreVoteRequest(term + 1, 2, 1, 0, NO_EPOCH))
    assert PreVoteResponse(term + 1, 1, 2, True) in c.flush(1)


def test_check_quorum_steps_down_a_leader_cut_off_from_the_majority() -> None:
    c = Cluster()
    leader = c.elect(0)
    for _ in range(3 * ELECTION):
        c.heartbeat(drop=to(2))  # one follower answering: still a majority
    assert leader.role is Role.LEADER
    for _ in range(2 * ELECTION):
        c.heartbeat(drop=lambda m: m.dst == 0)
    assert c.cores[0].role is Role.FOLLOWER and c.cores[0].leader_id is None
    with pytest.raises(NotLeaderError):
        leader.propose(b"x", 1)
    # The driver saw both changes of role in the Readies.
    assert c.port.leaderships[0] == [Leadership(leader.term, 0), Leadership(leader.term, None)]


def test_new_partition_leader_writes_no_marker() -> None:
    c = Cluster()
    leader = c.elect(0)
    assert leader.log_end_offset == 0
    assert c.port.leaderships[0] == [Leadership(leader.term, 0)]  # the epoch starts at 0
    (entry,) = c.propose(0, [b"first"])
    assert entry.base_offset == 0
    assert leader.high_watermark == 1


def test_only_current_term_entries_commit_by_counting() -> None:
    old = batches([1])
    c = Cluster(logs={0: old}, hard={i: HardState(1, None, 0) for i in range(3)},
                max_append_bytes=1)  # one batch per append: the ack of the old entry comes first
    held: list[Message] = []

    def hold_marker_once_follower_has_old_entry(m: Message) -> bool:
        if (isinstance(m, AppendRequest) and m.entries and m.entries[0].base_offset == 1
                and c.logs[1].log_end_offset == 1):
            held.append(m)
            return True
        return m.dst == 2 or m.src == 2

    leader = c.elect(0, drop=hold_marker_once_follower_has_old_entry)
    marker = c.logs[0].entry_at(1)
    assert marker is not None and marker.epoch == leader.term > 1 and marker.base_offset == 1
    assert c.port.leaderships[0] == [Leadership(leader.term, 1)]  # the epoch starts at its marker
    assert c.logs[1].entry_at(0) == old[0]  # the old entry is on a majority...
    assert leader.high_watermark == 0  # ...and still not committed
    c.cores[1].step(held[0])
    c.settle(drop=to(2))
    assert leader.high_watermark == 2


def test_diverged_follower_is_truncated_with_a_fast_backtrack() -> None:
    common = batches([1])
    follower_log = common + batches([1] * 100, start=1)  # uncommitted tail of epoch 1
    leader_log = common + batches([2] * 60 + [3] * 60, start=1)
    c = Cluster(logs={0: leader_log, 1: follower_log, 2: common},
                hard={0: HardState(3, None, 1), 1: HardState(1, None, 1), 2: HardState(3, 0, 1)})
    c.elect(0, drop=lambda m: m.dst == 1 or m.src == 1)
    c.sent.clear()
    c.settle()
    c.heartbeat()
    rejections = [m for m in c.sent if isinstance(m, AppendResponse) and not m.success]
    assert 1 <= len(rejections) <= 2  # one per epoch to skip, not one per entry
    assert list(c.logs[1].entries) == list(c.logs[0].entries)
    assert any(rd.truncate_to == 1 for rd in c.readies[1])


def test_leadership_transfer_waits_for_the_target_to_catch_up() -> None:
    c = Cluster()
    old = c.elect(0)
    c.propose(0, [b"a", b"b", b"c"], drop=to(2))
    assert c.logs[2].log_end_offset == 0
    old.transfer_leadership(2)
    with pytest.raises(NotLeaderError):
        old.propose(b"refused while transferring", 1)
    ends_at_timeout_now: list[int] = []

    def watch(m: Message) -> bool:
        if isinstance(m, TimeoutNow):
            ends_at_timeout_now.append(c.logs[2].log_end_offset)
        return False

    c.settle(drop=watch)
    c.heartbeat()
    assert ends_at_timeout_now == [3]
    assert c.cores[2].role is Role.LEADER and c.cores[2].term == old.term
    assert old.role is Role.FOLLOWER and old.leader_id == 2


def test_follower_behind_the_leader_log_start_is_reset_to_it() -> None:
    c = Cluster()
    c.elect(0)
    c.propose(0, [b"%d" % i for i in range(6)], drop=to(2))
    c.logs[0].advance_log_start(4)
    c.logs[1].advance_log_start(4)
    c.heartbeat()
    assert c.logs[2].log_start_offset == 4
    assert list(c.logs[2].entries) == list(c.logs[0].entries)
    assert c.cores[2].high_watermark >= 4
    assert [rd.reset_to for rd in c.readies[2] if rd.reset_to is not None] == [4]
    # A follower that already holds the leader's first batch keeps its log.
    assert all(rd.reset_to is None for rd in c.readies[1])


def test_flow_control_bounds_appends_in_flight() -> None:
    c = Cluster(max_inflight_appends=2, max_append_bytes=10)
    leader = c.elect(0)
    c.sent.clear()
    for i in range(8):
        leader.propose(b"%08d" % i, 1)
    sent = c.flush(0)
    appends = [m for m in sent if isinstance(m, AppendRequest) and m.dst == 1]
    assert len(appends) == 2
    assert all(sum(e.size for e in m.entries) <= 10 for m in appends)
    c.settle(pending=sent)
    assert c.logs[1].log_end_offset == c.logs[2].log_end_offset == 8
    assert leader.high_watermark == 8


def test_follower_holding_the_leader_first_batch_is_not_reset() -> None:
    log = batches([1] * 6)
    c = Cluster(logs={1: log}, hard={1: HardState(1, None, 0)})
    follower = c.cores[1]
    follower.step(AppendRequest(1, 0, 1, 3, NO_EPOCH, tuple(log[4:]), 6))
    assert c.flush(1) == [AppendResponse(1, 1, 0, True, match_end=6)]
    assert list(c.logs[1].entries) == log and c.logs[1].log_start_offset == 0
    assert follower.high_watermark == 6


def test_heartbeats_and_their_answers_do_not_wait_for_a_slow_disk() -> None:
    """While a leader's and a follower's appends are still being written (a Ready in flight
    each), heartbeats and their answers of the durable term go out at once, so a slow fsync
    neither looks like a dead leader nor deposes one by check-quorum; acknowledgements still
    wait for the disk."""
    c = Cluster()
    leader = c.elect(0)
    term = leader.term
    leader.propose(b"big", 1)
    in_flight = leader.ready()  # the leader's disk round, not finished
    append = next(m for m in in_flight.messages if m.dst == 1)
    follower = c.cores[1]
    follower.step(append)
    follower_round = follower.ready()  # the follower's write of it, not finished
    assert isinstance(follower_round.messages[0], AppendResponse)
    for _ in range(3 * ELECTION):  # far past an election timeout and a check-quorum window
        leader.tick()
        heartbeats = leader.take_prompt_messages()
        assert [(m.term, m.dst) for m in heartbeats] == [(term, 1), (term, 2)]
        for heartbeat in heartbeats:
            c.cores[heartbeat.dst].step(heartbeat)
            c.cores[heartbeat.dst].tick()
            for answer in c.cores[heartbeat.dst].take_prompt_messages():
                assert answer == HeartbeatResponse(term, heartbeat.dst, 0)
                leader.step(answer)
    assert leader.role is Role.LEADER and leader.term == term
    assert all(c.cores[i].role is Role.FOLLOWER and c.cores[i].term == term for i in (1, 2))
    # The acknowledgement waited for the follower's disk; once done, the write commits.
    for i, rd in ((1, follower_round), (0, in_flight)):
        rd.apply_log_writes(c.logs[i])
        c.cores[i].advance(rd)
    leader.step(follower_round.messages[0])
    assert leader.high_watermark == append.entries[-1].end_offset


def test_a_heartbeat_answer_of_a_term_not_yet_durable_waits_for_it() -> None:
    """A heartbeat of a new term makes the follower adopt the term: its answer promises that
    term, so it leaves only with the Ready that persists it."""
    c = Cluster()
    c.elect(0)
    follower = c.cores[1]
    follower.step(Heartbeat(follower.term + 1, 2, 1, 0))
    assert follower.take_prompt_messages() == []
    rd = follower.ready()
    assert rd.hard_state is not None and rd.hard_state.term == follower.term
    assert rd.messages == (HeartbeatResponse(follower.term, 1, 2),)


def test_a_round_of_a_retired_replica_is_dropped() -> None:
    """A node that rebuilt a replica's core (storage changed under it) marks the old one
    retired: the round in flight completes without its vote, its HW or its advance."""
    c = Cluster()
    c.cores[1].step(VoteRequest(1, 0, 1, 0, NO_EPOCH))
    rnd = c.driver.begin([(1, c.replicas[1])])
    assert rnd is not None
    (write,) = rnd.writes
    write.persist()
    c.replicas[1].retired = True
    c.driver.complete(rnd)
    assert c.port.out == [] and c.port.readies[1] == []
