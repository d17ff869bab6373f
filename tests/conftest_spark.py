"""The one SparkSession of a pytest run (starting one takes seconds to minutes on a slow
machine): local[2], UI off, UTC, with the tidelog data source registered. Loaded as a plugin by
tests/conftest.py; pyspark is imported only when a test asks for the session."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or (
        home is not None and os.path.exists(os.path.join(home, "bin", "java"))
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if not _java_available():
        pytest.skip("Java is not installed: the Spark end-to-end tests need a JVM (Java 17)")
    # Workers must run this venv's interpreter, which has tidelog installed (editable).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tidelog.spark import TidelogDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tidelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TidelogDataSource)
    yield session
    session.stop()
