"""The tidelog data source in a real Spark (local[2]) against real node processes: batch reads by
offsets and by time under both isolation levels, streaming with availableNow and a restart from
the checkpoint, batch and streaming writes, data loss. Kept few and small: Spark jobs are slow
on two cores. One session for the run (conftest_spark), one cluster for this module."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from spark_helpers import run_available_now
from waiting_helpers import poll_to

from tidelog import Client, TopicPartition
from tidelog.testing import LocalCluster, wait_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.slow

EVENTS = 300
PARTITIONS = 3
TESTS = Path(__file__).resolve().parents[1]
EXAMPLES = TESTS.parent / "examples"
#: Recent enough that the default retention (a week) keeps it.
BASE_TS = (int(time.time()) - 3600) * 1000


def event(i: int) -> dict[str, Any]:
    """Record i of topic "events": partition i % 3, offset i // 3, one second apart."""
    return {
        "key": b"k%d" % i,
        "value": b"v%d" % i,
        "partition": i % PARTITIONS,
        "offset": i // PARTITIONS,
        "ts": BASE_TS + i * 1000,
        "headers": [("n", str(i).encode())],
    }


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as c:
        c.create_topic("events", partitions=PARTITIONS, replication_factor=1)
        with c.producer() as producer:
            for i in range(EVENTS):
                e = event(i)
                producer.send("events", e["value"], key=e["key"], partition=e["partition"],
                              timestamp_ms=e["ts"], headers=e["headers"])
        yield c


def produce(client: Client, topic: str, values: list[bytes], partitions: int) -> None:
    with client.producer() as producer:
        for i, value in enumerate(values):
            producer.send(topic, value, partition=i % partitions)


def read(spark: SparkSession, cluster: LocalCluster, **options: str) -> DataFrame:
    reader = spark.read.format("tidelog").option("tidelog.bootstrap.servers", cluster.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def consume_all(
    client: Client, topic: str, partitions: int, isolation: str = "read_uncommitted"
) -> list[Any]:
    consumer = client.consumer(auto_offset_reset="earliest", isolation_level=isolation)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    return poll_to(consumer, consumer.end_offsets(tps))


def test_bad_options_fail_at_load(spark: SparkSession, cluster: LocalCluster) -> None:
    with pytest.raises(Exception, match="Only one of the following options"):
        read(spark, cluster, subscribe="events", assign='{"events":[0]}')


def test_batch_read_by_offsets(spark: SparkSession, cluster: LocalCluster, client: Client) -> None:
    df = read(spark, cluster, subscribe="events", includeHeaders="true")
    rows = df.selectExpr(
        "key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts",
        "timestampType", "headers",
    ).collect()
    assert len(rows) == EVENTS
    by_position = {(r.partition, r.offset): r for r in rows}
    for i in range(EVENTS):
        e = event(i)
        row = by_position[e["partition"], e["offset"]]
        assert (row.key, row.value, row.topic, row.ts, row.timestampType) == (
            e["key"], e["value"], "events", e["ts"], 0
        )
        assert [(h.key, h.value) for h in row.headers] == e["headers"]

    # JSON bounds with -2/-1, split into more Spark partitions than topic-partitions.
    ranged = read(
        spark, cluster, subscribe="events", minPartitions="4",
        startingOffsets='{"events":{"0":5,"1":-2,"2":-2}}',
        endingOffsets='{"events":{"0":10,"1":-1,"2":3}}',
    )
    assert ranged.rdd.getNumPartitions() == 6  # sizes 5, 100, 3 -> 1 + 4 + 1 pieces
    got = sorted((r.partition, r.offset) for r in ranged.select("partition", "offset").collect())
    want = [(0, o) for o in range(5, 10)] + [(1, o) for o in range(100)]
    want += [(2, o) for o in range(3)]
    assert got == want


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_batch_read_by_timestamp(
    spark: SparkSession, cluster: LocalCluster, client: Client, isolation: str
) -> None:
    """KIP-79: a window [150 s, 240 s) after BASE_TS is records 150..239 in every partition.
    Without open transactions read_committed's bound (the LSO) equals the HW, so both levels
    read the same records."""
    window = read(
        spark, cluster, subscribe="events",
        startingTimestamp=str(BASE_TS + 150_000), endingTimestamp=str(BASE_TS + 240_000),
        **{"tidelog.isolation.level": isolation},
    )
    values = {r.value for r in window.select("value").collect()}
    assert values == {b"v%d" % i for i in range(150, 240)}

    last = read(
        spark, cluster, assign='{"events":[1]}',
        startingOffsetsByTimestamp=f'{{"events":{{"1":{BASE_TS + 297_000}}}}}',
        **{"kafka.isolation.level": isolation},
    )
    assert [(r.partition, r.offset) for r in last.select("partition", "offset").collect()] == [
        (1, 99)
    ]


def test_streaming_available_now_and_restart(
    spark: SparkSession, cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    client.create_topic("stream", partitions=2, replication_factor=1)
    produce(client, "stream", [b"a%d" % i for i in range(200)], 2)
    seen: list[list[tuple[int, int]]] = []

    def run() -> None:
        run_available_now(
            lambda: spark.readStream.format("tidelog")
            .option("tidelog.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", "stream")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "120")
            .load()
            .writeStream.foreachBatch(
                lambda df, _: seen.append(
                    [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
                )
            )
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
        )

    run()
    first = [p for batch in seen for p in batch]
    assert sorted(first) == [(p, o) for p in range(2) for o in range(100)]
    assert len([b for b in seen if b]) >= 2  # maxOffsetsPerTrigger split the backlog
    assert all(len(batch) <= 121 for batch in seen)

    produce(client, "stream", [b"b%d" % i for i in range(60)], 2)
    seen.clear()
    run()
    again = [p for batch in seen for p in batch]
    assert sorted(again) == [(p, o) for p in range(2) for o in range(100, 130)]


def test_batch_and_streaming_write(
    spark: SparkSession, cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    client.create_topic("written", partitions=2, replication_factor=1)
    rows = [(b"k%d" % i, f"v{i}", i % 2, [("h", b"%d" % i)]) for i in range(50)]
    df = spark.createDataFrame(
        rows, "key binary, value string, partition int, "
        "headers array<struct<key:string,value:binary>>",
    )
    (df.write.format("tidelog").mode("append")
     .option("tidelog.bootstrap.servers", cluster.bootstrap).option("topic", "written").save())
    written = consume_all(client, "written", 2)
    assert sorted((r.key, r.value, r.partition, r.headers) for r in written) == sorted(
        (k, v.encode(), p, (("h", h[0][1]),)) for k, v, p, h in rows
    )

    with pytest.raises(Exception, match="Overwrite not allowed"):
        (df.write.format("tidelog").mode("overwrite")
         .option("tidelog.bootstrap.servers", cluster.bootstrap).option("topic", "written").save())

    client.create_topic("copied", partitions=1, replication_factor=1)
    run_available_now(
        lambda: spark.readStream.format("tidelog")
        .option("tidelog.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "events").option("startingOffsets", "earliest").load()
        .selectExpr("key", "value", "'copied' AS topic")
        .writeStream.format("tidelog")
        .option("tidelog.bootstrap.servers", cluster.bootstrap)
        .option("checkpointLocation", str(tmp_path / "copy-checkpoint"))
    )
    copied = consume_all(client, "copied", 1)
    assert sorted(r.value for r in copied) == sorted(event(i)["value"] for i in range(EVENTS))


def test_read_committed_source(spark: SparkSession, cluster: LocalCluster, client: Client) -> None:
    """tidelog.isolation.level=read_committed: a batch read ends at the last stable offset (an
    open transaction and everything after it stay out) and never returns an aborted record or a
    marker; read_uncommitted returns all of them."""
    client.create_topic("txn", partitions=1, replication_factor=1)
    tp = TopicPartition("txn", 0)
    with client.producer(transactional_id="spark-src") as txn, client.producer() as plain:
        txn.init_transactions()
        txn.begin_transaction()
        for i in range(5):
            txn.send("txn", b"c%d" % i)
        txn.commit_transaction()
        txn.begin_transaction()
        for i in range(5):
            txn.send("txn", b"a%d" % i)
        txn.flush()
        txn.abort_transaction()
        plain.send("txn", b"n0").result()
        txn.begin_transaction()
        txn.send("txn", b"o0").result()  # open: the LSO stops here
        plain.send("txn", b"n1").result()
        lso = client.list_offsets({tp: -1}, "read_committed")[tp].offset
        hw = client.list_offsets({tp: -1})[tp].offset
        assert lso < hw

        committed = read(spark, cluster, subscribe="txn",
                         **{"tidelog.isolation.level": "read_committed"})
        rows = committed.select("value", "offset").collect()
        assert sorted(r.value for r in rows) == [b"c0", b"c1", b"c2", b"c3", b"c4", b"n0"]
        assert all(r.offset < lso for r in rows)
        everything = {r.value for r in read(spark, cluster, subscribe="txn").collect()}
        assert {b"a0", b"o0", b"n1"} <= everything

        txn.commit_transaction()
    # EndTxn is answered before the markers land: the read waits for the LSO to reach the HW.
    wait_for(lambda: client.list_offsets({tp: -1}, "read_committed")[tp].offset
             == client.list_offsets({tp: -1})[tp].offset, 30, "the commit marker")
    after = read(spark, cluster, subscribe="txn", **{"kafka.isolation.level": "read_committed"})
    assert sorted(r.value for r in after.select("value").collect()) == sorted(
        [b"c%d" % i for i in range(5)] + [b"n0", b"o0", b"n1"]
    )


def test_exactly_once_sink_across_restart(
    spark: SparkSession, cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """exactlyOnce: the query's last micro-batch is written, then its checkpoint commit is
    removed (a query killed between the two); the restarted query runs that batch again, and
    the read_committed output still has every input record once."""
    client.create_topic("eos-src", partitions=2, replication_factor=1)
    client.create_topic("eos-dst", partitions=2, replication_factor=1)
    produce(client, "eos-src", [b"e%d" % i for i in range(40)], 2)
    checkpoint = tmp_path / "eos-checkpoint"

    def run() -> None:
        run_available_now(
            lambda: spark.readStream.format("tidelog")
            .option("tidelog.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", "eos-src").option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "20").load()
            .selectExpr("value", "partition")
            .writeStream.format("tidelog")
            .option("tidelog.bootstrap.servers", cluster.bootstrap)
            .option("topic", "eos-dst").option("exactlyOnce", "true")
            .option("checkpointLocation", str(checkpoint))
        )

    run()
    last = max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    assert last >= 1  # maxOffsetsPerTrigger made several batches
    for name in (str(last), f".{last}.crc"):  # the batch's output is in the topic, its commit not
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    produce(client, "eos-src", [b"f%d" % i for i in range(10)], 2)
    run()
    output = [r.value for r in consume_all(client, "eos-dst", 2, "read_committed")]
    expected = [b"e%d" % i for i in range(40)] + [b"f%d" % i for i in range(10)]
    assert sorted(output) == sorted(expected)


def test_write_and_read_back_over_mutual_tls(spark: SparkSession, tmp_path: Path) -> None:
    """A cluster with TLS on every listener and client certificates required: the sink's and
    the source's clients, built on the executors, connect with the tidelog.security.protocol
    and tidelog.ssl.* options (a plaintext client's refusal is
    tests/client/test_tls_cluster.py's)."""
    with LocalCluster(1, tmp_path / "tls-cluster", tls=True) as cluster, \
            Client(cluster.bootstrap, **cluster.client_options) as client:
        client.create_topic("sealed", partitions=2, replication_factor=1)
        tls = {f"tidelog.{key.replace('_', '.', 1)}": value
               for key, value in cluster.client_options.items()}
        rows = [(b"k%d" % i, f"v{i}", i % 2) for i in range(20)]
        df = spark.createDataFrame(rows, "key binary, value string, partition int")
        (df.write.format("tidelog").mode("append").options(**tls)
         .option("tidelog.bootstrap.servers", cluster.bootstrap).option("topic", "sealed")
         .save())
        read_back = read(spark, cluster, subscribe="sealed", **tls).selectExpr(
            "key", "CAST(value AS STRING) AS value", "partition").collect()
        assert sorted((r.key, r.value, r.partition) for r in read_back) == sorted(rows)


def test_data_loss_fails_or_skips(
    spark: SparkSession, cluster: LocalCluster, client: Client
) -> None:
    """Retention removes the head of the log; a read from offset 0 then meets lost offsets."""
    client.create_topic(
        "lossy", partitions=1, replication_factor=1,
        config={"segment.bytes": "1024", "retention.bytes": "2048"},
    )
    with client.producer() as producer:
        for _ in range(200):  # one batch each, so that they spread over many small segments
            producer.send("lossy", b"x" * 50).result()
    tp = TopicPartition("lossy", 0)
    earliest = wait_for(  # retention runs every 5 s
        lambda: client.list_offsets({tp: -2})[tp].offset, 60, "retention to delete a segment",
        interval=0.5,
    )
    latest = client.list_offsets({tp: -1})[tp].offset

    from_zero = '{"lossy":{"0":0}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, cluster, subscribe="lossy", startingOffsets=from_zero).collect()

    rows = read(spark, cluster, subscribe="lossy", startingOffsets=from_zero,
                failOnDataLoss="false").select("offset").collect()
    offsets = [r.offset for r in rows]
    assert offsets and min(offsets) >= earliest
    assert sorted(offsets) == list(range(min(offsets), latest))


def test_example_pipeline(
    spark: SparkSession, cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """examples/pipeline.py end to end on a small demo topic: the aggregate in Parquet and in
    the output topic agree with the records stamped inside the window."""
    spec = importlib.util.spec_from_file_location("pipeline", EXAMPLES / "pipeline.py")
    assert spec is not None and spec.loader is not None
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)

    end_ms = (int(time.time()) // 60) * 60_000
    pipeline.produce_demo_data(client, "page-views", 600, end_ms)  # one view every 6 s
    start_ms = end_ms - 30 * 60_000
    rows = pipeline.run(spark, cluster.bootstrap, "page-views", "per-minute", tmp_path / "out",
                        start_ms, start_ms + 10 * 60_000)
    assert rows > 0
    table = (
        spark.read.parquet(str(tmp_path / "out"))
        .selectExpr("unix_millis(minute) AS ms", "views").collect()
    )
    assert len(table) == rows
    assert sum(r.views for r in table) == 100  # 10 minutes of one view every 6 s
    assert {r.ms for r in table} == {start_ms + m * 60_000 for m in range(10)}
    published = consume_all(client, "per-minute", 1)
    assert len(published) == rows
    assert sum(json.loads(r.value)["views"] for r in published) == 100


@pytest.mark.timeout(600)  # four JVMs to start (master, two workers, the driver) and executors
def test_standalone_cluster(
    spark_standalone: str, cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """The reads and writes above once more, from a driver against a standalone cluster (a
    master and two workers, separate JVMs): the executors of two worker processes build their
    clients from the pickled options, as on a real cluster. By offsets (JSON bounds, split
    over more tasks than partitions), by time, read_committed (the aborted records dropped on
    the executors) and read_uncommitted; a batch write; an exactly-once streaming copy in
    several micro-batches. The driver is a process of its own (spark_standalone_job.py)."""
    client.create_topic("sa-txn", partitions=1, replication_factor=1)
    client.create_topic("sa-written", partitions=2, replication_factor=1)
    client.create_topic("sa-eos", partitions=PARTITIONS, replication_factor=1)  # as "events"
    with client.producer(transactional_id="spark-standalone") as txn:
        txn.init_transactions()
        for tag, commit in (("c", True), ("a", False), ("d", True)):
            txn.begin_transaction()
            for i in range(3):
                txn.send("sa-txn", f"{tag}{i}".encode())
            txn.flush()
            if commit:
                txn.commit_transaction()
            else:
                txn.abort_transaction()
    args = {
        "master": spark_standalone, "bootstrap": cluster.bootstrap,
        "checkpoint": str(tmp_path / "eos-checkpoint"),
        "from_ts": BASE_TS + 150_000, "to_ts": BASE_TS + 240_000,
        "pythonpath": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(
            [sys.executable, str(TESTS / "spark_standalone_job.py"), json.dumps(args)],
            env=env, capture_output=True, timeout=420, cwd=tmp_path, check=False,
        )
    except subprocess.TimeoutExpired as exc:  # killed: its driver JVM ends with its stdin
        pytest.fail(f"the driver program did not finish in {exc.timeout:g} s:\n"
                    f"{(exc.stderr or b'').decode(errors='replace')[-5000:]}")
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-5000:]
    got = json.loads(done.stdout.decode().strip().splitlines()[-1])

    want = [(0, o) for o in range(5, 10)] + [(1, o) for o in range(100)]
    want += [(2, o) for o in range(3)]
    assert sorted((p, o) for p, o, _ in got["by_offsets"]) == want
    assert all(v == f"v{3 * o + p}" for p, o, v in got["by_offsets"])
    assert sorted(v for _, _, v in got["by_time"]) == sorted(f"v{i}" for i in range(150, 240))
    assert sorted(v for _, _, v in got["committed"]) == ["c0", "c1", "c2", "d0", "d1", "d2"]
    assert sorted(v for _, _, v in got["uncommitted"]) == sorted(
        f"{t}{i}" for t in "cad" for i in range(3))
    written = consume_all(client, "sa-written", 2)
    assert sorted((r.value, r.partition) for r in written) == sorted(
        (f"w{i}".encode(), i % 2) for i in range(20))
    copied = consume_all(client, "sa-eos", PARTITIONS, "read_committed")
    assert sorted(r.value for r in copied) == sorted(event(i)["value"] for i in range(EVENTS))
    ends = client.list_offsets({TopicPartition("sa-eos", p): -1 for p in range(PARTITIONS)})
    assert sum(e.offset for e in ends.values()) > EVENTS  # the transactions' markers
    assert len(got["executors"]) == 2, got["executors"]  # two executor processes served it
