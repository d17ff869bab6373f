"""A producer's settings, with Kafka's names, defaults and rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.compression import PRODUCER_CODECS, Codec
from tidelog.errors import ConfigurationError
from tidelog.settings import CLIENT_SETTINGS, check_types, config_from

_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
#: Kafka's retries default: Integer.MAX_VALUE, so that delivery_timeout_ms is the bound.
MAX_RETRIES = 2**31 - 1
#: kafka-python's names of settings whose Tidelog field is named otherwise.
ALIASES = {
    "enable_idempotence": "idempotent",
    "max_in_flight_requests_per_connection": "max_in_flight",
}
#: kafka-python producer settings of features Tidelog does not have, with what the feature is.
NOT_BUILT = {
    "api_version": "Kafka protocol versions to pick (it speaks gRPC)",
    "interceptor_classes": "producer interceptors",
    "metric_reporters": "metrics reporters (producer.metrics() gives the figures)",
    "sasl_mechanism": "SASL authentication",
    "sasl_plain_username": "SASL authentication",
    "sasl_plain_password": "SASL authentication",
}
#: A serializer: kafka-python's, the key or value as the application has it -> bytes or None.
Serializer = Callable[[Any], bytes | None]
#: kafka-python's partitioner: (key bytes or None, all partitions, available partitions) ->
#: the partition.
Partitioner = Callable[[bytes | None, list[int], list[int]], int]


@dataclass(frozen=True)
class ProducerConfig:
    """A producer's settings, with Kafka's names and defaults; picklable."""

    acks: str | int = "all"
    #: None: on unless acks, retries or max_in_flight rule it out (Kafka's default); True with
    #: one of those is an error (see `idempotence`). Kafka's name: enable_idempotence.
    idempotent: bool | None = None
    linger_ms: int = 5
    batch_size: int = 16_384
    buffer_memory: int = 32 * 1024 * 1024
    delivery_timeout_ms: int = 120_000
    #: Batches of one partition in flight at once (Kafka's max.in.flight, at most 5 with
    #: idempotence). Kafka's name: max_in_flight_requests_per_connection.
    max_in_flight: int = 5
    #: How long send() may block for metadata or for room in the buffer.
    max_block_ms: int = 60_000
    #: Makes the producer transactional (kafka-python's transactional_id): its records go in
    #: transactions that commit or abort whole, and a newer producer with the same id fences
    #: it. Needs idempotence.
    transactional_id: str | None = None
    #: How long the coordinator lets a transaction stay open before it aborts it and fences the
    #: producer (Kafka's transaction.timeout.ms; at most the nodes' transaction.max.timeout.ms).
    transaction_timeout_ms: int = 60_000
    #: Kafka's compression.type: none, gzip, snappy, lz4 or zstd. Each batch's records are
    #: compressed as one stream when the batch leaves; batch_size then counts compressed
    #: bytes, at the topic's estimated ratio, as in Kafka (`accumulator.batch_limit`).
    compression_type: str = "none"
    #: How many times a batch is sent again after a retriable error (Kafka's retries); the
    #: default leaves delivery_timeout_ms the only bound, as Kafka's. 0 turns idempotence off
    #: unless it was asked for, which it then refuses (Kafka's rule).
    retries: int = MAX_RETRIES
    #: Turn each key / value given to send() into bytes (kafka-python's serializers; called
    #: with None too, as Kafka's are).
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    #: Picks the partition of a record sent without one (kafka-python's signature); None:
    #: Kafka's default (the key's murmur2 hash, the sticky partition for keyless records).
    partitioner: Partitioner | None = None

    @classmethod
    def from_settings(cls, **settings: Any) -> ProducerConfig:
        """The config of `client.producer(**settings)`, by Tidelog's or kafka-python's names;
        a setting that is none of them fails with a ConfigurationError saying why."""
        return config_from(
            cls, "producer", settings, aliases=ALIASES, not_built=NOT_BUILT,
            elsewhere=dict.fromkeys(
                CLIENT_SETTINGS, "a connection setting: give it to Client(...), whose "
                "producers share its connections (or to a Producer(...) of its own)"
            ),
        )

    def __post_init__(self) -> None:
        check_types(self, ALIASES)
        if self.acks not in _ACKS:
            raise ConfigurationError(f"acks must be 'all', -1, 0 or 1, got {self.acks!r}")
        if self.idempotent and _ACKS[self.acks] != -1:
            raise ConfigurationError(
                "idempotence needs acks='all'; pass idempotent=False for acks=0 or 1"
            )
        if self.idempotent and self.max_in_flight > 5:
            raise ConfigurationError("max_in_flight must be 1..5 with idempotence (Kafka's rule)")
        if self.idempotent and self.retries == 0:
            raise ConfigurationError("idempotence needs retries > 0 (Kafka's rule)")
        if self.max_in_flight < 1 or self.batch_size < 1 or self.linger_ms < 0:
            raise ConfigurationError("need max_in_flight >= 1, batch_size >= 1, linger_ms >= 0")
        if self.retries < 0:
            raise ConfigurationError(f"retries must be >= 0, got {self.retries}")
        if self.transactional_id is not None:
            if not self.transactional_id:
                raise ConfigurationError("transactional_id must be a non-empty string")
            if not self.idempotence:
                raise ConfigurationError(
                    "a transactional producer is idempotent: leave acks='all', retries > 0, "
                    "max_in_flight <= 5 and idempotent on"
                )
        if self.transaction_timeout_ms <= 0:
            raise ConfigurationError("transaction_timeout_ms must be > 0")
        if self.compression_type not in PRODUCER_CODECS:
            raise ConfigurationError(
                f"compression_type must be one of {', '.join(PRODUCER_CODECS)}, got "
                f"{self.compression_type!r}"
            )
        if self.delivery_timeout_ms <= 0 or self.max_block_ms < 0 or self.buffer_memory < 1:
            raise ConfigurationError(
                "need delivery_timeout_ms > 0, max_block_ms >= 0, buffer_memory >= 1"
            )

    @property
    def codec(self) -> Codec:
        return PRODUCER_CODECS[self.compression_type]

    @property
    def acks_value(self) -> int:
        return _ACKS[self.acks]

    @property
    def idempotence(self) -> bool:
        """As asked for; when not asked, on unless a setting rules it out (acks other than
        "all", retries 0, more than 5 batches in flight), as Kafka's producer decides."""
        if self.idempotent is not None:
            return self.idempotent
        return self.acks_value == -1 and self.retries > 0 and self.max_in_flight <= 5
