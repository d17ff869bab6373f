"""What one client's producers, consumers and admin calls share: the configuration, the
transport (one event loop, a channel per node), the metadata manager, the coordinator cache
and the retry backoff.

The engines (``tidelog.partitioned``, ``tidelog.producer``, ``tidelog.consumer``,
``tidelog.membership``) and the admin client (``tidelog.admin``) are given a ``Connections``
and never the ``Client`` that built it, so none of them imports ``tidelog.client``: the
client sits on top and only composes them. The engines see the metadata manager as the small
protocol ``tidelog.metadata.MetadataSource``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidelog.coordinated import Coordinators
from tidelog.errors import ConfigurationError, NodeUnavailableError
from tidelog.metadata import ClusterMetadata, MetadataSource
from tidelog.metadata_manager import MetadataManager
from tidelog.retry import Backoff, Deadline
from tidelog.settings import CLIENT_SETTINGS, check_types
from tidelog.transport import CallObserver, Security, Transport

T = TypeVar("T")
#: The client_id of a client not given one (kafka-python's is "kafka-python-<version>").
DEFAULT_CLIENT_ID = "tidelog-python"


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
    #: Names the client to the nodes (kafka-python's client_id): sent as the gRPC user agent
    #: of its connections.
    client_id: str = DEFAULT_CLIENT_ID

    def __post_init__(self) -> None:
        check_types(self)
        if not self.bootstrap:
            raise ConfigurationError("bootstrap_servers needs at least one HOST:PORT")
        for address in self.bootstrap:
            host, sep, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
            if (not sep or not host or "," in host or not port.isdigit()
                    or not 0 < int(port) < 65536):
                raise ConfigurationError(
                    f"bootstrap_servers: expected HOST:PORT (a port 1-65535), got {address!r}"
                )
        if self.request_timeout_ms <= 0:
            raise ConfigurationError("request_timeout_ms must be > 0")
        if not 0 < self.retry_backoff_ms <= self.retry_backoff_max_ms:
            raise ConfigurationError("need 0 < retry_backoff_ms <= retry_backoff_max_ms")

    @classmethod
    def of(
        cls,
        bootstrap: str | Sequence[str] | None = None,
        request_timeout_ms: int = 30_000,
        **settings: Any,
    ) -> ClientConfig:
        """The config of the arguments `Client` and `AdminClient` take: `bootstrap` (or
        kafka-python's `bootstrap_servers`) as "HOST:PORT,HOST:PORT" or a list, and the
        settings by name: client_id, retry_backoff_ms, retry_backoff_max_ms, observers (each a
        ``CallObserver``), security_protocol and the ssl_cafile, ssl_certfile and ssl_keyfile
        paths (kafka-python's names). Any other name fails as a ConfigurationError."""
        unknown = sorted(settings.keys() - CLIENT_SETTINGS)
        if unknown:
            raise ConfigurationError(
                f"unknown client setting {unknown[0]!r}; the connection settings are "
                f"{', '.join(sorted(CLIENT_SETTINGS))} (a producer's or a consumer's go to "
                "client.producer(...) or client.consumer(...))"
            )
        servers = settings.pop("bootstrap_servers", None)
        if bootstrap is None:
            bootstrap = servers
        elif servers is not None:
            raise ConfigurationError(
                "bootstrap and bootstrap_servers are the same setting: give one of them"
            )
        if bootstrap is None:
            raise ConfigurationError("bootstrap_servers is required: HOST:PORT of any node")
        if isinstance(bootstrap, str):
            addresses = bootstrap.split(",")
        elif isinstance(bootstrap, list | tuple) and all(isinstance(a, str) for a in bootstrap):
            addresses = list(bootstrap)
        else:
            raise ConfigurationError(
                "bootstrap_servers must be 'HOST:PORT,...' or a list of them, got "
                f"{bootstrap!r:.80}"
            )
        paths = []
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = settings.pop(name, None)
            if path is not None and not isinstance(path, str | os.PathLike):
                raise ConfigurationError(f"{name} must be a path, got {type(path).__name__}")
            paths.append(None if path is None else os.fspath(path))
        security = Security(settings.pop("security_protocol", "PLAINTEXT"), *paths)
        observers = settings.pop("observers", ())
        if not isinstance(observers, list | tuple):
            raise ConfigurationError(f"observers must be a list, got {type(observers).__name__}")
        return cls(
            bootstrap=tuple(a.strip() for a in addresses if a.strip()),
            request_timeout_ms=request_timeout_ms,
            observers=tuple(observers),
            security=security,
            **settings,
        )


@dataclass
class Attempts:
    """What a retried call to the controller carries from one attempt to the next."""

    #: The metadata version the last attempt used: a refresh older than it is no news.
    seen_version: int
    refresh: bool = False


class Connections:
    """One client's shared machinery; safe to share between threads."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        cluster = ClusterMetadata()
        self.backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self.transport = Transport(cluster, config.observers, config.security, config.client_id)
        self.metadata: MetadataSource = MetadataManager(
            cluster, self.transport, config.bootstrap, self.backoff
        )
        self.coordinators = Coordinators(self.transport, self.metadata, config.bootstrap,
                                         self.backoff)

    def close(self) -> None:
        """Close the connections and stop the loop; producers built on them fail what they
        still hold."""
        self.transport.close()

    def metrics(self) -> dict[str, float | int | str]:
        """The connections' own figures, under Kafka's metric names where it has them: taken
        now, a snapshot."""
        cluster = self.metadata.cluster
        return {
            "client-id": self.config.client_id,
            "metadata-refresh-total": self.metadata.refreshes,
            "known-nodes": len(cluster.nodes()),
            "known-topics": len(cluster.topics()),
            "connection-count": self.transport.connection_count,
        }

    def deadline(self, timeout_ms: float | None = None) -> Deadline:
        """A call's overall deadline: `timeout_ms`, else the configured request timeout. A
        `timeout_ms` that is no number >= 0 is a ConfigurationError, raised before the call."""
        if timeout_ms is not None and (
            not isinstance(timeout_ms, int | float) or isinstance(timeout_ms, bool)
            or not timeout_ms >= 0
        ):
            raise ConfigurationError(f"timeout_ms must be a number >= 0 or None, got "
                                     f"{timeout_ms!r:.80}")
        return Deadline(self.config.request_timeout_ms if timeout_ms is None else timeout_ms)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the loop and wait for it (see `Transport.run`)."""
        return self.transport.run(coro)

    def call(self, node_id: int, method: str, request: Any, timeout_s: float) -> Any:
        """One RPC to a node by id (its address from metadata)."""
        return self.run(self.transport.call(node_id, method, request, timeout_s))

    def controller_call(
        self, method: str, request_for: Callable[[], Any], deadline: Deadline, state: Attempts
    ) -> Any:
        """One attempt of a request for the controller (any node forwards it when the
        controller is unknown); metadata is refreshed first when the last attempt asked."""
        metadata = self.metadata
        metadata.ensure(deadline)
        if state.refresh:
            metadata.refresh(deadline, state.seen_version)
            state.refresh = False
        state.seen_version = metadata.cluster.version
        nodes = metadata.cluster.nodes()
        controller = metadata.cluster.controller_id
        node_id = controller if controller in nodes else random.choice(list(nodes))
        try:
            return self.call(node_id, method, request_for(), deadline.attempt_s())
        except NodeUnavailableError:
            state.refresh = True
            raise
