"""A Spark worker whose interpreter cannot import tidelog is told how to fix it.

Spark pickles the registered data source class with cloudpickle into each Python worker and
calls it there. The test does the same without a JVM: the class is pickled as Spark pickles
it, then loaded and called in an interpreter that has pyspark but not tidelog (site-packages
on its path without the editable install's finder, started outside the repository), as a
worker started with a PYSPARK_PYTHON lacking tidelog is. Before, the class was pickled by
reference, and loading it failed with a bare "No module named 'tidelog'"."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

_WORKER = """
import sys
from pyspark import cloudpickle
cls = cloudpickle.loads(sys.stdin.buffer.read())
try:
    cls({"tidelog.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}).schema()
except ImportError as exc:
    print(exc)
"""


def test_a_worker_without_tidelog_says_how_to_install_it(tmp_path: Path) -> None:
    from pyspark import cloudpickle

    from tidelog.spark import TidelogDataSource

    shipped = cloudpickle.dumps(TidelogDataSource)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]  # no .pth: no tidelog
    done = subprocess.run(
        [sys.executable, "-S", "-c", _WORKER], input=shipped, capture_output=True,
        cwd=tmp_path, env=env, timeout=120,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "cannot import tidelog" in out and "PYSPARK_PYTHON" in out, out
    assert sys.executable in out
