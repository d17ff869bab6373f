"""Produce throughput through the client library against the raw gRPC figure, same cluster,
same run.

* raw: pre-built batches (the client's batch size of 1 KiB records) sent by blocking Produce
  calls with acks=-1, one thread per partition, so one call in flight per partition.
* client: ``producer.send()`` of the same records (idempotent, acks=all, batched by the
  producer) spread over the same number of partitions, then ``flush()``.

The two alternate over several rounds (the machine is shared, so its load drifts) and the
ratio is the median of the rounds' ratios. Goal: client / raw >= 0.8.

Run: ``.venv/bin/python bench/client.py [--quick] [--records N] [--rounds R]``.
``--quick`` uses tiny sizes so a smoke test can keep the script working; its figures mean
little.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402

from tidelog import Client  # noqa: E402
from tidelog.records import RecordInput, build_batch  # noqa: E402
from tidelog.testing import LocalCluster  # noqa: E402
from tidelog.types import TopicPartition  # noqa: E402
from tidelog.v1 import tidelog_pb2 as pb  # noqa: E402
from tidelog.v1 import tidelog_pb2_grpc  # noqa: E402

VALUE = os.urandom(1024)


def raw_throughput(client: Client, topic: str, partitions: int, records: int,
                   per_batch: int) -> float:
    """Records/s of pre-built batches, one blocking Produce per partition at a time."""
    now = int(time.time() * 1000)
    batch = build_batch([RecordInput(VALUE, None, now) for _ in range(per_batch)])
    batches_each = max(records // (per_batch * partitions), 1)
    errors: list[str] = []

    def run(partition: int) -> None:
        tp = TopicPartition(topic, partition)
        leader = client.metadata.leader_for(tp)
        address = client.metadata.address_of(leader) if leader is not None else None
        assert address is not None, f"no leader for {tp}"
        channel = grpc.insecure_channel(address)
        stub = tidelog_pb2_grpc.TidelogStub(channel)
        request = pb.ProduceRequest(acks=-1, timeout_ms=30_000, topics=[pb.TopicProduceData(
            name=topic, partitions=[pb.PartitionProduceData(partition=partition, records=batch)]
        )])
        with channel:
            for _ in range(batches_each):
                answer = stub.Produce(request, timeout=60)
                code = answer.topics[0].partitions[0].error_code
                if code:
                    errors.append(f"{tp}: error {code}")
                    return

    threads = [threading.Thread(target=run, args=(p,)) for p in range(partitions)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise SystemExit("raw produce failed: " + "; ".join(errors))
    return batches_each * per_batch * partitions / elapsed


def client_throughput(client: Client, topic: str, partitions: int, records: int,
                      batch_size: int) -> float:
    with client.producer(acks="all", idempotent=True, batch_size=batch_size) as producer:
        producer.send(topic, VALUE, partition=0).result()  # InitProducerId outside the timing
        start = time.perf_counter()
        futures = [producer.send(topic, VALUE, partition=i % partitions) for i in range(records)]
        producer.flush()
        elapsed = time.perf_counter() - start
    for future in futures:
        future.result()
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--batch-kib", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    records = 600 if args.quick else args.records // args.rounds
    batch_size = args.batch_kib * 1024
    per_batch = batch_size // (len(VALUE) + 29)
    with LocalCluster(3) as cluster, Client(cluster.bootstrap) as client:
        for topic in ("bench-raw", "bench-client"):
            client.create_topic(topic, partitions=args.partitions, replication_factor=3)
        rounds = []
        for _ in range(args.rounds):
            raw = raw_throughput(client, "bench-raw", args.partitions, records, per_batch)
            ours = client_throughput(client, "bench-client", args.partitions, records, batch_size)
            rounds.append((raw, ours))
    mib = len(VALUE) / (1024 * 1024)
    print(f"records: {records} x 1 KiB per round, {args.rounds} rounds, {args.partitions} "
          f"partitions, replication 3, acks=all, batches of {per_batch} records "
          f"({args.batch_kib} KiB)")
    for raw, ours in rounds:
        print(f"raw gRPC Produce (pre-built batches): {raw:,.0f} records/s "
              f"({raw * mib:.1f} MiB/s); client producer (idempotent, batched): "
              f"{ours:,.0f} records/s ({ours * mib:.1f} MiB/s)")
    ratio = statistics.median(ours / raw for raw, ours in rounds)
    print(f"ratio client/raw: {ratio:.2f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
