"""A producer's settings, with Kafka's names, defaults and rules."""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.compression import PRODUCER_CODECS, Codec
from tidelog.errors import ConfigurationError

_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}


@dataclass(frozen=True)
class ProducerConfig:
    """A producer's settings, with Kafka's names and defaults; picklable."""

    acks: str | int = "all"
    #: None: on exactly when acks is "all" (Kafka's default); True with other acks is an error.
    idempotent: bool | None = None
    linger_ms: int = 5
    batch_size: int = 16_384
    buffer_memory: int = 32 * 1024 * 1024
    delivery_timeout_ms: int = 120_000
    #: Batches of one partition in flight at once (Kafka's max.in.flight, at most 5 with
    #: idempotence).
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

    def __post_init__(self) -> None:
        if self.acks not in _ACKS:
            raise ConfigurationError(f"acks must be 'all', -1, 0 or 1, got {self.acks!r}")
        if self.idempotent and _ACKS[self.acks] != -1:
            raise ConfigurationError(
                "idempotence needs acks='all'; pass idempotent=False for acks=0 or 1"
            )
        if self.idempotence and not 1 <= self.max_in_flight <= 5:
            raise ConfigurationError("max_in_flight must be 1..5 with idempotence (Kafka's rule)")
        if self.max_in_flight < 1 or self.batch_size < 1 or self.linger_ms < 0:
            raise ConfigurationError("need max_in_flight >= 1, batch_size >= 1, linger_ms >= 0")
        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise ConfigurationError("transactional_id must be a non-empty string")
            if not self.idempotence:
                raise ConfigurationError(
                    "a transactional producer is idempotent: leave acks='all' and idempotent on"
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
        return self.acks_value == -1 if self.idempotent is None else self.idempotent
