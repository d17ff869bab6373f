"""The value types of the public API (contract §4), shared by the client, the CLI and the tests."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from tidelog.errors import ConfigurationError

#: Special ListOffsets timestamps (contract §6).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

#: ListOffsets / Fetch replica ids.
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def checked_partition(tp: object) -> TopicPartition:
    """`tp` as a TopicPartition: a (topic, partition) pair of a non-empty str and an int >= 0,
    checked where an application hands it in, or a ConfigurationError naming it."""
    if isinstance(tp, tuple) and len(tp) == 2:
        topic, partition = tp
        if (type(topic) is str and topic and isinstance(partition, int)
                and not isinstance(partition, bool) and partition >= 0):
            return tp if type(tp) is TopicPartition else TopicPartition(topic, partition)
        if isinstance(partition, int) and not isinstance(partition, bool) and partition < 0:
            raise ConfigurationError(
                f"invalid TopicPartition({topic!r}, {partition}): partitions are numbered from 0"
            )
    raise ConfigurationError(
        f"expected a TopicPartition(topic: str, partition: int), got {tp!r:.80}"
    )


def checked_partitions(partitions: object, call: str) -> list[TopicPartition]:
    """A collection of TopicPartitions, each checked (`checked_partition`); `call` names the
    method in the error. A lone TopicPartition or a str is refused: iterating either would
    read its parts as partitions."""
    if isinstance(partitions, str | bytes | TopicPartition) or not isinstance(
        partitions, list | tuple | set | frozenset | dict | type({}.keys())
    ):
        raise ConfigurationError(
            f"{call}() takes a list of TopicPartition ({call}([tp])), got {partitions!r:.80}"
        )
    return [checked_partition(tp) for tp in partitions]


def checked_topics(topics: object, call: str) -> list[str]:
    """A collection of topic names (non-empty str each); a lone str is refused, as iterating
    it would read its letters as topics."""
    if isinstance(topics, str | bytes) or not isinstance(
        topics, list | tuple | set | frozenset | dict | type({}.keys())
    ):
        raise ConfigurationError(f"{call}() takes a list of topic names, got {topics!r:.80}")
    out = list(topics)
    for topic in out:
        if type(topic) is not str or not topic:
            raise ConfigurationError(
                f"{call}(): a topic name is a non-empty str, got {topic!r:.80}"
            )
    return out


class IsolationLevel(IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @classmethod
    def parse(cls, value: IsolationLevel | str | int) -> IsolationLevel:
        """Accept the enum, its wire number, or Kafka's config spelling ("read_committed")."""
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ConfigurationError(
                    f"isolation level must be read_uncommitted or read_committed, got {value!r}"
                ) from None
        try:
            return cls(value)
        except ValueError:
            raise ConfigurationError(f"unknown isolation level {value!r}") from None


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """What a ListOffsets lookup asks for: a special negative value or a timestamp >= 0."""

    timestamp: int

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(EARLIEST_TIMESTAMP)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(LATEST_TIMESTAMP)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(MAX_TIMESTAMP)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        if timestamp_ms < 0:
            raise ConfigurationError(f"a timestamp must be >= 0, got {timestamp_ms}")
        return cls(timestamp_ms)


class ListOffsetsResult(NamedTuple):
    """One partition's ListOffsets answer, as the node computes it, the wire carries it and
    `list_offsets` returns it: offset, timestamp and leader_epoch are -1 when the lookup found
    nothing (not an error); `old_style_offsets` holds the answer of a legacy (v0) lookup
    (segment base offsets and the log end, descending), empty otherwise."""

    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1
    old_style_offsets: tuple[int, ...] = ()


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the next record to consume, free-form metadata
    (at most 4096 characters, contract §8), and the leader epoch of the last consumed record
    (None when unknown)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's place in its group (Kafka's ConsumerGroupMetadata, KIP-447), from
    `Consumer.group_metadata()`: what `Producer.send_offsets_to_transaction` hands the group's
    coordinator, which commits the offsets only for a current member at its current epoch,
    so a member that was fenced or fell behind a rebalance cannot commit offsets of partitions
    it no longer owns."""

    group_id: str
    #: The member epoch (a generation, in Kafka's name); -1 outside the group.
    generation_id: int = -1
    #: "" outside the group.
    member_id: str = ""
    group_instance_id: str | None = None


#: The internal topic that holds committed offsets (contract §8).
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"


class GroupListing(NamedTuple):
    """One consumer group as ListGroups reports it."""

    group_id: str
    #: "" for a group that only commits offsets (a "simple" group), "consumer" for members.
    protocol_type: str
    #: Kafka's name for the group state ("Empty" for a group with no members).
    state: str
    #: The node coordinating the group.
    coordinator_id: int


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    leader_epoch: int = -1
