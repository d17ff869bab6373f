"""Storage faults on real nodes: replicas restarted with segments cut short while they were down.

The damage is what a bad disk or an operator's mistake leaves: a segment file shorter than it
was. The node finds it at startup (the segment's index points past its end), keeps the intact
prefix, and must then be repaired from the others without losing any acknowledged record.

The tests share the module's cluster, each with a topic of its own: each one leaves every node
running again and its topic repaired.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from record_helpers import values_of

from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.types import DEBUGGING_REPLICA_ID, LATEST_TIMESTAMP

pytestmark = pytest.mark.timeout(180)

SEGMENT_BYTES = 2048


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"replica_lag_max_ms": 2000}


@pytest.fixture(autouse=True)
def every_node_running_after(cluster: LocalCluster) -> Iterator[None]:
    """A test that fails with a node stopped must not hand the next one a cluster of two."""
    yield
    for node in cluster.node_ids:
        if not cluster.is_running(node):
            cluster.restart(node)


def log_end(raw: Raw, topic: str, node: int) -> int:
    answer = raw.list_offset(node, topic, 0, LATEST_TIMESTAMP, replica_id=DEBUGGING_REPLICA_ID)
    assert answer.error_code == 0, answer
    return answer.offset


def produce(raw: Raw, topic: str, count: int, start: int = 0) -> dict[int, bytes]:
    """`count` acknowledged (acks=all) batches of 4 records; the acknowledged values by
    offset."""
    return raw.produce_acknowledged(topic, 0, (
        [b"%06d-%d" % (i, j) + bytes(40) for j in range(4)] for i in range(start, start + count)
    ))


def partition_dir(c: LocalCluster, topic: str, node: int) -> Path:
    return c.data_dir / f"node-{node}" / f"{topic}-0"


def wait_until_every_replica_holds_it_all(c: LocalCluster, raw: Raw, topic: str) -> None:
    """acks=all waits for the in-sync replicas only: a follower that opened its replica late
    (a loaded machine) may not hold the batches yet, and has no segments to damage."""
    leader = raw.wait_leaders(topic, 1)[0]
    end = log_end(raw, topic, leader)
    wait_for(lambda: all(log_end(raw, topic, n) == end for n in c.node_ids), 60,
             "every replica to hold every acknowledged batch")


def cut_segment(c: LocalCluster, topic: str, node: int, which: str) -> None:
    """Halve the middle or the active (last) segment of `node`'s replica."""
    segments = sorted(partition_dir(c, topic, node).glob("*.log"))
    assert len(segments) >= 3, segments
    victim = segments[len(segments) // 2] if which == "middle" else segments[-1]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])


def assert_all_acked_on_every_replica(
    c: LocalCluster, raw: Raw, topic: str, acked: dict[int, bytes]
) -> None:
    def converged() -> bool:
        ends = {log_end(raw, topic, n) for n in c.node_ids}
        return len(ends) == 1
    wait_for(converged, 60, "every replica's log end to agree")
    leader = raw.wait_leaders(topic, 1)[0]
    held = dict(values_of(raw.fetch_all(leader, topic, 0)))
    lost = {o: v for o, v in acked.items() if held.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records lost, first {min(lost)}"


def test_follower_restarted_with_a_shorter_log_catches_up_and_rejoins_the_isr(
    cluster: LocalCluster, raw: Raw,
) -> None:
    c, topic = cluster, "damaged-follower"
    raw.create_topic(topic, 1, 3, segment_bytes=str(SEGMENT_BYTES))
    acked = produce(raw, topic, 60)
    wait_until_every_replica_holds_it_all(c, raw, topic)
    leader = raw.wait_leaders(topic, 1)[0]
    follower = next(n for n in c.node_ids if n != leader)
    logged = len(c.logs(follower))
    assert c.stop(follower) == 0
    cut_segment(c, topic, follower, "middle")
    c.restart(follower)
    # The leader is idle: only the follower's answer to a heartbeat can tell it that its
    # picture of the follower is wrong.
    wait_for(lambda: log_end(raw, topic, follower) == log_end(raw, topic, leader), 30,
             "the follower to catch up")
    wait_for(lambda: follower in raw.metadata(leader, topic).partitions[0].isr, 30, "the ISR")
    assert "batches were lost" in c.logs(follower)[logged:]
    assert_all_acked_on_every_replica(c, raw, topic, acked)


def test_two_damaged_replicas_wait_for_the_one_that_holds_everything(
    cluster: LocalCluster, raw: Raw,
) -> None:
    c, topic = cluster, "damaged-majority"
    raw.create_topic(topic, 1, 3, segment_bytes=str(SEGMENT_BYTES))
    acked = produce(raw, topic, 60)
    wait_until_every_replica_holds_it_all(c, raw, topic)
    leader = raw.wait_leaders(topic, 1)[0]
    first, second = (n for n in c.node_ids if n != leader)
    assert c.stop(first) == 0
    assert c.stop(second) == 0
    c.kill(leader)
    cut_segment(c, topic, first, "middle")
    cut_segment(c, topic, second, "active")
    # The two damaged replicas are a majority: by their shortened logs they could elect one
    # of themselves and truncate the leader's copy of what they lost when it returns. They come
    # back together (one alone finds no metadata voter to catch up from and waits 10 s before
    # it serves) and serve, with a controller of their own, before the leader returns.
    c.restart(first, wait=False)
    c.restart(second, wait=False)
    c.wait_ready()
    c.restart(leader)
    assert_all_acked_on_every_replica(c, raw, topic, acked)
    acked.update(produce(raw, topic, 5, start=60))
    assert_all_acked_on_every_replica(c, raw, topic, acked)
