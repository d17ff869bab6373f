"""A node whose disk fills up: it stays up, its replicas stop writing (KAFKA_STORAGE_ERROR),
leadership moves to nodes that can write, nothing acknowledged is lost, and once space is freed
its replicas take writes again and catch up.

Node 3's data directory is a small tmpfs; a filler file leaves it about a megabyte, which the
produced batches then use up.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from record_helpers import values_of
from tmpfs_helpers import fill, tmpfs

from tidelog.errors import KafkaStorageError
from tidelog.testing import LocalCluster, Raw, make_batch, probe, wait_for
from tidelog.types import DEBUGGING_REPLICA_ID, LATEST_TIMESTAMP

pytestmark = pytest.mark.timeout(240)

TOPIC = "filling"
FULL = 3


def replica_bytes(raw: Raw, node: int, partition: int) -> bytes | None:
    """Every batch `node` holds of the partition, or None while it cannot say (offline)."""
    try:
        return raw.fetch_all(node, TOPIC, partition, replica_id=DEBUGGING_REPLICA_ID)
    except AssertionError:
        return None


def log_end(raw: Raw, node: int, partition: int) -> int | None:
    answer = raw.list_offset(node, TOPIC, partition, LATEST_TIMESTAMP,
                             replica_id=DEBUGGING_REPLICA_ID)
    return answer.offset if answer.error_code == 0 else None


def test_a_full_disk_takes_the_replica_offline_until_space_is_freed(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "cluster" / f"node-{FULL}", "size=8m") as disk, LocalCluster(
        3, data_dir=tmp_path / "cluster", replica_lag_max_ms=2000
    ) as c, Raw(c) as raw:
        raw.create_topic(TOPIC, 3, 3)
        # The partition node 3 leads (each node leads the one it is preferred for).
        partition = wait_for(
            lambda: next(
                (p + 1 for p, n in enumerate(raw.wait_leaders(TOPIC, 3)) if n == FULL), None
            ),
            30, f"node {FULL} to lead a partition",
        ) - 1
        filler = fill(disk, 1024 * 1024)
        acked = raw.produce_acknowledged(TOPIC, partition, (  # 24 x 200 KiB: over what is left
            [b"%03d-%d-" % (i, j) + bytes(50_000) for j in range(4)] for i in range(24)
        ), timeout=60)

        assert c.is_running(FULL)
        assert "the disk refused a write" in c.logs(FULL)
        # While its disk has no room for a batch, node 3's replica stays offline.
        answer = raw.produce(FULL, TOPIC, partition, make_batch([b"refused"]))
        assert answer.error_code == KafkaStorageError.code, answer
        assert probe(c.address_of(FULL), with_metadata=False).serving
        leader = raw.wait_leaders(TOPIC, 3)[partition]
        assert leader != FULL, "the node that cannot write still leads"
        held = dict(values_of(raw.fetch_all(leader, TOPIC, partition)))
        lost = [o for o, v in acked.items() if held.get(o) != v]
        assert not lost, f"{len(lost)} acknowledged records lost, first {min(lost)}"

        filler.unlink()
        wait_for(lambda: "the disk takes writes again" in c.logs(FULL), 60,
                 f"node {FULL}'s replicas to come back")

        def caught_up() -> bool:
            leader = raw.wait_leaders(TOPIC, 3)[partition]
            ours = replica_bytes(raw, FULL, partition)
            return ours is not None and ours == replica_bytes(raw, leader, partition)

        wait_for(caught_up, 60, f"node {FULL}'s replica to hold what the leader holds")
        assert log_end(raw, FULL, partition) == log_end(raw, leader, partition)
