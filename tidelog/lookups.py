"""The lookups the admin client and the consumer share: ListOffsets of partitions (through
the partitioned-request engine, at each partition's leader) and the topics that exist (from a
metadata refresh made now)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidelog import wire
from tidelog.errors import ConfigurationError
from tidelog.metadata import TopicInfo
from tidelog.partitioned import PartitionedRequest
from tidelog.retry import Deadline, call_with_retry
from tidelog.types import (
    CONSUMER_REPLICA_ID,
    IsolationLevel,
    ListOffsetsResult,
    OffsetSpec,
    TopicPartition,
    checked_partition,
)

if TYPE_CHECKING:
    from tidelog.connections import Connections


def list_offsets(
    connections: Connections,
    specs: Mapping[TopicPartition, OffsetSpec | int],
    isolation_level: IsolationLevel | str | int,
    deadline: Deadline,
    replica_id: int = CONSUMER_REPLICA_ID,
) -> dict[TopicPartition, ListOffsetsResult]:
    """ListOffsets per contract §6, a spec or a timestamp per partition; "nothing found" is
    ListOffsetsResult(-1, -1, -1)."""
    if not isinstance(specs, Mapping):
        raise ConfigurationError(
            f"list_offsets() takes a mapping of TopicPartition to OffsetSpec or timestamp, got "
            f"{specs!r:.80}"
        )
    timestamps: dict[TopicPartition, int] = {}
    for tp, spec in specs.items():
        tp = checked_partition(tp)
        if isinstance(spec, OffsetSpec):
            timestamps[tp] = spec.timestamp
        elif isinstance(spec, int) and not isinstance(spec, bool):
            timestamps[tp] = spec
        else:
            raise ConfigurationError(
                f"{tp}: expected an OffsetSpec or a timestamp (int ms), got {spec!r:.80}"
            )
    return lookup_offsets(connections, "ListOffsets", timestamps, 0,
                          IsolationLevel.parse(isolation_level), replica_id, deadline)


def lookup_offsets(
    connections: Connections,
    what: str,
    timestamps: Mapping[TopicPartition, int],
    max_num_offsets: int,
    isolation: IsolationLevel,
    replica_id: int,
    deadline: Deadline,
) -> dict[TopicPartition, ListOffsetsResult]:
    """ListOffsets of each partition's timestamp at its leader; `max_num_offsets` >= 1 makes
    it the legacy (v0) lookup."""
    metadata = connections.metadata
    metadata.ensure(deadline)

    def build(work: Mapping[TopicPartition, int]) -> Any:
        lookups = {
            tp: wire.OffsetLookup(timestamp, metadata.cluster.leader_epoch(tp), max_num_offsets)
            for tp, timestamp in work.items()
        }
        return wire.list_offsets_request(lookups, isolation, replica_id)

    return PartitionedRequest(
        connections.transport, metadata, connections.backoff, what, "ListOffsets", build,
        wire.parse_list_offsets,
    ).run(timestamps, deadline)


def fresh_topics(connections: Connections, deadline: Deadline) -> dict[str, TopicInfo]:
    """Every topic that exists, by name in order, from a refresh made now (retried within the
    deadline): what a describe call shows must be current."""
    metadata = connections.metadata
    call_with_retry(lambda: metadata.refresh(deadline), what="Metadata", deadline=deadline,
                    backoff=connections.backoff)
    return {n: t for n, t in sorted(metadata.cluster.topics().items()) if t.error_code == 0}


def topic_names(connections: Connections, deadline: Deadline) -> list[str]:
    """The names of the topics that exist, but the internal ones (__consumer_offsets...)."""
    return [n for n, t in fresh_topics(connections, deadline).items() if not t.is_internal]
