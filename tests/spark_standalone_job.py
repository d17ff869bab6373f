"""The driver program of tests/client/test_spark_e2e.py::test_standalone_cluster, run in a process
of its own (a Python process has one SparkContext, and the test run's local[2] session may be
up already): a session against the standalone master, the reads and writes that a cluster's
executors serve with clients built from the pickled options, and what they returned, as one
JSON line on stdout.

    python tests/spark_standalone_job.py '{"master": ..., "bootstrap": ..., "checkpoint": ...}'
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from spark_helpers import TEST_JVM_OPTIONS, run_available_now

from tidelog.spark import local_session

#: The executors of the two workers (each one core): the job waits for both, so that the reads
#: are spread over two executor processes.
EXECUTORS = 2
_EXECUTORS_WAIT_S = 180


def _step(what: str, started: float = time.monotonic()) -> None:
    """Progress on stderr, which the test shows when the program fails."""
    print(f"{time.monotonic() - started:7.1f}s {what}", file=sys.stderr, flush=True)


def main(args: dict[str, Any]) -> dict[str, Any]:
    spark = local_session(
        "tidelog-standalone", master=args["master"],
        **{
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": str(EXECUTORS),
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.showConsoleProgress": "false",
            "spark.executorEnv.PYTHONPATH": args["pythonpath"],
            "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
            "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
        },
    )
    try:
        _step("session up")
        _wait_for_executors(spark)
        _step("executors registered")
        bootstrap = args["bootstrap"]

        def read(**options: str) -> Any:
            reader = spark.read.format("tidelog").option("tidelog.bootstrap.servers", bootstrap)
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        # The four reads as one job (fewer rounds between the driver and the executors).
        reads = {
            "by_offsets": read(
                subscribe="events", minPartitions="4",
                startingOffsets='{"events":{"0":5,"1":-2,"2":-2}}',
                endingOffsets='{"events":{"0":10,"1":-1,"2":3}}',
            ),
            "by_time": read(subscribe="events", startingTimestamp=str(args["from_ts"]),
                            endingTimestamp=str(args["to_ts"])),
            "committed": read(subscribe="sa-txn",
                              **{"tidelog.isolation.level": "read_committed"}),
            "uncommitted": read(subscribe="sa-txn"),
        }
        union = None
        for name, df in reads.items():
            part = df.selectExpr(f"'{name}' AS read", "partition", "offset",
                                 "CAST(value AS STRING) AS value")
            union = part if union is None else union.unionByName(part)
        assert union is not None
        got: dict[str, Any] = {name: [] for name in reads}
        for r in union.collect():
            got[r.read].append([r.partition, r.offset, r.value])
        _step("reads by offsets, by time, read_committed and read_uncommitted")
        rows = [(f"w{i}", i % 2) for i in range(20)]
        (spark.createDataFrame(rows, "value string, partition int").write.format("tidelog")
         .mode("append").option("tidelog.bootstrap.servers", bootstrap)
         .option("topic", "sa-written").save())
        _step("batch write")
        run_available_now(
            lambda: spark.readStream.format("tidelog")
            .option("tidelog.bootstrap.servers", bootstrap)
            .option("subscribe", "events").option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "150").load()
            .selectExpr("value", "partition")
            .writeStream.format("tidelog")
            .option("tidelog.bootstrap.servers", bootstrap)
            .option("topic", "sa-eos").option("exactlyOnce", "true")
            .option("checkpointLocation", args["checkpoint"])
        )
        _step("exactly-once streaming write")
        return {"executors": _executors(spark), **got}
    finally:
        spark.stop()


def _executors(spark: Any) -> list[str]:
    """The ids of the executors registered (the driver is not one)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds().mkString(",")
    return sorted(i for i in ids.split(",") if i)


def _wait_for_executors(spark: Any) -> None:
    deadline = time.monotonic() + _EXECUTORS_WAIT_S
    while len(_executors(spark)) < EXECUTORS:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(_executors(spark))} of {EXECUTORS} executors registered "
                               f"within {_EXECUTORS_WAIT_S} s")
        time.sleep(0.2)


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
