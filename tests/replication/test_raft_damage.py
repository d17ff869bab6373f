"""Replicas whose storage lost acknowledged entries (Protocol-Aware Recovery, FAST'18).

A restart can find a log shorter than what the replica acknowledged (a corrupted segment is
cut at the damage). The leader must notice and send the lost part again, and until the replica
has it back it must neither campaign nor vote by its shorter log: in a group where the lost
entries were committed by it and one other replica, its vote could otherwise elect the third,
which never had them.
"""

from __future__ import annotations

import random

from raft_helpers import ELECTION, Cluster, MemoryStore, to

from tidelog.replication import AppendResponse, HardState, RaftCore, Role
from tidelog.replication.driver import DrivenReplica


def lose_tail(c: Cluster, i: int, keep: int) -> RaftCore:
    """Node i restarts with its log cut at `keep`, knowing (from its checkpoint) where it
    ended before."""
    log = c.logs[i]
    floor = (c.cores[i].last_epoch, log.log_end_offset)
    log.truncate_to(keep)
    hs = c.hard.get(i, HardState(0, None, 0))
    hs = HardState(hs.term, hs.vote, min(hs.high_watermark, keep))
    core = RaftCore(i, c.ids, log, random.Random(i), c.config, hs, repair_floor=floor)
    c.replicas[i] = DrivenReplica(core, MemoryStore(log, c.hard, i, c.confs), hs)
    c.cores[i] = core
    return core


def test_idle_leader_repairs_a_follower_that_lost_acknowledged_entries() -> None:
    c = Cluster()
    leader = c.elect(0)
    c.propose(0, [b"%d" % i for i in range(10)])
    assert c.logs[2].log_end_offset == leader.log_end_offset == leader.match_of(2)
    damaged = lose_tail(c, 2, keep=4)
    assert damaged.damaged
    c.sent.clear()
    for _ in range(3):
        c.heartbeat()
    assert list(c.logs[2].entries) == list(c.logs[0].entries)
    assert any(isinstance(m, AppendResponse) and m.lost for m in c.sent)
    assert leader.match_of(2) == leader.log_end_offset
    assert not damaged.damaged


def test_quiet_leader_is_woken_to_repair_a_follower_that_lost_acknowledged_entries() -> None:
    """A damaged replica may not campaign, and a pre-vote is what wakes a quiesced leader: it
    pokes its peers with an unasked heartbeat answer instead, and the woken leader repairs it."""
    c = Cluster(quiesce=True)
    leader = c.elect(0)
    c.propose(0, [b"%d" % i for i in range(10)])
    c.heartbeat()
    assert leader.quiesced and c.cores[1].quiesced and c.cores[2].quiesced
    damaged = lose_tail(c, 2, keep=4)
    for _ in range(3 * ELECTION):
        for core in c.cores.values():
            core.tick()
        c.settle()
        if not damaged.damaged and leader.quiesced:
            break
    assert not damaged.damaged
    assert list(c.logs[2].entries) == list(c.logs[0].entries)
    assert leader.quiesced and damaged.quiesced


def test_damaged_replica_neither_campaigns_nor_votes_by_its_shorter_log() -> None:
    c = Cluster()
    c.elect(0)
    # Committed by nodes 0 and 1 only: node 2 is cut off.
    c.propose(0, [b"%d" % i for i in range(10)], drop=to(2))
    committed = c.cores[0].high_watermark
    assert committed >= 10 and c.logs[2].log_end_offset < committed
    damaged = lose_tail(c, 1, keep=2)
    # Node 0 is down. Nodes 1 and 2 time out again and again: no leader may come of it,
    # because node 2 lacks the committed entries and node 1 does not know which they were.
    for _ in range(6 * ELECTION):
        for i in (1, 2):
            c.cores[i].tick()
        c.settle(drop=to(0))
        assert damaged.role is Role.FOLLOWER
        assert c.cores[2].role is not Role.LEADER
    # Node 0 returns: its log is at least where node 1's was, so node 1 votes for it, and
    # the new leader repairs node 1.
    c.elect(0)
    c.heartbeat()
    assert list(c.logs[1].entries) == list(c.logs[0].entries)
    assert c.logs[0].log_end_offset >= committed
    assert not damaged.damaged
