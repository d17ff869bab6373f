"""The client's one transport: an event loop of its own, in one thread, running grpc.aio
channels (one per node address), and the one translation of gRPC failures into Tidelog errors.

Everything a client sends goes through ``Transport.call``: the synchronous API runs its
coroutines on the loop and waits (``Transport.run``), and the producer's sender lives on the
loop as a task. One loop rather than synchronous channels: a synchronous channel's ``future()``
hands each completion to a polling thread that gRPC starts afresh whenever no call is in flight,
and a sender under load makes it do so many times a second; on the loop a completion is a
callback, and the calls of a round to several leaders are in flight together for free.

``CallObserver`` is the supported hook for seeing the traffic (tracing, metrics): a client
built with observers tells each of them every request it sends and every answer it gets, with
the node it went to, on the loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ssl
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from tidelog.errors import (
    ConfigurationError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeUnavailableError,
    SslAuthenticationError,
    TidelogError,
    UnknownServerError,
    UnsupportedVersionError,
)
from tidelog.event_loops import client_loop_factory
from tidelog.metadata import ClusterMetadata
from tidelog.records import MAX_MESSAGE_BYTES
from tidelog.v1 import tidelog_pb2, tidelog_pb2_grpc

T = TypeVar("T")

#: How often the client pings each node it has a connection to, and how long a ping may go
#: unanswered: a stalled node is given up within their sum (a loaded node answers a ping from
#: gRPC's own threads, without waiting for its Python code).
KEEPALIVE_TIME_MS = 1000
KEEPALIVE_TIMEOUT_MS = 1000
#: The least time a connection attempt gets: as long as a stalled node is given anyway.
CONNECT_TIMEOUT_MS = KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS
CHANNEL_OPTIONS = [
    # The nodes' own limit: a Produce may carry, and a Fetch answer return, one batch of up to
    # records.MAX_BATCH_BYTES (a Fetch holds at most 64 MiB otherwise).
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # gRPC's default reconnect backoff grows to 2 minutes; a restarted node must be found again
    # within the retry budget of one call.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # Not a backoff: gRPC gives each connection attempt (TCP, the TLS handshake, the node's
    # first SETTINGS) at least this long before it abandons it and starts over. At 100 ms, a
    # node slower than the backoff to set a connection up (TLS handshakes between processes on
    # a loaded machine) was never reached; a refused connection still fails at once.
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
    # A node that stalls without failing (SIGSTOP, a hung host) keeps its connection open, so
    # a call to it would end only at its deadline (a Produce's is request_timeout_ms plus
    # slack). HTTP/2 pings find it out: unanswered for KEEPALIVE_TIMEOUT_MS, the connection is
    # closed and every call on it fails UNAVAILABLE, which makes the node suspect. The nodes
    # accept pings this often (node.transport.SERVER_OPTIONS); a ping costs a few bytes.
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # What gRPC 1.85 actually waits for a ping's answer (keepalive_timeout_ms alone left an
    # unanswered ping pending for the call's whole deadline).
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
#: How long the diagnosis of a connection that failed may take (it runs only for an address
#: that never answered, so a node that is merely down or paused costs it once).
_PROBE_TIMEOUT_S = 1.0
_TRANSPORT_FAILURES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}


#: The TLS settings under the names of properties files (the node's own names for them, as
#: ``--command-config`` files and the Spark data source's ``tidelog.``-prefixed options spell
#: them) -> Security's fields.
SECURITY_SETTINGS = {
    "security.protocol": "security_protocol",
    "ssl.cafile": "ssl_cafile",
    "ssl.certfile": "ssl_certfile",
    "ssl.keyfile": "ssl_keyfile",
}


@dataclass(frozen=True)
class Security:
    """How the client talks to the nodes' client listeners: kafka-python's
    ``security_protocol`` ("PLAINTEXT" or "SSL") and, for SSL, ``ssl_cafile`` (the CA that
    signed the nodes' certificates; the system's CAs when None) and, for listeners that require
    client certificates, ``ssl_certfile`` and ``ssl_keyfile`` (PEM files)."""

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.security_protocol, str):
            raise ConfigurationError(
                f"security_protocol must be 'PLAINTEXT' or 'SSL', got {self.security_protocol!r}"
            )
        protocol = self.security_protocol.upper()
        object.__setattr__(self, "security_protocol", protocol)
        if protocol not in ("PLAINTEXT", "SSL"):
            raise ConfigurationError(
                f"security_protocol must be 'PLAINTEXT' or 'SSL', got {self.security_protocol!r}"
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ConfigurationError("ssl_certfile and ssl_keyfile go together")
        if protocol == "PLAINTEXT" and (self.ssl_cafile or self.ssl_certfile):
            raise ConfigurationError("ssl_* files need security_protocol='SSL'")

    @property
    def tls(self) -> bool:
        return self.security_protocol == "SSL"

    def credentials(self) -> grpc.ChannelCredentials | None:
        """None for PLAINTEXT; the files are read (and checked) once per client."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=_read_pem(self.ssl_cafile, "ssl_cafile"),
            private_key=_read_pem(self.ssl_keyfile, "ssl_keyfile"),
            certificate_chain=_read_pem(self.ssl_certfile, "ssl_certfile"),
        )

    def aio_channel(self, address: str, options: Sequence[tuple[str, Any]]) -> grpc.aio.Channel:
        credentials = self.credentials()
        if credentials is None:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(address, credentials, options=options)

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A blocking channel (the CLI's and the test harness's direct calls)."""
        credentials = self.credentials()
        if credentials is None:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(address, credentials, options=options)

    async def diagnose(self, address: str) -> str | None:
        """Why connecting to ``address`` fails, when TLS is the reason: a listener that speaks
        TLS to a PLAINTEXT client (or the reverse), a node certificate ssl_cafile does not
        trust, or a node that hangs up right after the handshake (it refused this client's
        certificate, or that there was none). None when the connection is not the problem.

        gRPC reports most of these as "Socket closed", which also means a node going down, so
        a handshake of our own tells them apart."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.set_alpn_protocols(["h2"])
        if self.tls:
            if self.ssl_cafile:
                context.load_verify_locations(self.ssl_cafile)
            else:
                context.load_default_certs()
            if self.ssl_certfile and self.ssl_keyfile:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port), ssl=context, server_hostname=host),
                _PROBE_TIMEOUT_S,
            )
        except ssl.SSLCertVerificationError as exc:
            return (f"the node's certificate is not trusted by ssl_cafile "
                    f"({self.ssl_cafile or 'the system CAs'}): {exc.verify_message}")
        except ssl.SSLError as exc:
            if not self.tls:
                return None
            if exc.reason == "WRONG_VERSION_NUMBER":
                return ("the node's listener speaks PLAINTEXT, not TLS: connect with "
                        "security_protocol='PLAINTEXT'")
            return f"the TLS handshake failed: {exc.reason or exc}"
        except (OSError, TimeoutError, ValueError):
            return None
        try:
            if not self.tls:
                return ("the node's listener requires TLS (it completed a TLS handshake) and "
                        "this client speaks PLAINTEXT: connect with security_protocol='SSL' and "
                        "ssl_cafile (plus ssl_certfile and ssl_keyfile if the listener requires "
                        "client certificates)")
            try:
                # A gRPC server speaks first (its SETTINGS); one that refused our certificate
                # hangs up instead.
                first = await asyncio.wait_for(reader.read(1), _PROBE_TIMEOUT_S)
            except (OSError, TimeoutError):
                return None
            if first:
                return None
            closed = "the node closed the connection right after the TLS handshake"
            if not self.ssl_certfile:
                return (f"{closed}: its listener requires a client certificate (set "
                        "ssl_certfile and ssl_keyfile)")
            return (f"{closed}: it refused the certificate {self.ssl_certfile} (its listener "
                    "requires one signed by a CA it trusts)")
        finally:
            # No TLS close_notify exchange: a gRPC server does not answer it, and waiting for
            # it (asyncio's SSL shutdown timeout is 30 s) stalled the caller, a peer link too.
            writer.transport.abort()


@functools.lru_cache(maxsize=16)
def _read_pem_cached(path: str) -> bytes:
    return Path(path).read_bytes()


def _read_pem(path: str | None, name: str) -> bytes | None:
    if path is None:
        return None
    try:
        return _read_pem_cached(path)
    except OSError as exc:
        raise ConfigurationError(f"{name}: cannot read {path}: {exc.strerror}") from None


class CallObserver:
    """Sees a client's traffic (pass instances in ``Client(observers=...)``). Both methods run
    on the client's event loop thread, in the order of the calls, so they must be quick and
    must not call the client's blocking API. ``node_id`` is None for a bootstrap address not
    yet known by id. A request the producer sends is the serialized ProduceRequest (bytes,
    method "ProduceSerialized"); every other request and answer is the tidelog.v1 message."""

    def on_request(self, node_id: int | None, method: str, request: Any) -> None:
        """A request is about to leave."""

    def on_response(self, node_id: int | None, method: str, request: Any, response: Any) -> None:
        """A request was answered (not called for a request that failed in transport)."""


class _NodeStub(tidelog_pb2_grpc.TidelogStub):
    """The generated stub, plus Produce taking a request already serialized by
    `wire.serialized_produce_request`, so the producer's batches are copied once on their way
    into gRPC."""

    _PRODUCE = "/{}/Produce".format(tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"].full_name)

    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(channel)  # type: ignore[no-untyped-call]  # generated code
        self.ProduceSerialized = channel.unary_unary(
            self._PRODUCE, response_deserializer=tidelog_pb2.ProduceResponse.FromString
        )


class Transport:
    """The loop thread (started on first use, so an unpickled or idle client costs none) and
    the channels on it; safe to use from any thread."""

    def __init__(
        self, metadata: ClusterMetadata, observers: Sequence[CallObserver] = (),
        security: Security | None = None, client_id: str = "",
    ) -> None:
        self._metadata = metadata
        #: The channels' options: the client_id, if any, goes to the nodes as the user agent.
        self._options = [*CHANNEL_OPTIONS, *([("grpc.primary_user_agent", client_id)]
                                             if client_id else [])]
        self._observers = tuple(observers)
        self._security = security or Security()
        #: Addresses that answered once: a later failure there is the node, not the setup, so
        #: only a failure at an address that never answered gets a TLS diagnosis.
        self._answered: set[str] = set()
        #: Nodes whose last call failed in transport (down, or stalled): a metadata refresh
        #: does not wait for them while others answer. A node's next answer clears it.
        self._suspects: set[int] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stubs: dict[str, _NodeStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The client's event loop, running in its thread."""
        loop = self._loop
        if loop is not None:
            return loop
        with self._lock:
            if self._closed:
                raise ConfigurationError("the client is closed")
            if self._loop is None:
                loop = client_loop_factory()()
                self._thread = threading.Thread(
                    target=loop.run_forever, name="tidelog-client", daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    @property
    def connection_count(self) -> int:
        """How many node addresses this transport has a channel to."""
        return len(self._stubs)

    def suspect(self, node_id: int) -> bool:
        """Whether the node's last call failed in transport (it has not answered since)."""
        return node_id in self._suspects

    def on_loop_thread(self) -> bool:
        return self._thread is not None and threading.get_ident() == self._thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the loop; the returned future completes with it."""
        try:
            loop = self.loop
        except ConfigurationError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for its outcome: how the synchronous API calls.
        Every coroutine of the client bounds its own time, so this waits without a timeout."""
        if self.on_loop_thread():
            coro.close()
            raise ConfigurationError(
                "a blocking client call from the client's own event loop thread (a send() "
                "callback?) would wait for itself; call it from another thread"
            )
        return self.submit(coro).result()

    async def call(
        self, node_id: int | None, method: str, request: Any, timeout_s: float,
        address: str | None = None,
    ) -> Any:
        """One RPC to a node by id (its address from metadata) or to `address`; a failure
        comes out as a Tidelog error, and a transport failure also makes the node suspect."""
        if address is None:
            address = self._metadata.address_of(node_id) if node_id is not None else None
            if address is None:
                raise LeaderNotAvailableError(f"node {node_id} is not in the cluster metadata")
        stub = self._stubs.get(address)
        if stub is None:
            if self._closed:
                raise ConfigurationError("the client is closed")
            channel = self._security.aio_channel(address, self._options)
            self._channels.append(channel)
            stub = self._stubs[address] = _NodeStub(channel)
        for observer in self._observers:
            observer.on_request(node_id, method, request)
        try:
            response = await getattr(stub, method)(request, timeout=max(timeout_s, 0.001))
        except grpc.RpcError as exc:
            if address not in self._answered and exc.code() is grpc.StatusCode.UNAVAILABLE:
                reason = await self._security.diagnose(address)
                if reason is not None:
                    where = f"node {node_id} ({address})" if node_id is not None else address
                    raise SslAuthenticationError(f"{where}: {reason}") from None
            raise self._translate(exc, node_id, address) from None
        self._answered.add(address)
        if node_id is not None:
            self._suspects.discard(node_id)
        for observer in self._observers:
            observer.on_response(node_id, method, request, response)
        return response

    def _translate(self, exc: grpc.RpcError, node_id: int | None, address: str) -> TidelogError:
        code = exc.code()
        where = f"node {node_id} ({address})" if node_id is not None else address
        detail = f"{where}: {code.name}: {exc.details()}"
        if code in _TRANSPORT_FAILURES:
            if node_id is not None:
                self._suspects.add(node_id)
                self._metadata.invalidate_node(node_id)
            return NodeUnavailableError(detail)
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return UnsupportedVersionError(detail)
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidRequestError(detail)
        return UnknownServerError(detail)

    def close(self) -> None:
        """Close the channels (cancelling what is in flight) and stop the loop thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self.on_loop_thread():
            raise ConfigurationError("a client cannot be closed from its own event loop thread")
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    async def _shutdown(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        self._stubs.clear()
