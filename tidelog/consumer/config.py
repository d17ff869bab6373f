"""A consumer's settings (`ConsumerConfig`), with Kafka's names and defaults, and the checks
that turn a setting Tidelog does not have into an error that says why."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.errors import ConfigurationError
from tidelog.settings import CLIENT_SETTINGS, check_types, config_from
from tidelog.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, IsolationLevel

#: What each auto_offset_reset asks ListOffsets for; "none": no reset (raise).
RESETS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}


#: Kafka consumer settings (kafka-python's names) of features Tidelog does not have, with
#: what the feature is: such a setting fails with that name rather than a TypeError.
_NOT_BUILT = {
    "partition_assignment_strategy": "client-side assignors (the group coordinator assigns "
    "partitions, KIP-848: group_remote_assignor='uniform' or 'range')",
    "session_timeout_ms": "client-set session timeouts (the group coordinator sets it, KIP-848)",
    "heartbeat_interval_ms": "client-set heartbeat intervals (the group coordinator sets it, "
    "KIP-848)",
    "client_rack": "rack-aware fetching from followers (KIP-392)",
    "check_crcs": "turning CRC checks off (every fetched batch is checked)",
    "interceptor_classes": "consumer interceptors",
    "metric_reporters": "metrics reporters (consumer.metrics() gives the figures)",
    "enable_incremental_fetch_sessions": "incremental fetch sessions (KIP-227)",
    "sasl_mechanism": "SASL authentication",
    "sasl_plain_username": "SASL authentication",
    "sasl_plain_password": "SASL authentication",
}
#: A deserializer: kafka-python's, the key's or value's bytes (or None) -> what the
#: application gets in the record.
Deserializer = Callable[[bytes | None], Any]


@dataclass(frozen=True)
class ConsumerConfig:
    """A consumer's settings, with Kafka's names and defaults; picklable."""

    #: The consumer group whose committed offsets the consumer uses; None: no commits.
    group_id: str | None = None
    isolation_level: IsolationLevel | str | int = "read_uncommitted"
    #: Where a partition without a position (and no committed offset) starts: "latest",
    #: "earliest" or "none" (raise).
    auto_offset_reset: str = "latest"
    #: Commit the positions every auto_commit_interval_ms, from poll(), and on close(); only
    #: with a group_id (kafka-python's reading of Kafka's default).
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    #: group.instance.id: a static member of a subscribed group (its partitions wait for it
    #: through a restart within the session timeout).
    group_instance_id: str | None = None
    #: group.remote.assignor: the server-side assignor asked for ("uniform" or "range").
    group_remote_assignor: str | None = None
    #: How long a subscribed member may take to revoke partitions (sent as the rebalance
    #: timeout); Kafka's default.
    max_poll_interval_ms: int = 300_000
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 1024 * 1024
    #: The most records one poll() returns; the rest wait in the consumer, unfetched again.
    max_poll_records: int = 500
    #: How long iterating over the consumer waits for the next record before it stops
    #: (kafka-python's consumer_timeout_ms); None: for ever.
    consumer_timeout_ms: int | None = None
    #: Turn each record's key / value into what the application reads (kafka-python's
    #: deserializers; called with None too, as Kafka's are); None: the bytes as stored.
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None

    @classmethod
    def from_settings(cls, **settings: Any) -> ConsumerConfig:
        """The config of `client.consumer(**settings)`: a setting Tidelog does not know fails
        with a ConfigurationError that says why (a feature not built, a setting of the Client,
        or a name that is no setting at all) instead of the dataclass's TypeError."""
        return config_from(
            cls, "consumer", settings, not_built=_NOT_BUILT,
            elsewhere=dict.fromkeys(
                CLIENT_SETTINGS, "a connection setting: give it to Client(...), whose "
                "consumers share its connections"
            ),
        )

    def __post_init__(self) -> None:
        check_types(self)
        if self.group_id is not None and not self.group_id:
            raise ConfigurationError(
                f"group_id must be a non-empty string or None, got {self.group_id!r}"
            )
        if self.auto_commit_interval_ms < 0:
            raise ConfigurationError("auto_commit_interval_ms must be >= 0")
        IsolationLevel.parse(self.isolation_level)
        if self.auto_offset_reset not in RESETS:
            raise ConfigurationError(
                f"auto_offset_reset must be latest, earliest or none, got "
                f"{self.auto_offset_reset!r}"
            )
        if self.fetch_max_wait_ms < 0 or self.fetch_min_bytes < 0:
            raise ConfigurationError("fetch_max_wait_ms and fetch_min_bytes must be >= 0")
        if self.fetch_max_bytes < 1 or self.max_partition_fetch_bytes < 1:
            raise ConfigurationError("fetch_max_bytes and max_partition_fetch_bytes must be >= 1")
        if self.max_poll_records < 1:
            raise ConfigurationError("max_poll_records must be >= 1")
        if self.consumer_timeout_ms is not None and self.consumer_timeout_ms < 0:
            raise ConfigurationError("consumer_timeout_ms must be >= 0 or None")
