"""A consumer's membership in a consumer group with server-side assignment (Kafka's KIP-848
protocol, kafka-mapping §10.10): heartbeats in the background, reconciliation in the
application's thread.

Two halves share the state under one lock:

* The heartbeat task runs on the client's loop: it joins (epoch 0, every field), then sends a
  heartbeat every interval the coordinator gives, each with the partitions the member owns now
  (so an acknowledgement is never lost with a null), and at once after the application has
  reconciled (ACKNOWLEDGING). An answer's assignment, the complete set the member may own,
  becomes the target to reconcile. Every heartbeat carries every field (Kafka's client sends
  only what changed), so that no lost answer can leave the member without its assignment.
  FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID mean the member lost its partitions: heartbeats stop
  until the application has run `on_partitions_lost`, then the member joins again at epoch 0
  with the same member id. The errors Kafka's client treats as fatal (UNRELEASED_INSTANCE_ID,
  GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR, ...) stop the membership and are raised by the
  next poll.
* Reconciliation runs inside the consumer's `poll()` (and `close()`), as the Java consumer
  runs its listener: with auto-commit on, the positions of the partitions about to be revoked
  are committed first (synchronously, with the member's epoch); then `on_partitions_revoked`,
  then the new partitions are installed and `on_partitions_assigned` is called (also when
  nothing was added), and only then does the next heartbeat report the new owned set. A
  partition the coordinator moves away is therefore acknowledged only after the application
  has stopped consuming and committed it, and the coordinator hands it over only after that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidelog.errors import (
    FencedMemberEpochError,
    RetriableError,
    TidelogError,
    UnknownMemberIdError,
    UnknownServerError,
    for_code,
)
from tidelog.retry import Deadline
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

if TYPE_CHECKING:
    from tidelog.connections import Connections

log = logging.getLogger("tidelog.consumer")

#: What a heartbeat waits for before the coordinator's interval is known.
_FIRST_INTERVAL_S = 0.1
#: How often a pattern subscription looks for new matching topics (Kafka's metadata.max.age).
_PATTERN_REFRESH_S = 5.0


@dataclass(frozen=True)
class MemberDescription:
    """One member of a consumer group, as ConsumerGroupDescribe shows it."""

    member_id: str
    instance_id: str | None
    member_epoch: int
    client_host: str
    subscribed_topics: tuple[str, ...]
    assignment: frozenset[TopicPartition]
    target_assignment: frozenset[TopicPartition]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[MemberDescription, ...]


def describe_request(group_id: str) -> pb.ConsumerGroupDescribeRequest:
    return pb.ConsumerGroupDescribeRequest(group_ids=[group_id])


def parse_describe(response: Any, group_id: str) -> ConsumerGroupDescription:
    """The answer of ConsumerGroupDescribe for one group; raises its error."""
    for group in response.groups:
        if group.group_id != group_id:
            continue
        if group.error_code:
            raise for_code(group.error_code)(group.error_message)
        return ConsumerGroupDescription(
            group.group_id, group.group_state, group.group_epoch, group.assignment_epoch,
            group.assignor_name,
            tuple(
                MemberDescription(
                    m.member_id, m.instance_id if m.HasField("instance_id") else None,
                    m.member_epoch, m.client_host, tuple(m.subscribed_topic_names),
                    _partitions(m.assignment), _partitions(m.target_assignment),
                )
                for m in group.members
            ),
        )
    raise UnknownServerError(f"ConsumerGroupDescribe did not answer for {group_id!r}")


def _partitions(assignment: Any) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t.topic, p) for t in assignment.topics for p in t.partitions)


class ConsumerRebalanceListener:
    """Callbacks of a subscribed consumer, run in the application's thread inside `poll()`:
    revoked before assigned; lost (instead of revoked) when the member was fenced and its
    partitions may already belong to another member."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """The partitions are about to go to another member: commit here when auto-commit
        is off."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """The partitions were added to the assignment (possibly none)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The member was fenced: the partitions are no longer its own. By default, as in
        Kafka, the same as a revocation."""
        self.on_partitions_revoked(lost)


class Membership:
    """One consumer's membership; created by `Consumer.subscribe`."""

    def __init__(
        self,
        connections: Connections,
        group_id: str,
        topics: Iterable[str] | None,
        pattern: str | None,
        *,
        instance_id: str | None,
        rebalance_timeout_ms: int,
        server_assignor: str | None,
        client_id: str = "",
    ) -> None:
        self.connections = connections
        self.group_id = group_id
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.client_id = client_id
        #: KIP-1082: the member id is made once, here, and kept for the member's life.
        self.member_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        #: Set whenever something the application waits for happened (an assignment, a
        #: fencing, a fatal error): poll() waits on it while it has nothing to fetch.
        self.changed = threading.Event()
        self.epoch = 0
        self.topics: tuple[str, ...] = tuple(sorted(set(topics or ())))
        self.owned: set[TopicPartition] = set()
        #: The latest assignment from the coordinator, not reconciled yet.
        self.target: set[TopicPartition] | None = None
        self.lost = False
        self.fatal: TidelogError | None = None
        self.interval_s = _FIRST_INTERVAL_S
        self._next_pattern_check = 0.0
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task = connections.transport.submit(self._run())

    # ---- the heartbeat task (client loop) -------------------------------------------------------

    def wake(self) -> None:
        """Heartbeat now (from any thread)."""
        loop, event = self._loop, self._wake
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._wake.set()  # join at once
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            if self._stopping:
                return
            request = self._request()
            if request is None:
                continue
            try:
                response = await self._send(request, Deadline(max(self.interval_s, 1.0) * 1000))
            except (FencedMemberEpochError, UnknownMemberIdError) as exc:
                log.info("group %s: member %s fenced (%s); its partitions are lost",
                         self.group_id, self.member_id, exc)
                with self._lock:
                    self.lost, self.epoch, self.target = True, 0, None
                self.changed.set()
            except RetriableError as exc:
                log.debug("group %s: heartbeat failed, retried: %s", self.group_id, exc)
                await asyncio.sleep(self.connections.backoff.delay_s(1))
                self._wake.set()
            except TidelogError as exc:
                log.error("group %s: membership ends: %s", self.group_id, exc)
                with self._lock:
                    self.fatal = exc
                self.changed.set()
                return
            else:
                self._answered(request, response)

    async def _send(self, request: pb.ConsumerGroupHeartbeatRequest, deadline: Deadline) -> Any:
        def parse(response: Any) -> Any:
            if response.error_code:
                raise for_code(response.error_code)(response.error_message)
            return response

        return await self.connections.coordinators.call(
            self.group_id, "ConsumerGroupHeartbeat", request, parse, deadline
        )

    def _request(self) -> pb.ConsumerGroupHeartbeatRequest | None:
        with self._lock:
            if self.lost or self.fatal is not None:
                return None  # the application has to run on_partitions_lost first
            if self.epoch == 0 and not self.topics:
                return None  # a pattern that matches no topic yet: nothing to join with
            # Every heartbeat is "full" (subscription, rebalance timeout, owned partitions), so
            # every answer carries the member's assignment: an answer lost to a timeout, or a
            # retry of a request the coordinator already took, hides nothing. The
            # coordinator writes nothing for fields that did not change.
            request = pb.ConsumerGroupHeartbeatRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch,
                topic_partitions=_assignment_pb(self.owned),
                subscribed_topic_names=pb.ConsumerGroupTopicNames(names=self.topics),
                rebalance_timeout_ms=self.rebalance_timeout_ms,
            )
            if self.instance_id is not None:
                request.instance_id = self.instance_id
            if self.server_assignor is not None:
                request.server_assignor = self.server_assignor
            return request

    def _answered(self, request: pb.ConsumerGroupHeartbeatRequest, response: Any) -> None:
        with self._lock:
            if self.lost:
                return
            self.epoch = response.member_epoch
            self.interval_s = response.heartbeat_interval_ms / 1000
            if response.HasField("assignment"):
                target = {
                    TopicPartition(t.topic, p)
                    for t in response.assignment.topics for p in t.partitions
                }
                if target != self.owned or self.target is not None:
                    self.target = target
                    self.changed.set()

    # ---- the application's side ---------------------------------------------------------------

    def refresh_pattern(self, list_topics: Callable[[], list[str]]) -> None:
        """A pattern subscription follows the topics that match it (checked every few s)."""
        if self.pattern is None or time.monotonic() < self._next_pattern_check:
            return
        self._next_pattern_check = time.monotonic() + _PATTERN_REFRESH_S
        pattern = self.pattern
        matching = tuple(sorted(t for t in list_topics()
                                if pattern.fullmatch(t) and not t.startswith("__")))
        with self._lock:
            if matching != self.topics:
                self.topics = matching
                changed = True
            else:
                changed = False
        if changed:
            self.wake()

    def take_work(self) -> tuple[str, set[TopicPartition], set[TopicPartition]] | None:
        """What the application has to do now: ("lost", owned, ∅) or ("reconcile", revoked,
        added); None when nothing. Raises the fatal error that ended the membership."""
        with self._lock:
            if self.fatal is not None:
                raise self.fatal
            if self.lost:
                return "lost", set(self.owned), set()
            if self.target is None:
                return None
            return "reconcile", self.owned - self.target, self.target - self.owned

    def done(self, kind: str, revoked: set[TopicPartition], added: set[TopicPartition]) -> None:
        """The application finished the work `take_work` gave: report it at once."""
        with self._lock:
            if kind == "lost":
                self.owned, self.lost, self.target = set(), False, None
            else:
                self.owned = (self.owned - revoked) | added
                if self.target == self.owned:
                    self.target = None
            self.changed.clear()
        self.wake()

    def member(self) -> tuple[str, int]:
        """(member id, epoch), what the member's offset commits carry."""
        with self._lock:
            return self.member_id, self.epoch

    def leave(self, timeout_s: float) -> None:
        """Stop heartbeating and leave the group: epoch -1, or -2 for a static member, which
        keeps its partitions for a session timeout so that its next incarnation gets them back
        without a rebalance."""
        self._stopping = True
        self.wake()
        with self._lock:
            joined = self.epoch > 0 and self.fatal is None
            epoch = -2 if self.instance_id is not None else -1
        if not joined:
            return
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
        )
        if self.instance_id is not None:
            request.instance_id = self.instance_id
        try:
            self.connections.run(self._send(request, Deadline(timeout_s * 1000)))
        except TidelogError as exc:
            log.warning("group %s: leaving failed (the session timeout removes the member): "
                        "%s", self.group_id, exc)


def _assignment_pb(owned: set[TopicPartition]) -> pb.ConsumerGroupAssignment:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(owned):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return pb.ConsumerGroupAssignment(topics=[
        pb.ConsumerGroupTopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()
    ])
