"""The driver's view of the cluster for planning: which partitions a subscription covers and
their offsets, through the client's ListOffsets at the query's isolation level.

Spark's Kafka source tries a failed lookup again ``fetchOffset.numRetries`` times,
``fetchOffset.retryIntervalMs`` apart. Here the client's partitioned-request engine does the
retrying (only retriable errors, only the failed partitions, metadata refreshed as the errors
ask), and these options only size its deadline: as long as numRetries + 1 tries of one request
timeout each, with the intervals between them, would last.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from tidelog.client import Client
from tidelog.spark.options import SourceOptions
from tidelog.types import LATEST_TIMESTAMP, TopicPartition

#: Topic config that makes the log stamp records itself (Kafka's timestampType 1).
_LOG_APPEND_TIME = ("message.timestamp.type", "LogAppendTime")


class ClusterLookup:
    """``planning.OffsetLookup`` over a live client; also knows each topic's timestamp type."""

    def __init__(self, client: Client, options: SourceOptions) -> None:
        self._client = client
        self._options = options
        self._log_append_topics: set[str] = set()
        retries = options.fetch_retries
        self._timeout_ms = (
            (retries + 1) * client.config.request_timeout_ms
            + retries * options.fetch_retry_interval_ms
        )

    def partitions(self) -> list[TopicPartition]:
        subscription = self._options.subscription
        topics = self._client.describe_topics(timeout_ms=self._timeout_ms)
        self._log_append_topics = {
            name for name, info in topics.items()
            if info.configs.get(_LOG_APPEND_TIME[0]) == _LOG_APPEND_TIME[1]
        }
        counts = {
            name: len(info.partitions)
            for name, info in topics.items()
            if not info.is_internal and info.error_code == 0
        }
        return subscription.resolve(counts)

    def timestamp_type(self, topic: str) -> int:
        """0 CreateTime, 1 LogAppendTime, from the topic config seen by ``partitions()``."""
        return 1 if topic in self._log_append_topics else 0

    def offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        isolation = self._options.isolation_level
        found = self._client.list_offsets(specs, isolation, timeout_ms=self._timeout_ms)
        return {tp: result.offset for tp, result in found.items()}

    def earliest(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Earliest offsets of the partitions that still exist; a vanished one is left out (the
        caller reports it as data loss)."""
        existing = set(self.partitions())
        return self.offsets({tp: -2 for tp in partitions if tp in existing})

    def latest(self, known: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Latest offsets of the subscription; fetched again (up to the retry count) while one
        is below a `known` offset, which a lagging leader can briefly answer (Spark's
        fetchLatestOffsets)."""
        attempt = 0
        while True:
            latest = self.offsets(dict.fromkeys(self.partitions(), LATEST_TIMESTAMP))
            behind = [tp for tp, offset in latest.items() if offset < known.get(tp, offset)]
            if not behind or attempt >= self._options.fetch_retries:
                return latest
            attempt += 1
            time.sleep(self._options.fetch_retry_interval_ms / 1000)
