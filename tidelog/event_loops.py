"""The event loop a node and the client's transport run on: uvloop where it is installed,
asyncio's own loop otherwise, or either one by choice.

uvloop runs the same grpc.aio servers and channels unchanged and spends less CPU per request
(nodes spent about a tenth less CPU per MiB produced at a fixed rate on the benchmark machine,
docs/performance.md). It is a dependency on every platform it builds for (not Windows), so
"auto" finds it there and falls back to asyncio elsewhere. A node chooses with its
``event.loop`` setting; the client library reads ``TIDELOG_EVENT_LOOP`` from the environment
(its transport's loop is started long after the application chose its settings, and an
application's own loop is never replaced).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from tidelog.errors import ConfigurationError

EventLoopKind = Literal["auto", "asyncio", "uvloop"]
KINDS: tuple[EventLoopKind, ...] = ("auto", "asyncio", "uvloop")
#: The environment variable the client library's transport reads (default "auto").
CLIENT_ENV = "TIDELOG_EVENT_LOOP"

T = TypeVar("T")


def loop_factory(kind: str, setting: str = "event.loop") -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new loop of ``kind``. "uvloop" when uvloop cannot be imported is an error
    naming ``setting``: someone asked for it and would otherwise measure asyncio unknowingly."""
    if kind not in KINDS:
        raise ConfigurationError(f"{setting} must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise ConfigurationError(
                f"{setting}=uvloop, but uvloop is not installed (pip install uvloop; it does "
                "not run on Windows): set it to auto or asyncio"
            ) from None
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def client_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The client transport's loop maker, as ``TIDELOG_EVENT_LOOP`` asks (unset: "auto")."""
    return loop_factory(os.environ.get(CLIENT_ENV, "auto").strip().lower() or "auto", CLIENT_ENV)


def run(coro: Coroutine[Any, Any, T], kind: str, setting: str = "event.loop") -> T:
    """``asyncio.run(coro)`` on a loop of ``kind``."""
    try:
        factory = loop_factory(kind, setting)
    except ConfigurationError:
        coro.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """"uvloop" or "asyncio": which implementation ``loop`` is, for logs and metrics."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
