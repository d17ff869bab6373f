"""The test tiers (tests/conftest_tiers.py): the rule puts a test that reaches a cluster, a
subprocess or a server in ``cluster`` and one that drives the simulator in ``simulation``, even
through helpers and fixtures; a ``unit`` test that starts anything fails instead of booting a
node; and every test of the suite is in exactly one tier."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import grpc.aio
import pytest
from conftest_tiers import TierViolation, forbid_processes_and_sockets

from tidelog.testing import LocalCluster

pytest_plugins = ["pytester"]

_REPO = Path(__file__).resolve().parents[2]

#: A test module as a developer would write it: a cluster reached through a fixture, through a
#: helper, and through ``subprocess``; the simulator through a module attribute; and a unit test.
_SAMPLE = '''
import subprocess

import pytest

from tidelog.replication import sim
from tidelog.testing import LocalCluster


@pytest.fixture
def nodes():
    with LocalCluster(nodes=1) as running:
        yield running


def _boot():
    nodes = LocalCluster(nodes=1)
    try:
        nodes.start()
    finally:
        nodes.close()


def test_fixture(nodes):
    pass


def test_helper():
    _boot()


def test_process():
    subprocess.run(["true"], check=True)


def test_simulator():
    assert sim.run


def test_pure():
    assert sorted([2, 1]) == [1, 2]


@pytest.mark.unit
def test_marked_unit_but_boots_a_cluster():
    _boot()
'''


@pytest.mark.unit
def test_the_rule_marks_each_test_by_what_it_reaches_and_unit_boots_nothing(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_sample=_SAMPLE)
    cluster = pytester.runpytest_inprocess("-p", "conftest_tiers", "--co", "-q", "-m", "cluster")
    cluster.stdout.fnmatch_lines(["*tiers: unit 2, simulation 1, cluster 3*"])
    assert sorted(re.findall(r"::(test_\w+)", cluster.stdout.str())) == [
        "test_fixture", "test_helper", "test_process",
    ]
    simulation = pytester.runpytest_inprocess("-p", "conftest_tiers", "--co", "-q",
                                              "-m", "simulation")
    assert re.findall(r"::(test_\w+)", simulation.stdout.str()) == ["test_simulator"]

    # The explicit marker wins over the rule; the guard then stops its cluster before any
    # process or port, and the test fails naming what it tried.
    unit = pytester.runpytest_inprocess("-p", "conftest_tiers", "-p", "no:cacheprovider",
                                        "-m", "unit")
    unit.assert_outcomes(passed=1, failed=1, deselected=4)
    unit.stdout.fnmatch_lines(["*TierViolation*test_marked_unit_but_boots_a_cluster is in a tier "
                               "without processes or sockets, but it tried to *"])


@pytest.mark.unit
def test_the_guard_refuses_sockets_processes_and_grpc_and_restores_them() -> None:
    bind = socket.socket.bind
    violations: list[str] = []
    with forbid_processes_and_sockets("this test", violations):
        with socket.socket() as sock, pytest.raises(TierViolation, match="bind a socket"):
            sock.bind(("127.0.0.1", 0))
        with pytest.raises(TierViolation, match="start a process"):
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        with pytest.raises(TierViolation, match="create a gRPC server"):
            grpc.aio.server()
        with grpc.insecure_channel("127.0.0.1:1") as channel:  # a channel alone connects nothing
            call = channel.unary_unary("/tidelog.v1.Tidelog/Metadata")
            with pytest.raises(TierViolation, match="make a gRPC call"):
                call(b"", timeout=1)
        nodes = LocalCluster(nodes=1)
        try:
            with pytest.raises(TierViolation, match=r"start a process|bind a socket"):
                nodes.start()
        finally:
            nodes.close()
    assert len(violations) == 5
    assert socket.socket.bind is bind


@pytest.mark.cluster  # the unit test below binds a socket for real
def test_a_whole_run_lets_a_unit_test_in_the_wrong_tier_pass_with_a_warning(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_sample="""
import pytest
from tidelog.testing import _free_ports

@pytest.mark.unit
def test_binds():
    assert _free_ports(1)
""")
    whole = pytester.runpytest_inprocess("-p", "conftest_tiers", "-p", "no:cacheprovider")
    whole.assert_outcomes(passed=1, warnings=1)
    whole.stdout.fnmatch_lines(["*TierWarning*test_binds is in a tier without processes or "
                                "sockets, but it tried to bind a socket*"])


def test_every_test_of_the_suite_is_in_exactly_one_tier() -> None:
    """Collects the whole suite selecting no tier: nothing may be left over."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
         "-m", "not (unit or simulation or cluster)"],
        cwd=_REPO, capture_output=True, text=True, timeout=280, check=False,
    )
    assert done.returncode == 5, done.stdout[-3000:] + done.stderr[-3000:]  # 5: none selected
    counts = re.search(r"tiers: unit (\d+), simulation (\d+), cluster (\d+)", done.stdout)
    deselected = re.search(r"(\d+) deselected", done.stdout)
    assert counts is not None and deselected is not None, done.stdout[-3000:]
    assert all(int(count) > 0 for count in counts.groups())
    assert sum(int(count) for count in counts.groups()) == int(deselected.group(1))
