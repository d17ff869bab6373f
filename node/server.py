"""The node process: a grpc.aio server around a :class:`~node.runtime.NodeRuntime`.

The shell owns what every node needs whatever the runtime does: the data-dir lock, binding,
health (NOT_SERVING until the logs are loaded), reflection (v1 and v1alpha), refusing request
bodies that do not parse, publishing the bound address, signals, and dying with its launcher.
It also wires the runtime's parts to the gRPC services, so the client API and the runtime never
import each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import inspect
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from tidelog.errors import InvalidConfigError
from tidelog.event_loops import loop_name
from tidelog.node.config import NodeConfig, format_peers
from tidelog.node.edge.interceptors import HandlerRewriter, behavior_kind
from tidelog.node.edge.malformed import reject_malformed
from tidelog.node.files import open_private, prepare_data_dir, write_atomically
from tidelog.v1 import tidelog_pb2

#: Holds an exclusive flock while a node runs, so two nodes never share a data dir and a
#: launcher can tell a running node from a stale pid.
LOCK_FILE = "node.lock"
#: The "host:port" the node actually bound, written once it listens (for launchers using port
#: 0): the client listener's on the first line, the node-to-node listener's on the second, the
#: Kafka listener's on the third (empty without one).
ADDR_FILE = "node.addr"
#: "host:port" of the node's metrics endpoint, written once it serves (metrics.port >= 0).
METRICS_ADDR_FILE = "metrics.addr"
TIDELOG_SERVICE = tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"].full_name

_PARENT_POLL_S = 0.2
#: After the launcher is gone, how long a clean stop may take before the watchdog thread exits
#: the process regardless (the event loop may be the thing that is stuck).
_ORPHAN_DEADLINE_S = 5.0
_SERVER_GRACE_S = 1.0
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

log = logging.getLogger("tidelog.node")


async def serve(config: NodeConfig, *, exit_with_parent: int | None = None) -> int:
    """Runs one node until SIGTERM/SIGINT (graceful) or until ``exit_with_parent`` is no longer
    this process's parent (immediate). Returns the process exit code."""
    # The runtime is heavy; config errors come first.
    from tidelog.node import logs
    from tidelog.node.api.data_plane import PARTITION_ERROR_RPCS
    from tidelog.node.api.forwarding import answer_forwarded
    from tidelog.node.api.groups import COUNTED_RPCS
    from tidelog.node.api.servicer import TidelogServicer
    from tidelog.node.cluster.registration import join_cluster, load_identity
    from tidelog.node.coordinators.txn_verification import add_verification_service
    from tidelog.node.edge.limits import CLIENT_LIMITS, INTERNAL_LIMITS, InFlight, RequestLimits
    from tidelog.node.edge.security import NodesOnly, server_credentials
    from tidelog.node.kafka.apis import KafkaParts, kafka_registry
    from tidelog.node.kafka.listener import KafkaListener
    from tidelog.node.kafka.sasl import scram_lookup
    from tidelog.node.metrics import NodeMetrics, RequestMetrics
    from tidelog.node.replicas.transport import SERVER_OPTIONS, add_raft_transport
    from tidelog.node.runtime import NodeRuntime
    from tidelog.storage.record_format import prepare_record_format
    from tidelog.v1 import tidelog_pb2_grpc

    prepare_data_dir(config.data_dir)
    with _hold_data_dir(config.data_dir):
        # Data of an earlier record format is converted before anything reads it.
        prepare_record_format(config.data_dir)
        metrics = NodeMetrics()
        # Outermost first: a request refused as malformed is counted (and timed) too.
        request_metrics = RequestMetrics(
            metrics, counted_by_handler={
                f"/{TIDELOG_SERVICE}/{rpc}"
                for rpc in (*PARTITION_ERROR_RPCS.values(), *COUNTED_RPCS)
            },
        )
        # Two servers, since a gRPC server serves each service on every port it has: the
        # client listener never serves the node-to-node service, nor the other way round.
        # Each has interceptors of its own: they cache handlers by method name, and a cache
        # shared by both would serve a method on the other port once one port had served it.
        # Outermost, the size and in-flight limits (node/edge/limits.py): nothing is received before
        # they allow it. Each listener has its own budget, so clients never hold up the
        # node-to-node traffic (nor a forward between two nodes wait for the other's clients).
        server = grpc.aio.server(
            options=SERVER_OPTIONS, interceptors=[
                RequestLimits(InFlight(config.queued_max_request_bytes), CLIENT_LIMITS),
                request_metrics, RejectMalformedRequests(),
            ],
        )
        # On an SSL node-to-node listener only node principals are answered, checked first of
        # all, before a request takes any of the listener's budget or is read (a PLAINTEXT one
        # has no identities to check).
        nodes_only = (
            [NodesOnly(config.node_principal_set)]
            if config.security_inter_broker_protocol == "SSL" else []
        )
        internal_server = grpc.aio.server(
            options=SERVER_OPTIONS,
            interceptors=[
                *nodes_only,
                RequestLimits(InFlight(config.queued_max_request_bytes), INTERNAL_LIMITS),
                RequestMetrics(metrics), RejectMalformedRequests(),
            ],
        )
        port = _add_port(
            server, config.listen, "listen", server_credentials(config, internal=False)
        )
        internal_port = _add_port(
            internal_server, config.internal_listen, "internal.listen",
            server_credentials(config, internal=True),
        )
        config = config.bound(port, internal_port)
        # The Kafka listener binds now, so that the node registers its real address.
        kafka = KafkaListener(config) if config.kafka_listen else None
        if kafka is not None:
            config = config.kafka_bound(await kafka.bind())
        identity = load_identity(config.data_dir, config.node_id)
        epoch = -1
        if config.join:
            config, identity, epoch = await join_cluster(config, identity)
            logs.configure(config.node_id, config.log_format)
        health_servicer = HealthServicer()
        for service in (health.OVERALL_HEALTH, TIDELOG_SERVICE):
            await health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        _enable_reflection([TIDELOG_SERVICE, health.SERVICE_NAME], server)
        runtime = NodeRuntime(config, identity, epoch)
        runtime.balancer.on_pass = metrics.balancer_passes.inc
        servicer = TidelogServicer(
            config, runtime.replicas, runtime.routing, runtime.controller,
            runtime.offsets_topic, runtime.groups, runtime.txn_topic, runtime.txns,
            partial(request_metrics.count_error, TIDELOG_SERVICE),
            consumer_groups=runtime.consumer_groups,
            txn_verification=runtime.txn_verification,
        )
        tidelog_pb2_grpc.add_TidelogServicer_to_server(servicer, server)
        close_inbound = add_raft_transport(
            internal_server, runtime.on_envelope, runtime.controller.fetch_metadata,
            runtime.txn_markers.handle, runtime.controller.reassignment_done,
            runtime.registry.register, runtime.registry.heartbeat,
            partial(answer_forwarded, servicer),
        )
        add_verification_service(internal_server, runtime.txn_verification.handle)
        loop = asyncio.get_running_loop()
        metrics.export_state(
            config.node_id, runtime.replicas, runtime.routing, lambda: runtime.controller.image,
            runtime.groups, loop, topic_labels=config.metrics_topic_labels,
        )

        stopping = asyncio.Event()
        graceful = True

        def request_stop(is_graceful: bool) -> None:
            nonlocal graceful
            graceful = graceful and is_graceful
            stopping.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, request_stop, True)
        if exit_with_parent is not None:
            _start_parent_watchdog(exit_with_parent, lambda: request_stop(False), loop)

        metrics_path = config.data_dir / METRICS_ADDR_FILE
        metrics_path.unlink(missing_ok=True)
        stop_metrics: Callable[[], None] | None = None
        metrics_address = ""
        if config.metrics_port >= 0:
            metrics_address, stop_metrics = metrics.serve(
                config.metrics_host, config.metrics_port,
                token_file=config.metrics_auth_token_file, certfile=config.ssl_certfile,
                keyfile=config.ssl_keyfile,
            )
            write_atomically(metrics_path, metrics_address + "\n")
        await internal_server.start()
        await server.start()
        if kafka is not None:
            await kafka.serve(kafka_registry(
                KafkaParts(config, servicer, runtime.controller, runtime.routing)
            ), scram_lookup(runtime.controller))
        addr_path = config.data_dir / ADDR_FILE
        write_atomically(
            addr_path, f"{config.listen}\n{config.internal_listen}\n{config.kafka_listen}\n"
        )
        log.info(
            "node %d listening on %s (clients, %s) and %s (nodes, %s)%s%s; peers %s",
            config.node_id, config.listen, config.security_protocol, config.internal_listen,
            config.security_inter_broker_protocol,
            f"; Kafka protocol on {config.kafka_listen}" if kafka is not None else "",
            f"; metrics on {'https' if config.metrics_auth_token_file else 'http'}://"
            f"{metrics_address}/metrics" if metrics_address else "",
            format_peers(config.peers),
            extra={"event": "node_started", "listen": config.listen,
                   "internal_listen": config.internal_listen, "kafka_listen": config.kafka_listen,
                   "advertised": config.advertised_address, "metrics": metrics_address,
                   "peers": {str(n): a for n, a in config.peers.items()}},
        )
        for exposure in config.plaintext_exposures():
            log.warning("node %d: %s; set up TLS (docs/operations/listeners-and-tls.md)",
                        config.node_id, exposure, extra={"event": "plaintext_listener"})
        try:
            await runtime.start()
            for service in (health.OVERALL_HEALTH, TIDELOG_SERVICE):
                await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
            log.info("node %d serving on the %s event loop", config.node_id, loop_name(loop),
                     extra={"event": "node_serving", "event_loop": loop_name(loop)})
            await stopping.wait()
            log.info("node %d stopping (%s)", config.node_id, "graceful" if graceful else "now",
                     extra={"event": "node_stopping", "graceful": graceful})
            await health_servicer.enter_graceful_shutdown()
            await runtime.stop(graceful=graceful)
        finally:
            close_inbound()
            if kafka is not None:
                await kafka.stop()
            await server.stop(_SERVER_GRACE_S if graceful else 0)
            await internal_server.stop(_SERVER_GRACE_S if graceful else 0)
            addr_path.unlink(missing_ok=True)
            if stop_metrics is not None:
                await loop.run_in_executor(None, stop_metrics)
                metrics_path.unlink(missing_ok=True)
    log.info("node %d stopped", config.node_id, extra={"event": "node_stopped"})
    return 0


def _add_port(
    server: grpc.aio.Server, address: str, key: str, credentials: grpc.ServerCredentials | None
) -> int:
    try:
        if credentials is None:
            return int(server.add_insecure_port(address))
        return int(server.add_secure_port(address, credentials))
    except RuntimeError:
        raise InvalidConfigError(
            f"{key}: cannot listen on {address}: the address is in use or unavailable"
        ) from None


class RejectMalformedRequests(HandlerRewriter):
    """Answers INVALID_ARGUMENT to a request body that does not parse, for every method that
    has grpc parse its requests, with the node's rate-limited log line (node.malformed).

    Left to grpc, a parse failure is an "unexpected" servicer exception: status UNKNOWN and a
    traceback in the log per request. So the handler each method had gets its parsing moved
    into the method: the bytes are parsed there, and a failure aborts the call."""

    def rewrite(self, method: str, handler: Any) -> Any:
        deserialize = handler.request_deserializer
        if deserialize is None:  # the method takes bytes and parses them itself
            return handler

        async def parse(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                return deserialize(raw)
            except Exception as exc:  # whatever the parser raises, the bytes are at fault
                await reject_malformed(context, method, exc)

        async def parse_each(
            raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            async for raw in raws:
                yield await parse(raw, context)

        async def request_of(arg: Any, context: grpc.aio.ServicerContext) -> Any:
            if handler.request_streaming:
                return parse_each(arg, context)
            return await parse(arg, context)

        kind = behavior_kind(handler)
        behavior = getattr(handler, kind)
        wrapped: Callable[..., Any]
        if inspect.isasyncgenfunction(behavior):

            async def wrapped(arg: Any, context: grpc.aio.ServicerContext) -> Any:
                async for response in behavior(await request_of(arg, context), context):
                    yield response

        else:

            async def wrapped(arg: Any, context: grpc.aio.ServicerContext) -> Any:
                return await behavior(await request_of(arg, context), context)

        return handler._replace(request_deserializer=None, **{kind: wrapped})


class HealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
    """The library's health servicer (Check, Watch, the statuses the node sets), plus List.

    grpcio-health-checking's asyncio servicer lacks List, which then fell to the generated base
    class: NotImplementedError, and a traceback in the node's log for every call anyone made
    (a way to flood it). List answers as the health protocol says instead."""

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        """Every service the servicer knows, with its status as Check would answer it. The
        statuses are set on this same event loop, so the answer is a consistent snapshot; the
        node knows two services, far below any limit the protocol lets a server set."""
        return health_pb2.HealthListResponse(statuses={
            service: health_pb2.HealthCheckResponse(status=status)
            for service, status in self._server_status.items()
        })


def _enable_reflection(services: list[str], server: grpc.aio.Server) -> None:
    """Serves server reflection as grpc.reflection.v1 and v1alpha (contract §5): current tools
    (grpcurl, Postman) ask for v1 first, older ones for v1alpha. grpcio-reflection ships
    v1alpha only; v1 is the same service under another package name with the same messages
    field for field, so one servicer answers both, and v1's descriptor, derived from v1alpha's,
    lets a client look v1 itself up too."""
    v1_service = _register_reflection_v1()
    servicer = reflection.aio.ReflectionServicer(
        [*services, reflection.SERVICE_NAME, v1_service]
    )
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(v1_service, {"ServerReflectionInfo": method})]
    )


def _register_reflection_v1() -> str:
    """Adds grpc/reflection/v1/reflection.proto, made from v1alpha's descriptor by renaming
    the package, to the default descriptor pool (once); returns the v1 service's full name."""
    old, new = reflection_pb2.DESCRIPTOR.package, "grpc.reflection.v1"
    name = "grpc/reflection/v1/reflection.proto"
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(name)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto()
        reflection_pb2.DESCRIPTOR.CopyToProto(proto)
        proto.name, proto.package = name, new
        proto.ClearField("options")
        for message in proto.message_type:
            for field in message.field:
                if field.HasField("type_name"):  # scalars have none (and must keep it unset)
                    field.type_name = field.type_name.replace(f".{old}.", f".{new}.")
        for service in proto.service:
            for rpc in service.method:
                rpc.input_type = rpc.input_type.replace(f".{old}.", f".{new}.")
                rpc.output_type = rpc.output_type.replace(f".{old}.", f".{new}.")
        pool.AddSerializedFile(proto.SerializeToString())
    return f"{new}.ServerReflection"


def data_dir_in_use(data_dir: Path) -> bool:
    """Whether a live node holds ``data_dir`` (the lock dies with its process, stale pids don't)."""
    try:
        handle = open_private(data_dir / LOCK_FILE, "a")
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def data_dir_holder(data_dir: Path) -> int | None:
    """The pid the node holding ``data_dir``'s lock wrote into the lock file; None when the
    file names none. Only meaningful while `data_dir_in_use`: a file a dead node left names
    a pid the system may have given to another process since."""
    try:
        text = (data_dir / LOCK_FILE).read_text()
    except OSError:
        return None
    return int(text) if text.strip().isdigit() else None


@contextlib.contextmanager
def _hold_data_dir(data_dir: Path) -> Iterator[None]:
    with open_private(data_dir / LOCK_FILE, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InvalidConfigError(
                f"data dir {data_dir} is in use by another running node"
            ) from None
        # Whoever stops the node finds it by its lock (`data_dir_holder`), however it was
        # started: by a launcher that recorded its pid, or by hand.
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield


def _start_parent_watchdog(
    parent_pid: int, stop: Callable[[], None], loop: asyncio.AbstractEventLoop
) -> None:
    """Stops the node once ``parent_pid`` is no longer its parent, so a launcher killed with
    SIGKILL (which runs no cleanup) leaves no orphan. A thread rather than a task, so a wedged
    event loop cannot keep an orphan alive: it exits the process after a deadline."""

    if sys.platform == "linux":
        # The kernel's own guarantee: SIGKILL when the launcher dies, even while this process is
        # SIGSTOPped (LocalCluster.pause) and the watchdog thread cannot run. It tracks the
        # launcher *thread* that spawned us, which for launchers is their main thread.
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        # A dead parent re-parents us at once (even while it is an unreaped zombie), which a
        # liveness check of its pid would miss.
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        log.warning("launcher %d is gone; stopping", parent_pid)
        loop.call_soon_threadsafe(stop)
        time.sleep(_ORPHAN_DEADLINE_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
