"""Fixtures shared by the test modules. The Spark session lives in its own plugin module, so
that suites stay independent.

``cluster`` is one LocalCluster per test module (starting one takes seconds), closed after the
module's last test whatever the outcome; a module that needs other settings overrides
``cluster_options``. ``raw`` is a Raw stub wrapper on that cluster. ``fresh_cluster`` and
``fresh_raw`` are the same for one test alone, for tests that leave nodes damaged, stopped or
killed, which the next test must not inherit.

Every node the tests run, in this process or spawned (they inherit the environment), checks
that no helper thread touches the state its event loop owns (`tidelog.node.replicas.loop_owned`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tidelog.node.replicas.loop_owned import DEBUG_THREADS_ENV
from tidelog.testing import LISTEN_PORTS_ENV, LocalCluster, Raw, listen_port_room

os.environ.setdefault(DEBUG_THREADS_ENV, "1")


def _own_listen_ports() -> None:
    """Each pytest-xdist worker its own share of the listening ports, for its clusters and the
    processes it starts (they inherit the environment): a node killed by one worker's test is
    down for a while, its port free, and another worker's cluster picked it (a whole run on four
    workers saw a node restart into "address in use")."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if not worker.startswith("gw") or workers < 2 or LISTEN_PORTS_ENV in os.environ:
        return
    room, index = listen_port_room(), int(worker[2:])
    share = len(room) // workers
    first = room.start + index * share
    os.environ[LISTEN_PORTS_ENV] = f"{first}-{first + share - 1}"


_own_listen_ports()

pytest_plugins = ["conftest_spark", "conftest_tiers"]


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    """LocalCluster's arguments for the module's cluster (``nodes``, node settings)."""
    return {}


@pytest.fixture(scope="module")
def cluster(cluster_options: dict[str, Any]) -> Iterator[LocalCluster]:
    with LocalCluster(**cluster_options) as running:
        yield running


@pytest.fixture(scope="module")
def raw(cluster: LocalCluster) -> Iterator[Raw]:
    with Raw(cluster) as stubs:
        yield stubs


@pytest.fixture
def fresh_cluster(cluster_options: dict[str, Any]) -> Iterator[LocalCluster]:
    with LocalCluster(**cluster_options) as running:
        yield running


@pytest.fixture
def fresh_raw(fresh_cluster: LocalCluster) -> Iterator[Raw]:
    with Raw(fresh_cluster) as stubs:
        yield stubs
