"""The Kafka listener: an asyncio server on kafka.listen, run by the node beside its gRPC
listeners, with the client listener's TLS (security.protocol, the same certificate, key and
CA, ssl.client.auth), its own queued.max.request.bytes budget, and Kafka's
connections.max.idle.ms.

The principal of a connection is decided at its handshake exactly as the gRPC client listener
decides it (node/edge/security.py): with ssl.client.auth=required the verified certificate's
subject (``User:CN=...``), else ``User:ANONYMOUS``. A SASL listener (kafka.security.protocol
SASL_PLAINTEXT or SASL_SSL) gives each connection a SASL session instead, and its principal is
the authenticated user's (node/kafka/sasl.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

from tidelog.coordinator.metadata_records import split_address
from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig
from tidelog.node.edge.limits import InFlight
from tidelog.node.edge.security import ANONYMOUS, principal_of_certificate
from tidelog.node.kafka.connection import Connection, ReceiveClock
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.node.kafka.sasl import CredentialLookup, SaslSession

log = logging.getLogger("tidelog.node")


class KafkaListener:
    """Binds first (`bind`: the node registers the bound address before it serves), accepts
    once the registry of APIs exists (`serve`)."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.registry = ApiRegistry()
        self._budget = InFlight(config.queued_max_request_bytes)
        self._tls = _server_context(config)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._sasl = config.kafka_protocol.startswith("SASL_")
        self._credentials: CredentialLookup = lambda _user, _mechanism: None

    async def bind(self) -> int:
        """Binds kafka.listen without accepting yet; returns the bound port."""
        parts = split_address(self.config.kafka_listen)
        assert parts is not None  # NodeConfig checked it
        host, port = parts
        try:
            self._server = await asyncio.get_running_loop().create_server(
                self._protocol, host, port, ssl=self._tls, reuse_address=True,
                start_serving=False,
            )
        except OSError as exc:
            raise InvalidConfigError(
                f"kafka.listen: cannot listen on {self.config.kafka_listen}: {exc.strerror}"
            ) from None
        return int(self._server.sockets[0].getsockname()[1])

    async def serve(
        self, registry: ApiRegistry, credentials: CredentialLookup | None = None
    ) -> None:
        """Accepts connections, answering the APIs of `registry`; a SASL listener checks
        clients against `credentials` (none: every client is refused)."""
        assert self._server is not None, "bind first"
        self.registry = registry
        if credentials is not None:
            self._credentials = credentials
        await self._server.start_serving()

    async def stop(self) -> None:
        """Stops accepting, and closes every connection (their requests are cancelled)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def _protocol(self) -> ReceiveClock:
        """What `asyncio.start_server` builds for each connection, with a clock of the bytes
        received for the idle limit."""
        return ReceiveClock(asyncio.StreamReader(), self._accept)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            clock = writer.transport.get_protocol()
            assert isinstance(clock, ReceiveClock)
            sasl = (SaslSession(self.config.sasl_enabled_mechanisms, self._credentials)
                    if self._sasl else None)
            connection = Connection(
                self.registry, self._budget, ANONYMOUS if sasl else _principal(writer), reader,
                writer, clock, self.config.connections_max_idle_ms, sasl,
            )
            await connection.serve()
        except Exception:  # never the node: this connection only
            log.exception("Kafka connection failed")
            writer.transport.abort()
        finally:
            self._connections.discard(task)


def _principal(writer: asyncio.StreamWriter) -> str:
    """The verified client certificate's principal, else ANONYMOUS. The TLS context asks for a
    certificate only with ssl.client.auth=required, so a certificate present was verified."""
    tls = writer.get_extra_info("ssl_object")
    der = tls.getpeercert(binary_form=True) if tls is not None else None
    if not der:
        return ANONYMOUS
    return principal_of_certificate(ssl.DER_cert_to_PEM_cert(der).encode())


def _server_context(config: NodeConfig) -> ssl.SSLContext | None:
    """The client listener's TLS for the Kafka listener (None: PLAINTEXT, SASL_PLAINTEXT). A
    SASL_SSL listener asks for no client certificate: its clients are who SASL says."""
    if config.kafka_protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
        if config.ssl_client_auth == "required" and config.kafka_protocol == "SSL":
            context.load_verify_locations(cafile=config.ssl_cafile)
            context.verify_mode = ssl.CERT_REQUIRED
        else:
            context.verify_mode = ssl.CERT_NONE
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"kafka.listen: the TLS files do not load: {exc}") from None
    return context
