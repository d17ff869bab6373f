"""The one SparkSession of a pytest run (starting one takes seconds to minutes on a slow
machine): local[2], UI off, UTC, with the tidelog data source registered; and a standalone
Spark cluster (a master and two workers, separate JVMs) for the test that runs a driver against
it. Loaded as a plugin by tests/conftest.py; pyspark is imported only when a test asks for the
session or the cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from spark_helpers import TEST_JVM_OPTIONS

from tidelog.testing import wait_for

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
            "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
        },
    )
    yield session
    session.stop()


#: What a standalone worker offers: one core, and the memory of one executor (Spark's least is
#: 450 MiB of heap).
WORKER_MEMORY = "512m"
_REPO = Path(__file__).resolve().parent.parent
_START_S = 300.0
_STOP_S = 15.0


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone Spark cluster from the pyspark distribution: a master and two workers, each
    a JVM of its own (`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`),
    every port and web UI on 127.0.0.1, the daemons with 256 MiB of heap. Yields the master's
    URL once the master listens and both workers registered. Each daemon runs in a process
    group of its own, which the executors it starts join: the group is stopped at the end,
    whatever happened (SIGTERM, then SIGKILL)."""
    if not _java_available():
        pytest.skip("Java is not installed: a standalone Spark cluster needs a JVM (Java 17)")
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {
        **os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m", "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS,
        "SPARK_LOG_DIR": str(work),
        "PYSPARK_PYTHON": sys.executable,
        # The executors' Python workers import tidelog (the data source is pickled by name).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
    }
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"spark://127.0.0.1:{port}"
    daemons: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, *args: str) -> None:
        with (work / f"{name}.log").open("wb") as log:
            daemons[name] = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args], env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )

    def started(name: str, line: str) -> bool:
        if daemons[name].poll() is not None:
            tail = (work / f"{name}.log").read_text(errors="replace")[-2000:]
            pytest.skip(f"the standalone Spark {name} could not start (exit "
                        f"{daemons[name].returncode}):\n{tail}")
        return line in (work / f"{name}.log").read_text(errors="replace")

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", "0")
        # Workers started before the master listens wait seconds for their next try.
        wait_for(lambda: started("master", "Starting Spark master at"), timeout=_START_S,
                 what="the standalone Spark master")
        for name in ("worker1", "worker2"):
            start(name, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                  "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", WORKER_MEMORY,
                  "--work-dir", str(work / name))
        for name in ("worker1", "worker2"):
            wait_for(lambda name=name: started(name, "Successfully registered with master"),
                     timeout=_START_S, what=f"standalone Spark {name} registered")
        yield url
    finally:
        for process in daemons.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in daemons.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(_STOP_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # executors left behind, if any
            process.wait()
