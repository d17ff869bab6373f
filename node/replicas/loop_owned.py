"""State the event loop owns, and a debug check that no other thread touches it.

A node's event loop mutates its registries (the replicas it hosts, above all) at any await.
A helper thread (the disk thread and its flush helpers, the scrub thread, the metrics
server's thread) that walked such a registry itself saw it change under it: a CreateTopics
of 10,000 partitions crashed a node with "dictionary changed size during iteration" in the
checkpoint pass, which read the replica registry on the disk thread while the loop added the
new replicas. The rule is that such state reaches another thread only as a snapshot taken on
the loop (a tuple of the replicas, a dict of their logs) and handed to the job.

The rule is checked, not only stated: with ``TIDELOG_DEBUG_THREADS=1`` in the environment
(the test suite sets it, tests/conftest.py, and the nodes it starts inherit it),
`loop_owned_dict` returns a dict that raises `LoopOwnershipError` when any thread but the one
that created it reads or changes it, and logs where. Off (the default) it is a plain dict:
the hot path pays nothing. A static rule could not see which thread runs a function; this
check sees every access that actually happens in a test.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

#: Set to 1 to have loop-owned containers check the thread that touches them.
DEBUG_THREADS_ENV = "TIDELOG_DEBUG_THREADS"

K = TypeVar("K")
V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger(__name__)


class LoopOwnershipError(RuntimeError):
    """A thread other than the event loop's touched state the loop owns."""


def checking_threads() -> bool:
    return os.environ.get(DEBUG_THREADS_ENV) == "1"


def loop_owned_dict(name: str) -> dict[K, V]:
    """An empty dict owned by the calling thread (the event loop's, for a node's state):
    checked as the module says when `checking_threads`, else a plain dict."""
    if checking_threads():
        return _OwnedDict(name)
    return {}


def _checked(method: F) -> F:
    def checked(self: _OwnedDict, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != self.owner:
            self.refuse(method.__name__)
        return method(self, *args, **kwargs)

    checked.__name__ = method.__name__
    checked.__doc__ = method.__doc__
    return checked  # type: ignore[return-value]


class _OwnedDict(dict[Any, Any]):
    """A dict that only its creating thread may use (`loop_owned_dict`)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.owner = threading.get_ident()

    def refuse(self, operation: str) -> None:
        thread = threading.current_thread().name
        message = (f"{self.name} touched off the event loop ({operation} on thread {thread}): "
                   "hand the thread a snapshot taken on the loop instead")
        # Logged as well as raised: a job nobody awaits (a submit to the disk thread) would
        # drop the exception unseen.
        log.critical(message, stack_info=True)
        raise LoopOwnershipError(message)

    __getitem__ = _checked(dict.__getitem__)
    __setitem__ = _checked(dict.__setitem__)
    __delitem__ = _checked(dict.__delitem__)
    __contains__ = _checked(dict.__contains__)
    __iter__ = _checked(dict.__iter__)
    __len__ = _checked(dict.__len__)
    __eq__ = _checked(dict.__eq__)
    __or__ = _checked(dict.__or__)
    __ior__ = _checked(dict.__ior__)
    __reversed__ = _checked(dict.__reversed__)
    get = _checked(dict.get)
    keys = _checked(dict.keys)
    values = _checked(dict.values)
    items = _checked(dict.items)
    pop = _checked(dict.pop)
    popitem = _checked(dict.popitem)
    setdefault = _checked(dict.setdefault)
    update = _checked(dict.update)
    clear = _checked(dict.clear)
    copy = _checked(dict.copy)
