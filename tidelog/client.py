"""The entry point of the client library (contract §4): connections, metadata, admin operations
and offset lookups; ``client.producer()`` and ``client.consumer()`` build on it.

A synchronous API, so it is simple to call from threads and from Spark executors, over one
transport (``tidelog.transport``: grpc.aio channels, one per node, on an event loop the client
owns and the synchronous calls wait on); every public call has an overall deadline (the
client's ``request_timeout_ms`` or the call's ``timeout_ms``) that bounds its retries, and each
attempt gets a slice of it. Requests made of per-partition work go through one engine
(``tidelog.partitioned``). A ``Client`` pickles as its configuration: unpickling builds a fresh
client with its own transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from tidelog import txn_admin, wire
from tidelog.acl import ANY_ACL, AclBinding, AclBindingFilter
from tidelog.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
)
from tidelog.coordinated import Coordinators, check_group_id, checked_offsets
from tidelog.errors import (
    AuthorizationError,
    ConfigurationError,
    InvalidPartitionsError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeUnavailableError,
    RequestTimedOutError,
    RetriableError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    for_code,
)
from tidelog.membership import ConsumerGroupDescription, describe_request, parse_describe
from tidelog.metadata import ClusterMetadata, MetadataSnapshot, TopicInfo, merge_snapshots
from tidelog.partitioned import PartitionedRequest
from tidelog.retry import Backoff, Deadline, call_with_retry, leader_poll_s
from tidelog.transport import CallObserver, Security, Transport
from tidelog.types import (
    CONSUMER_OFFSETS_TOPIC,
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    GroupListing,
    IsolationLevel,
    ListOffsetsResult,
    OffsetAndMetadata,
    OffsetSpec,
    TopicPartition,
)

if TYPE_CHECKING:
    from tidelog.consumer import Consumer
    from tidelog.producer import Producer

T = TypeVar("T")

#: One Metadata attempt against one node; a stalled node must not eat a call's whole deadline.
_METADATA_ATTEMPT_S = 2.0


@dataclass(frozen=True)
class ClientConfig:
    """Everything needed to build a client; picklable, so Spark executors build their own."""

    bootstrap: tuple[str, ...]
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    #: Told of every request and answer (``tidelog.transport.CallObserver``): the supported
    #: hook for tracing a client's traffic.
    observers: tuple[CallObserver, ...] = ()
    #: TLS to the nodes' client listeners (kafka-python's names; see ``transport.Security``).
    security: Security = field(default_factory=Security)

    def __post_init__(self) -> None:
        if not self.bootstrap:
            raise ConfigurationError("bootstrap needs at least one HOST:PORT")
        for address in self.bootstrap:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigurationError(f"bootstrap: expected HOST:PORT, got {address!r}")
        if self.request_timeout_ms <= 0:
            raise ConfigurationError("request_timeout_ms must be > 0")
        if not 0 < self.retry_backoff_ms <= self.retry_backoff_max_ms:
            raise ConfigurationError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")


@dataclass(frozen=True)
class ClusterDescription:
    nodes: dict[int, str]
    controller_id: int


@dataclass
class _Attempts:
    """What a retried call carries from one attempt to the next."""

    #: The metadata version the last attempt used: a refresh older than it is no news.
    seen_version: int
    refresh: bool = False


class Client:
    """Connections, cluster metadata and admin operations; safe to share between threads."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        request_timeout_ms: int = 30_000,
        *,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        observers: Sequence[CallObserver] = (),
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str | os.PathLike[str] | None = None,
        ssl_certfile: str | os.PathLike[str] | None = None,
        ssl_keyfile: str | os.PathLike[str] | None = None,
    ) -> None:
        addresses = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        security = Security(
            security_protocol,
            *(None if path is None else os.fspath(path)
              for path in (ssl_cafile, ssl_certfile, ssl_keyfile)),
        )
        self._init(
            ClientConfig(
                bootstrap=tuple(a.strip() for a in addresses if a.strip()),
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                retry_backoff_max_ms=retry_backoff_max_ms,
                observers=tuple(observers),
                security=security,
            )
        )

    def _init(self, config: ClientConfig) -> None:
        self.config = config
        self.metadata = ClusterMetadata()
        self.backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self.transport = Transport(self.metadata, config.observers, config.security)
        self.coordinators = Coordinators(self)
        self._refresh_cond = threading.Condition()
        self._refreshing = False
        self._refreshes = 0
        #: The nodes' answers of the last refresh, before they were merged.
        self._answers: list[MetadataSnapshot] = []

    @classmethod
    def from_config(cls, config: ClientConfig) -> Client:
        client = cls.__new__(cls)
        client._init(config)
        return client

    def __reduce__(self) -> tuple[Callable[[ClientConfig], Client], tuple[ClientConfig]]:
        return Client.from_config, (self.config,)

    def close(self) -> None:
        """Close the connections and stop the client's loop; producers built on this client
        fail what they still hold."""
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- connections -----------------------------------------------------------------------

    def deadline(self, timeout_ms: float | None = None) -> Deadline:
        return Deadline(self.config.request_timeout_ms if timeout_ms is None else timeout_ms)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and wait for it (see `Transport.run`)."""
        return self.transport.run(coro)

    def call(self, node_id: int, method: str, request: Any, timeout_s: float) -> Any:
        """One RPC to a node by id (its address from metadata)."""
        return self.run(self.transport.call(node_id, method, request, timeout_s))

    # ---- metadata --------------------------------------------------------------------------

    @property
    def metadata_refreshes(self) -> int:
        """How many Metadata refreshes this client made (concurrent requests share one)."""
        return self._refreshes

    def refresh_metadata(
        self, deadline: Deadline | None = None, seen_version: int | None = None
    ) -> None:
        """Refresh unless someone else did since the caller saw `seen_version` (default: now);
        a refresh already under way is joined rather than repeated."""
        deadline = deadline or self.deadline()
        seen = self.metadata.version if seen_version is None else seen_version
        with self._refresh_cond:
            while self._refreshing:
                if not self._refresh_cond.wait(deadline.remaining()):
                    raise NodeUnavailableError("timed out waiting for a metadata refresh")
            if self.metadata.version > seen:
                return
            self._refreshing = True
        try:
            self._refreshes += 1
            self._answers = self.run(self._metadata_answers(deadline))
            self.metadata.update(merge_snapshots(self._answers))
        finally:
            with self._refresh_cond:
                self._refreshing = False
                self._refresh_cond.notify_all()

    async def _metadata_answers(self, deadline: Deadline) -> list[MetadataSnapshot]:
        """Every known node's answer, asked at once, to be merged (the highest leader epoch of
        each partition wins), so one node that has not heard of an election yet, or that
        stalls, costs nothing: the answers are complete once every node not suspect has
        answered (a suspect one counts only while nothing else answered). The bootstrap
        addresses are asked one after the other only while no node is known."""
        nodes = self.metadata.nodes()
        if not nodes:
            return [wire.parse_metadata(await self._fetch_metadata_async(deadline))]
        timeout = min(deadline.remaining(), _METADATA_ATTEMPT_S)
        request = wire.metadata_request(())
        transport = self.transport
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
        return [wire.parse_metadata(await self._fetch_metadata_async(deadline))]

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
                    self.refresh_metadata(deadline)
                if all(self.metadata.moved(tp, was) for tp, was in failed.items()):
                    return
            left = until - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(poll_s if failed else left, left))
        if not failed:
            with contextlib.suppress(RetriableError):
                self.refresh_metadata(deadline)

    def _fetch_metadata(self, deadline: Deadline, topics: Sequence[str] = ()) -> Any:
        return self.run(self._fetch_metadata_async(deadline, topics))

    async def _fetch_metadata_async(self, deadline: Deadline, topics: Sequence[str] = ()) -> Any:
        """Ask the known nodes in random order, then the bootstrap addresses (for `topics`
        by name, else for all)."""
        known = list(self.metadata.nodes().items())
        random.shuffle(known)
        candidates: list[tuple[int | None, str]] = list(known)
        candidates += [(None, a) for a in self.config.bootstrap if a not in dict(known).values()]
        failures: list[str] = []
        for node_id, address in candidates:
            timeout = min(deadline.remaining(), _METADATA_ATTEMPT_S)
            if timeout <= 0:
                break
            try:
                return await self.transport.call(
                    node_id, "Metadata", wire.metadata_request(topics), timeout, address
                )
            except NodeUnavailableError as exc:
                failures.append(str(exc))
        raise NodeUnavailableError(
            "no node answered Metadata: " + ("; ".join(failures) or "the deadline passed")
        )

    def check_described(self, topics: Iterable[str], deadline: Deadline) -> None:
        """Raise the authorization error of a topic the metadata leaves out because this
        client may not DESCRIBE it. A node leaves such a topic out of an answer for all topics
        and answers TOPIC_AUTHORIZATION_FAILED (29) only when asked for it by name (as Kafka
        does), so the topics missing from the last answer are asked for by name, once."""
        missing = [t for t in dict.fromkeys(topics) if self.metadata.topic(t) is None]
        if not missing:
            return
        for topic in self._fetch_metadata(deadline, missing).topics:
            if issubclass(for_code(topic.error_code), AuthorizationError):
                raise wire.error_for(topic.error_code, "", f"topic {topic.name!r}")

    def ensure_metadata(self, deadline: Deadline) -> None:
        if self.metadata.version == 0:
            call_with_retry(
                lambda: self.refresh_metadata(deadline, seen_version=0),
                what="Metadata",
                deadline=deadline,
                backoff=self.backoff,
            )

    def partitions_for(
        self, topic: str, deadline: Deadline | None = None, *, partition: int | None = None
    ) -> int:
        """The topic's partition count, refreshing metadata (with retries) until it is known;
        with `partition`, until the topic has that partition: one another client has just
        added may not be in this client's metadata yet, and Kafka's producer too refreshes and
        waits for it (up to max.block.ms) rather than refuse it at once."""
        deadline = deadline or self.deadline()
        count = self.metadata.partition_count(topic)
        if count is not None and (partition is None or partition < count):
            return count

        def attempt() -> int:
            self.refresh_metadata(deadline)
            found = self.metadata.partition_count(topic)
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
                attempt, what=f"Metadata for {topic!r}", deadline=deadline, backoff=self.backoff
            )
        except RequestTimedOutError as exc:
            if not isinstance(exc.__cause__, UnknownTopicOrPartitionError):
                raise  # no node answered: that is the news
            known = self.metadata.partition_count(topic)
            if partition is not None and known is not None:
                raise RequestTimedOutError(  # Kafka's wording
                    f"partition {partition} of topic {topic!r} with partition count {known} is "
                    f"not present in metadata after {deadline.timeout_ms:g} ms"
                ) from exc.__cause__
            raise RequestTimedOutError(  # Kafka's wording
                f"topic {topic!r} not present in metadata after {deadline.timeout_ms:g} ms"
            ) from exc.__cause__

    # ---- admin -----------------------------------------------------------------------------

    def _controller_call(self, method: str, request_for: Callable[[], Any], deadline: Deadline,
                         state: _Attempts) -> Any:
        """Send an admin request to the controller (any node forwards it when unknown)."""
        self.ensure_metadata(deadline)
        if state.refresh:
            self.refresh_metadata(deadline, state.seen_version)
            state.refresh = False
        state.seen_version = self.metadata.version
        nodes = self.metadata.nodes()
        controller = self.metadata.controller_id
        node_id = controller if controller in nodes else random.choice(list(nodes))
        try:
            return self.call(node_id, method, request_for(), deadline.attempt_s())
        except NodeUnavailableError:
            state.refresh = True
            raise

    def _topic_change(
        self, method: str, name: str, request_for: Callable[[], Any], already: type[TidelogError],
        deadline: Deadline,
    ) -> None:
        """Create or delete one topic. An attempt whose outcome is unknown (no answer came, or
        the controller answered REQUEST_TIMED_OUT: the change may commit after all) makes
        `already` (exists / unknown) on a later attempt mean that our change went through.
        Otherwise `already` is the answer, raised without a retry as Kafka's AdminClient does:
        deleting a topic that never existed fails with UNKNOWN_TOPIC_OR_PARTITION, although
        that error is retriable elsewhere (a NOT_CONTROLLER before it changed nothing)."""
        state = _Attempts(self.metadata.version)
        maybe_done = False

        def attempt() -> TidelogError | None:
            nonlocal maybe_done
            try:
                response = self._controller_call(method, request_for, deadline, state)
            except NodeUnavailableError:
                maybe_done = True  # the request may have reached the controller
                raise
            error = wire.parse_topic_results(response).get(name)
            if error is None or (maybe_done and isinstance(error, already)):
                return None
            if isinstance(error, already):
                return error
            maybe_done = maybe_done or isinstance(error, RequestTimedOutError)
            state.refresh = isinstance(error, RetriableError)
            raise error

        error = call_with_retry(attempt, what=f"{method} {name!r}", deadline=deadline,
                                backoff=self.backoff)
        if error is not None:
            raise error

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str | int] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Create a topic and return once every partition has a leader and in-sync replicas
        known to every node, so the next produce or lookup needs no election-wait of its own
        and a describe shows the ISR. `partitions` -1 means the nodes' num.partitions (as
        Kafka's CreateTopics); `replication_factor` None means min(3, number of nodes)."""
        deadline = self.deadline(timeout_ms)
        self.ensure_metadata(deadline)
        factor = replication_factor or min(3, len(self.metadata.nodes()))
        configs = {k: str(v) for k, v in (config or {}).items()}
        self._topic_change(
            "CreateTopics",
            name,
            lambda: wire.create_topics_request(
                name, partitions, factor, configs, int(deadline.attempt_s() * 1000)
            ),
            TopicAlreadyExistsError,
            deadline,
        )

        self._await_leaders({name: partitions}, deadline)

    def _await_leaders(self, counts: Mapping[str, int], deadline: Deadline) -> None:
        """Return once every node that answers Metadata knows each topic with its count of
        partitions (any count for -1: the node's default), each with a leader and its in-sync
        replicas: a node that has not heard of the change yet (the group coordinator of a
        commit, say) would refuse it, and one that knows the leader before the leader's first
        announcement reaches it would show an empty ISR."""

        def led(info: TopicInfo | None, count: int) -> bool:
            return (info is not None and not info.error_code and bool(info.partitions)
                    and count in (-1, len(info.partitions))
                    and all(p.leader >= 0 and p.isr for p in info.partitions))

        def served() -> None:
            self.refresh_metadata(deadline)
            for name, count in counts.items():
                if not all(led(answer.topics.get(name), count) for answer in self._answers):
                    raise LeaderNotAvailableError(
                        f"topic {name!r} has partitions without a leader")

        call_with_retry(served, what=f"leaders of {', '.join(map(repr, counts))}",
                        deadline=deadline, backoff=self.backoff)

    def delete_topic(self, name: str, *, timeout_ms: int | None = None) -> None:
        deadline = self.deadline(timeout_ms)
        self._topic_change(
            "DeleteTopics",
            name,
            lambda: wire.delete_topics_request([name], int(deadline.attempt_s() * 1000)),
            UnknownTopicOrPartitionError,
            deadline,
        )
        self.refresh_metadata(deadline)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicInfo]:
        """Fresh metadata of the named topics (all when None); an unknown name raises
        UNKNOWN_TOPIC_OR_PARTITION, and one this client may not DESCRIBE the authorization
        error (TOPIC_AUTHORIZATION_FAILED), as Kafka's admin client says."""
        deadline = self.deadline(timeout_ms)
        call_with_retry(lambda: self.refresh_metadata(deadline), what="Metadata",
                        deadline=deadline, backoff=self.backoff)
        topics = self.metadata.topics()
        if names is None:
            return {n: t for n, t in sorted(topics.items()) if t.error_code == 0}
        names = list(names)
        self.check_described(names, deadline)
        out: dict[str, TopicInfo] = {}
        for name in names:
            info = topics.get(name)
            if info is None or info.error_code:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            out[name] = info
        return out

    def list_topics(self, *, timeout_ms: int | None = None) -> list[str]:
        return [n for n, t in self.describe_topics(timeout_ms=timeout_ms).items()
                if not t.is_internal]

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        deadline = self.deadline(timeout_ms)
        call_with_retry(lambda: self.refresh_metadata(deadline), what="Metadata",
                        deadline=deadline, backoff=self.backoff)
        return ClusterDescription(self.metadata.nodes(), self.metadata.controller_id)

    # ---- partitions and configs ------------------------------------------------------------

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions | int],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Grow each topic to its new total partition count through the controller
        (CreatePartitions, needs ALTER on the topic) and return once every new partition has
        a leader. Raises the first failed topic's error: INVALID_PARTITIONS (not an increase),
        INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED...
        A retry after a lost answer finds the topic grown already, which counts as done."""
        remaining = {
            name: new if isinstance(new, NewPartitions) else NewPartitions(int(new))
            for name, new in topic_partitions.items()
        }
        counts = {name: new.total_count for name, new in remaining.items()}
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)
        attempts = 0

        def attempt() -> TidelogError | None:
            nonlocal attempts
            attempts += 1
            response = self._controller_call(
                "CreatePartitions",
                lambda: wire.create_partitions_request(
                    remaining, validate_only, int(deadline.attempt_s() * 1000)),
                deadline, state,
            )
            failed = wire.parse_create_partitions(response)
            if attempts > 1 and any(isinstance(e, InvalidPartitionsError)
                                    for e in failed.values()):
                self.refresh_metadata(deadline)
                topics = self.metadata.topics()
                failed = {
                    name: error for name, error in failed.items()
                    if not (isinstance(error, InvalidPartitionsError) and name in topics
                            and len(topics[name].partitions) == remaining[name].total_count)
                }
            return _raise_retriable(remaining, failed, state)

        if remaining:
            error = call_with_retry(attempt, what="CreatePartitions", deadline=deadline,
                                    backoff=self.backoff)
            if error is not None:
                raise error
            if not validate_only:
                self._await_leaders(counts, deadline)

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
        release: bool = False,
    ) -> dict[TopicPartition, TidelogError]:
        """Move each partition's replicas to its list (preferred leader first), or cancel its
        reassignment under way with None (AlterPartitionReassignments, KIP-455; needs ALTER on
        the cluster). Returns once the controller has recorded them: the partitions' leaders
        then move their Raft groups (`list_partition_reassignments` shows what is under way).
        Each partition is then held out of continuous balancing for the cluster's
        balancer.operator.hold.ms; ``release`` (the lists are then ignored: pass None) only
        releases the partitions' holds, so that balancing may move them again.
        The partitions that failed are returned with their errors (INVALID_REPLICA_ASSIGNMENT,
        UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS); a top-level error is raised."""
        remaining = dict(reassignments)
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)
        failed: dict[TopicPartition, TidelogError] = {}

        def attempt() -> None:
            response = self._controller_call(
                "AlterPartitionReassignments",
                lambda: wire.alter_partition_reassignments_request(
                    remaining, int(deadline.attempt_s() * 1000), release),
                deadline, state,
            )
            if response.error_code:
                error = wire.error_for(response.error_code, response.error_message,
                                       "AlterPartitionReassignments")
                state.refresh = isinstance(error, RetriableError)
                raise error
            answers = wire.parse_alter_partition_reassignments(response)
            for tp in [tp for tp in remaining if tp not in answers]:
                del remaining[tp]
            retry = [tp for tp, error in answers.items() if isinstance(error, RetriableError)]
            for tp, error in answers.items():
                if tp not in retry:
                    failed[tp] = error
                    del remaining[tp]
            if retry:
                state.refresh = True
                raise answers[retry[0]]

        if remaining:
            call_with_retry(attempt, what="AlterPartitionReassignments", deadline=deadline,
                            backoff=self.backoff)
        return failed

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, wire.PartitionReassignment]:
        """The reassignments under way, of every partition or of those given
        (ListPartitionReassignments; needs DESCRIBE on the cluster), as the controller knows
        them: a partition is left out once its reassignment is done."""
        asked = None if partitions is None else list(partitions)
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)

        def attempt() -> dict[TopicPartition, wire.PartitionReassignment]:
            response = self._controller_call(
                "ListPartitionReassignments",
                lambda: wire.list_partition_reassignments_request(asked), deadline, state,
            )
            if response.error_code:
                error = wire.error_for(response.error_code, response.error_message,
                                       "ListPartitionReassignments")
                state.refresh = isinstance(error, RetriableError)
                raise error
            return wire.parse_list_partition_reassignments(response)

        return call_with_retry(attempt, what="ListPartitionReassignments", deadline=deadline,
                               backoff=self.backoff)

    def decommission_node(
        self, node_id: int, *, cancel: bool = False, timeout_ms: int | None = None
    ) -> wire.DecommissionStatus:
        """Decommission node `node_id` (needs ALTER on the cluster): the controller records it,
        gives the node no new replica and moves those it holds away, a bounded number at a
        time; `cancel` re-commissions it. Returns once recorded, with the drain's progress
        (`describe_decommission` follows it). BROKER_ID_NOT_REGISTERED for an unknown node,
        INVALID_REQUEST when too few nodes would remain to hold the partitions' replicas."""
        return self._decommission(node_id, 2 if cancel else 1, timeout_ms)

    def describe_decommission(
        self, node_id: int, *, timeout_ms: int | None = None
    ) -> wire.DecommissionStatus:
        """How far node `node_id`'s decommission got (needs DESCRIBE on the cluster)."""
        return self._decommission(node_id, 0, timeout_ms)

    def unregister_node(self, node_id: int, *, timeout_ms: int | None = None) -> None:
        """Remove node `node_id`'s registration for good (Kafka's UnregisterBroker; needs
        ALTER on the cluster), once it holds no replica and is stopped: Metadata and cluster
        status leave it out from then on; started again, it registers afresh.
        INVALID_REQUEST while it is alive, holds a replica or votes in the controller's
        quorum; BROKER_ID_NOT_REGISTERED for a node not registered."""
        self._decommission(node_id, 3, timeout_ms)

    def _decommission(
        self, node_id: int, action: int, timeout_ms: int | None
    ) -> wire.DecommissionStatus:
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)

        def attempt() -> wire.DecommissionStatus:
            response = self._controller_call(
                "DecommissionNode",
                lambda: wire.decommission_request(
                    node_id, action, int(deadline.attempt_s() * 1000)),
                deadline, state,
            )
            if response.error_code:
                error = wire.error_for(response.error_code, response.error_message,
                                       "DecommissionNode")
                state.refresh = isinstance(error, RetriableError)
                raise error
            return wire.parse_decommission(node_id, response)

        return call_with_retry(attempt, what="DecommissionNode", deadline=deadline,
                               backoff=self.backoff)

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        keys: Sequence[str] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """The configs of topics and nodes (DescribeConfigs, needs DESCRIBE_CONFIGS on the
        topic or the cluster), each with its value, source, read-only and sensitive flags;
        `keys` picks some. A node's own resource is asked of that node, the rest of the
        controller, which has applied every change it acknowledged (other nodes apply them
        shortly after, as in Kafka). Raises the first failed resource's error."""
        wanted = [ConfigResource(ConfigResourceType(r[0]), str(r[1])) for r in resources]
        deadline = self.deadline(timeout_ms)
        self.ensure_metadata(deadline)
        by_node: dict[int, list[ConfigResource]] = {}
        for resource in wanted:
            node = (int(resource.name) if resource.resource_type == ConfigResourceType.BROKER
                    and resource.name.isdigit() else -1)
            by_node.setdefault(node, []).append(resource)
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for node, asked in by_node.items():

            def attempt(
                node: int = node, asked: list[ConfigResource] = asked
            ) -> TidelogError | None:
                nodes = self.metadata.nodes()
                if node >= 0 and node not in nodes:
                    raise InvalidRequestError(f"no node {node} in the cluster's metadata")
                controller = self.metadata.controller_id
                target = (node if node >= 0 else controller if controller in nodes
                          else random.choice(list(nodes)))
                response = self.call(target, "DescribeConfigs",
                                     wire.describe_configs_request(asked, keys),
                                     deadline.attempt_s())
                results = wire.parse_describe_configs(response)
                for resource, result in results.items():
                    if not isinstance(result, TidelogError):
                        out[ConfigResource(ConfigResourceType(resource[0]), resource[1])] = result
                return _first_final(
                    [r for r in results.values() if isinstance(r, TidelogError)])

            error = call_with_retry(attempt, what="DescribeConfigs", deadline=deadline,
                                    backoff=self.backoff)
            if error is not None:
                raise error
        return {resource: out[resource] for resource in wanted if resource in out}

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Change dynamic configs of topics and nodes through the controller
        (IncrementalAlterConfigs, needs ALTER_CONFIGS on the topic or the cluster); each
        resource's changes commit together, and take effect on the running logs. Raises the
        first failed resource's error (INVALID_CONFIG, INVALID_REQUEST,
        UNKNOWN_TOPIC_OR_PARTITION, ...). Every operation is idempotent, so retries are safe."""
        remaining = {
            ConfigResource(ConfigResourceType(r[0]), str(r[1])): list(ops)
            for r, ops in changes.items()
        }
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)

        def attempt() -> TidelogError | None:
            response = self._controller_call(
                "IncrementalAlterConfigs",
                lambda: wire.incremental_alter_configs_request(
                    remaining, validate_only, int(deadline.attempt_s() * 1000)),
                deadline, state,
            )
            return _raise_retriable(remaining, wire.parse_incremental_alter_configs(response),
                                    state)

        if remaining:
            error = call_with_retry(attempt, what="IncrementalAlterConfigs", deadline=deadline,
                                    backoff=self.backoff)
            if error is not None:
                raise error

    # ---- ACLs ------------------------------------------------------------------------------

    def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None
    ) -> None:
        """Create ACLs through the controller (needs ALTER on the cluster). One that exists
        already succeeds, so a retry after a lost answer is safe. Raises the first binding's
        error, naming the binding (CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, ...).
        Other nodes apply the ACLs shortly after the controller does, as in Kafka."""
        wanted = list(bindings)
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)

        def attempt() -> None:
            response = self._controller_call(
                "CreateAcls", lambda: wire.create_acls_request(wanted), deadline, state
            )
            for error in wire.parse_create_acls(response, wanted):
                if error is not None:
                    state.refresh = isinstance(error, RetriableError)
                    raise error

        if wanted:
            call_with_retry(attempt, what="CreateAcls", deadline=deadline, backoff=self.backoff)

    def describe_acls(
        self, acl_filter: AclBindingFilter = ANY_ACL, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """The ACLs `acl_filter` selects (all by default), as the controller has them;
        needs DESCRIBE on the cluster."""
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)

        def attempt() -> list[AclBinding]:
            response = self._controller_call(
                "DescribeAcls", lambda: wire.describe_acls_request(acl_filter), deadline, state
            )
            return wire.parse_describe_acls(response)

        return call_with_retry(
            attempt, what="DescribeAcls", deadline=deadline, backoff=self.backoff
        )

    def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """Delete every ACL some filter selects, through the controller (needs ALTER on the
        cluster); returns the ACLs deleted. Raises the first filter's error."""
        wanted = list(filters)
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)

        def attempt() -> list[AclBinding]:
            response = self._controller_call(
                "DeleteAcls", lambda: wire.delete_acls_request(wanted), deadline, state
            )
            deleted: dict[AclBinding, None] = {}
            for outcome in wire.parse_delete_acls(response, wanted):
                if isinstance(outcome, TidelogError):
                    state.refresh = isinstance(outcome, RetriableError)
                    raise outcome
                deleted.update(dict.fromkeys(outcome))
            return list(deleted)

        if not wanted:
            return []
        return call_with_retry(attempt, what="DeleteAcls", deadline=deadline,
                               backoff=self.backoff)

    # ---- offsets ---------------------------------------------------------------------------

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec | int],
        isolation_level: IsolationLevel | str | int = IsolationLevel.READ_UNCOMMITTED,
        replica_id: int = CONSUMER_REPLICA_ID,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """ListOffsets per contract §6; "nothing found" is ListOffsetsResult(-1, -1, -1)."""
        isolation = IsolationLevel.parse(isolation_level)
        timestamps = {
            TopicPartition(*tp): s.timestamp if isinstance(s, OffsetSpec) else int(s)
            for tp, s in specs.items()
        }
        return self._lookup(
            "ListOffsets", timestamps, 0, isolation, replica_id, self.deadline(timeout_ms)
        )

    def legacy_offsets_before(
        self,
        tp: TopicPartition,
        time_ms: int,
        max_num_offsets: int,
        *,
        timeout_ms: int | None = None,
    ) -> list[int]:
        """The v0 lookup (contract §6): segment base offsets and the LEO, descending, of segments
        last modified before `time_ms` (-1 latest, -2 earliest)."""
        if max_num_offsets < 1:
            raise ConfigurationError(f"max_num_offsets must be >= 1, got {max_num_offsets}")
        if time_ms < EARLIEST_TIMESTAMP:
            raise ConfigurationError(f"time_ms must be -2, -1 or >= 0, got {time_ms}")
        tp = TopicPartition(*tp)
        answers = self._lookup(
            "legacy ListOffsets", {tp: time_ms}, max_num_offsets, IsolationLevel.READ_UNCOMMITTED,
            CONSUMER_REPLICA_ID, self.deadline(timeout_ms),
        )
        return list(answers[tp].old_style_offsets)

    def _lookup(
        self,
        what: str,
        timestamps: Mapping[TopicPartition, int],
        max_num_offsets: int,
        isolation: IsolationLevel,
        replica_id: int,
        deadline: Deadline,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        self.ensure_metadata(deadline)

        def build(work: Mapping[TopicPartition, int]) -> Any:
            lookups = {
                tp: wire.OffsetLookup(timestamp, self.metadata.leader_epoch(tp), max_num_offsets)
                for tp, timestamp in work.items()
            }
            return wire.list_offsets_request(lookups, isolation, replica_id)

        return PartitionedRequest(
            self, what, "ListOffsets", build, wire.parse_list_offsets
        ).run(timestamps, deadline)

    def init_producer_id(
        self, producer_id: int = -1, producer_epoch: int = -1, *, timeout_ms: int | None = None
    ) -> tuple[int, int]:
        """A producer id and epoch for idempotent producing (any node forwards the request
        to the controller); pass the current ones to get a new epoch (KIP-360)."""
        deadline = self.deadline(timeout_ms)
        state = _Attempts(self.metadata.version)

        def attempt() -> tuple[int, int]:
            response = self._controller_call(
                "InitProducerId",
                lambda: wire.init_producer_id_request(producer_id, producer_epoch),
                deadline,
                state,
            )
            try:
                return wire.parse_init_producer_id(response)
            except RetriableError:
                state.refresh = True
                raise

        return call_with_retry(
            attempt, what="InitProducerId", deadline=deadline, backoff=self.backoff
        )

    # ---- consumer groups ---------------------------------------------------------------------

    def find_coordinator(self, group_id: str, *, timeout_ms: int | None = None) -> int:
        """The node id of the group's coordinator (the leader of the group's partition of
        __consumer_offsets), asked afresh; later offset calls for the group go straight to it."""
        deadline = self.deadline(timeout_ms)
        return self.run(self.coordinators.find(check_group_id(group_id), deadline))

    def list_consumer_groups(self, *, timeout_ms: int | None = None) -> list[GroupListing]:
        """Every group with committed offsets (or members), sorted by id: ListGroups on every
        node, merged, as Kafka's admin does. A node that does not answer is only waited for
        while it may be a coordinator: while it leads a partition of __consumer_offsets in
        fresh metadata, or some partition has no leader yet."""
        deadline = self.deadline(timeout_ms)

        def attempt() -> list[GroupListing]:
            self.refresh_metadata(deadline)
            nodes = sorted(self.metadata.nodes())
            answers = self.run(_gather(
                self._list_groups_on(node_id, deadline.attempt_s()) for node_id in nodes
            ))
            found: dict[str, GroupListing] = {}
            failed: dict[int, TidelogError] = {}
            for node_id, answer in zip(nodes, answers, strict=True):
                if isinstance(answer, TidelogError):
                    failed[node_id] = answer
                else:
                    found.update((g.group_id, g) for g in answer)
            offsets = self.metadata.topic(CONSUMER_OFFSETS_TOPIC)
            leaders = {p.leader for p in offsets.partitions} if offsets is not None else set()
            final = [e for e in failed.values() if not isinstance(e, RetriableError)]
            if final:
                raise final[0]
            if -1 in leaders:
                raise LeaderNotAvailableError(
                    f"a partition of {CONSUMER_OFFSETS_TOPIC} has no leader"
                )
            waited = {n: e for n, e in failed.items() if n in leaders}
            if waited:
                raise NodeUnavailableError("; ".join(str(e) for e in waited.values()))
            return [found[g] for g in sorted(found)]

        return call_with_retry(attempt, what="ListGroups", deadline=deadline,
                               backoff=self.backoff)

    async def _list_groups_on(self, node_id: int, timeout_s: float) -> list[GroupListing]:
        response = await self.transport.call(
            node_id, "ListGroups", wire.list_groups_request(), timeout_s
        )
        return wire.parse_list_groups(response, node_id)

    def describe_consumer_group(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> ConsumerGroupDescription:
        """A consumer group's state, epochs, assignor and members with their assignments
        (ConsumerGroupDescribe at its coordinator); GROUP_ID_NOT_FOUND when the group has no
        members' records (a group that only commits offsets)."""
        group_id = check_group_id(group_id)
        return self.run(self.coordinators.call(
            group_id, "ConsumerGroupDescribe", describe_request(group_id),
            lambda response: parse_describe(response, group_id), self.deadline(timeout_ms),
        ))

    def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets: of every partition it committed (None), or of the
        given partitions that have one."""
        deadline = self.deadline(timeout_ms)
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        found = self.run(self.coordinators.fetch(check_group_id(group_id), wanted, deadline))
        return {tp: value for tp, value in sorted(found.items()) if value is not None}

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit `offsets` for the group, all or none (contract §8); raises the first
        partition's error (OFFSET_METADATA_TOO_LARGE for that partition while the others
        commit, as Kafka)."""
        deadline = self.deadline(timeout_ms)
        self.run(self.coordinators.commit(check_group_id(group_id), checked_offsets(offsets),
                                          deadline))

    def delete_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete the groups and their committed offsets, each at its coordinator, all in
        flight together. Every group is tried; the first failure (in the given order) is
        raised, e.g. GROUP_ID_NOT_FOUND, and names its group."""
        if isinstance(group_ids, str):
            raise ConfigurationError("delete_consumer_groups takes a list of group ids")
        groups = list(dict.fromkeys(check_group_id(g) for g in group_ids))
        deadline = self.deadline(timeout_ms)
        outcomes = self.run(_gather(
            self.coordinators.delete_group(g, deadline) for g in groups
        ))
        for outcome in outcomes:
            if isinstance(outcome, TidelogError):
                raise outcome

    # ---- producers and consumers -------------------------------------------------------------

    # ---- transactions (KIP-664: tidelog.txn_admin) ------------------------------------------

    def list_transactions(
        self, *, states: Sequence[str] = (), producer_ids: Sequence[int] = (),
        timeout_ms: int | None = None,
    ) -> list[txn_admin.TransactionListing]:
        """Every transactional id the coordinators hold (ListTransactions on every node)."""
        return txn_admin.list_transactions(self, self.deadline(timeout_ms), states, producer_ids)

    def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, txn_admin.TransactionDescription]:
        """Each id's state at its coordinator."""
        return txn_admin.describe_transactions(self, transactional_ids,
                                               self.deadline(timeout_ms))

    def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, list[txn_admin.ProducerInfo]]:
        """The producers, and their open transactions, each partition's leader knows of."""
        return txn_admin.describe_producers(self, partitions, self.deadline(timeout_ms))

    def abort_transaction(
        self, partition: TopicPartition, producer_id: int, producer_epoch: int,
        coordinator_epoch: int, *, timeout_ms: int | None = None,
    ) -> None:
        """An ABORT marker for a producer's open (hanging) transaction on the partition."""
        txn_admin.abort_transaction(self, partition, producer_id, producer_epoch,
                                    coordinator_epoch, self.deadline(timeout_ms))

    def producer(self, **config: Any) -> Producer:
        """A producer sharing this client's connections; see `tidelog.producer.ProducerConfig`."""
        from tidelog.producer import Producer, ProducerConfig

        return Producer(self, ProducerConfig(**config))

    def consumer(self, group_id: str | None = None, **config: Any) -> Consumer:
        """A consumer of manually assigned partitions; see `tidelog.consumer.ConsumerConfig`.
        With a `group_id` it commits its positions to the group's coordinator and starts
        from the group's committed offsets."""
        from tidelog.consumer import Consumer, ConsumerConfig

        return Consumer(self, ConsumerConfig.from_settings(group_id=group_id, **config))



def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark the outcome of a task nobody awaits as seen."""
    if not task.cancelled():
        task.exception()


async def _gather(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T | TidelogError]:
    """Run the coroutines together; each one's result or Tidelog error, in order."""
    outcomes = await asyncio.gather(*coros, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, TidelogError):
            raise outcome
    return outcomes  # type: ignore[return-value]  # checked above


def _first_final(errors: Sequence[TidelogError]) -> TidelogError | None:
    """The first error of an admin answer's resources: raised when retriable (to try again),
    returned when it is the answer. UNKNOWN_TOPIC_OR_PARTITION of a topic an admin request
    names is the answer, not stale metadata (Kafka's admin client fails the topic at once)."""
    if not errors:
        return None
    error = errors[0]
    if isinstance(error, RetriableError) and not isinstance(error, UnknownTopicOrPartitionError):
        raise error
    return error


def _raise_retriable(
    remaining: dict[Any, Any], failed: Mapping[Any, TidelogError], state: _Attempts
) -> TidelogError | None:
    """Per-resource answers of an admin change: forget the resources done, raise the first
    retriable error (to try the failed ones again), return the first final one."""
    for key in [k for k in remaining if k not in failed]:
        del remaining[key]
    state.refresh = True  # only read when _first_final raises: the next attempt refreshes
    return _first_final(list(failed.values()))
