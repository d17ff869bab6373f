"""The one SparkSession of a pytest run (starting one takes seconds to minutes on a slow
machine): local[2], UI off, UTC, with the tidelog data source registered. Loaded as a plugin by
tests/conftest.py; pyspark is imported only when a test asks for the session."""

from __future__ import annotations

import os
import shutil
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
    from tidelog.spark import local_session

    session = local_session(
        "tidelog-tests",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        },
    )
    yield session
    session.stop()
