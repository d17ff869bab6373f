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
from tidelog.transport import CallObserver, Security, Transport

T = TypeVar("T")


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

    @classmethod
    def of(
        cls,
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
    ) -> ClientConfig:
        """The config of the arguments `Client` and `AdminClient` take: `bootstrap` as
        "HOST:PORT,HOST:PORT" or a list, the TLS settings by kafka-python's names."""
        addresses = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        security = Security(
            security_protocol,
            *(None if path is None else os.fspath(path)
              for path in (ssl_cafile, ssl_certfile, ssl_keyfile)),
        )
        return cls(
            bootstrap=tuple(a.strip() for a in addresses if a.strip()),
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            observers=tuple(observers),
            security=security,
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
        self.transport = Transport(cluster, config.observers, config.security)
        self.metadata: MetadataSource = MetadataManager(
            cluster, self.transport, config.bootstrap, self.backoff
        )
        self.coordinators = Coordinators(self.transport, self.metadata, config.bootstrap,
                                         self.backoff)

    def close(self) -> None:
        """Close the connections and stop the loop; producers built on them fail what they
        still hold."""
        self.transport.close()

    def deadline(self, timeout_ms: float | None = None) -> Deadline:
        """A call's overall deadline: `timeout_ms`, else the configured request timeout."""
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
