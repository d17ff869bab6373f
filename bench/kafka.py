"""Produce and consume through the Kafka listener with confluent-kafka (librdkafka) against the
same through Tidelog's own gRPC client, on the same cluster in the same run.

* produce: 1 KiB records (one random value), one call per record, acks=all, idempotent,
  ``linger.ms`` 5 and batches of up to 1,000,000 bytes on both sides (librdkafka's defaults,
  which a user tuning for throughput keeps: an idempotent librdkafka producer has one request
  in flight per partition once a batch holds 5 records or more, as it counts its in-flight
  limit of 5 in records, so its batches had better be big), spread over the topic's
  partitions by each client's own partitioner. Timed from the
  first send to the end of the flush; a side fails the run unless every record is
  acknowledged.
* consume: both consumers read the same topic (in turn the one each producer wrote, round by
  round) from the beginning of every partition, manually assigned, until they have every
  record: the Kafka one with ``consume()``, the gRPC one with ``poll()``, defaults otherwise
  but librdkafka's ``fetch.queue.backoff.ms``, 10 instead of 1,000 (its documentation says to
  lower it for throughput): once librdkafka's queue of prefetched records is full it stops
  fetching for that long, and the application drains 64 MiB in well under a second, then
  waits (three times the records/s with it, on 3 nodes).

Each side runs in a process of its own (one per client, started once), so that neither pays
for the other's threads or interpreter; the nodes' CPU (user + system, every thread, from
/proc) is read around each side and printed per MiB. Rounds alternate which side goes first
(the machine is shared, so its load drifts); each round's topics are deleted after it. The
ratios are the medians of the rounds' Kafka/gRPC ratios. Goal: >= 0.9 for both.

Run: ``.venv/bin/python bench/kafka.py [--quick] [--rounds R] [--records N] [--nodes 1|3]``.
``--quick`` runs one node, two rounds of a few thousand records, for a smoke test; its figures
mean little.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog import Client  # noqa: E402
from tidelog.producer import RecordFuture  # noqa: E402
from tidelog.testing import LocalCluster, load_script  # noqa: E402
from tidelog.types import TopicPartition  # noqa: E402

cluster_bench = load_script(Path(__file__).with_name("cluster.py"))

RECORD_BYTES = 1024
MIB = 1024 * 1024
LINGER_MS = 5
BATCH_BYTES = 1_000_000
PARTITIONS = 6
#: librdkafka's pause in fetching once its queue of prefetched records is full (see above).
FETCH_QUEUE_BACKOFF_MS = 10
#: A side that takes longer than this is stuck, not slow.
SIDE_TIMEOUT_S = 300.0

#: What a side returns: (records timed, their seconds, this process's CPU seconds in them).
Timed = tuple[int, float, float]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def produce_grpc(bootstrap: str, topic: str, count: int) -> Timed:
    """``count`` records through Tidelog's producer (its defaults are acks=all, idempotent),
    timed after a first one is acknowledged (the topic gets ``count + 1``)."""
    value = os.urandom(RECORD_BYTES)
    with Client(bootstrap) as client, client.producer(
        linger_ms=LINGER_MS, batch_size=BATCH_BYTES
    ) as producer:
        send = producer.send
        send(topic, value).get(timeout=SIDE_TIMEOUT_S)  # connected, its producer id known
        failures: list[BaseException] = []

        def note(future: RecordFuture) -> None:
            if (error := future.exception()) is not None:
                failures.append(error)

        started, cpu = time.perf_counter(), _cpu()
        for _ in range(count):
            send(topic, value).add_done_callback(note)
        producer.flush(timeout=SIDE_TIMEOUT_S)
        elapsed, cpu = time.perf_counter() - started, _cpu() - cpu
        if producer.records_failed or producer.records_acknowledged != count + 1:
            raise RuntimeError(f"gRPC producer: {count + 1} sent, "
                               f"{producer.records_acknowledged} acknowledged, "
                               f"{producer.records_failed} failed (first: {failures[:1]})")
    return count, elapsed, cpu


def produce_kafka(bootstrap: str, topic: str, count: int) -> Timed:
    """``count`` records through confluent-kafka's producer, delivery reports of errors only
    (a callback per record costs the Python side as much as the send), timed after a first
    one is delivered (the topic gets ``count + 1``)."""
    import confluent_kafka

    failures: list[object] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": LINGER_MS, "batch.size": BATCH_BYTES, "log_level": 0,
        "delivery.report.only.error": True,
        "on_delivery": lambda err, _msg: failures.append(err),
    })
    value = os.urandom(RECORD_BYTES)
    produce, poll = producer.produce, producer.poll
    produce(topic, value)  # connected, its producer id known (librdkafka asks for it 0.5 s on)
    producer.flush(SIDE_TIMEOUT_S)
    started, cpu = time.perf_counter(), _cpu()
    for _ in range(count):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # librdkafka's queue is full: serve delivery reports, retry
                poll(0.005)
    left = producer.flush(SIDE_TIMEOUT_S)
    elapsed, cpu = time.perf_counter() - started, _cpu() - cpu
    if left or failures:
        raise RuntimeError(f"Kafka producer: {left} records undelivered, "
                           f"{len(failures)} failed (first: {failures[:1]})")
    return count, elapsed, cpu


def consume_grpc(bootstrap: str, topic: str, count: int) -> Timed:
    """The ``count`` records of ``topic`` through Tidelog's consumer, partitions assigned,
    timed from the first poll that returned records (so the connection, the offsets' lookup
    and the first fetch are not)."""
    with Client(bootstrap) as client:
        consumer = client.consumer()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            first, deadline = 0, time.monotonic() + SIDE_TIMEOUT_S
            while not first and time.monotonic() < deadline:
                first = sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
            got, started, cpu = first, time.perf_counter(), _cpu()
            while got < count and time.monotonic() < deadline:
                got += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
            elapsed, cpu = time.perf_counter() - started, _cpu() - cpu
        finally:
            consumer.close()
    if got != count:
        raise RuntimeError(f"gRPC consumer: {got} of {count} records read")
    return count - first, elapsed, cpu


def consume_kafka(bootstrap: str, topic: str, count: int) -> Timed:
    """The ``count`` records of ``topic`` through confluent-kafka's consumer, partitions
    assigned, timed as `consume_grpc`."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-kafka", "enable.auto.commit": False,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS, "log_level": 0,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        first = got = 0
        started = cpu = 0.0
        deadline = time.monotonic() + SIDE_TIMEOUT_S
        while got < count and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=10_000, timeout=0.5)
            if messages and not first:
                first, started, cpu = len(messages), time.perf_counter(), _cpu()
            for message in messages:
                if message.error() is not None:
                    raise RuntimeError(f"Kafka consumer: {message.error()}")
                got += 1
        elapsed, cpu = time.perf_counter() - started, _cpu() - cpu
    finally:
        consumer.close()
    if got != count:
        raise RuntimeError(f"Kafka consumer: {got} of {count} records read")
    return count - first, elapsed, cpu


def nodes_cpu(cluster: LocalCluster) -> float:
    return sum(cluster_bench.cpu_seconds(pid) for n in cluster.node_ids
               if (pid := cluster.pid_of(n)) is not None)


def timed_side(
    cluster: LocalCluster, pool: ProcessPoolExecutor, work: Callable[[str, str, int], Timed],
    bootstrap: str, topic: str, count: int,
) -> tuple[float, float, float]:
    """(records/s, the client process's CPU ms per MiB, the nodes' CPU ms per MiB)."""
    before = nodes_cpu(cluster)
    timed, elapsed, client_cpu = pool.submit(work, bootstrap, topic, count).result(
        SIDE_TIMEOUT_S)
    mib = max(timed, 1) * RECORD_BYTES / MIB
    return (timed / elapsed, client_cpu * 1000 / mib,
            (nodes_cpu(cluster) - before) * 1000 / mib)


def describe(figures: tuple[float, float, float]) -> str:
    rate, client_ms, nodes_ms = figures
    return (f"{rate:,.0f} records/s ({rate * RECORD_BYTES / MIB:.1f} MiB/s; CPU ms/MiB nodes "
            f"{nodes_ms:.1f}, client {client_ms:.1f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--rounds", type=int, default=None, help="default 4 (--quick: 2)")
    parser.add_argument("--records", type=int, default=None,
                        help="records per side and round (default 200,000; --quick: 1,000)")
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=None,
                        help="cluster size, replication factor the same (default 3; --quick: 1)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 4)
    count = args.records or (1_000 if args.quick else 200_000)
    nodes = args.nodes or (1 if args.quick else 3)
    print(f"# {nodes} node(s), replication {nodes}, {PARTITIONS} partitions, {count:,} x "
          f"{RECORD_BYTES} B records a side and round, acks=all, idempotent, linger.ms "
          f"{LINGER_MS}, batches of {BATCH_BYTES:,} B; load average before: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    ratios: dict[str, list[float]] = {"produce": [], "consume": []}
    # "spawn": a forked child would inherit the gRPC state of this process and its threads.
    spawn = multiprocessing.get_context("spawn")
    pools = {side: ProcessPoolExecutor(1, mp_context=spawn) for side in ("grpc", "kafka")}
    for pool in pools.values():  # the workers start (and import) while the cluster starts
        pool.submit(os.getpid)
    with LocalCluster(nodes) as cluster, Client(cluster.bootstrap) as client, \
            pools["grpc"], pools["kafka"]:
        works = {"grpc": (produce_grpc, consume_grpc, cluster.bootstrap),
                 "kafka": (produce_kafka, consume_kafka, cluster.kafka_bootstrap)}
        for r in range(rounds):
            sides = ["grpc", "kafka"] if r % 2 == 0 else ["kafka", "grpc"]
            topics = {side: f"bench-{side}-{r}" for side in sides}
            produced: dict[str, tuple[float, float, float]] = {}
            consumed: dict[str, tuple[float, float, float]] = {}
            for side in sides:
                client.create_topic(topics[side], partitions=PARTITIONS,
                                    replication_factor=nodes)
                produce, _, bootstrap = works[side]
                produced[side] = timed_side(cluster, pools[side], produce, bootstrap,
                                            topics[side], count)
            read = topics[sides[r // 2 % 2]]  # each producer's topic in turn
            for side in sides:
                _, consume, bootstrap = works[side]
                consumed[side] = timed_side(cluster, pools[side], consume, bootstrap, read,
                                            count + 1)
            for topic in topics.values():
                client.admin.delete_topic(topic)
            for what, figures in (("produce", produced), ("consume", consumed)):
                ratios[what].append(figures["kafka"][0] / figures["grpc"][0])
                print(f"round {r + 1} {what} ({' then '.join(sides)}"
                      + (f", of {read}" if what == "consume" else "")
                      + f"): gRPC {describe(figures['grpc'])}; Kafka "
                      f"{describe(figures['kafka'])}; ratio {ratios[what][-1]:.2f}", flush=True)
    for what, values in ratios.items():
        ratio = statistics.median(values)
        print(f"ratio Kafka/gRPC {what}: {ratio:.2f} (goal >= 0.9) "
              f"{'OK' if ratio >= 0.9 else 'MISSED'}")
    print("# load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.quick:
        print("# --quick: sizes too small for the goal to mean anything")
    return 0


if __name__ == "__main__":
    sys.exit(main())
