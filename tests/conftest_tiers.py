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

The rule is checked, not trusted: in a run that selects a tier (``-m unit``), a unit or
simulation test that binds or connects a socket, starts a process, creates a gRPC server or makes
a gRPC call is stopped and fails with a message naming what it did, so ``-m unit`` never boots a
node; in a run of the whole suite the same test passes with a TierWarning naming it. Loaded as a
plugin by tests/conftest.py."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

TIERS = ("unit", "simulation", "cluster")
_DESCRIPTIONS = {
    "unit": "no process, no socket: pure functions, state machines, files in tmp_path",
    "simulation": "the deterministic simulator and the Raft transcripts: no process, no socket",
    "cluster": "real processes, servers or sockets (LocalCluster, subprocesses, gRPC servers)",
}

#: What puts a test in the cluster tier when its code reaches it: modules (any use of them) and
#: functions or classes (compared by identity, so an alias or a re-export counts too).
CLUSTER_STARTERS = (
    "subprocess", "socket", "multiprocessing", "asyncio.subprocess",
    "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell", "asyncio.start_server",
    "asyncio.open_connection", "os.fork",
    "grpc.server", "grpc.aio.server", "grpc.insecure_channel", "grpc.secure_channel",
    "grpc.aio.insecure_channel", "grpc.aio.secure_channel",
    "tidelog.testing.LocalCluster", "tidelog.testing.Raw", "tidelog.testing.probe",
    "tidelog.testing.stop_cluster",
    "tidelog.chaos.run.run", "tidelog.chaos.scenarios.lost_prepare",
)


@functools.cache
def _starter_ids() -> frozenset[int]:
    """The identities of CLUSTER_STARTERS. One that does not import (a package half-way through
    a change) is left out rather than stopping every test: the guard still catches its users."""
    ids = set()
    for dotted in CLUSTER_STARTERS:
        module_name, _, attribute = dotted.rpartition(".")
        try:
            found = importlib.import_module(dotted)
        except ImportError:
            try:
                found = getattr(importlib.import_module(module_name), attribute)
            except Exception:  # whatever breaks that import, the other tests still run
                continue
        ids.add(id(found))
    return frozenset(ids)

#: Modules whose use puts a test in the simulation tier (matched on the last dotted parts, so
#: ``tidelog.replication.sim`` and ``replication.sim`` are the same module).
SIM_MODULES = ("replication.sim", "replication.sim_disk", "commands.sim", "raft_transcript")



def _is_sim_module(name: str | None) -> bool:
    return name is not None and any(
        name == module or name.endswith("." + module) for module in SIM_MODULES
    )


def _defined_in(obj: object, directories: list[Path]) -> bool:
    return _module_in(getattr(obj, "__module__", None) or "", tuple(directories))


@functools.cache
def _module_in(module_name: str, directories: tuple[Path, ...]) -> bool:
    source = getattr(sys.modules.get(module_name), "__file__", None)
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
        #: Where the walk follows names (`_test_dirs`).
        self.test_dirs = test_dirs
        self.tier = "unit"
        self.why = ""
        self._seen: set[int] = set()

    def _found(self, tier: str, why: str) -> None:
        if TIERS.index(tier) > TIERS.index(self.tier):
            self.tier, self.why = tier, why

    def value(self, value: object, names: set[str], via: str) -> None:
        """One name a walked function uses, resolved to ``value``."""
        if id(value) in _starter_ids():
            self._found("cluster", f"{via} uses {getattr(value, '__name__', value)!s}")
            return
        if isinstance(value, types.ModuleType):
            if _is_sim_module(value.__name__):
                self._found("simulation", f"{via} uses {value.__name__}")
            for name in names:  # module.attribute: subprocess.run, grpc.aio.server, sim.run
                attribute = getattr(value, name, None)
                if attribute is not None and attribute is not value:
                    if id(attribute) in _starter_ids():
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


_WALKS_KEY = pytest.StashKey[dict[tuple[int, int], tuple[str, str]]]()
_TEST_DIRS_KEY = pytest.StashKey[list[Path]]()


def _test_dirs(config: pytest.Config) -> list[Path]:
    """Where the walk follows names: the ini file's test paths (tests/), else the rootdir."""
    if _TEST_DIRS_KEY not in config.stash:
        paths = [config.rootpath / path for path in config.getini("testpaths")]
        config.stash[_TEST_DIRS_KEY] = [path.resolve() for path in paths or [config.rootpath]]
    return config.stash[_TEST_DIRS_KEY]


def _walked(
    item: pytest.Item, obj: object, cls: type | None, test_dirs: list[Path]
) -> tuple[str, str]:
    """The tier one function or fixture reaches, walked once per run (parametrized tests and
    shared fixtures come back many times)."""
    walks = item.config.stash.setdefault(_WALKS_KEY, {})
    key = (id(obj), id(cls))
    if key not in walks:
        reach = _Reach(test_dirs)
        reach.walk(obj, dict(vars(cls)) if cls is not None else None)
        walks[key] = (reach.tier, reach.why)
    return walks[key]


def classify(item: pytest.Item) -> tuple[str, str]:
    """The tier of one collected test and why: explicit marker, else what it reaches."""
    explicit = [tier for tier in TIERS if item.get_closest_marker(tier) is not None]
    if len(explicit) > 1:
        raise pytest.UsageError(f"{item.nodeid} is marked {' and '.join(explicit)}: pick one tier")
    if explicit:
        return explicit[0], "marked"
    function = getattr(item, "function", None)
    if function is None:
        return "cluster", "not a Python test function"
    test_dirs = _test_dirs(item.config)
    found = [_walked(item, function, getattr(item, "cls", None), test_dirs)]
    fixture_info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in (fixture_info.name2fixturedefs.get(name, ()) if fixture_info else ()):
            if _defined_in(fixturedef.func, test_dirs):
                found.append(_walked(item, fixturedef.func, None, test_dirs))
    return max(found, key=lambda tier_why: TIERS.index(tier_why[0]))


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


class TierWarning(pytest.PytestWarning):
    """In a run that selects no tier: a unit or simulation test did what its tier does not."""


def _rpc_entry_points() -> list[tuple[object, str]]:
    """Where a gRPC call or connection starts, sync and asyncio (a channel alone is allowed:
    creating one connects nothing, and the CLI makes one before it validates its arguments)."""
    import grpc._channel as sync_channel
    import grpc.aio._channel as aio_channel

    points: list[tuple[object, str]] = [(grpc, "channel_ready_future"),
                                        (aio_channel.Channel, "channel_ready")]
    for module in (sync_channel, aio_channel):
        for name, cls in vars(module).items():
            if name.endswith("MultiCallable") and isinstance(cls, type):
                points += [(cls, method) for method in ("__call__", "with_call", "future")
                           if method in vars(cls)]
    return points


@contextmanager
def forbid_processes_and_sockets(
    what: str, violations: list[str], *, refuse: bool = True
) -> Iterator[None]:
    """While it is open, binding or connecting a socket, starting a process, creating a gRPC
    server and making a gRPC call are recorded in ``violations``, and with ``refuse`` raise
    TierViolation instead of happening (recorded too, so a test whose code swallows the
    exception still fails). Without ``refuse`` only what the main thread does is recorded: a
    module's cluster fixture may have client threads calling while a unit test runs."""

    def guarded(action: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def instead(*args: Any, **kwargs: Any) -> Any:
            if refuse or threading.current_thread() is threading.main_thread():
                violations.append(
                    f"{what} is in a tier without processes or sockets, but it tried to {action}. "
                    "Mark it @pytest.mark.cluster, or add what it uses to CLUSTER_STARTERS in "
                    "tests/conftest_tiers.py so the rule sees it."
                )
                if refuse:
                    raise TierViolation(violations[-1])
            return original(*args, **kwargs)

        return instead

    points = [
        (socket.socket, "bind", "bind a socket"),
        (socket.socket, "connect", "connect a socket"),
        (socket.socket, "connect_ex", "connect a socket"),
        (subprocess.Popen, "_execute_child", "start a process"),
        (os, "fork", "fork a process"),
        (grpc, "server", "create a gRPC server"),
        (grpc.aio, "server", "create a gRPC server"),
        *((owner, name, "make a gRPC call") for owner, name in _rpc_entry_points()),
    ]
    # What each owner defines itself (socket.socket inherits bind and connect from _socket).
    saved = [(owner, name, vars(owner).get(name)) for owner, name, _ in points]
    try:
        for owner, name, action in points:
            setattr(owner, name, guarded(action, getattr(owner, name)))
        yield
    finally:
        for owner, name, own in saved:
            if own is None:
                delattr(owner, name)
            else:
                setattr(owner, name, own)


@contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    """Refuses in a run that selects a tier (-m unit, --fast), so it never boots anything;
    in other runs (the whole suite) warns, so a test in the wrong tier shows without failing."""
    if item.stash.get(_TIER_KEY, "cluster") == "cluster":
        yield
        return
    markexpr = item.config.getoption("markexpr", "") or ""
    refuse = any(tier in markexpr for tier in TIERS)
    violations: list[str] = []
    with forbid_processes_and_sockets(item.nodeid, violations, refuse=refuse):
        yield
    if violations and refuse:
        raise TierViolation(violations[0])
    if violations:
        item.warn(TierWarning(violations[0]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)
