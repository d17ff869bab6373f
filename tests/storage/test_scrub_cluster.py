"""The scrubber on real nodes: a batch damaged on disk below what recovery checks is found
without a restart and repaired from a replica that holds it intact.

The damage is one flipped byte inside a record of a closed segment. A clean restart checks no
CRC, so only the scrubber can find it; on a leader, it must not cut what it may alone hold, and
hands leadership over first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from record_helpers import values_of

from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig
from tidelog.records import iter_batches
from tidelog.testing import LocalCluster, Raw, probe, wait_for
from tidelog.types import DEBUGGING_REPLICA_ID

pytestmark = pytest.mark.timeout(180)

TOPIC = "scrubbed"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    # Each log is verified again a second after its last pass began, so that damage done to a
    # running node is found within the test (the default is a day).
    return {"replica_lag_max_ms": 2000, "log_scrub_interval_ms": 1000}


def produce(raw: Raw, count: int) -> dict[int, bytes]:
    """`count` acknowledged (acks=all) batches of 4 records; the acknowledged values by offset."""
    return raw.produce_acknowledged(TOPIC, 0, (
        [b"%06d-%d" % (i, j) + bytes(40) for j in range(4)] for i in range(count)
    ))


def flip_a_byte(c: LocalCluster, node: int, which: str = "middle") -> int:
    """Flip a byte inside a record of the middle batch of the middle (closed) or the active
    segment of `node`'s replica (in place: a running node reads the change); returns the
    batch's base offset."""
    segments = sorted((c.data_dir / f"node-{node}" / f"{TOPIC}-0").glob("*.log"))
    assert len(segments) >= 4, segments
    victim = segments[len(segments) // 2] if which == "middle" else segments[-1]
    batches = list(iter_batches(victim.read_bytes()))
    pos, header = batches[len(batches) // 2]
    at = pos + header.size - 10
    with victim.open("r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))
    return header.base_offset


def replica_bytes(raw: Raw, node: int) -> bytes:
    return raw.fetch_all(node, TOPIC, 0, replica_id=DEBUGGING_REPLICA_ID)


def assert_identical_to_leader(raw: Raw, node: int, acked: dict[int, bytes]) -> None:
    def identical() -> bool:
        leader = raw.wait_leaders(TOPIC, 1)[0]
        return replica_bytes(raw, node) == replica_bytes(raw, leader)

    wait_for(identical, 60, f"node {node}'s replica to equal the leader's again")
    held = dict(values_of(replica_bytes(raw, node)))
    lost = {o: v for o, v in acked.items() if held.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records lost, first {min(lost)}"


@pytest.mark.parametrize("which", ["middle", "active"])
def test_a_follower_damaged_under_a_clean_restart_is_found_and_repaired(
    fresh_cluster: LocalCluster, fresh_raw: Raw, which: str,
) -> None:
    c, raw = fresh_cluster, fresh_raw
    raw.create_topic(TOPIC, 1, 3, segment_bytes="2048")
    acked = produce(raw, 60)
    leader = raw.wait_leaders(TOPIC, 1)[0]
    follower = next(n for n in c.node_ids if n != leader)
    # acks=all waits for the in-sync replicas only: a follower that opened its replica late
    # (a loaded machine) may not hold the batches yet, and has no segments to damage.
    assert_identical_to_leader(raw, follower, acked)
    assert c.stop(follower) == 0
    offset = flip_a_byte(c, follower, which)
    c.restart(follower)  # clean: recovery checks no CRC, so the damage goes unnoticed
    wait_for(lambda: f"corrupt batch at offset {offset}" in c.logs(follower), 30,
             "the scrubber to find the damage")
    wait_for(lambda: f"log cut at offset {offset}" in c.logs(follower), 30, "the cut")
    assert_identical_to_leader(raw, follower, acked)


def test_a_damaged_leader_hands_over_before_it_is_repaired(
    fresh_cluster: LocalCluster, fresh_raw: Raw,
) -> None:
    c, raw = fresh_cluster, fresh_raw
    raw.create_topic(TOPIC, 1, 3, segment_bytes="2048")
    acked = produce(raw, 60)
    leader = raw.wait_leaders(TOPIC, 1)[0]
    wait_for(lambda: len(raw.metadata(leader, TOPIC).partitions[0].isr) == 3, 30, "a full ISR")
    offset = flip_a_byte(c, leader)
    wait_for(lambda: "handing leadership" in c.logs(leader), 30, "the leader to step down")
    wait_for(lambda: raw.wait_leaders(TOPIC, 1)[0] != leader, 30, "another leader")
    wait_for(lambda: f"log cut at offset {offset}" in c.logs(leader), 30, "the cut")
    assert_identical_to_leader(raw, leader, acked)


def test_scrub_settings_are_validated(tmp_path: Path) -> None:
    base = {"node.id": "1", "listen": "127.0.0.1:0", "data.dir": str(tmp_path)}
    assert NodeConfig.from_properties(base).log_scrub_bytes_per_second == 8 * 1024 * 1024
    assert NodeConfig.from_properties(
        {**base, "log.scrub.bytes.per.second": "0"}
    ).log_scrub_bytes_per_second == 0
    with pytest.raises(InvalidConfigError, match=r"log\.scrub\.bytes\.per\.second"):
        NodeConfig.from_properties({**base, "log.scrub.bytes.per.second": "-1"})
    with pytest.raises(InvalidConfigError, match=r"log\.scrub\.interval\.ms"):
        NodeConfig.from_properties({**base, "log.scrub.interval.ms": "0"})


def test_a_damaged_leader_with_no_other_copy_cuts_nothing(
    fresh_cluster: LocalCluster, fresh_raw: Raw,
) -> None:
    c, raw = fresh_cluster, fresh_raw
    raw.create_topic(TOPIC, 1, 1, segment_bytes="2048")
    acked = produce(raw, 60)
    leader = raw.wait_leaders(TOPIC, 1)[0]
    before = replica_bytes(raw, leader)
    offset = flip_a_byte(c, leader)
    wait_for(lambda: "no other replica is in sync: nothing is cut" in c.logs(leader), 30,
             "the scrubber to find the damage")
    held = replica_bytes(raw, leader)
    assert len(held) == len(before), "the only copy was cut"
    served = dict(values_of(raw.fetch_all(leader, TOPIC, 0, max_bytes=1024)))
    assert all(served.get(o) == v for o, v in acked.items() if o < offset)
    assert "log cut" not in c.logs(leader)


def test_a_follower_fed_a_damaged_batch_refuses_it_and_stays_up(tmp_path: Path) -> None:
    # No scrubber: the leader does not know its copy is damaged and sends it.
    with LocalCluster(3, replica_lag_max_ms=2000, log_scrub_bytes_per_second=0) as c, Raw(c) as raw:
        raw.create_topic(TOPIC, 1, 3, segment_bytes="2048")
        leader = raw.wait_leaders(TOPIC, 1)[0]
        behind = next(n for n in c.node_ids if n != leader)
        assert c.stop(behind) == 0
        produce(raw, 60)
        flip_a_byte(c, leader)
        c.restart(behind)
        wait_for(lambda: "a batch from the leader failed its checks" in c.logs(behind), 30,
                 "the follower to refuse the damaged batch")
        assert c.is_running(behind)
        assert probe(c.address_of(behind), with_metadata=False).serving
