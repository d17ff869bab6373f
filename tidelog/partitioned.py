"""The one engine for requests made of per-partition work (Produce, Fetch, ListOffsets): split
the work by leader, send one request per leader (all in flight together on the client's loop),
match each partition's answer, classify each partition's error by its class, retry only the
failed partitions, merge.

What an error does, by class (``tidelog.errors``), never by code:

* not a ``RetriableError``: final for its partition, never sent again;
* a ``RetriableError``: the partition is tried again after a backoff;
* an ``InvalidMetadataError``: metadata is refreshed first, unless the error carried a newer
  leader hint (KIP-951), which is adopted and lets the retry go at once. Without a hint (the
  leader died, or does not know its successor yet) the backoff is spent polling the metadata
  of every node (``MetadataSource.await_new_leaders``), and the retry goes as soon as a node names a
  leader other than the one that failed: an election is followed within a poll, not a
  backoff, while the nodes still naming the dead leader cost no retry against it.

A call's overall deadline bounds its retries, and each attempt gets a bounded slice of it
(``Deadline.attempt_s``), never all of it: a node that stalls (a paused process keeps its
sockets open, so nothing fails fast) costs one slice, after which the node is suspect, metadata
is refreshed and the partition goes to its new leader.

``PartitionedRequest.attempt`` is one round; ``run`` is rounds until every partition is
answered, one failed for good, or the deadline passed. The consumer's poll makes rounds of its
own (it returns as soon as any partition has records) and the producer's sender sends per
leader and reacts per batch (its retries are bounded by each batch's delivery timeout, not by
one call's deadline), both with this engine's pieces.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tidelog import wire
from tidelog.errors import (
    InvalidMetadataError,
    LeaderNotAvailableError,
    RetriableError,
    TidelogError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from tidelog.metadata import NO_LEADER
from tidelog.retry import Backoff, Deadline, PartitionsFailed, call_with_retry
from tidelog.types import TopicPartition

if TYPE_CHECKING:
    from tidelog.metadata import MetadataSource
    from tidelog.transport import Transport

Q = TypeVar("Q")
A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Reaction:
    """What one retriable failure asks of the next attempt."""

    #: Metadata must be refreshed before it.
    refresh: bool
    #: A newer leader was adopted from the error's hint: no backoff needed.
    immediate: bool


@dataclass
class Attempt(Generic[A]):
    """The outcome of one round, per partition."""

    answers: dict[TopicPartition, A] = field(default_factory=dict)
    #: Retriable failures: send these partitions again.
    retry: dict[TopicPartition, TidelogError] = field(default_factory=dict)
    #: Failures that no retry will cure.
    final: dict[TopicPartition, TidelogError] = field(default_factory=dict)
    refresh: bool = False
    #: Every retriable failure came with a newer leader (meaningless when none failed).
    immediate: bool = True
    #: The partitions that need fresh metadata, each with the (leader, epoch) that failed it
    #: (NO_LEADER when the metadata named none): see ``ClusterMetadata.moved``.
    failed_leaders: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)


class PartitionedRequest(Generic[Q, A]):
    """One kind of partitioned request: `build` makes a leader's request from its partitions'
    work, `parse` reads a response as each partition's answer or `wire.Failure`; sent over
    `transport` to the leaders `metadata` names, retried after `backoff`."""

    def __init__(
        self,
        transport: Transport,
        metadata: MetadataSource,
        backoff: Backoff,
        what: str,
        method: str,
        build: Callable[[Mapping[TopicPartition, Q]], Any],
        parse: Callable[[Any], Mapping[TopicPartition, A | wire.Failure]],
    ) -> None:
        self.transport = transport
        self.metadata = metadata
        self.backoff = backoff
        self.what = what
        self.method = method
        self.build = build
        self.parse = parse

    def by_leader(
        self, partitions: Iterable[TopicPartition]
    ) -> tuple[dict[int, list[TopicPartition]], dict[TopicPartition, wire.Failure]]:
        """The partitions grouped by their leader in the metadata, and the failures of those
        without a known leader (retriable: they ask for a refresh)."""
        metadata = self.metadata.cluster
        groups: dict[int, list[TopicPartition]] = {}
        leaderless: dict[TopicPartition, wire.Failure] = {}
        for tp in partitions:
            leader = metadata.leader_for(tp)
            if leader is None:
                missing = metadata.partition(tp) is None
                error: TidelogError = (
                    UnknownTopicOrPartitionError(f"{tp} is not in the cluster metadata")
                    if missing else LeaderNotAvailableError(f"{tp} has no known leader")
                )
                leaderless[tp] = wire.Failure(error)
            else:
                groups.setdefault(leader, []).append(tp)
        return groups, leaderless

    async def send(
        self, node: int, work: Mapping[TopicPartition, Q], timeout_s: float
    ) -> dict[TopicPartition, A | wire.Failure]:
        """One request to one leader: each partition's answer or failure (a failed call is
        every partition's failure)."""
        try:
            response = await self.transport.call(
                node, self.method, self.build(work), timeout_s
            )
            answers = self.parse(response)
        except TidelogError as exc:
            return {tp: wire.Failure(exc) for tp in work}
        out: dict[TopicPartition, A | wire.Failure] = {}
        for tp in work:
            answer = answers.get(tp)
            if answer is None:
                answer = wire.Failure(UnknownServerError(f"{tp}: no answer"))
            out[tp] = answer
        return out

    def classify(self, tp: TopicPartition, failure: wire.Failure) -> Reaction | None:
        """None when the failure is final; else what the retry needs. A newer leader hint is
        adopted here."""
        error = failure.error
        if not isinstance(error, RetriableError):
            return None
        if not isinstance(error, InvalidMetadataError):
            return Reaction(refresh=False, immediate=False)
        if failure.hint is not None and self.metadata.cluster.apply_hint(tp, failure.hint):
            return Reaction(refresh=False, immediate=True)
        return Reaction(refresh=True, immediate=False)

    async def attempt(self, work: Mapping[TopicPartition, Q], timeout_s: float) -> Attempt[A]:
        """One round: a request to each leader, all in flight together, each bounded by
        `timeout_s`."""
        groups, failures = self.by_leader(work)
        metadata = self.metadata.cluster
        sent_to = {tp: (node, metadata.leader_epoch(tp))
                   for node, tps in groups.items() for tp in tps}
        sent = await asyncio.gather(*(
            self.send(node, {tp: work[tp] for tp in tps}, timeout_s)
            for node, tps in groups.items()
        ))
        outcome: Attempt[A] = Attempt()
        for answers in sent:
            for tp, answer in answers.items():
                if isinstance(answer, wire.Failure):
                    failures[tp] = answer
                else:
                    outcome.answers[tp] = answer
        for tp, failure in failures.items():
            reaction = self.classify(tp, failure)
            if reaction is None:
                outcome.final[tp] = failure.error
                continue
            outcome.retry[tp] = failure.error
            outcome.refresh |= reaction.refresh
            outcome.immediate &= reaction.immediate
            if reaction.refresh:
                outcome.failed_leaders[tp] = sent_to.get(
                    tp, (NO_LEADER, metadata.leader_epoch(tp)))
        return outcome

    def run(self, work: Mapping[TopicPartition, Q], deadline: Deadline) -> dict[TopicPartition, A]:
        """Rounds until every partition is answered (returns the answers), one fails for good
        (raises its error, naming it), or the deadline passes (RequestTimedOutError naming
        the partitions still failing and why). Blocking: for the synchronous API."""
        metadata, cluster = self.metadata, self.metadata.cluster
        results: dict[TopicPartition, A] = {}
        seen_version = cluster.version
        failed_rounds = 0

        def attempt() -> dict[TopicPartition, A]:
            nonlocal seen_version, failed_rounds
            pending = {tp: q for tp, q in work.items() if tp not in results}
            if any(cluster.leader_for(tp) is None for tp in pending):
                try:
                    metadata.refresh(deadline, seen_version)
                    metadata.check_described((tp.topic for tp in pending), deadline)
                except RetriableError as exc:
                    # Keep naming the partitions: they are what the caller waits for.
                    raise PartitionsFailed(
                        dict.fromkeys(pending, exc), refresh=True, immediate=False
                    ) from exc
            seen_version = cluster.version
            outcome = self.transport.run(self.attempt(pending, deadline.attempt_s()))
            results.update(outcome.answers)
            if outcome.final:
                raise outcome.final[min(outcome.final)]
            if not outcome.retry:
                return results
            failed_rounds += 1
            if outcome.refresh:
                # The backoff, spent watching for the next leaders: the retry goes at once.
                metadata.await_new_leaders(
                    outcome.failed_leaders, self.backoff.delay_s(failed_rounds), deadline
                )
                seen_version = cluster.version
            raise PartitionsFailed(outcome.retry, refresh=False,
                                   immediate=outcome.immediate or outcome.refresh)

        return call_with_retry(attempt, what=self.what, deadline=deadline, backoff=self.backoff)
