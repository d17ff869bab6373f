"""The debug check of loop-owned state (`tidelog.node.replicas.loop_owned`): with it on, a
thread other than the owner's that reads or changes the registry raises, however it goes about
it; off, the registry is a plain dict."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tidelog.node.replicas.loop_owned import DEBUG_THREADS_ENV, LoopOwnershipError, loop_owned_dict

_ACCESSES: dict[str, Callable[[dict[int, str]], Any]] = {
    "get": lambda d: d.get(1),
    "index": lambda d: d[1],
    "contains": lambda d: 1 in d,
    "len": len,
    "iterate": list,
    "values": lambda d: list(d.values()),
    "items": lambda d: list(d.items()),
    "copy": dict,
    "unpack": lambda d: {**d},
    "set": lambda d: d.__setitem__(2, "b"),
    "pop": lambda d: d.pop(1),
    "delete": lambda d: d.__delitem__(1),
    "setdefault": lambda d: d.setdefault(3, "c"),
    "update": lambda d: d.update({4: "d"}),
    "clear": lambda d: d.clear(),
}


def _on_another_thread(access: Callable[[dict[int, str]], Any], owned: dict[int, str]) -> Any:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(access(owned))
        except Exception as exc:  # what the other thread saw is the outcome
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return outcome[0]


@pytest.mark.parametrize("access", _ACCESSES.values(), ids=_ACCESSES.keys())
def test_with_the_check_on_another_thread_cannot_touch_the_registry(
    monkeypatch: pytest.MonkeyPatch, access: Callable[[dict[int, str]], Any]
) -> None:
    monkeypatch.setenv(DEBUG_THREADS_ENV, "1")
    owned: dict[int, str] = loop_owned_dict("the registry")
    owned[1] = "a"
    seen = _on_another_thread(access, owned)
    assert isinstance(seen, LoopOwnershipError), seen
    assert "the registry touched off the event loop" in str(seen)
    assert owned == {1: "a"}
    access(owned)  # its own thread may


def test_with_the_check_off_the_registry_is_a_plain_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEBUG_THREADS_ENV, raising=False)
    owned: dict[int, str] = loop_owned_dict("the registry")
    assert type(owned) is dict
    owned[1] = "a"
    assert _on_another_thread(lambda d: list(d.values()), owned) == ["a"]
