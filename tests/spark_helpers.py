"""Helpers of the Spark tests shared with their standalone driver program
(tests/spark_standalone_job.py), which runs outside pytest."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter


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
