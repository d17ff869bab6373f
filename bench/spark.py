"""Batch-read throughput of the tidelog Spark source against the client's own consume rate, same
cluster, same records, same run.

* client: one ``Consumer`` assigned every partition, polling from earliest to the end offsets
  (what a plain Python job would do).
* spark: ``spark.read.format("tidelog")`` of the whole topic on local[2], written to Spark's
  ``noop`` sink so every column is materialised in the JVM (a ``count()`` could skip columns).

Both read N records of 100 bytes from a topic of two partitions (one per local[2] core). The two
alternate over a few rounds (the machine is shared, so its load drifts); the figures are the
medians and the ratio is spark / client. Spark's first job (Python workers starting) is a
warm-up and not counted.

Run: ``.venv/bin/python bench/spark.py [--quick] [--records N] [--rounds R]``.
``--quick`` uses tiny sizes so the script can be smoke-tested; its figures mean little.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog import Client, TopicPartition  # noqa: E402
from tidelog.testing import LocalCluster  # noqa: E402

TOPIC = "bench"
PARTITIONS = 2
VALUE_BYTES = 100


def load(client: Client, records: int) -> None:
    client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
    value = os.urandom(VALUE_BYTES)
    with client.producer(linger_ms=20, batch_size=256 * 1024) as producer:
        for i in range(records):
            producer.send(TOPIC, value, partition=i % PARTITIONS)


def client_rate(client: Client, records: int) -> float:
    consumer = client.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    start = time.perf_counter()
    end = consumer.end_offsets(tps)
    seen = 0
    while any(consumer.position(tp) < end[tp] for tp in tps):
        seen += len(consumer.poll(timeout_ms=1000))
    elapsed = time.perf_counter() - start
    assert seen == records, f"client read {seen} records, expected {records}"
    return records / elapsed


def spark_rate(spark: object, bootstrap: str) -> float:
    start = time.perf_counter()
    (
        spark.read.format("tidelog")  # type: ignore[attr-defined]
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    args = parser.parse_args()
    records, rounds = (2_000, 1) if args.quick else (args.records, args.rounds)

    from tidelog.spark import local_session

    spark = local_session("tidelog-bench")
    try:
        with LocalCluster(nodes=1) as cluster, Client(cluster.bootstrap) as client:
            started = time.perf_counter()
            load(client, records)
            print(f"loaded {records:,} records of {VALUE_BYTES} B in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
            spark_rate(spark, cluster.bootstrap)  # warm-up: Python workers start
            client_rates, spark_rates = [], []
            for r in range(rounds):
                client_rates.append(client_rate(client, records))
                spark_rates.append(records / spark_rate(spark, cluster.bootstrap))
                print(f"round {r + 1}: client {client_rates[-1]:,.0f} rows/s, "
                      f"spark {spark_rates[-1]:,.0f} rows/s", flush=True)
    finally:
        spark.stop()
    c, s = statistics.median(client_rates), statistics.median(spark_rates)
    print(f"client consume: {c:,.0f} rows/s (median of {rounds})")
    print(f"spark batch read (local[2]): {s:,.0f} rows/s (median of {rounds})")
    print(f"ratio spark / client: {s / c:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
