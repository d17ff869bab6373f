"""The client's metadata manager: keeps the picture of the cluster (``ClusterMetadata``) fresh.

One per client, shared by everything the client runs (admin calls, producers, consumers): a
refresh asks every known node at once and merges their answers (``merge_snapshots``), and
concurrent refreshes share one. Everything else sees it through the protocol
``tidelog.metadata.MetadataSource``; the admin client also reads the nodes' answers of the
last refresh one by one (``answers``), to wait until every node knows a new topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tidelog import wire
from tidelog.errors import (
    AuthorizationError,
    NodeUnavailableError,
    RequestTimedOutError,
    RetriableError,
    TidelogError,
    UnknownTopicOrPartitionError,
    for_code,
)
from tidelog.metadata import ClusterMetadata, MetadataSnapshot, merge_snapshots
from tidelog.retry import Backoff, Deadline, call_with_retry, leader_poll_s
from tidelog.transport import Transport
from tidelog.types import TopicPartition

#: One Metadata attempt against one node; a stalled node must not eat a call's whole deadline.
_METADATA_ATTEMPT_S = 2.0


class MetadataManager:
    """Refreshes, the wait for new leaders, and the checks built on metadata; thread-safe."""

    def __init__(
        self, cluster: ClusterMetadata, transport: Transport, bootstrap: Sequence[str],
        backoff: Backoff,
    ) -> None:
        self._cluster = cluster
        self._transport = transport
        self._bootstrap = tuple(bootstrap)
        self._backoff = backoff
        self._refresh_cond = threading.Condition()
        self._refreshing = False
        self._refreshes = 0
        #: The nodes' answers of the last refresh, before they were merged.
        self._answers: list[MetadataSnapshot] = []

    @property
    def cluster(self) -> ClusterMetadata:
        return self._cluster

    @property
    def refreshes(self) -> int:
        """How many Metadata refreshes were made (concurrent requests share one)."""
        return self._refreshes

    @property
    def answers(self) -> Sequence[MetadataSnapshot]:
        """Each node's answer of the last refresh, before they were merged."""
        return self._answers

    def refresh(self, deadline: Deadline, seen_version: int | None = None) -> None:
        """Refresh unless someone else did since the caller saw `seen_version` (default: now);
        a refresh already under way is joined rather than repeated."""
        seen = self._cluster.version if seen_version is None else seen_version
        with self._refresh_cond:
            while self._refreshing:
                if not self._refresh_cond.wait(deadline.remaining()):
                    raise NodeUnavailableError("timed out waiting for a metadata refresh")
            if self._cluster.version > seen:
                return
            self._refreshing = True
        try:
            self._refreshes += 1
            self._answers = self._transport.run(self._metadata_answers(deadline))
            self._cluster.update(merge_snapshots(self._answers))
        finally:
            with self._refresh_cond:
                self._refreshing = False
                self._refresh_cond.notify_all()

    def ensure(self, deadline: Deadline) -> None:
        """Have metadata: the first refresh, retried within the deadline."""
        if self._cluster.version == 0:
            call_with_retry(
                lambda: self.refresh(deadline, seen_version=0),
                what="Metadata",
                deadline=deadline,
                backoff=self._backoff,
            )

    async def _metadata_answers(self, deadline: Deadline) -> list[MetadataSnapshot]:
        """Every known node's answer, asked at once, to be merged (the highest leader epoch of
        each partition wins), so one node that has not heard of an election yet, or that
        stalls, costs nothing: the answers are complete once every node not suspect has
        answered (a suspect one counts only while nothing else answered). The bootstrap
        addresses are asked one after the other only while no node is known."""
        nodes = self._cluster.nodes()
        if not nodes:
            return [wire.parse_metadata(await self._fetch_async(deadline))]
        timeout = min(deadline.remaining(), _METADATA_ATTEMPT_S)
        request = wire.metadata_request(())
        transport = self._transport
        asked = {
            asyncio.ensure_future(transport.call(node_id, "Metadata", request, timeout, address)):
            node_id for node_id, address in nodes.items()
        }
        answers: list[MetadataSnapshot] = []
        failures: list[TidelogError] = []
        pending = set(asked)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    try:
                        answers.append(wire.parse_metadata(task.result()))
                    except TidelogError as exc:
                        failures.append(exc)
                if answers and all(transport.suspect(asked[task]) for task in pending):
                    break
        finally:
            for task in pending:
                task.cancel()
                # Not awaited: a call that fails before its cancellation lands must not be
                # logged as an exception never retrieved.
                task.add_done_callback(_retrieve)
        if answers:
            return answers
        final = [exc for exc in failures if not isinstance(exc, NodeUnavailableError)]
        if final:
            raise final[0]
        return [wire.parse_metadata(await self._fetch_async(deadline))]

    def await_new_leaders(
        self, failed: Mapping[TopicPartition, tuple[int, int]], window_s: float,
        deadline: Deadline,
    ) -> None:
        """The retry backoff of requests whose leaders failed them (`failed`: each partition's
        (leader, epoch) that failed): metadata is refreshed every `leader_poll_s` during
        the `window_s` the backoff would sleep, and the wait ends as soon as every partition
        has a leader other than the one that failed (`ClusterMetadata.moved`), so a retry
        follows an election within a poll of it instead of a backoff later. Without failed
        leaders to watch (nothing named a partition's leader), it sleeps the window and
        refreshes once, as a plain backoff does. A failed refresh is no news; the caller's
        next attempt finds out what is wrong."""
        until = min(time.monotonic() + window_s, deadline.at)
        poll_s = leader_poll_s(window_s)
        while True:
            if failed:
                with contextlib.suppress(RetriableError):
                    self.refresh(deadline)
                if all(self._cluster.moved(tp, was) for tp, was in failed.items()):
                    return
            left = until - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(poll_s if failed else left, left))
        if not failed:
            with contextlib.suppress(RetriableError):
                self.refresh(deadline)

    async def _fetch_async(self, deadline: Deadline, topics: Sequence[str] = ()) -> Any:
        """Ask the known nodes in random order, then the bootstrap addresses (for `topics`
        by name, else for all)."""
        known = list(self._cluster.nodes().items())
        random.shuffle(known)
        candidates: list[tuple[int | None, str]] = list(known)
        candidates += [(None, a) for a in self._bootstrap if a not in dict(known).values()]
        failures: list[str] = []
        for node_id, address in candidates:
            timeout = min(deadline.remaining(), _METADATA_ATTEMPT_S)
            if timeout <= 0:
                break
            try:
                return await self._transport.call(
                    node_id, "Metadata", wire.metadata_request(topics), timeout, address
                )
            except NodeUnavailableError as exc:
                failures.append(exc.args[0])  # the code once, on the error raised below
        raise NodeUnavailableError(
            "no node answered Metadata: " + ("; ".join(failures) or "the deadline passed")
        )

    def check_described(self, topics: Iterable[str], deadline: Deadline) -> None:
        """Raise the authorization error of a topic the metadata leaves out because this
        client may not DESCRIBE it. A node leaves such a topic out of an answer for all topics
        and answers TOPIC_AUTHORIZATION_FAILED (29) only when asked for it by name (as Kafka
        does), so the topics missing from the last answer are asked for by name, once."""
        missing = [t for t in dict.fromkeys(topics) if self._cluster.topic(t) is None]
        if not missing:
            return
        answer = self._transport.run(self._fetch_async(deadline, missing))
        for topic in answer.topics:
            if issubclass(for_code(topic.error_code), AuthorizationError):
                raise wire.error_for(topic.error_code, "", f"topic {topic.name!r}")

    def partitions_for(
        self, topic: str, deadline: Deadline, *, partition: int | None = None
    ) -> int:
        """The topic's partition count, refreshing metadata (with retries) until it is known;
        with `partition`, until the topic has that partition: one another client has just
        added may not be in this client's metadata yet, and Kafka's producer too refreshes and
        waits for it (up to max.block.ms) rather than refuse it at once."""
        count = self._cluster.partition_count(topic)
        if count is not None and (partition is None or partition < count):
            return count

        def attempt() -> int:
            self.refresh(deadline)
            found = self._cluster.partition_count(topic)
            if found is None:
                self.check_described([topic], deadline)
                raise UnknownTopicOrPartitionError(f"topic {topic!r} is not in the metadata")
            if partition is not None and partition >= found:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {partition} ({found} known)"
                )
            return found

        try:
            return call_with_retry(
                attempt, what=f"Metadata for {topic!r}", deadline=deadline, backoff=self._backoff
            )
        except RequestTimedOutError as exc:
            if not isinstance(exc.__cause__, UnknownTopicOrPartitionError):
                raise  # no node answered: that is the news
            known = self._cluster.partition_count(topic)
            if partition is not None and known is not None:
                raise RequestTimedOutError(  # Kafka's wording
                    f"partition {partition} of topic {topic!r} with partition count {known} is "
                    f"not present in metadata after {deadline.timeout_ms:g} ms"
                ) from exc.__cause__
            raise RequestTimedOutError(  # Kafka's wording
                f"topic {topic!r} not present in metadata after {deadline.timeout_ms:g} ms"
            ) from exc.__cause__


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark the outcome of a task nobody awaits as seen."""
    if not task.cancelled():
        task.exception()
