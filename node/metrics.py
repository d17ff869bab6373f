"""A node's Prometheus metrics, served on ``metrics.port`` (off unless set).

Two kinds, read in two ways:

* Request metrics (count, gRPC status, Kafka error codes, latency, bytes per RPC) are counted
  as requests pass, by a gRPC server interceptor (:class:`RequestMetrics`): every unary RPC of
  every service the node serves, with no hook in any handler. A response's Kafka error codes
  (the top-level one and each topic's and partition's) are counted as Kafka's ErrorsPerSec
  counts them, one per code found; the walk reads only the small ``error_code`` fields, never
  the records.
* State metrics (each hosted partition's offsets, size, leadership; under-replicated and
  offline partitions; consumer-group lag) are read when Prometheus scrapes, by a collector
  (:class:`_StateCollector`). The scrape runs on the HTTP server's thread, but the replicas
  belong to the event loop, so the collector asks the loop for a snapshot of plain numbers
  (one callback, no awaiting) and builds the families on its own thread; only a log's size,
  which the log guards with its own lock for any thread, is read there.

storage, replication and coordinator know nothing of this module (the import contracts forbid
prometheus there): it reads their state from the node's side.

Names follow Prometheus conventions: ``tidelog_`` prefix, ``_total`` counters, ``_seconds``
and ``_bytes`` units. The Kafka equivalents are named in each help text.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.controller import METADATA_TP, MetadataImage
from tidelog.errors import InvalidConfigError
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import format_address
from tidelog.node.coordinators.group_driver import GroupCoordinatorDriver
from tidelog.node.edge.interceptors import HandlerRewriter
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import TopicPartition

log = logging.getLogger("tidelog.node")

#: Request latency buckets, 0.5 ms to 30 s: a health check on an idle node takes well under a
#: millisecond, an acks=all produce a few fsyncs, a long-polling fetch up to its max wait.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
#: How long a scrape waits for the event loop's snapshot; a loop stalled longer than this
#: answers the scrape without the state metrics (and says so in the log, once per stall).
_SNAPSHOT_TIMEOUT_S = 5.0
#: How deep the walk for error codes goes: response -> topics -> partitions.
_ERROR_CODE_DEPTH = 3

_KAFKA_NAMES = {cls.code: cls.name for cls in errors.all_errors()}


class NodeMetrics:
    """The registry of one node (its own, not the process-wide default, so that nodes run in
    one process in tests stay apart) and the request metrics the interceptor updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        registry = self.registry
        self.requests = Counter(
            "tidelog_requests", "Requests answered, by RPC and gRPC status (Kafka: "
            "RequestsPerSec; a whole-call failure has a status other than OK)",
            ["service", "rpc", "status"], registry=registry,
        )
        self.errors = Counter(
            "tidelog_request_errors", "Kafka error codes in answers, one per code found in the "
            "response, its topics and partitions (Kafka: ErrorsPerSec)",
            ["service", "rpc", "code", "error"], registry=registry,
        )
        self.latency = Histogram(
            "tidelog_request_duration_seconds", "Time from a request's arrival to its answer, "
            "waits included (Kafka: TotalTimeMs)",
            ["service", "rpc"], buckets=LATENCY_BUCKETS, registry=registry,
        )
        self.request_bytes = Counter(
            "tidelog_request_bytes", "Bytes of requests received; Produce's are the bytes "
            "produced (Kafka: BytesInPerSec)", ["service", "rpc"], registry=registry,
        )
        self.response_bytes = Counter(
            "tidelog_response_bytes", "Bytes of answers sent; Fetch's are the bytes fetched "
            "(Kafka: BytesOutPerSec)", ["service", "rpc"], registry=registry,
        )
        self.balancer_passes = Counter(
            "tidelog_balancer_passes", "Passes of continuous balancing on this node while it "
            "led the controller, each planning moves unless nothing changed since a plan "
            "that had none (Redpanda's balancer ticks)", registry=registry,
        )

    def export_state(
        self,
        node_id: int,
        replicas: ReplicaSet,
        routing: Routing,
        image: Callable[[], MetadataImage],
        groups: GroupCoordinatorDriver,
        loop: asyncio.AbstractEventLoop,
        *,
        topic_labels: bool = True,
    ) -> None:
        """Scrapes read the state of these parts, through `loop`, which owns them. (The
        request metrics exist first: the gRPC server, and its interceptor, come before the
        runtime, which needs the bound address.) `topic_labels` False (metrics.topic.labels)
        leaves out the families labelled by topic and partition, and sums group lag per
        group: whoever reaches the endpoint learns no topic name."""
        self.registry.register(_StateCollector(
            node_id, replicas, routing, image, groups, loop, topic_labels=topic_labels,
        ))

    def serve(
        self, host: str, port: int, *, token_file: str = "", certfile: str = "",
        keyfile: str = "",
    ) -> tuple[str, Callable[[], None]]:
        """Serves /metrics on a thread of its own: returns the bound "host:port" and the
        function that stops it. With `token_file`, over HTTPS (`certfile`, `keyfile`) and only
        to a scraper that sends ``Authorization: Bearer <the file's token>``; others get 401.
        Raises InvalidConfigError when the port is taken or a file does not load."""
        address = format_address(host, port)
        app = make_wsgi_app(self.registry)
        context: ssl.SSLContext | None = None
        if token_file:
            app = _bearer_only(app, _read_token(token_file))
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            try:
                context.load_cert_chain(certfile, keyfile)
            except (OSError, ssl.SSLError) as exc:
                raise InvalidConfigError(
                    f"metrics: cannot load ssl.certfile {certfile} and ssl.keyfile {keyfile}: "
                    f"{exc}"
                ) from None

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

            def handle_error(self, request: Any, client_address: Any) -> None:
                """A scraper that hangs up or fails the TLS handshake costs no traceback."""

        try:
            server = make_server(host, port, app, Server, handler_class=_QuietHandler)
        except OSError as exc:
            raise InvalidConfigError(f"cannot serve metrics on {address}: {exc.strerror}") from None
        if context is not None:
            # The handshake happens on the request's own thread (at its first read), so a
            # client that connects and says nothing holds up no other scrape.
            server.socket = context.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        thread.start()

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join()

        return format_address(host, server.server_port), stop


def _read_token(path: str) -> bytes:
    """The scrape credential in `path` (surrounding whitespace dropped); it must not be empty."""
    try:
        token = Path(path).read_bytes().strip()
    except OSError as exc:
        raise InvalidConfigError(
            f"metrics.auth.token.file {path}: cannot read it: {exc.strerror}"
        ) from None
    if not token:
        raise InvalidConfigError(f"metrics.auth.token.file {path} is empty")
    return token


def _bearer_only(app: WSGIApplication, token: bytes) -> WSGIApplication:
    """`app` for a request that carries ``Authorization: Bearer <token>`` (compared in
    constant time); 401 with a WWW-Authenticate challenge for any other."""
    expected = b"Bearer " + token

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Any:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [
            ("WWW-Authenticate", 'Bearer realm="tidelog metrics"'),
            ("Content-Type", "text/plain; charset=utf-8"),
        ])
        return [b"this endpoint needs the scrape token (metrics.auth.token.file)\n"]

    return guarded


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


# ---- request metrics ----------------------------------------------------------------------


class RequestMetrics(HandlerRewriter):
    """Counts, times and sizes every unary RPC, and counts the Kafka error codes its answer
    carries. Streaming RPCs (the node-to-node Raft stream, health Watch, reflection) live as
    long as a connection: a latency or a count per stream would say nothing, so they pass.

    Finding the codes costs a walk over the answer's topics and partitions (about 0.3 us of CPU
    per partition, half of what building the answer costs): for the methods named in
    `counted_by_handler` (full names, "/service/Method": the large per-partition answers of
    Produce, Fetch and ListOffsets) the handler reports each error as it sets it, through
    :meth:`count_error`, and nothing is walked."""

    def __init__(self, metrics: NodeMetrics, counted_by_handler: Collection[str] = ()) -> None:
        super().__init__()
        self._metrics = metrics
        self._counted_by_handler = frozenset(counted_by_handler)
        self._errors: dict[tuple[str, str, int], Any] = {}

    def count_error(self, service: str, rpc: str, code: int) -> None:
        """One Kafka error code found in an answer of `service`'s `rpc`."""
        key = (service, rpc, code)
        child = self._errors.get(key)
        if child is None:
            name = _KAFKA_NAMES.get(code, f"CODE_{code}")
            child = self._errors[key] = self._metrics.errors.labels(service, rpc, str(code), name)
        child.inc()

    def rewrite(self, method: str, handler: Any) -> Any:
        if handler.request_streaming or handler.response_streaming:
            return handler
        service, _, rpc = method.lstrip("/").rpartition("/")
        metrics = self._metrics
        latency = metrics.latency.labels(service, rpc)
        received = metrics.request_bytes.labels(service, rpc)
        sent = metrics.response_bytes.labels(service, rpc)
        by_status: dict[str, Any] = {}
        walks = method not in self._counted_by_handler
        count_error = self.count_error
        behavior = handler.unary_unary

        def count_status(status: str) -> None:
            child = by_status.get(status)
            if child is None:
                child = by_status[status] = metrics.requests.labels(service, rpc, status)
            child.inc()

        def count_codes(response: Any) -> None:
            walk = _error_walker(type(response))
            if walk is None:
                return
            found: list[int] = []
            walk(response, found)
            for code in found:
                count_error(service, rpc, code)

        async def measured(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            if isinstance(request, bytes):  # the method parses its own bytes
                received.inc(len(request))
            try:
                response = await behavior(request, context)
            except asyncio.CancelledError:
                count_status("CANCELLED")
                raise
            except BaseException:
                count_status(_status_name(context.code(), grpc.StatusCode.UNKNOWN))
                raise
            finally:
                latency.observe(time.perf_counter() - started)
            count_status(_status_name(context.code(), grpc.StatusCode.OK))
            if walks:
                count_codes(response)
            return response

        changes: dict[str, Any] = {"unary_unary": measured}
        deserialize = handler.request_deserializer
        if deserialize is not None:

            def counted_deserialize(raw: bytes) -> Any:
                received.inc(len(raw))
                return deserialize(raw)

            changes["request_deserializer"] = counted_deserialize
        serialize = handler.response_serializer
        if serialize is not None:

            def counted_serialize(message: Any) -> bytes:
                data: bytes = serialize(message)
                sent.inc(len(data))
                return data

            changes["response_serializer"] = counted_serialize
        return handler._replace(**changes)


def _status_name(code: Any, default: grpc.StatusCode) -> str:
    """The name of the status a handler set (``context.code()``: a StatusCode, or None when it
    set none)."""
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return str(default.name)


_Walker = Callable[[Any, list[int]], None]
_WALKERS: dict[type, _Walker | None] = {}


def _error_walker(message_type: Any) -> _Walker | None:
    """The function that collects the non-zero ``error_code`` fields of a message of this
    type and of its repeated sub-messages (topics, partitions), built once per type."""
    try:
        return _WALKERS[message_type]
    except KeyError:
        walker = _WALKERS[message_type] = _walker_of(message_type.DESCRIPTOR, 0)
        return walker


def _walker_of(descriptor: Any, depth: int) -> _Walker | None:
    has_code = "error_code" in descriptor.fields_by_name
    nested: list[tuple[str, _Walker]] = []
    if depth < _ERROR_CODE_DEPTH:
        for field in descriptor.fields:
            child = field.message_type
            if child is None or not field.is_repeated or child.GetOptions().map_entry:
                continue
            walker = _walker_of(child, depth + 1)
            if walker is not None:
                nested.append((field.name, walker))
    if not has_code and not nested:
        return None

    def walk(message: Any, found: list[int]) -> None:
        if has_code and (code := message.error_code):
            found.append(code)
        for name, walker in nested:
            for child in getattr(message, name):
                walker(child, found)

    return walk


# ---- state metrics, read at scrape time ----------------------------------------------------


@dataclass(frozen=True)
class _PartitionState:
    """One hosted replica as the loop saw it at the scrape."""

    topic: str
    partition: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int
    log_start_offset: int
    is_leader: bool
    leader_epoch: int
    under_replicated: bool
    offline: bool
    leaderships_won: int
    leaderships_lost: int
    replica: PartitionReplica


@dataclass(frozen=True)
class _Snapshot:
    partitions: list[_PartitionState]
    #: Whether this node leads the controller (Kafka's ActiveControllerCount).
    active_controller: bool
    #: Partitions with no leader in service (none named, a dead one, or this node's replica
    #: not leading), counted by the active controller only, as Kafka does.
    offline_partitions: int
    #: (group, topic, partition, committed offset, lag or None where the partition is not
    #: hosted here) for the groups this node coordinates.
    group_offsets: list[tuple[str, str, int, int, int | None]]
    #: Open transactions on the partitions this node leads that began longer than
    #: transaction.max.timeout.ms ago (`_late_transactions`).
    hanging_transactions: int
    #: Raft heartbeats and their answers this node sent (`ReplicaSet.heartbeat_items`), and
    #: batches proposed on the replicas it hosts now (`PartitionReplica.proposals`).
    heartbeat_items: int = 0
    proposals: int = 0


def _lag_per_group(
    group_offsets: list[tuple[str, str, int, int, int | None]],
) -> GaugeMetricFamily:
    """The lag of each group, summed over its partitions (those hosted here)."""
    total: dict[str, int] = {}
    for group, _, _, _, behind in group_offsets:
        total[group] = total.get(group, 0) + (behind or 0)
    family = GaugeMetricFamily(
        "tidelog_group_lag_sum", "A group's lag summed over the partitions its coordinator "
        "also hosts (metrics.topic.labels=false)", labels=["group"])
    for group, behind in total.items():
        family.add_metric([group], behind)
    return family


class _StateCollector(Collector):
    def __init__(
        self,
        node_id: int,
        replicas: ReplicaSet,
        routing: Routing,
        image: Callable[[], MetadataImage],
        groups: GroupCoordinatorDriver,
        loop: asyncio.AbstractEventLoop,
        *,
        topic_labels: bool = True,
    ) -> None:
        self.node_id = node_id
        self.topic_labels = topic_labels
        self.replicas = replicas
        self.routing = routing
        self.image = image
        self.groups = groups
        self.loop = loop
        self._stalled = False

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: the families depend on the partitions hosted at the scrape."""
        return ()

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        if snapshot is None:
            return
        labels = ["topic", "partition"]

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        hw = gauge("tidelog_partition_high_watermark", "High watermark of a hosted replica")
        lso = gauge("tidelog_partition_last_stable_offset", "Last stable offset of a hosted "
                    "replica")
        leo = gauge("tidelog_partition_log_end_offset", "Log end offset of a hosted replica "
                    "(Kafka: LogEndOffset)")
        start = gauge("tidelog_partition_log_start_offset", "Log start offset of a hosted "
                      "replica (Kafka: LogStartOffset)")
        size = gauge("tidelog_partition_size_bytes", "Bytes in a hosted replica's segments "
                     "(Kafka: Size)")
        leader = gauge("tidelog_partition_leader", "1 while this node leads the partition")
        epoch = gauge("tidelog_partition_leader_epoch", "The replica's current leader epoch "
                      "(its Raft term)")
        under = gauge("tidelog_partition_under_replicated", "1 while this node leads the "
                      "partition and some replica is out of sync (Kafka: UnderReplicated)")
        won = CounterMetricFamily(
            "tidelog_partition_leader_elections", "Leaderships this node's replica gained "
            "since the node started", labels=labels)
        lost = CounterMetricFamily(
            "tidelog_partition_leadership_losses", "Leaderships this node's replica lost "
            "since the node started", labels=labels)
        for p in snapshot.partitions:
            values = [p.topic, str(p.partition)]
            hw.add_metric(values, p.high_watermark)
            lso.add_metric(values, p.last_stable_offset)
            leo.add_metric(values, p.log_end_offset)
            start.add_metric(values, p.log_start_offset)
            size.add_metric(values, _size_of(p.replica))
            leader.add_metric(values, int(p.is_leader))
            epoch.add_metric(values, p.leader_epoch)
            under.add_metric(values, int(p.under_replicated))
            won.add_metric(values, p.leaderships_won)
            lost.add_metric(values, p.leaderships_lost)
        if self.topic_labels:
            yield from (hw, lso, leo, start, size, leader, epoch, under, won, lost)
        parts = snapshot.partitions
        yield GaugeMetricFamily(
            "tidelog_under_replicated_partitions", "Partitions this node leads with a replica "
            "out of sync (Kafka: UnderReplicatedPartitions)",
            value=sum(p.under_replicated for p in parts))
        yield GaugeMetricFamily(
            "tidelog_leader_partitions", "Partitions this node leads (Kafka: LeaderCount)",
            value=sum(p.is_leader for p in parts))
        yield GaugeMetricFamily(
            "tidelog_partitions", "Replicas hosted on this node (Kafka: PartitionCount)",
            value=len(parts))
        yield CounterMetricFamily(
            "tidelog_raft_heartbeat_items", "Raft heartbeats and heartbeat answers this node "
            "sent since it started (node liveness's envelopes not counted)",
            value=snapshot.heartbeat_items)
        yield CounterMetricFamily(
            "tidelog_raft_proposals", "Batches proposed on the replicas this node hosts, "
            "since each was opened", value=snapshot.proposals)
        yield GaugeMetricFamily(
            "tidelog_offline_replicas", "Hosted replicas whose log is offline (the disk "
            "refused a write)", value=sum(p.offline for p in parts))
        yield GaugeMetricFamily(
            "tidelog_active_controller", "1 on the node that leads the controller "
            "(Kafka: ActiveControllerCount)", value=int(snapshot.active_controller))
        yield GaugeMetricFamily(
            "tidelog_offline_partitions", "Partitions with no leader, or whose leader is a "
            "node the active controller has not heard from for an election timeout, as the "
            "active controller sees them; 0 on other nodes (Kafka: OfflinePartitionsCount)",
            value=snapshot.offline_partitions)
        yield GaugeMetricFamily(
            "tidelog_hanging_transactions", "Transactions open on partitions this node leads "
            "that began longer than transaction.max.timeout.ms ago: no coordinator lets one "
            "run so long, so each holds its partition's last stable offset until `tidelog "
            "transactions abort` ends it (Kafka: PartitionsWithLateTransactionsCount, which "
            "counts their partitions)", value=snapshot.hanging_transactions)
        group_labels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily(
            "tidelog_group_committed_offset", "A group's committed offset, on the node that "
            "coordinates the group", labels=group_labels)
        lag = GaugeMetricFamily(
            "tidelog_group_lag", "High watermark minus committed offset, where the "
            "coordinator also hosts the partition (its replica's high watermark)",
            labels=group_labels)
        if not self.topic_labels:
            yield _lag_per_group(snapshot.group_offsets)
            return
        for group, topic, partition, offset, behind in snapshot.group_offsets:
            values = [group, topic, str(partition)]
            committed.add_metric(values, offset)
            if behind is not None:
                lag.add_metric(values, behind)
        yield committed
        yield lag

    def _snapshot(self) -> _Snapshot | None:
        """The numbers, read on the loop; None when the loop does not answer in time."""
        loop = self.loop
        if loop.is_closed():
            return None
        future: concurrent.futures.Future[_Snapshot] = concurrent.futures.Future()

        def fill() -> None:
            try:
                future.set_result(self._read())
            except BaseException as exc:
                future.set_exception(exc)

        try:
            loop.call_soon_threadsafe(fill)
            snapshot = future.result(timeout=_SNAPSHOT_TIMEOUT_S)
        except RuntimeError:  # the loop closed meanwhile: the node is stopping
            return None
        except concurrent.futures.TimeoutError:
            if not self._stalled:
                log.warning("node %d: metrics scrape without partition state: the event loop "
                            "did not answer in %.0fs", self.node_id, _SNAPSHOT_TIMEOUT_S)
            self._stalled = True
            return None
        self._stalled = False
        return snapshot

    def _read(self) -> _Snapshot:
        """On the loop: plain numbers only, no I/O but the first read of an open
        transaction's start (`_late_transactions`)."""
        lag_max_ms = self.replicas.config.replica_lag_max_ms
        hosted = self.replicas.partitions
        partitions = []
        for tp, replica in list(hosted.items()):
            leads = replica.is_leader
            partitions.append(_PartitionState(
                tp.topic, tp.partition,
                replica.high_watermark, replica.last_stable_offset,
                replica.log.log_end_offset, replica.log.log_start_offset,
                leads, replica.leader_epoch,
                leads and len(replica.in_sync_replicas(lag_max_ms)) < len(replica.replicas),
                replica.offline, replica.leaderships_won, replica.leaderships_lost, replica,
            ))
        controller = hosted.get(METADATA_TP)
        active = controller is not None and controller.is_leader
        offline = 0
        if active:
            for name, topic in self.image().topics.items():
                offline += sum(
                    not has_leader(TopicPartition(name, p), self.routing, self.replicas)
                    for p in range(topic.partition_count)
                )
        group_offsets: list[tuple[str, str, int, int, int | None]] = []
        for group, tp, offset in self.groups.committed_offsets():
            hosting = hosted.get(tp)
            behind = None if hosting is None else max(hosting.high_watermark - offset, 0)
            group_offsets.append((group, tp.topic, tp.partition, offset, behind))
        hanging = _late_transactions(
            list(hosted.values()), self.replicas.config.transaction_max_timeout_ms
        )
        return _Snapshot(partitions, active, offline, group_offsets, hanging,
                         self.replicas.heartbeat_items,
                         sum(replica.proposals for replica in hosted.values()))


def _late_transactions(replicas: Iterable[PartitionReplica], max_timeout_ms: int) -> int:
    """On the loop: how many transactions open on the partitions these replicas lead began
    more than `max_timeout_ms` ago, by the first timestamp of their first batch, as
    DescribeProducers reports it. Each start is read from the log once per transaction
    (`PartitionReplica.open_transactions` keeps it); one not readable yet, or a leader still
    settling, counts none."""
    started_before = wall_clock_ms() - max_timeout_ms
    late = 0
    for replica in replicas:
        if not replica.is_leader:
            continue
        try:
            opened = replica.open_transactions()
        except errors.TidelogError:
            continue
        late += sum(0 <= start < started_before for _, start in opened.values())
    return late


def has_leader(tp: TopicPartition, routing: Routing, replicas: ReplicaSet) -> bool:
    """Whether `tp` has a leader in service, as this node sees it: a leader is named, and
    it is either this node with its replica leading, or a peer this node hears from.

    Announcements are only ever replaced by newer ones, so the leader they name outlives
    its node (a replication-factor-1 partition whose node was killed stays "led" by it
    for good): a leader is believed only while its node is alive. Alive is the node-level
    liveness of `ReplicaSet` (`peer_live`: an envelope heard from the peer within an
    election timeout, and every node sends each peer one every heartbeat interval), which
    costs nothing per partition and is what the Raft replicas here already act on. The
    alternatives see less: the controller group's check-quorum bookkeeping stops while
    the group is quiesced (its idle state) and lives in the core of a partition that
    only leads here; a transport stream to a peer that was SIGSTOPped or cut off stays
    open until gRPC's keepalive gives up, several election timeouts later."""
    leader = routing.leader_of(tp)[0]
    if leader < 0:
        return False
    if leader == replicas.node_id:
        replica = replicas.partitions.get(tp)
        return replica is not None and replica.is_leader
    return replicas.peer_live(leader)


def _size_of(replica: PartitionReplica) -> int:
    """On the scrape's thread: the log's own lock makes its size safe to read from any
    thread (a log closed meanwhile counts what it last held)."""
    return replica.log.size
