"""``TidelogDataSource``, the class a job registers, as Spark ships it: by value.

Spark pickles the registered class into each Python worker it starts (with the interpreter that
``PYSPARK_PYTHON`` names) and calls its methods there. A class pickled by reference makes the
worker import ``tidelog`` before any of its code runs, so a worker whose interpreter lacks
tidelog fails with a bare ``ModuleNotFoundError``. This module is registered with cloudpickle to
be pickled by value: the class travels as code that imports ``tidelog.spark.source`` only when
Spark calls it, and says how to fix a failed import. It imports nothing of tidelog at the top,
and the methods hand everything else to ``tidelog.spark.source.TidelogSource``; the readers and
writers that returns are pickled by reference, for workers that have tidelog.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource

#: What a worker that cannot import tidelog says; names the setting to fix.
HINT = (
    "Spark's Python worker cannot import tidelog ({error}). Spark starts its workers, on the "
    "driver's host and on every executor, with the interpreter PYSPARK_PYTHON (or "
    "spark.pyspark.python) names, currently {python}: install tidelog there (pip install "
    "'tidelog[spark]') or put it on that interpreter's PYTHONPATH; see the Spark section of "
    "docs/client.md."
)


def _source() -> Any:
    """``tidelog.spark.source``, imported in the worker, or an ImportError saying why not."""
    try:
        import tidelog.spark.source as source
    except ImportError as exc:
        raise ImportError(HINT.format(error=exc, python=sys.executable)) from exc
    return source


class TidelogDataSource(DataSource):
    """Read topics (batch or streaming) and write rows to topics, with Spark's Kafka-source
    options; see ``tidelog.spark``."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def _implementation(self) -> Any:
        return _source().TidelogSource(self.options)

    def schema(self) -> Any:
        return self._implementation().schema()

    def reader(self, schema: Any) -> Any:
        return self._implementation().reader(schema)

    def streamReader(self, schema: Any) -> Any:
        return self._implementation().streamReader(schema)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        return self._implementation().writer(schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return self._implementation().streamWriter(schema, overwrite)


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
