"""Leadership held by node liveness (`RaftConfig.fortify`, "Fortification" in
`tidelog.replication.raft`): an awake follower's election timer stands still while its
leader's node is heard, check-quorum counts the voters whose nodes are heard, and a leader
heartbeats a follower only when something waits on it."""

from __future__ import annotations

import pytest
from raft_helpers import ELECTION, Cluster

from tidelog.replication import (
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    PreVoteRequest,
    Role,
)
from tidelog.replication.messages import Message


def _awake_follower(fortify: bool, stall_timeouts: int = 1) -> Cluster:
    """Node 0 leads; node 2 missed the quiesce heartbeat, so it is awake while the others are
    quiet (as after a stray message woke it)."""
    c = Cluster(3, quiesce=True, fortify=fortify, stall_timeouts=stall_timeouts)
    c.elect(0, drop=lambda m: isinstance(m, Heartbeat) and m.dst == 2)
    assert c.cores[0].quiesced and not c.cores[2].quiesced
    return c


def _tick(c: Cluster, i: int, n: int) -> list[Message]:
    sent: list[Message] = []
    for _ in range(n):
        c.cores[i].tick()
        sent += c.flush(i)
    return sent


def test_an_awake_follower_never_campaigns_while_its_leaders_node_is_heard() -> None:
    c = _awake_follower(fortify=True)
    sent = _tick(c, 2, 6 * ELECTION)
    assert c.cores[2].role is Role.FOLLOWER and c.cores[2].leader_id == 0
    assert not any(isinstance(m, PreVoteRequest) for m in sent)
    # Silent for an election timeout, its leader is asked, by an answer to no heartbeat,
    # whether anything was lost.
    pokes = [m for m in sent if isinstance(m, HeartbeatResponse)]
    assert pokes and all(m.dst == 0 for m in pokes)
    # Its leader's node silent for an election timeout (node liveness): it stands.
    c.cores[2].peer_down(0)
    sent = _tick(c, 2, 2 * ELECTION)
    assert any(isinstance(m, PreVoteRequest) for m in sent)


def test_without_fortification_the_awake_follower_campaigns_on_its_own_clock() -> None:
    c = _awake_follower(fortify=False)
    sent = _tick(c, 2, 2 * ELECTION)
    assert any(isinstance(m, PreVoteRequest) for m in sent)


def test_a_supporting_follower_grants_a_vote_once_its_leader_campaigns() -> None:
    """A leader never campaigns: a vote request from it says it no longer leads (it stepped
    down, or its node restarted), so the follower's support ends and it grants it."""
    c = _awake_follower(fortify=True)
    follower = c.cores[2]
    follower.step(PreVoteRequest(follower.term + 1, 0, 2, follower.log_end_offset,
                                 follower.last_epoch))
    answers = c.flush(2)
    assert [m.granted for m in answers if m.dst == 0] == [True]  # type: ignore[attr-defined]
    # Any other candidate is refused while the leader's node is heard.
    c2 = _awake_follower(fortify=True)
    f2 = c2.cores[2]
    f2.step(PreVoteRequest(f2.term + 1, 1, 2, f2.log_end_offset, f2.last_epoch))
    assert [m.granted for m in c2.flush(2) if m.dst == 1] == [False]  # type: ignore[attr-defined]


def test_a_leader_heartbeats_only_the_follower_an_append_waits_on() -> None:
    c = Cluster(3, quiesce=True, fortify=True)
    c.elect(0)
    cut = 2
    c.propose(0, [b"a"], drop=lambda m: m.dst == cut or m.src == cut)
    leader = c.cores[0]
    assert not leader.quiesced  # node 2 lacks the entry
    sent = _tick(c, 0, 2 * ELECTION)
    beats = [m for m in sent if isinstance(m, Heartbeat)]
    assert beats and {m.dst for m in beats} == {cut}
    # Asked once about the stall, and again each election timeout it lasts, not each tick.
    assert len(beats) <= 3, len(beats)


def test_a_leaders_tick_that_sends_nothing_tells_its_driver_nothing() -> None:
    """A fortified leader's heartbeat tick mostly sends nothing (heartbeats go on demand): it
    then returns False, so the driver does not look at the core again for it; the ticks that
    ask the stalled follower return True. Before, every heartbeat tick returned True: each
    of a node's 100-350 awake leaders under a produce over 1,000 partitions was looked at
    again each interval."""
    c = Cluster(3, quiesce=True, fortify=True)
    c.elect(0)
    cut = 2
    c.propose(0, [b"a"], drop=lambda m: m.dst == cut or m.src == cut)
    leader = c.cores[0]
    acted, sent = [], []
    for _ in range(3 * ELECTION):
        acted.append(leader.tick())
        sent.append(c.flush(0))
    assert acted == [bool(messages) for messages in sent], (acted, sent)
    assert 1 <= sum(acted) <= 4 and leader.role is Role.LEADER and not leader.quiesced


def test_an_awake_leader_given_its_ticks_two_at_a_time_asks_only_the_stalled_follower() -> None:
    """A fortified leader is `steady`: given its ticks two at a time (here two heartbeat
    intervals' worth; the simulator gives as many) it still asks only the follower an append
    waits on, at most as often as one tick at a time would, and leads on while the
    followers' nodes are heard."""
    c = Cluster(3, quiesce=True, fortify=True)
    c.elect(0)
    cut = 2
    c.propose(0, [b"a"], drop=lambda m: m.dst == cut or m.src == cut)
    leader = c.cores[0]
    assert leader.steady
    sent: list[Message] = []
    for _ in range(2 * ELECTION):
        leader.tick(ticks=2)
        sent += c.flush(0)
    beats = [m for m in sent if isinstance(m, Heartbeat)]
    assert beats and {m.dst for m in beats} == {cut} and len(beats) <= 3, beats
    assert leader.role is Role.LEADER and leader.steady


def test_check_quorum_counts_the_voters_whose_nodes_are_heard() -> None:
    c = Cluster(3, quiesce=True, fortify=True)
    c.elect(0)
    c.propose(0, [b"a"], drop=lambda m: m.dst == 2 or m.src == 2)
    leader = c.cores[0]
    for _ in range(3 * ELECTION):  # nothing answers, but both followers' nodes are heard
        leader.tick()
        c.flush(0)
    assert leader.role is Role.LEADER
    for _ in range(2 * ELECTION):  # node liveness hears neither
        leader.tick(down={1, 2})
        c.flush(0)
    assert leader.role is Role.FOLLOWER


def test_with_stall_timeouts_a_follower_pokes_only_after_that_many_election_timeouts() -> None:
    """`RaftConfig.stall_timeouts` (a node's links lose messages only when they break): an
    awake follower unheard for fewer election timeouts than that asks nothing, and then asks
    once each time it lasts as long."""
    c = _awake_follower(fortify=True, stall_timeouts=4)
    pokes = [m for m in _tick(c, 2, 3 * ELECTION) if isinstance(m, HeartbeatResponse)]
    assert not pokes  # at most 2 election timeouts each (the random part): under 4 either way
    sent = _tick(c, 2, 6 * ELECTION)
    pokes = [m for m in sent if isinstance(m, HeartbeatResponse)]
    assert pokes and all(m.dst == 0 for m in pokes) and len(pokes) <= 2
    assert not any(isinstance(m, PreVoteRequest) for m in sent)
    # A word from the leader starts the count again.
    follower = c.cores[2]
    follower.step(Heartbeat(follower.term, 0, 2, follower.high_watermark))
    c.flush(2)
    assert not [m for m in _tick(c, 2, 3 * ELECTION) if isinstance(m, HeartbeatResponse)]


def test_with_stall_timeouts_a_leader_asks_a_stalled_follower_only_that_late() -> None:
    c = Cluster(3, quiesce=True, fortify=True, stall_timeouts=4)
    c.elect(0)
    cut = 2
    c.propose(0, [b"a"], drop=lambda m: m.dst == cut or m.src == cut)
    assert not [m for m in _tick(c, 0, 3 * ELECTION) if isinstance(m, Heartbeat)]
    beats = [m for m in _tick(c, 0, 6 * ELECTION) if isinstance(m, Heartbeat)]
    assert beats and {m.dst for m in beats} == {cut} and len(beats) <= 2


def test_a_quiet_leader_stays_quiet_on_an_answer_that_tells_it_nothing() -> None:
    """An append answered twice (sent again after a question about a stall, or overtaken by
    a later append's answer): the late answer acknowledges what the quiet leader knows its
    follower holds, and waking for it would cost a quiesce heartbeat to each follower."""
    c = Cluster(3, quiesce=True, fortify=True)
    c.elect(0)
    c.propose(0, [b"a"])
    leader = c.cores[0]
    for _ in range(4 * ELECTION):  # until the group's last write is held everywhere
        if leader.quiesced:
            break
        c.heartbeat()
    assert leader.quiesced
    end = leader.log_end_offset
    leader.step(AppendResponse(leader.term, 1, 0, True, match_end=end))
    leader.step(AppendResponse(leader.term, 2, 0, True, match_end=end - 1))
    # Each sender (awake: the append it answered woke it) alone is told to go quiet.
    told = c.flush(0)
    assert leader.quiesced and [(type(m), m.dst) for m in told] == [(Heartbeat, 1), (Heartbeat, 2)]
    assert all(m.quiesce for m in told)  # type: ignore[attr-defined]
    # Anything else still wakes it: an answer of another term, a refusal, a poke.
    leader.step(HeartbeatResponse(leader.term, 1, 0))
    assert not leader.quiesced


def test_a_leader_that_stepped_down_tells_a_follower_still_supporting_it() -> None:
    """A follower that never learnt its leader stepped down within the term (its removal, or
    check-quorum) asks it, after a stall interval, whether something was lost: the former
    leader answers ``resigned``, and the follower's support ends (it grants votes again).
    Any other answer from it (a term's word, a stale poke's) leaves the support be."""
    c = _awake_follower(fortify=True)
    leader, follower = c.cores[0], c.cores[2]
    follower.step(HeartbeatResponse(follower.term, 0, 2))  # not resigned: nothing changes
    assert follower._supports()
    leader._become_follower(leader.term, None)  # stepped down, as a removed leader does
    pokes = [m for m in _tick(c, 2, 3 * ELECTION) if isinstance(m, HeartbeatResponse)]
    assert pokes
    leader.step(pokes[0])
    [answer] = c.flush(0)
    assert isinstance(answer, HeartbeatResponse) and answer.resigned and answer.dst == 2
    follower.step(answer)
    assert not follower._supports()
    follower.step(PreVoteRequest(follower.term + 1, 1, 2, follower.log_end_offset,
                                 follower.last_epoch))
    assert [m.granted for m in c.flush(2) if m.dst == 1] == [True]  # type: ignore[attr-defined]


def test_a_steady_follower_takes_many_ticks_at_once_and_only_runs_slower() -> None:
    """A follower that supports its leader is `steady`: a driver may tick it several ticks at
    once (the node does, once a heartbeat interval). It still never campaigns and still asks
    its leader after a stall; a leader, a quiet core or one whose support lapsed takes one tick
    at a time, and is refused more."""
    c = _awake_follower(fortify=True)
    follower, leader = c.cores[2], c.cores[0]
    assert follower.steady and not leader.steady and not c.cores[1].steady  # 1 is quiet
    for core in (leader, c.cores[1]):
        with pytest.raises(ValueError, match="only a steady core"):
            core.tick(ticks=2)
    sent: list[Message] = []
    for _ in range(6 * ELECTION // 5):
        follower.tick(ticks=5)
        sent += c.flush(2)
    assert follower.role is Role.FOLLOWER and follower.leader_id == 0 and follower.steady
    assert not any(isinstance(m, PreVoteRequest) for m in sent)
    assert [m.dst for m in sent if isinstance(m, HeartbeatResponse)]  # the stall's pokes
    follower.peer_down(0)
    assert not follower.steady
    with pytest.raises(ValueError, match="only a steady core"):
        follower.tick(ticks=5)
    assert any(isinstance(m, PreVoteRequest) for m in _tick(c, 2, 2 * ELECTION))
