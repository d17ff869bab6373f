"""Moving a replica of a partition on a real 3-node cluster, against a plain Fetch of the same
bytes from the same leader, in the same run.

An RF=2 partition on two nodes (the leader first) is filled with ``--size`` MiB of 200-byte
records in batches of 1000 (acks=all, default node settings: fsync before acknowledging).
Baseline: a consumer's Fetch of the whole partition from its leader, from offset 0 to the end,
8 MiB a request, nothing decoded (the bytes the new replica needs, moved once over gRPC by the
same node). Figure: AlterPartitionReassignments of the partition to the leader and the third
node (the follower leaves), from the call to the moment ListPartitionReassignments no longer
shows it: the new replica opened as a learner, caught up, promoted, the old follower removed and
the completion recorded. MB/s of the move against MB/s of the fetch; goal >= 0.5.

Run: ``.venv/bin/python bench/reassign.py [--size 1024] [--quick]``. ``--quick`` moves 4 MiB;
its ratio means little. The figures are printed, never asserted: exit 1 only when something went
wrong. tests/coordinator/test_reassign_cluster.py runs `measure` on 1 MiB on its own
cluster, so the script keeps working without a cluster start of its own in CI.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path, where bench/storage.py would
# shadow the storage package the nodes' code imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog import Client, TopicPartition  # noqa: E402
from tidelog.clock import wall_clock_ms  # noqa: E402
from tidelog.records import RecordInput, build_batch, iter_batches  # noqa: E402
from tidelog.testing import LocalCluster, Raw, wait_for  # noqa: E402
from tidelog.types import LATEST_TIMESTAMP  # noqa: E402

MIB = 1024 * 1024
TOPIC = "moved"
RECORD = b"r" * 200
RECORDS_PER_BATCH = 1000
FETCH_BYTES = 8 * MIB
GOAL = 0.5
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * MIB),
    ("grpc.max_receive_message_length", 64 * MIB),
]


def fetch_all(raw: Raw, node: int, topic: str, end: int) -> int:
    """Fetch from 0 to `end` as a consumer, FETCH_BYTES a request; the bytes moved."""
    offset = moved = 0
    while offset < end:
        part = raw.fetch(node, topic, 0, offset, max_bytes=FETCH_BYTES)
        if part.error_code:
            raise SystemExit(f"fetch failed: {part}")
        if not part.records:
            raise SystemExit(f"fetch at {offset} returned nothing before {end}")
        moved += len(part.records)
        for _, header in iter_batches(part.records):
            offset = header.next_offset
    return moved


def run(size_mib: int) -> float:
    with (
        LocalCluster(3, auto_leader_rebalance_enable=False) as cluster,
        Raw(cluster, CHANNEL_OPTIONS) as raw,
        Client(cluster.bootstrap) as client,
    ):
        return measure(cluster, raw, client, size_mib)


def measure(cluster: LocalCluster, raw: Raw, client: Client, size_mib: float,
            topic: str = TOPIC) -> float:
    """The run on a cluster of three nodes (`raw` with CHANNEL_OPTIONS); prints the figures
    and returns the ratio. tests/coordinator/test_reassign_cluster.py runs it on its own cluster."""
    raw.create_topic(topic, 1, 2)
    leader = raw.wait_leaders(topic, 1)[0]
    replicas = list(raw.metadata(leader, topic).partitions[0].replicas)
    follower = next(n for n in replicas if n != leader)
    (new,) = set(cluster.node_ids) - set(replicas)
    batch = build_batch([RecordInput(RECORD, None, wall_clock_ms())] * RECORDS_PER_BATCH)
    started = time.monotonic()
    end = 0
    while end * len(RECORD) < size_mib * MIB:
        part = raw.produce(leader, topic, 0, batch, timeout_ms=30_000)
        if part.error_code:
            raise SystemExit(f"produce failed: {part}")
        end = part.base_offset + RECORDS_PER_BATCH
    produce_s = time.monotonic() - started
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    moved = fetch_all(raw, leader, topic, end)
    fetch_s = time.monotonic() - started
    tp = TopicPartition(topic, 0)
    started = time.monotonic()
    failed = client.admin.alter_partition_reassignments({tp: [leader, new]})
    if failed:
        raise SystemExit(f"reassignment refused: {failed}")
    wait_for(lambda: not client.admin.list_partition_reassignments([tp]), 3600,
             "the reassignment to complete", interval=0.02)
    move_s = time.monotonic() - started
    load_after = os.getloadavg()[0]
    if raw.list_offset(new, topic, 0, LATEST_TIMESTAMP, replica_id=-2).offset < end:
        raise SystemExit(f"node {new} does not hold the partition's {end} records")
    if raw.metadata(leader, topic).partitions[0].leader_id != leader:
        raise SystemExit("leadership moved during the run")
    fetch_rate = moved / MIB / fetch_s
    move_rate = moved / MIB / move_s
    ratio = move_rate / fetch_rate
    print(f"partition: {end} records, {moved / MIB:.1f} MiB (produced in {produce_s:.1f} s); "
          f"replicas [{leader}, {follower}] -> [{leader}, {new}]")
    print(f"plain fetch from the leader:  {fetch_s:.2f} s ({fetch_rate:.1f} MiB/s)")
    print(f"reassignment, call to done:   {move_s:.2f} s ({move_rate:.1f} MiB/s)")
    print(f"load average (1 min): {load_before:.1f} before the fetch, {load_after:.1f} after "
          "the move")
    print(f"ratio move/fetch: {ratio:.2f} (goal >= {GOAL:g})")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="MiB in the partition")
    parser.add_argument("--quick", action="store_true", help="4 MiB: a smoke run")
    args = parser.parse_args()
    run(4 if args.quick else args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
