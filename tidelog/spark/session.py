"""A local Spark session with the Tidelog source registered, for examples, tests and benchmarks.

One place decides what a laptop session needs: workers that run this interpreter (which has
tidelog installed), a driver bound to loopback only, no web UI, UTC timestamps, quiet logs.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(
    app_name: str = "tidelog", *, master: str = "local[2]", **conf: str
) -> SparkSession:
    """`local[2]` Spark with `format("tidelog")` ready; `conf` adds or overrides settings.
    `master` may name a standalone cluster (``spark://host:port``) whose workers run this
    interpreter too."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tidelog.spark.shipped import TidelogDataSource

    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TidelogDataSource)
    return session
