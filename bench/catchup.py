"""Follower catch-up on a real 3-node cluster, against a fresh Fetch of the same bytes.

One follower is stopped (SIGSTOP) while ``--mb`` MB of 200-byte records in batches of 1000 are
committed by the two others (acks=all, default node settings: fsync before acknowledging).
Baseline: a consumer's Fetch of those bytes from the leader, from offset 0 to the end, 8 MiB a
request, nothing decoded (the bytes a follower needs, moved once over gRPC by the same node).
Figure: SIGCONT to the moment the follower's log end offset reaches the leader's, polled every
20 ms. Goal: catch-up / fetch <= 5.

Run: ``.venv/bin/python bench/catchup.py [--mb 100] [--quick]``. ``--quick`` moves 4 MB so a
smoke test keeps the script working; its ratio means little. The figures are printed, never
asserted: exit 1 only when something went wrong.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path, where bench/storage.py would
# shadow the storage package the nodes' code imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402

from tidelog.records import RecordInput, build_batch, iter_batches  # noqa: E402
from tidelog.testing import LocalCluster  # noqa: E402
from tidelog.types import DEBUGGING_REPLICA_ID  # noqa: E402
from tidelog.v1 import tidelog_pb2 as pb  # noqa: E402
from tidelog.v1 import tidelog_pb2_grpc  # noqa: E402

MIB = 1024 * 1024
TOPIC = "catchup"
RECORD = b"c" * 200
RECORDS_PER_BATCH = 1000
FETCH_BYTES = 8 * MIB
GOAL = 5.0
NOT_CONTROLLER = 41
NOT_ENOUGH_REPLICAS = 19  # a controller just elected, settling its log
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * MIB),
    ("grpc.max_receive_message_length", 64 * MIB),
]


class Node:
    """Raw stubs to one node (the benchmark measures the protocol, not the client library)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.stub = tidelog_pb2_grpc.TidelogStub(self.channel)

    def produce(self, batch: bytes) -> None:
        answer = self.stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=30_000, topics=[
            pb.TopicProduceData(name=TOPIC, partitions=[
                pb.PartitionProduceData(partition=0, records=batch)])]), timeout=40)
        part = answer.topics[0].partitions[0]
        if part.error_code:
            raise SystemExit(f"produce failed: {part}")

    def fetch(self, offset: int) -> bytes:
        answer = self.stub.Fetch(pb.FetchRequest(
            replica_id=-1, max_bytes=FETCH_BYTES, topics=[pb.FetchTopic(name=TOPIC, partitions=[
                pb.FetchPartition(partition=0, fetch_offset=offset,
                                  partition_max_bytes=FETCH_BYTES)])]), timeout=30)
        part = answer.topics[0].partitions[0]
        if part.error_code:
            raise SystemExit(f"fetch failed: {part}")
        return part.records

    def log_end(self) -> int:
        answer = self.stub.ListOffsets(pb.ListOffsetsRequest(
            replica_id=DEBUGGING_REPLICA_ID, topics=[pb.ListOffsetsTopic(name=TOPIC, partitions=[
                pb.ListOffsetsPartition(partition=0, timestamp=-1)])]), timeout=10)
        return answer.topics[0].partitions[0].offset

    def leader(self) -> int:
        meta = self.stub.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=10)
        parts = meta.topics[0].partitions if meta.topics else []
        return parts[0].leader_id if parts and not meta.topics[0].error_code else -1


def fetch_all(node: Node, end: int) -> int:
    """Fetch from 0 to `end`; the bytes moved."""
    offset = moved = 0
    while offset < end:
        records = node.fetch(offset)
        if not records:
            raise SystemExit(f"fetch at {offset} returned nothing before {end}")
        moved += len(records)
        for _, header in iter_batches(records):
            offset = header.next_offset
    return moved


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def run(mb: int) -> float:
    with LocalCluster(3, auto_leader_rebalance_enable=False) as cluster:
        nodes = {n: Node(cluster.address_of(n)) for n in cluster.node_ids}
        first = nodes[cluster.node_ids[0]]

        def created() -> bool:
            answer = first.stub.CreateTopics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
                name=TOPIC, num_partitions=1, replication_factor=3)], timeout_ms=15_000),
                timeout=20)
            code = answer.topics[0].error_code
            if code not in (0, NOT_CONTROLLER, NOT_ENOUGH_REPLICAS):
                raise SystemExit(f"create topic failed: {answer}")
            return code == 0

        wait(created, 60, "the controller to create the topic")
        wait(lambda: all(node.leader() >= 0 for node in nodes.values()), 60, "a leader")
        leader_id = first.leader()
        leader = nodes[leader_id]
        stopped = next(n for n in cluster.node_ids if n != leader_id)
        now_ms = int(time.time() * 1000)  # retention (7 days) would delete records stamped 0
        batch = build_batch([RecordInput(RECORD, None, now_ms)] * RECORDS_PER_BATCH)
        cluster.pause(stopped)
        try:
            started = time.monotonic()
            while leader.log_end() * len(RECORD) < mb * 1_000_000:
                leader.produce(batch)
            produce_s = time.monotonic() - started
            end = leader.log_end()
            started = time.monotonic()
            moved = fetch_all(leader, end)
            fetch_s = time.monotonic() - started
        finally:
            cluster.resume(stopped)
        started = time.monotonic()
        wait(lambda: nodes[stopped].log_end() >= end, 600, f"node {stopped} to catch up")
        catchup_s = time.monotonic() - started
        if leader.leader() != leader_id:
            raise SystemExit("leadership moved during the run")
    ratio = catchup_s / fetch_s
    print(f"records committed while node {stopped} was stopped: {end} "
          f"({moved / MIB:.1f} MiB in {produce_s:.1f} s)")
    print(f"fresh fetch of them from the leader: {fetch_s:.2f} s "
          f"({moved / MIB / fetch_s:.1f} MiB/s)")
    print(f"follower catch-up after SIGCONT:     {catchup_s:.2f} s "
          f"({moved / MIB / catchup_s:.1f} MiB/s)")
    print(f"ratio catch-up/fetch: {ratio:.2f} (goal <= {GOAL:g})")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MB committed while stopped")
    parser.add_argument("--quick", action="store_true", help="4 MB: a smoke run")
    args = parser.parse_args()
    run(4 if args.quick else args.mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
