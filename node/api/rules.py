"""The rules every client request is held to, shared by the handlers of the client API
(`api`, `group_api`): unset optional fields read as their documented meaning (`or_unset`), a
partition named twice answered once with INVALID_REQUEST (`each_once`), one topic entry per
topic in an answer (`Answers`), the error answer of a request refused as a whole (`error_answer`),
and the gRPC statuses of a request refused as a whole."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc

from tidelog import errors
from tidelog.types import TopicPartition

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
M = TypeVar("M")


def or_unset(message: Any, field: str, unset: int) -> int:
    """An ``optional`` field's value, or `unset`, what its proto comment says a request that
    leaves it out means (proto3 alone would read it as 0)."""
    return getattr(message, field) if message.HasField(field) else unset


def each_once(items: Iterable[tuple[K, V]]) -> tuple[dict[K, V], set[K]]:
    """What a request names, each once with its first entry and in request order (one answer
    each), and the keys it names more than once (INVALID_REQUEST for those, kafka-mapping
    §2.1: a partition listed twice in a Produce would otherwise be appended twice)."""
    firsts: dict[K, V] = {}
    twice: set[K] = set()
    for key, item in items:
        if key in firsts:
            twice.add(key)
        else:
            firsts[key] = item
    return firsts, twice


def error_answer(response_type: Callable[..., M], exc: errors.TidelogError, **fields: Any) -> M:
    """The answer of a request refused or failed as a whole: `exc`'s code and message at the
    top of a `response_type`, beside `fields` (the -1s of what it cannot vouch for)."""
    return response_type(error_code=exc.code, error_message=str(exc), **fields)


async def answer_of(
    response_type: Callable[[], M], refused: errors.TidelogError | None,
    action: Callable[[], Awaitable[object]],
) -> M:
    """The answer of a request with nothing to say but whether it was done: `refused`'s error
    when it is refused, else `action`'s error, else an empty `response_type`."""
    try:
        if refused is not None:
            raise refused
        await action()
    except errors.TidelogError as exc:
        return error_answer(response_type, exc)
    return response_type()


def partitions_of(topics: Iterable[Any]) -> Iterator[tuple[TopicPartition, Any]]:
    # tuple.__new__: a TopicPartition without NamedTuple's Python-level __new__ (a request of
    # the offset commit benchmark names 100 partitions, and this is per partition).
    new = tuple.__new__
    return ((new(TopicPartition, (t.name, p.partition)), p) for t in topics for p in t.partitions)


class Answers:
    """The per-partition answers of a response (Produce, Fetch, ListOffsets, the offset
    requests), one topic entry per topic name however the request spread its partitions."""

    def __init__(self, response: Any) -> None:
        self._topics = response.topics
        #: Per topic name, the `add` of its entry's partitions.
        self._by_name: dict[str, Any] = {}

    def add(self, tp: TopicPartition) -> Any:
        return self.add_to(tp.topic)(partition=tp.partition)

    def add_to(self, topic: str) -> Any:
        """The `add` of `topic`'s partitions in the answer, for a caller answering many
        partitions of one topic in a row."""
        add_partition = self._by_name.get(topic)
        if add_partition is None:
            add_partition = self._by_name[topic] = self._topics.add(name=topic).partitions.add
        return add_partition


async def unsupported(context: grpc.aio.ServicerContext, what: str) -> NoReturn:
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED, f"{what} is not supported yet by this Tidelog version"
    )
    raise AssertionError("unreachable")


async def invalid(context: grpc.aio.ServicerContext, message: str) -> NoReturn:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
    raise AssertionError("unreachable")

