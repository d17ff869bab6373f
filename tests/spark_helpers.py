"""Helpers of the Spark tests shared with their standalone driver program
(tests/spark_standalone_job.py), which runs outside pytest."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

#: Options of every JVM the tests start (drivers, executors, the standalone daemons). A test's
#: JVM lives a minute and runs most of its code a few times: the optimising JIT compiler (C2)
#: and the parallel collector's threads are CPU spent for nothing there. The quick compiler
#: alone and the serial collector halved a driver's CPU over six of the Spark tests (45 s to
#: 21 s) and cut their wall time by a fifth. Users' sessions keep the JVM's defaults.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def run_available_now(build: Callable[[], DataStreamWriter], attempts: int = 3) -> None:
    """Run a streaming query with trigger availableNow to its end.

    Spark gives the Python process that drives a streaming source a fixed 10 s to start and
    connect back (PythonWorkerFactory); on a machine loaded by other work that can pass, failing
    the query while it is still INITIALIZING, before any offset is logged. Only that failure is
    retried; any other fails the test."""
    for attempt in range(attempts):
        query = build().trigger(availableNow=True).start()
        try:
            assert query.awaitTermination(300), "the query did not finish in 300 s"
            return
        except Exception as exc:
            starting = "failed to connect back" in str(exc) and "State: INITIALIZING" in str(exc)
            if not starting or attempt == attempts - 1:
                raise
