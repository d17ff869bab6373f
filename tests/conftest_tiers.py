"""Test tiers: every test is marked ``unit``, ``simulation`` or ``cluster`` from what it reaches,
so a developer can run the fast part alone (``pytest -m unit``, ``scripts/test.sh --fast``).

- ``cluster``: starts real processes, servers or sockets: it uses a fixture that does (the
  ``cluster`` family, the Spark session, ...), or its code reaches one of ``CLUSTER_STARTERS``.
- ``simulation``: drives the deterministic simulator or the Raft transcripts (``SIM_MODULES``).
- ``unit``: everything else: no process, no socket.

"Reaches" is read from the code, not guessed from file names: the names the test function uses
(nested functions and lambdas included), resolved in its module, followed into every function,
class and fixture defined under the test paths (helpers, conftest fixtures, the module's own
helpers), and into a module's attribute (``subprocess.run``, ``grpc.aio.server``). An explicit
``@pytest.mark.unit|simulation|cluster`` wins over the rule, for the few tests the rule cannot see
through (a test must then carry exactly one).

The rule is checked, not trusted: a unit or simulation test that binds or connects a socket,
starts a process or creates a gRPC server or channel fails with a message naming what it did, so
``-m unit`` never boots a node unnoticed. Loaded as a plugin by tests/conftest.py."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import os
import socket
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from tidelog import testing
from tidelog.chaos import run as chaos_run

TIERS = ("unit", "simulation", "cluster")
_DESCRIPTIONS = {
    "unit": "no process, no socket: pure functions, state machines, files in tmp_path",
    "simulation": "the deterministic simulator and the Raft transcripts: no process, no socket",
    "cluster": "real processes, servers or sockets (LocalCluster, subprocesses, gRPC servers)",
}

#: What puts a test in the cluster tier when its code reaches it: modules (any use of them) and
#: functions or classes (compared by identity, so an alias or a re-export counts too).
CLUSTER_STARTERS: tuple[object, ...] = (
    subprocess,
    socket,
    multiprocessing,
    asyncio.subprocess,
    asyncio.create_subprocess_exec,
    asyncio.create_subprocess_shell,
    asyncio.start_server,
    asyncio.open_connection,
    os.fork,
    grpc.server,
    grpc.aio.server,
    grpc.insecure_channel,
    grpc.secure_channel,
    grpc.aio.insecure_channel,
    grpc.aio.secure_channel,
    testing.LocalCluster,
    testing.Raw,
    testing.probe,
    testing.stop_cluster,
    chaos_run.run,
)
_STARTER_IDS = frozenset(id(starter) for starter in CLUSTER_STARTERS)

#: Modules whose use puts a test in the simulation tier (matched on the last dotted parts, so
#: ``tidelog.replication.sim`` and ``replication.sim`` are the same module).
SIM_MODULES = ("replication.sim", "replication.sim_disk", "commands.sim", "raft_transcript")



def _is_sim_module(name: str | None) -> bool:
    return name is not None and any(
        name == module or name.endswith("." + module) for module in SIM_MODULES
    )


def _defined_in(obj: object, directories: list[Path]) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    source = getattr(module, "__file__", None)
    if source is None:
        return False
    path = Path(source).resolve()
    return any(path.is_relative_to(directory) for directory in directories)


def _unwrap(func: Callable[..., Any]) -> Callable[..., Any]:
    """The test's own function under Hypothesis's ``@given`` and ``functools.wraps`` wrappers."""
    inner = getattr(getattr(func, "hypothesis", None), "inner_test", None)
    return inspect.unwrap(inner if inner is not None else func)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class _Reach:
    """Walks what a test can reach and remembers the highest tier found ("cluster" stops it)."""

    def __init__(self, test_dirs: list[Path]) -> None:
        #: Where the walk follows names: the ini file's test paths (tests/), else the rootdir.
        self.test_dirs = test_dirs
        self.tier = "unit"
        self.why = ""
        self._seen: set[int] = set()

    def _found(self, tier: str, why: str) -> None:
        if TIERS.index(tier) > TIERS.index(self.tier):
            self.tier, self.why = tier, why

    def value(self, value: object, names: set[str], via: str) -> None:
        """One name a walked function uses, resolved to ``value``."""
        if id(value) in _STARTER_IDS:
            self._found("cluster", f"{via} uses {getattr(value, '__name__', value)!s}")
            return
        if isinstance(value, types.ModuleType):
            if _is_sim_module(value.__name__):
                self._found("simulation", f"{via} uses {value.__name__}")
            for name in names:  # module.attribute: subprocess.run, grpc.aio.server, sim.run
                attribute = getattr(value, name, None)
                if attribute is not None and attribute is not value:
                    if id(attribute) in _STARTER_IDS:
                        self._found("cluster", f"{via} uses {value.__name__}.{name}")
                    elif isinstance(attribute, types.ModuleType) and _is_sim_module(
                        attribute.__name__
                    ):
                        self._found("simulation", f"{via} uses {attribute.__name__}")
            return
        if _is_sim_module(getattr(value, "__module__", None)):
            self._found("simulation", f"{via} uses {value.__module__}")
        elif _defined_in(value, self.test_dirs):
            self.walk(value)

    def walk(self, obj: object, extra_scope: dict[str, Any] | None = None) -> None:
        """A function or class defined under the test paths: every name its code uses."""
        if self.tier == "cluster" or id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        if isinstance(obj, type):
            for member in vars(obj).values():
                wrapped = isinstance(member, staticmethod | classmethod)
                target = member.__func__ if wrapped else member
                if inspect.isfunction(target):
                    self.walk(target, dict(vars(obj)))
            return
        if not callable(obj):
            return
        func = _unwrap(obj)
        code = getattr(func, "__code__", None)
        if code is None:
            return
        names = _code_names(code)
        scope = dict(getattr(func, "__globals__", {}))
        if extra_scope:
            scope.update(extra_scope)
        for name in names:
            if name in scope:
                self.value(scope[name], names, func.__qualname__)
            if self.tier == "cluster":
                return


def classify(item: pytest.Item) -> tuple[str, str]:
    """The tier of one collected test and why: explicit marker, else what it reaches."""
    explicit = [tier for tier in TIERS if item.get_closest_marker(tier) is not None]
    if len(explicit) > 1:
        raise pytest.UsageError(f"{item.nodeid} is marked {' and '.join(explicit)}: pick one tier")
    if explicit:
        return explicit[0], "marked"
    config = item.config
    paths = [config.rootpath / path for path in config.getini("testpaths")]
    reach = _Reach([path.resolve() for path in paths or [config.rootpath]])
    function = getattr(item, "function", None)
    if function is None:
        return "cluster", "not a Python test function"
    cls = getattr(item, "cls", None)
    reach.walk(function, dict(vars(cls)) if cls is not None else None)
    fixture_info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in (fixture_info.name2fixturedefs.get(name, ()) if fixture_info else ()):
            if _defined_in(fixturedef.func, reach.test_dirs):
                reach.walk(fixturedef.func)
    return reach.tier, reach.why


def pytest_configure(config: pytest.Config) -> None:
    """Registers the tier markers where the ini file does not (pyproject.toml does)."""
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    for tier in TIERS:
        if tier not in registered:
            config.addinivalue_line("markers", f"{tier}: {_DESCRIPTIONS[tier]}")


_TIER_KEY = pytest.StashKey[str]()
_COUNTS_KEY = pytest.StashKey[dict[str, int]]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every item with its tier before ``-m`` deselects (tryfirst: before that hook)."""
    counts = dict.fromkeys(TIERS, 0)
    for item in items:
        tier, _why = classify(item)
        item.stash[_TIER_KEY] = tier
        if item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))
        counts[tier] += 1
    config.stash[_COUNTS_KEY] = counts


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    counts = config.stash.get(_COUNTS_KEY, None)
    if counts is None:
        return None
    return "tiers: " + ", ".join(f"{tier} {counts[tier]}" for tier in TIERS)


class TierViolation(RuntimeError):
    """A test of a tier without processes and sockets tried to start one."""


@contextmanager
def forbid_processes_and_sockets(what: str, violations: list[str]) -> Iterator[None]:
    """While it is open, binding or connecting a socket, starting a process, and creating a gRPC
    server or channel raise TierViolation and are recorded in ``violations`` (recorded too, so a
    test whose code swallows the exception still fails)."""

    def refuse(action: str) -> None:
        message = (
            f"{what} is in a tier without processes or sockets, but it tried to {action}. "
            "Mark it @pytest.mark.cluster, or add what it uses to CLUSTER_STARTERS in "
            "tests/conftest_tiers.py so the rule sees it."
        )
        violations.append(message)
        raise TierViolation(message)

    def refusing(action: str) -> Callable[..., Any]:
        def refused(*_args: Any, **_kwargs: Any) -> Any:
            refuse(action)

        return refused

    patches: list[tuple[object, str, object]] = [
        (socket.socket, "bind", refusing("bind a socket")),
        (socket.socket, "connect", refusing("connect a socket")),
        (socket.socket, "connect_ex", refusing("connect a socket")),
        (subprocess.Popen, "_execute_child", refusing("start a process")),
        (os, "fork", refusing("fork a process")),
        (grpc, "server", refusing("create a gRPC server")),
        (grpc.aio, "server", refusing("create a gRPC server")),
        (grpc, "insecure_channel", refusing("open a gRPC channel")),
        (grpc, "secure_channel", refusing("open a gRPC channel")),
        (grpc.aio, "insecure_channel", refusing("open a gRPC channel")),
        (grpc.aio, "secure_channel", refusing("open a gRPC channel")),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    if item.stash.get(_TIER_KEY, "cluster") == "cluster":
        yield
        return
    violations: list[str] = []
    with forbid_processes_and_sockets(item.nodeid, violations):
        yield
    if violations:
        raise TierViolation(violations[0])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)
