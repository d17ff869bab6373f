"""A data pipeline on Spark over Tidelog: rewind to a point in time, aggregate a window, write
the result to Parquet and to another topic.

1. Rewind (KIP-79): ``offsets_for_times`` finds, per partition, the first offset at or after the
   window's start and end, so the job reads exactly the records stamped inside the window, and
   reads the same ones however often it is re-run.
2. Read that offset range with the ``tidelog`` Spark source (batch).
3. Aggregate with Spark: page views per page and minute, with the mean latency.
4. Write the aggregate to Parquet and, as JSON keyed by page, to an output topic.

``--demo-data`` first creates the input topic and fills it with an hour of page views, so the
example runs against an empty ``tidelog cluster up``. See examples/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog import Client, TopicPartition
from tidelog.errors import TopicAlreadyExistsError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PAGES = ("/", "/search", "/cart", "/checkout", "/help")


def produce_demo_data(client: Client, topic: str, events: int, end_ms: int) -> None:
    """`events` page views spread over the hour before `end_ms`, keyed by page."""
    with contextlib.suppress(TopicAlreadyExistsError):
        client.create_topic(topic, partitions=3, replication_factor=1)
    rng = random.Random(7)
    with client.producer() as producer:
        for i in range(events):
            page = rng.choice(PAGES)
            view = {"page": page, "latency_ms": rng.randint(5, 500), "user": rng.randint(1, 99)}
            producer.send(topic, json.dumps(view).encode(), key=page.encode(),
                          timestamp_ms=end_ms - 3_600_000 + i * 3_600_000 // events)


def rewind(client: Client, topic: str, start_ms: int, end_ms: int) -> tuple[str, str]:
    """startingOffsets/endingOffsets JSON for the records stamped in [start_ms, end_ms): the
    first offset at or after each instant, or the end offset where none is."""
    partitions = len(client.describe_topics([topic])[topic].partitions)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = client.consumer()
    latest = consumer.end_offsets(tps)

    def offsets_at(ms: int) -> dict[str, int]:
        found = consumer.offsets_for_times(dict.fromkeys(tps, ms))
        return {
            str(tp.partition): latest[tp] if hit is None else hit.offset
            for tp, hit in found.items()
        }

    start, end = offsets_at(start_ms), offsets_at(end_ms)
    for p in sorted(start, key=int):
        print(f"  {topic}-{p}: offsets [{start[p]}, {end[p]})")
    return json.dumps({topic: start}), json.dumps({topic: end})


def aggregate(views: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    schema = "page string, latency_ms int, user int"
    return (
        views.select("timestamp", F.from_json(F.col("value").cast("string"), schema).alias("v"))
        .groupBy(F.window("timestamp", "1 minute").start.alias("minute"), F.col("v.page"))
        .agg(F.count("*").alias("views"), F.avg("v.latency_ms").alias("mean_latency_ms"))
        .orderBy("minute", "page")
    )


def run(
    spark: SparkSession, bootstrap: str, topic: str, out_topic: str, out_dir: Path,
    start_ms: int, end_ms: int,
) -> int:
    """The pipeline; the number of aggregate rows written."""
    with Client(bootstrap) as client:
        starting, ending = rewind(client, topic, start_ms, end_ms)
        with contextlib.suppress(TopicAlreadyExistsError):
            client.create_topic(out_topic, partitions=1, replication_factor=1)
    views = (
        spark.read.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .load()
    )
    result = aggregate(views).cache()
    result.write.mode("overwrite").parquet(str(out_dir))
    (
        result.selectExpr("CAST(page AS BINARY) AS key", "to_json(struct(*)) AS value")
        .write.format("tidelog").mode("append")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("topic", out_topic)
        .save()
    )
    return result.count()


def _instant(text: str) -> int:
    """Milliseconds since the epoch from ms digits or ISO-8601 (naive means UTC)."""
    if text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text)
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:7420")
    parser.add_argument("--topic", default="page-views")
    parser.add_argument("--out-topic", default="page-views-per-minute")
    parser.add_argument("--out-dir", type=Path, default=Path("pipeline-out"))
    parser.add_argument("--since", type=_instant, help="window start, ms or ISO-8601 "
                        "(default: 30 minutes ago)")
    parser.add_argument("--minutes", type=int, default=15, help="window length (default 15)")
    parser.add_argument("--demo-data", type=int, nargs="?", const=5000, default=0, metavar="N",
                        help="first produce N page views over the last hour (default 5000)")
    args = parser.parse_args()
    now_ms = int(time.time() * 1000)
    start_ms = args.since if args.since is not None else now_ms - 30 * 60_000
    end_ms = start_ms + args.minutes * 60_000

    if args.demo_data:
        with Client(args.bootstrap) as client:
            produce_demo_data(client, args.topic, args.demo_data, now_ms)

    from tidelog.spark import local_session

    spark = local_session("tidelog-pipeline")
    try:
        print(f"window {datetime.fromtimestamp(start_ms / 1000, UTC):%Y-%m-%d %H:%M:%S} UTC, "
              f"{args.minutes} min, of topic {args.topic}:")
        rows = run(spark, args.bootstrap, args.topic, args.out_topic, args.out_dir,
                   start_ms, end_ms)
        spark.read.parquet(str(args.out_dir)).orderBy("minute", "page").show(10, truncate=False)
    finally:
        spark.stop()
    print(f"{rows} rows written to {args.out_dir}/ (Parquet) and to topic {args.out_topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
