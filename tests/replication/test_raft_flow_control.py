"""Flow control cannot leak: whatever a network does to appends (drops, duplicates, reorders)
and whatever a follower loses (a log tail truncated at restart), the leader's window of appends
in flight never stays shut, so once messages flow again every follower catches up within a few
heartbeats. The cores are driven directly and the test owns the network: each message moves
only when the test (or hypothesis) says so.

Followers never tick and check-quorum is off, so the leader stays for the whole run: what is
under test is replication towards followers, not elections.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raft_helpers import Cluster

from tidelog.replication import AppendRequest, HardState, Message, RaftCore

#: Heartbeat rounds (a leader tick, then every message delivered) a reliable network needs to
#: bring every follower to the leader's log end and high watermark, from any state.
HEAL_ROUNDS = 3
#: Heartbeat rounds that bring every follower to the leader's high watermark once the logs are
#: equal. A heartbeat carries a HW capped at what the leader knows the follower holds (it must
#: not mark as committed what the follower may lack): a follower whose acknowledgement was lost
#: gets a capped HW, its answer tells the leader where it is, and the next heartbeat carries
#: the whole HW.
HW_ROUNDS = 2


def _window_accounting_holds(c: Cluster, leader: RaftCore) -> None:
    """What the leader counts in flight is exactly what it recorded sending."""
    for pr in leader._progress.values():
        assert pr.inflight_bytes == sum(size for _, size in pr.inflight)
        assert len(pr.inflight) <= c.config.max_inflight_appends
        assert pr.replicating or not pr.inflight
        ends = [end for end, _ in pr.inflight]
        assert ends == sorted(set(ends)) and all(end <= pr.next for end in ends)


def _caught_up(c: Cluster, leader: RaftCore) -> bool:
    want = list(c.logs[leader.id].entries)
    return all(list(c.logs[i].entries) == want for i in c.ids)


def _heal(c: Cluster, leader: RaftCore, pending: list[Message]) -> None:
    """Deliver what is still in flight, then give heartbeats over a reliable network: every
    follower must reach the leader's log end within HEAL_ROUNDS, and its high watermark within
    HW_ROUNDS more."""
    c.settle(pending=pending)
    for _ in range(HEAL_ROUNDS):
        if _caught_up(c, leader):
            break
        c.heartbeat()
    assert _caught_up(c, leader), {
        i: c.logs[i].log_end_offset for i in c.ids
    }
    for _ in range(HW_ROUNDS):
        c.heartbeat()
        if all(c.cores[i].high_watermark == leader.high_watermark for i in c.ids):
            break
    assert leader.high_watermark == leader.log_end_offset
    assert all(c.cores[i].high_watermark == leader.high_watermark for i in c.ids), {
        i: c.cores[i].high_watermark for i in c.ids
    }


def _lose_tail(c: Cluster, follower: int, keep: int) -> None:
    """The follower restarts having lost its batches from the ``keep``-th on (a corrupted
    segment cut off by recovery); its high watermark comes back no higher than what it holds."""
    log = c.logs[follower]
    if keep < len(log.entries):
        log.truncate_to(log.entries[keep].base_offset)
    hs = c.hard.get(follower, HardState(0, None, 0))
    c.hard[follower] = HardState(hs.term, hs.vote, min(hs.high_watermark, log.log_end_offset))
    c.restart(follower)


def test_a_full_byte_window_of_lost_appends_is_resent_after_a_heartbeat() -> None:
    # Bytes fill the window long before the count does, and the transport drops every append.
    c = Cluster(max_inflight_appends=64, max_inflight_bytes=40, max_append_bytes=10,
                check_quorum=False)
    leader = c.elect(0)
    c.propose(0, [b"%010d" % i for i in range(12)],
              drop=lambda m: isinstance(m, AppendRequest) and m.dst == 1)
    assert c.logs[1].log_end_offset == 0 and c.logs[2].log_end_offset == 12
    c.heartbeat()
    assert c.logs[1].log_end_offset == 12
    assert c.cores[1].high_watermark == leader.high_watermark == 12


def test_late_appends_are_not_resent_when_the_window_is_full() -> None:
    # Appends still on their way when a heartbeat answer comes back: the empty append that asks
    # where the follower is arrives after them (one stream per direction) and frees the window.
    c = Cluster(max_inflight_appends=2, max_append_bytes=10, check_quorum=False)
    leader = c.elect(0)
    late: list[Message] = []

    def hold(m: Message) -> bool:
        if isinstance(m, AppendRequest) and m.dst == 1:
            late.append(m)
            return True
        return False

    c.propose(0, [b"%010d" % i for i in range(6)], drop=hold)
    assert len(late) == 2 and c.logs[1].log_end_offset == 0
    c.sent.clear()
    c.settle(pending=late)
    c.heartbeat()
    assert c.logs[1].log_end_offset == 6 and leader.high_watermark == 6
    resent = [e.base_offset for m in c.sent if isinstance(m, AppendRequest) and m.dst == 1
              for e in m.entries]
    assert sorted(resent) == [2, 3, 4, 5], "only what was never sent goes out"


@pytest.mark.parametrize("more", [0, 1])
def test_a_follower_that_lost_its_log_tail_is_brought_back(more: int) -> None:
    # With more records coming, and with an idle leader that believes the follower holds its
    # whole log (only the heartbeat tells the follower that it does not).
    c = Cluster(check_quorum=False)
    leader = c.elect(0)
    c.propose(0, [b"%d" % i for i in range(10)])
    assert c.logs[1].log_end_offset == 10
    _lose_tail(c, 1, 4)
    c.propose(0, [b"more"] * more)
    _heal(c, leader, [])


actions = st.lists(
    st.tuples(
        st.sampled_from(["propose", "tick", "deliver", "drop", "duplicate", "lose_tail"]),
        st.integers(0, 1 << 16),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inflight_appends=st.integers(1, 4),
    inflight_bytes=st.integers(1, 48),
    append_bytes=st.integers(1, 24),
    steps=actions,
)
def test_no_loss_duplication_or_reordering_leaks_the_window(
    inflight_appends: int, inflight_bytes: int, append_bytes: int,
    steps: list[tuple[str, int]],
) -> None:
    c = Cluster(max_inflight_appends=inflight_appends, max_inflight_bytes=inflight_bytes,
                max_append_bytes=append_bytes, check_quorum=False)
    leader = c.elect(0)
    pending: list[Message] = []

    def step(m: Message) -> None:
        c.cores[m.dst].step(m)
        pending.extend(c.flush(m.dst))

    for kind, n in steps:
        if kind == "propose":
            leader.propose(bytes(1 + n % 16), 1 + n % 3)
            pending.extend(c.flush(0))
        elif kind == "tick":
            leader.tick()
            pending.extend(c.flush(0))
        elif kind == "lose_tail":
            follower = 1 + n % 2
            _lose_tail(c, follower, (n // 2) % (len(c.logs[follower].entries) + 1))
        elif pending:
            m = pending[n % len(pending)]
            if kind != "duplicate":
                pending.remove(m)
            if kind != "drop":
                step(m)
        _window_accounting_holds(c, leader)
    _heal(c, leader, pending)


def test_a_follower_whose_acknowledgement_was_lost_learns_the_high_watermark() -> None:
    # Found by the property above: the leader commits on the other follower's answer, so the
    # first heartbeat to follower 1 carries a HW capped at what the leader knows it holds.
    c = Cluster(max_inflight_appends=2, max_inflight_bytes=2, max_append_bytes=1,
                check_quorum=False)
    leader = c.elect(0)
    leader.propose(bytes(1), 1)
    pending = c.flush(0)
    for m in [m for m in pending if m.dst == 1]:
        pending.remove(m)
        c.cores[1].step(m)
        c.flush(1)  # its answer is lost
    _heal(c, leader, pending)
