"""Waiting in tests, on a condition or on a consumer: `async_wait_for` (`wait_for` for code on an
event loop), `poll_records` and `poll_to`. They left the installed `tidelog.testing`, which keeps
what the CLI, the benchmarks and the chaos runs use (LocalCluster, Raw, wait_for)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from tidelog.testing import _check_deadline, _try, wait_for

if TYPE_CHECKING:
    from tidelog import Consumer
    from tidelog.types import ConsumerRecord, TopicPartition

T = TypeVar("T")


async def async_wait_for(
    condition: Callable[[], T | None],
    timeout: float = 30.0,
    what: str = "",
    *,
    interval: float = 0.02,
) -> T:
    """`wait_for` for a test that runs on an event loop (a node's replica set driven in
    process): the loop's tasks run between the tries."""
    deadline = time.monotonic() + timeout
    while not (value := _try(condition)):
        _check_deadline(deadline, timeout, what or condition)
        await asyncio.sleep(interval)
    return value


def poll_records(
    consumer: Consumer, count: int, timeout: float = 30.0
) -> list[ConsumerRecord]:
    """Polls until ``count`` records came, and returns them; at the deadline returns what came,
    so that the caller's assertion shows what was missing rather than a timeout."""
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(timeout_ms=500)
    return got


def poll_to(
    consumer: Consumer, ends: Mapping[TopicPartition, int], timeout: float = 60.0
) -> list[ConsumerRecord]:
    """Polls until the consumer's position reaches ``ends`` on every partition, and returns
    the records that came; the deadline raises AssertionError (a partial read must not pass
    for a whole one)."""
    got: list[ConsumerRecord] = []

    def reached() -> bool:
        if all(consumer.position(tp) >= end for tp, end in ends.items()):
            return True
        got.extend(consumer.poll(timeout_ms=500))
        return False

    wait_for(reached, timeout, f"the consumer to read up to {dict(ends)}")
    return got
