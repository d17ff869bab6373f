"""The entry point of the client library (contract §4): ``Client`` owns one set of connections
(``tidelog.connections``) and builds on it producers (``client.producer()``), consumers
(``client.consumer()``) and the admin client (``client.admin``, ``tidelog.admin``), which all
share them.

A synchronous API, so it is simple to call from threads and from Spark executors, over one
transport (``tidelog.transport``: grpc.aio channels, one per node, on an event loop the client
owns and the synchronous calls wait on); every public call has an overall deadline (the
client's ``request_timeout_ms`` or the call's ``timeout_ms``) that bounds its retries, and each
attempt gets a slice of it. A ``Client`` pickles as its configuration: unpickling builds a
fresh client with its own transport.

The client sits on top: the engines and the admin client are given its ``Connections``, never
the client, so nothing below imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tidelog.admin import AdminClient, ClusterDescription
from tidelog.connections import ClientConfig, Connections
from tidelog.consumer import Consumer, ConsumerConfig
from tidelog.metadata import ClusterMetadata, TopicInfo
from tidelog.producer import Producer, ProducerConfig
from tidelog.types import (
    CONSUMER_REPLICA_ID,
    IsolationLevel,
    ListOffsetsResult,
    OffsetSpec,
    TopicPartition,
)

__all__ = ["Client", "ClientConfig", "ClusterDescription"]


class Client:
    """A cluster's connections, and the producers, consumers and admin client built on them;
    safe to share between threads."""

    def __init__(
        self, bootstrap: str | Sequence[str] | None = None, request_timeout_ms: int = 30_000,
        **options: Any,
    ) -> None:
        """`bootstrap` (or kafka-python's `bootstrap_servers=`) as "HOST:PORT,HOST:PORT" or a
        list; `options` are the rest of ``ClientConfig.of``: client_id, retry_backoff_ms,
        retry_backoff_max_ms, observers (each a ``CallObserver``), security_protocol and the
        ssl_cafile, ssl_certfile and ssl_keyfile paths (kafka-python's names). Any other
        name is a ConfigurationError naming it."""
        self._init(ClientConfig.of(bootstrap, request_timeout_ms, **options))

    def _init(self, config: ClientConfig) -> None:
        self.connections = Connections(config)
        #: The admin operations (topics, configs, ACLs, groups, transactions...), on this
        #: client's connections.
        self.admin = AdminClient.sharing(self.connections)

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
        self.connections.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def config(self) -> ClientConfig:
        return self.connections.config

    @property
    def metadata(self) -> ClusterMetadata:
        """The client's picture of the cluster (nodes, topics, leaders), as last learned."""
        return self.connections.metadata.cluster

    @property
    def metadata_refreshes(self) -> int:
        """How many Metadata refreshes this client made (concurrent requests share one)."""
        return self.connections.metadata.refreshes

    def metrics(self) -> dict[str, dict[str, float | int | str]]:
        """The client-side figures of the connections, grouped as kafka-python's
        ``metrics()`` gives them ({group: {name: value}}); a producer's and a consumer's
        ``metrics()`` add their own."""
        return {"client-metrics": self.connections.metrics()}

    # ---- the admin calls of the first steps (the others: client.admin) ---------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str | int] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """`AdminClient.create_topic`."""
        self.admin.create_topic(name, partitions, replication_factor, config,
                                timeout_ms=timeout_ms)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicInfo]:
        """`AdminClient.describe_topics`."""
        return self.admin.describe_topics(names, timeout_ms=timeout_ms)

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec | int],
        isolation_level: IsolationLevel | str | int = IsolationLevel.READ_UNCOMMITTED,
        replica_id: int = CONSUMER_REPLICA_ID,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """`AdminClient.list_offsets`."""
        return self.admin.list_offsets(specs, isolation_level, replica_id,
                                       timeout_ms=timeout_ms)

    # ---- producers and consumers -------------------------------------------------------------

    def producer(self, **config: Any) -> Producer:
        """A producer sharing this client's connections; the settings by Tidelog's or
        kafka-python's names (`tidelog.producer.ProducerConfig.from_settings`)."""
        return Producer.sharing(self.connections, ProducerConfig.from_settings(**config))

    def consumer(self, group_id: str | None = None, **config: Any) -> Consumer:
        """A consumer of manually assigned partitions; see `tidelog.consumer.ConsumerConfig`.
        With a `group_id` it commits its positions to the group's coordinator and starts
        from the group's committed offsets."""
        return Consumer(self.connections, ConsumerConfig.from_settings(group_id=group_id, **config))
