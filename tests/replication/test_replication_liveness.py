"""Replication liveness on a real 3-node cluster: a follower that falls far behind (stopped with
SIGSTOP while the others commit) comes back in full, and a new leader whose only live follower
is catching up keeps its leadership and takes acks=all writes meanwhile.

Processes are signalled for real (SIGSTOP, SIGCONT, SIGKILL); every wait polls a condition and
the test timeout is the only bound on time.
"""

from __future__ import annotations

import pytest

from tidelog.testing import Raw, make_batch, wait_for
from tidelog.types import DEBUGGING_REPLICA_ID, LATEST_TIMESTAMP

pytestmark = pytest.mark.timeout(300)

TOPIC = "lagging"
RECORD = b"r" * 200
BATCH = 1000  # records per produce request: 200 kB


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    # Followers leave the ISR after 2 s without catching up, so a stopped follower visibly
    # drops out and has to earn its way back in; no rebalancing moves leadership under a test.
    return {"auto_leader_rebalance_enable": False, "replica_lag_max_ms": 2000}


def _log_end(raw: Raw, node: int) -> int:
    return raw.list_offset(node, TOPIC, 0, LATEST_TIMESTAMP, replica_id=DEBUGGING_REPLICA_ID).offset


def _leader(raw: Raw, asked: int) -> int | None:
    leader = raw.metadata(asked, TOPIC).partitions[0].leader_id
    return leader if leader >= 0 else None


def _isr(raw: Raw, asked: int) -> list[int]:
    leader = wait_for(lambda: _leader(raw, asked), what="a leader")
    return sorted(raw.metadata(leader, TOPIC).partitions[0].isr)


def _produce(raw: Raw, asked: int, records: int) -> None:
    """Commit `records` records (acks=all) in batches of BATCH, to whoever leads (as `asked`
    knows it): this is about the follower that is away, not about who leads meanwhile."""
    done = 0
    while done < records:
        leader = wait_for(lambda: _leader(raw, asked), what="a leader")
        if raw.produce(leader, TOPIC, 0, make_batch([RECORD] * BATCH)).error_code == 0:
            done += BATCH


def test_a_follower_stopped_while_100k_records_commit_catches_up_and_rejoins_the_isr(
    fresh_raw: Raw,
) -> None:
    raw = fresh_raw
    raw.create_topic(TOPIC, 1, 3)
    leader = raw.wait_leaders(TOPIC, 1)[0]
    stopped, other = sorted(n for n in raw.cluster.node_ids if n != leader)
    raw.cluster.pause(stopped)
    try:
        _produce(raw, other, 100_000)
        wait_for(lambda: stopped not in _isr(raw, other), what="the ISR to shrink")
    finally:
        raw.cluster.resume(stopped)
    end = _log_end(raw, wait_for(lambda: _leader(raw, other), what="a leader"))
    assert end >= 100_000
    wait_for(lambda: _log_end(raw, stopped) >= end, timeout=120,
             what=f"node {stopped} to catch up to offset {end}")
    wait_for(lambda: stopped in _isr(raw, other), what=f"node {stopped} to rejoin the ISR")


def test_a_new_leader_whose_only_follower_is_catching_up_keeps_its_epoch(
    fresh_raw: Raw,
) -> None:
    raw = fresh_raw
    raw.create_topic(TOPIC, 1, 3)
    old_leader = raw.wait_leaders(TOPIC, 1)[0]
    first_epoch = raw.metadata(old_leader, TOPIC).partitions[0].leader_epoch
    behind, current = (n for n in raw.cluster.node_ids if n != old_leader)
    raw.cluster.pause(behind)
    try:
        for _ in range(40):  # 8 MB the resumed follower will lack
            assert raw.produce(old_leader, TOPIC, 0, make_batch([RECORD] * BATCH)).error_code == 0
    finally:
        raw.cluster.kill(old_leader)
        raw.cluster.resume(behind)
    # Only `current` holds the whole log, so only it can win; `behind` is its one follower and
    # every acks=all write needs it.

    def accepted() -> bool:
        return raw.produce(current, TOPIC, 0, make_batch([b"after"]), timeout_ms=1000
                           ).error_code == 0

    wait_for(accepted, timeout=60, what="an acks=all write to the new leader")
    epoch = raw.metadata(current, TOPIC).partitions[0].leader_epoch
    assert first_epoch < epoch <= first_epoch + 3, "a few election rounds at most"
    end = _log_end(raw, current)
    writes = 0
    while _log_end(raw, behind) < end or writes < 20:
        answer = raw.produce(current, TOPIC, 0, make_batch([b"during"]), timeout_ms=5000)
        assert answer.error_code == 0, f"write {writes} while catching up: {answer}"
        writes += 1
        assert raw.metadata(current, TOPIC).partitions[0].leader_epoch == epoch
    leader = raw.metadata(current, TOPIC).partitions[0]
    assert (leader.leader_id, leader.leader_epoch) == (current, epoch)
