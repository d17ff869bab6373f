"""A PySpark (4.x) Python data source for Tidelog topics, format name ``tidelog``.

Options, offsets and semantics are those of Spark's own Kafka source, with ``tidelog.`` in
place of the ``kafka.`` prefix, so a job moves between the two by changing the format::

    from tidelog.spark import TidelogDataSource
    spark.dataSource.register(TidelogDataSource)
    df = (spark.read.format("tidelog")
          .option("tidelog.bootstrap.servers", "127.0.0.1:7420")
          .option("subscribe", "events").load())

Only ``tidelog.spark.source`` and ``tidelog.spark.shipped`` import pyspark, and only when
``TidelogDataSource`` is first asked for: ``import tidelog`` and the option/planning modules
work without Spark installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidelog.spark.session import local_session
    from tidelog.spark.shipped import TidelogDataSource

__all__ = ["TidelogDataSource", "local_session"]

_LAZY = {"TidelogDataSource": "tidelog.spark.shipped", "local_session": "tidelog.spark.session"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tidelog.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
