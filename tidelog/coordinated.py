"""Requests to a group's coordinator (FindCoordinator, OffsetCommit, OffsetFetch, DeleteGroups):
find the coordinator, send to it, react to the answer by the error's class, as the Java
consumer does (kafka-mapping §7.9):

* ``StaleCoordinatorError`` (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), REQUEST_TIMED_OUT, or
  a call that failed on its way (the node is down or stalled): the coordinator is forgotten and
  the retry finds it again (Kafka's ``markCoordinatorUnknown``); the backoff is spent asking
  FindCoordinator until a node names another coordinator, and the retry goes then;
* any other ``RetriableError`` (COORDINATOR_LOAD_IN_PROGRESS while a new coordinator replays
  the offsets partition, UNKNOWN_TOPIC_OR_PARTITION): retried at the same coordinator after a
  backoff;
* anything else is final (OFFSET_METADATA_TOO_LARGE, an authorization failure, ...).

Each group's coordinator is cached (the client itself goes straight to it, contract §8), so a
steady committer sends one RPC per commit. A call's deadline bounds its retries and every RPC
gets a slice of it (``Deadline.attempt_s``), never all of it: a coordinator that stalls without
failing (a paused process keeps its sockets) costs one slice, then it is forgotten.

Everything here runs as coroutines on the client's loop, so the cache needs no lock, an
asynchronous commit needs no thread of its own, and the blocking API waits on the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tidelog import wire
from tidelog.errors import (
    ConfigurationError,
    NodeUnavailableError,
    RequestTimedOutError,
    RetriableError,
    StaleCoordinatorError,
    TidelogError,
    UnknownServerError,
)
from tidelog.retry import Backoff, Deadline, RetryAtOnce, call_with_retry_async, leader_poll_s
from tidelog.types import OffsetAndMetadata, TopicPartition, checked_partition

if TYPE_CHECKING:
    from tidelog.metadata import MetadataSource
    from tidelog.transport import Transport

T = TypeVar("T")

#: FindCoordinator key types (Kafka's CoordinatorType).
GROUP = 0
TRANSACTION = 1


class Coordinators:
    """The coordinator of each key this client has talked to, and the calls that use it."""

    def __init__(
        self, transport: Transport, metadata: MetadataSource, bootstrap: Sequence[str],
        backoff: Backoff,
    ) -> None:
        self._transport = transport
        self._metadata = metadata
        self._bootstrap = tuple(bootstrap)
        self._backoff = backoff
        self._known: dict[tuple[int, str], wire.CoordinatorAnswer] = {}

    # ---- finding ------------------------------------------------------------------------------

    def cached(self, key: str, key_type: int = GROUP) -> int | None:
        """The coordinator's node id as last found, without asking."""
        answer = self._known.get((key_type, key))
        return None if answer is None else answer.node_id

    async def find(self, key: str, deadline: Deadline, key_type: int = GROUP) -> int:
        """Look the coordinator up (with retries up to the deadline) and cache it."""
        answer = await call_with_retry_async(
            lambda: self._lookup(key, key_type, deadline),
            what=f"FindCoordinator for {key!r}", deadline=deadline,
            backoff=self._backoff,
        )
        return answer.node_id

    async def _lookup(
        self, key: str, key_type: int, deadline: Deadline
    ) -> wire.CoordinatorAnswer:
        """One lookup: any node can answer, so the known nodes are asked in random order, then
        the bootstrap addresses, until one answers; its error (COORDINATOR_NOT_AVAILABLE while
        the group's partition has no leader) is raised as is."""
        known = list(self._metadata.cluster.nodes().items())
        random.shuffle(known)
        candidates: list[tuple[int | None, str]] = list(known)
        addresses = {address for _, address in known}
        candidates += [(None, a) for a in self._bootstrap if a not in addresses]
        request = wire.find_coordinator_request(key, key_type)
        failures: list[str] = []
        for node_id, address in candidates:
            timeout = deadline.attempt_s()
            if timeout <= 0:
                break
            try:
                response = await self._transport.call(
                    node_id, "FindCoordinator", request, timeout, address
                )
            except NodeUnavailableError as exc:
                failures.append(str(exc))
                continue
            answer = wire.parse_find_coordinator(response, key)
            self._known[(key_type, key)] = answer
            return answer
        raise NodeUnavailableError(
            "no node answered FindCoordinator: " + ("; ".join(failures) or "the deadline passed")
        )

    async def _after_stale(
        self, key: str, key_type: int, stale: int, error: TidelogError, failures: int,
        deadline: Deadline, retry: bool,
    ) -> TidelogError:
        """What a call whose coordinator `stale` failed it raises. A retried call spends its
        backoff asking FindCoordinator every `leader_poll_s` until a node names another
        coordinator (the others keep naming a dead one until they elect its successor, and
        answer COORDINATOR_LOAD_IN_PROGRESS while it replays), then retries at once
        (RetryAtOnce): a commit follows the election within a poll, not a backoff later."""
        if not retry or not isinstance(error, RetriableError):
            return error
        window = self._backoff.delay_s(failures)
        until = min(time.monotonic() + window, deadline.at)
        while True:
            with contextlib.suppress(RetriableError):
                if (await self._lookup(key, key_type, deadline)).node_id != stale:
                    break
            left = until - time.monotonic()
            if left <= 0:
                break
            await asyncio.sleep(min(leader_poll_s(window), left))
        return RetryAtOnce(error)

    def _forget(self, key: str, key_type: int, node_id: int) -> None:
        """Forget the coordinator, unless a newer lookup already replaced it."""
        answer = self._known.get((key_type, key))
        if answer is not None and answer.node_id == node_id:
            del self._known[(key_type, key)]

    # ---- calling ------------------------------------------------------------------------------

    async def call(
        self,
        key: str,
        method: str,
        request: Any,
        parse: Callable[[Any], T],
        deadline: Deadline,
        *,
        retry: bool = True,
        key_type: int = GROUP,
    ) -> T:
        """Send `request` to the key's coordinator and return `parse(response)`, which raises
        the answer's error. With `retry`, retriable failures are retried up to the deadline;
        without, the first failure is raised (an asynchronous commit: a retried commit could
        land after a newer one, so Kafka leaves the retry to the application)."""

        failures = 0

        async def attempt() -> T:
            nonlocal failures
            answer = self._known.get((key_type, key))
            if answer is None:
                answer = await self._lookup(key, key_type, deadline)
            try:
                response = await self._transport.call(
                    answer.node_id, method, request, deadline.attempt_s(), answer.address or None
                )
            except TidelogError as exc:
                self._forget(key, key_type, answer.node_id)
                failures += 1
                raise await self._after_stale(key, key_type, answer.node_id, exc, failures,
                                              deadline, retry) from None
            try:
                return parse(response)
            except (StaleCoordinatorError, RequestTimedOutError) as exc:
                self._forget(key, key_type, answer.node_id)
                failures += 1
                raise await self._after_stale(key, key_type, answer.node_id, exc, failures,
                                              deadline, retry) from None

        if not retry:
            return await attempt()
        return await call_with_retry_async(
            attempt, what=f"{method} for {key!r}", deadline=deadline,
            backoff=self._backoff,
        )

    # ---- consumer offsets ---------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        deadline: Deadline,
        *,
        retry: bool = True,
        member: tuple[str, int] | None = None,
    ) -> None:
        """OffsetCommit of a simple consumer (generation -1), or of a group member with its
        (member id, member epoch); raises the first error."""
        if not offsets:
            return
        request = wire.offset_commit_request(group_id, offsets, member)

        def parse(response: Any) -> None:
            outcome = wire.parse_offset_commit(response)
            failures = {tp: outcome.get(tp, _no_answer(tp)) for tp in offsets}
            raise_first({tp: e for tp, e in failures.items() if e is not None})

        await self.call(group_id, "OffsetCommit", request, parse, deadline, retry=retry)

    async def fetch(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        deadline: Deadline,
        *,
        require_stable: bool = False,
        member: tuple[str, int] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch: the committed offset of each partition (None when there is none);
        `partitions` None means every partition the group has committed. `require_stable`
        waits for pending transactional commits (a read_committed consumer's choice, KIP-447)
        instead of being answered UNSTABLE_OFFSET_COMMIT, which is retried. A group member
        sends its (member id, member epoch): STALE_MEMBER_EPOCH and UNKNOWN_MEMBER_ID are
        raised, not retried (as Kafka's consumer)."""
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        if wanted == []:
            return {}
        request = wire.offset_fetch_request(group_id, wanted, require_stable, member)

        def parse(response: Any) -> dict[TopicPartition, OffsetAndMetadata | None]:
            answers = wire.parse_offset_fetch(response, group_id)
            if wanted is not None:
                answers = {tp: answers.get(tp, wire.Failure(_no_answer(tp))) for tp in wanted}
            raise_first({
                tp: a.error for tp, a in answers.items() if isinstance(a, wire.Failure)
            })
            return {tp: a for tp, a in answers.items() if not isinstance(a, wire.Failure)}

        return await self.call(group_id, "OffsetFetch", request, parse, deadline)

    async def delete_group(self, group_id: str, deadline: Deadline) -> None:
        """DeleteGroups of one group at its coordinator; raises the group's error."""

        def parse(response: Any) -> None:
            error = wire.parse_delete_groups(response).get(
                group_id, UnknownServerError(f"group {group_id!r}: no answer")
            )
            if error is not None:
                raise error

        await self.call(
            group_id, "DeleteGroups", wire.delete_groups_request([group_id]), parse, deadline
        )


def _no_answer(tp: TopicPartition) -> TidelogError:
    return UnknownServerError(f"{tp}: the coordinator's answer left it out")


def raise_first(failures: Mapping[TopicPartition, TidelogError]) -> None:
    """Raise one error for a request's failed partitions: a final one before a retriable one
    (retrying cannot cure it), each kind in partition order; nothing when none failed."""
    if failures:
        ordered = sorted(failures.items())
        final = [e for _, e in ordered if not isinstance(e, RetriableError)]
        raise (final or [e for _, e in ordered])[0]


def check_group_id(group_id: object) -> str:
    if not isinstance(group_id, str):
        raise ConfigurationError(f"a group id must be a string, got {group_id!r}")
    return group_id


def checked_offsets(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The offsets to commit, as the client's types, after checking every value: an offset
    >= 0, metadata a string (None reads as "", as Kafka stores it), an epoch None or >= 0."""
    if not isinstance(offsets, Mapping):
        raise ConfigurationError(
            f"offsets must be a mapping of TopicPartition to OffsetAndMetadata, got "
            f"{type(offsets).__name__}"
        )
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        tp = checked_partition(tp)
        if not isinstance(value, OffsetAndMetadata):
            raise ConfigurationError(
                f"{tp}: expected OffsetAndMetadata(offset, metadata), got {value!r}"
            )
        offset, metadata, epoch = value
        if not isinstance(offset, int) or offset < 0:
            raise ConfigurationError(f"{tp}: a committed offset must be an int >= 0, got "
                                     f"{offset!r}")
        if metadata is None:
            metadata = ""
        if not isinstance(metadata, str):
            raise ConfigurationError(f"{tp}: metadata must be a string, got {metadata!r}")
        if epoch is not None and (not isinstance(epoch, int) or epoch < 0):
            raise ConfigurationError(f"{tp}: a leader epoch must be None or an int >= 0, got "
                                     f"{epoch!r}")
        out[tp] = OffsetAndMetadata(offset, metadata, epoch)
    return out
