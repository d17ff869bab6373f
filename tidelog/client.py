"""The entry point of the client library (SPEC §4): connections, metadata, admin operations
and offset lookups; ``client.producer()`` and ``client.consumer()`` build on it.

A synchronous API over gRPC channels, one per node and reused, so it is simple to call from
threads and from Spark executors; every public call has an overall deadline (the client's
``request_timeout_ms`` or the call's ``timeout_ms``) that also bounds its retries. A ``Client``
pickles as its configuration: unpickling builds a fresh client with its own channels.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from tidelog import wire
from tidelog.errors import (
    ConfigurationError,
    InvalidMetadataError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeUnavailableError,
    RequestTimedOutError,
    RetriableError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from tidelog.metadata import ClusterMetadata, TopicInfo
from tidelog.retry import Backoff, Deadline, PartitionsFailed, call_with_retry
from tidelog.types import (
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    IsolationLevel,
    ListOffsetsResult,
    OffsetSpec,
    TopicPartition,
)
from tidelog.v1 import tidelog_pb2, tidelog_pb2_grpc

if TYPE_CHECKING:
    from tidelog.consumer import Consumer
    from tidelog.producer import Producer

A = TypeVar("A")

#: Fetch answers may hold up to 64 MiB (the node's cap); leave room for the envelope.
_MAX_MESSAGE_BYTES = 80 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    # gRPC's default reconnect backoff grows to 2 minutes; a restarted node must be found again
    # within the retry budget of one call.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
#: One Metadata attempt against one node; a stalled node must not eat a call's whole deadline.
_METADATA_ATTEMPT_S = 2.0
_TRANSPORT_FAILURES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}


class _NodeStub(tidelog_pb2_grpc.TidelogStub):
    """The generated stub, plus Produce taking a request already serialized by
    `wire.serialized_produce_request`, so the producer's batches are copied once on their way
    into gRPC."""

    _PRODUCE = "/{}/Produce".format(tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"].full_name)

    def __init__(self, channel: grpc.Channel | grpc.aio.Channel) -> None:
        super().__init__(channel)  # type: ignore[no-untyped-call]  # generated code
        self.ProduceSerialized = channel.unary_unary(
            self._PRODUCE, response_deserializer=tidelog_pb2.ProduceResponse.FromString
        )


class LoopCalls:
    """A client's RPCs from one asyncio event loop, over grpc.aio channels (one per node,
    bound to that loop; errors translated as `Client.call`'s). The producer's sender uses
    them rather than a synchronous channel's `future()`: that hands each call's completion to
    a polling thread which gRPC starts afresh whenever no call is in flight, and a sender
    under load makes it do so many times a second; on the loop a completion is a callback."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._stubs: dict[str, _NodeStub] = {}
        self._channels: list[grpc.aio.Channel] = []

    async def call(self, node_id: int, method: str, request: Any, timeout_s: float) -> Any:
        address = self.client.metadata.address_of(node_id)
        if address is None:
            raise LeaderNotAvailableError(f"node {node_id} is not in the cluster metadata")
        stub = self._stubs.get(address)
        if stub is None:
            channel = grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)
            self._channels.append(channel)
            stub = self._stubs[address] = _NodeStub(channel)
        try:
            return await getattr(stub, method)(request, timeout=max(timeout_s, 0.001))
        except grpc.RpcError as exc:
            raise self.client.translate(exc, node_id, address) from None

    async def close(self) -> None:
        """Close the channels, cancelling what is still in flight."""
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        self._stubs.clear()


@dataclass(frozen=True)
class ClientConfig:
    """Everything needed to build a client; picklable, so Spark executors build their own."""

    bootstrap: tuple[str, ...]
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000

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
    ) -> None:
        addresses = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        self._init(
            ClientConfig(
                bootstrap=tuple(a.strip() for a in addresses if a.strip()),
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                retry_backoff_max_ms=retry_backoff_max_ms,
            )
        )

    def _init(self, config: ClientConfig) -> None:
        self.config = config
        self.metadata = ClusterMetadata()
        self.backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, _NodeStub] = {}
        self._channels_lock = threading.Lock()
        self._refresh_cond = threading.Condition()
        self._refreshing = False
        self._refreshes = 0
        self._closed = False

    @classmethod
    def from_config(cls, config: ClientConfig) -> Client:
        client = cls.__new__(cls)
        client._init(config)
        return client

    def __reduce__(self) -> tuple[Callable[[ClientConfig], Client], tuple[ClientConfig]]:
        return Client.from_config, (self.config,)

    def close(self) -> None:
        with self._channels_lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
        for channel in channels:
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- connections -----------------------------------------------------------------------

    def deadline(self, timeout_ms: float | None = None) -> Deadline:
        return Deadline(self.config.request_timeout_ms if timeout_ms is None else timeout_ms)

    def _stub(self, address: str) -> _NodeStub:
        stub = self._stubs.get(address)
        if stub is None:
            with self._channels_lock:
                if self._closed:
                    raise ConfigurationError("the client is closed")
                stub = self._stubs.get(address)
                if stub is None:
                    channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
                    self._channels[address] = channel
                    stub = self._stubs[address] = _NodeStub(channel)
        return stub

    def translate(self, exc: grpc.RpcError, node_id: int | None, address: str) -> TidelogError:
        """A failed call as a Tidelog error; a transport failure also makes the node suspect."""
        code = exc.code()
        where = f"node {node_id} ({address})" if node_id is not None else address
        detail = f"{where}: {code.name}: {exc.details()}"
        if code in _TRANSPORT_FAILURES:
            if node_id is not None:
                self.metadata.invalidate_node(node_id)
            return NodeUnavailableError(detail)
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return UnsupportedVersionError(detail)
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidRequestError(detail)
        return UnknownServerError(detail)

    def call(self, node_id: int, method: str, request: Any, timeout_s: float) -> Any:
        """One RPC to a node by id (its address from metadata)."""
        address = self.metadata.address_of(node_id)
        if address is None:
            raise LeaderNotAvailableError(f"node {node_id} is not in the cluster metadata")
        return self._call_address(address, node_id, method, request, timeout_s)

    def _call_address(
        self, address: str, node_id: int | None, method: str, request: Any, timeout_s: float
    ) -> Any:
        try:
            return getattr(self._stub(address), method)(request, timeout=max(timeout_s, 0.001))
        except grpc.RpcError as exc:
            raise self.translate(exc, node_id, address) from None

    def call_async(self, node_id: int, method: str, request: Any, timeout_s: float) -> Any:
        """Start one RPC and return its grpc future; `result_of` turns its outcome into ours."""
        address = self.metadata.address_of(node_id)
        if address is None:
            raise LeaderNotAvailableError(f"node {node_id} is not in the cluster metadata")
        return getattr(self._stub(address), method).future(
            request, timeout=max(timeout_s, 0.001)
        )

    def result_of(self, future: Any, node_id: int) -> Any:
        try:
            return future.result()
        except grpc.RpcError as exc:
            raise self.translate(exc, node_id, self.metadata.address_of(node_id) or "?") from None

    def loop_calls(self) -> LoopCalls:
        """RPCs for one asyncio event loop (the producer's sender thread runs one)."""
        return LoopCalls(self)

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
            self.metadata.update(wire.parse_metadata(self._fetch_metadata(deadline)))
        finally:
            with self._refresh_cond:
                self._refreshing = False
                self._refresh_cond.notify_all()

    def _fetch_metadata(self, deadline: Deadline) -> Any:
        """Ask the known nodes in random order, then the bootstrap addresses."""
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
                return self._call_address(
                    address, node_id, "Metadata", wire.metadata_request(), timeout
                )
            except NodeUnavailableError as exc:
                failures.append(str(exc))
        raise NodeUnavailableError(
            "no node answered Metadata: " + ("; ".join(failures) or "the deadline passed")
        )

    def ensure_metadata(self, deadline: Deadline) -> None:
        if self.metadata.version == 0:
            call_with_retry(
                lambda: self.refresh_metadata(deadline, seen_version=0),
                what="Metadata",
                deadline=deadline,
                backoff=self.backoff,
            )

    def partitions_for(self, topic: str, deadline: Deadline | None = None) -> int:
        """The topic's partition count, refreshing metadata (with retries) until it is known."""
        deadline = deadline or self.deadline()
        count = self.metadata.partition_count(topic)
        if count is not None:
            return count

        def attempt() -> int:
            self.refresh_metadata(deadline)
            found = self.metadata.partition_count(topic)
            if found is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} is not in the metadata")
            return found

        try:
            return call_with_retry(
                attempt, what=f"Metadata for {topic!r}", deadline=deadline, backoff=self.backoff
            )
        except RequestTimedOutError as exc:
            if not isinstance(exc.__cause__, UnknownTopicOrPartitionError):
                raise  # no node answered: that is the news
            raise RequestTimedOutError(  # Kafka's wording
                f"topic {topic!r} not present in metadata after {deadline.timeout_ms:g} ms"
            ) from exc.__cause__

    # ---- how a partition's failure changes the plan ------------------------------------------

    def react(self, tp: TopicPartition, failure: wire.Failure) -> tuple[bool, bool]:
        """(needs a refresh, may retry at once) for one partition's error; raises it when it
        is not retriable. A newer leader hint is adopted, which is what allows retrying at
        once without a refresh."""
        error = failure.error
        if not isinstance(error, RetriableError):
            raise error
        if not isinstance(error, InvalidMetadataError):
            return False, False
        if failure.hint is not None and self.metadata.apply_hint(tp, failure.hint):
            return False, True
        return True, False

    def run_partitioned(
        self,
        what: str,
        partitions: Iterable[TopicPartition],
        method: str,
        build: Callable[[list[TopicPartition]], Any],
        parse: Callable[[Any], Mapping[TopicPartition, A | wire.Failure]],
        deadline: Deadline,
    ) -> dict[TopicPartition, A]:
        """Send per-partition requests to each partition's leader (one RPC per leader, all in
        flight together) and retry only the failed partitions, per `tidelog.retry`."""
        wanted = list(dict.fromkeys(partitions))
        results: dict[TopicPartition, A] = {}
        state = _Attempts(seen_version=self.metadata.version)

        def attempt() -> dict[TopicPartition, A]:
            pending = [tp for tp in wanted if tp not in results]
            if state.refresh or any(self.metadata.leader_for(tp) is None for tp in pending):
                try:
                    self.refresh_metadata(deadline, state.seen_version)
                except RetriableError as exc:
                    # Keep naming the partitions: they are what the caller waits for.
                    raise PartitionsFailed(
                        dict.fromkeys(pending, exc), refresh=True, immediate=False
                    ) from exc
            state.seen_version = self.metadata.version
            failures: dict[TopicPartition, wire.Failure] = {}
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in pending:
                leader = self.metadata.leader_for(tp)
                if leader is None:
                    failures[tp] = wire.Failure(_no_leader(self.metadata, tp))
                else:
                    by_leader[leader].append(tp)
            calls = {
                node: (tps, self.call_async(node, method, build(tps), deadline.remaining()))
                for node, tps in by_leader.items()
            }
            for node, (tps, future) in calls.items():
                try:
                    answers = parse(self.result_of(future, node))
                except NodeUnavailableError as exc:
                    failures.update((tp, wire.Failure(exc)) for tp in tps)
                    continue
                for tp in tps:
                    answer = answers.get(tp)
                    if answer is None:
                        failures[tp] = wire.Failure(UnknownServerError(f"{tp}: no answer"))
                    elif isinstance(answer, wire.Failure):
                        failures[tp] = answer
                    else:
                        results[tp] = answer
            if not failures:
                return results
            refresh, immediate = False, True
            for tp, failure in failures.items():
                needs_refresh, at_once = self.react(tp, failure)
                refresh |= needs_refresh
                immediate &= at_once
            state.refresh = refresh
            raise PartitionsFailed(
                {tp: f.error for tp, f in failures.items()}, refresh=refresh, immediate=immediate
            )

        return call_with_retry(attempt, what=what, deadline=deadline, backoff=self.backoff)

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
            return self.call(node_id, method, request_for(), deadline.remaining())
        except NodeUnavailableError:
            state.refresh = True
            raise

    def _topic_change(
        self, method: str, name: str, request_for: Callable[[], Any], already: type[TidelogError],
        deadline: Deadline,
    ) -> None:
        """Create or delete one topic. After a retriable failure the change may have happened
        anyway, so on a retry `already` (exists / unknown) means our change went through."""
        state = _Attempts(self.metadata.version)
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            response = self._controller_call(method, request_for, deadline, state)
            error = wire.parse_topic_results(response).get(name)
            if error is None or (attempts > 1 and isinstance(error, already)):
                return
            state.refresh = isinstance(error, RetriableError)
            raise error

        call_with_retry(attempt, what=f"{method} {name!r}", deadline=deadline,
                        backoff=self.backoff)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str | int] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Create a topic and return once every partition has a leader, so the next produce
        or lookup needs no election-wait of its own. `replication_factor` None means
        min(3, number of nodes)."""
        deadline = self.deadline(timeout_ms)
        self.ensure_metadata(deadline)
        factor = replication_factor or min(3, len(self.metadata.nodes()))
        configs = {k: str(v) for k, v in (config or {}).items()}
        self._topic_change(
            "CreateTopics",
            name,
            lambda: wire.create_topics_request(
                name, partitions, factor, configs, int(deadline.remaining() * 1000)
            ),
            TopicAlreadyExistsError,
            deadline,
        )

        def served() -> None:
            self.refresh_metadata(deadline)
            info = self.metadata.topic(name)
            led = info is not None and all(p.leader >= 0 for p in info.partitions)
            if info is None or info.error_code or not info.partitions or not led:
                raise LeaderNotAvailableError(f"topic {name!r} has partitions without a leader")

        call_with_retry(served, what=f"leaders of {name!r}", deadline=deadline,
                        backoff=self.backoff)

    def delete_topic(self, name: str, *, timeout_ms: int | None = None) -> None:
        deadline = self.deadline(timeout_ms)
        self._topic_change(
            "DeleteTopics",
            name,
            lambda: wire.delete_topics_request([name], int(deadline.remaining() * 1000)),
            UnknownTopicOrPartitionError,
            deadline,
        )
        self.refresh_metadata(deadline)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicInfo]:
        """Fresh metadata of the named topics (all when None); an unknown name raises."""
        deadline = self.deadline(timeout_ms)
        call_with_retry(lambda: self.refresh_metadata(deadline), what="Metadata",
                        deadline=deadline, backoff=self.backoff)
        topics = self.metadata.topics()
        if names is None:
            return {n: t for n, t in sorted(topics.items()) if t.error_code == 0}
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

    # ---- offsets ---------------------------------------------------------------------------

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec | int],
        isolation_level: IsolationLevel | str | int = IsolationLevel.READ_UNCOMMITTED,
        replica_id: int = CONSUMER_REPLICA_ID,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """ListOffsets per SPEC §6; "nothing found" is ListOffsetsResult(-1, -1, -1)."""
        isolation = IsolationLevel.parse(isolation_level)
        timestamps = {
            TopicPartition(*tp): s.timestamp if isinstance(s, OffsetSpec) else int(s)
            for tp, s in specs.items()
        }
        answers = self._lookup(
            "ListOffsets", timestamps, 0, isolation, replica_id, self.deadline(timeout_ms)
        )
        return {
            tp: ListOffsetsResult(a.offset, a.timestamp, a.leader_epoch)
            for tp, a in answers.items()
        }

    def legacy_offsets_before(
        self,
        tp: TopicPartition,
        time_ms: int,
        max_num_offsets: int,
        *,
        timeout_ms: int | None = None,
    ) -> list[int]:
        """The v0 lookup (SPEC §6): segment base offsets and the LEO, descending, of segments
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
    ) -> dict[TopicPartition, wire.OffsetAnswer]:
        self.ensure_metadata(deadline)

        def build(tps: list[TopicPartition]) -> Any:
            lookups = {
                tp: wire.OffsetLookup(
                    timestamps[tp], self.metadata.leader_epoch(tp), max_num_offsets
                )
                for tp in tps
            }
            return wire.list_offsets_request(lookups, isolation, replica_id)

        return self.run_partitioned(
            what, timestamps, "ListOffsets", build, wire.parse_list_offsets, deadline
        )

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

    # ---- producers and consumers -------------------------------------------------------------

    def producer(self, **config: Any) -> Producer:
        """A producer sharing this client's connections; see `tidelog.producer.ProducerConfig`."""
        from tidelog.producer import Producer, ProducerConfig

        return Producer(self, ProducerConfig(**config))

    def consumer(self, group_id: str | None = None, **config: Any) -> Consumer:
        """A consumer of manually assigned partitions; see `tidelog.consumer.ConsumerConfig`."""
        from tidelog.consumer import Consumer, ConsumerConfig

        return Consumer(self, ConsumerConfig(group_id=group_id, **config))


def _no_leader(metadata: ClusterMetadata, tp: TopicPartition) -> TidelogError:
    if metadata.partition(tp) is None:
        return UnknownTopicOrPartitionError(f"{tp} is not in the cluster metadata")
    return LeaderNotAvailableError(f"{tp} has no known leader")
