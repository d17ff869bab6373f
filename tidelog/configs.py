"""Config admin types, Kafka's (kafka-python's admin names where it has them): which resource,
which change, and where a described value comes from. A leaf like `tidelog.acl`: the client,
the node and the controller's state machine share these codes."""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type codes of the resources that have configs here."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4


class AlterConfigOpType(IntEnum):
    """Kafka's AlterConfigOpType.OpType: APPEND and SUBTRACT apply to list configs only."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AlterConfigOp(NamedTuple):
    """One change of IncrementalAlterConfigs: set `value` (the default), delete the key (back
    to what the layer below says), or append or subtract list items (cleanup.policy)."""

    name: str
    value: str | None = None
    op_type: AlterConfigOpType = AlterConfigOpType.SET


class NewPartitions(NamedTuple):
    """CreatePartitions for one topic: the new total count, and optionally the replicas of
    each new partition (preferred leader first); None places them as a new topic's."""

    total_count: int
    new_assignments: list[list[int]] | None = None


class NewTopic(NamedTuple):
    """A topic to create (kafka-python's ``NewTopic``, in its order): -1 partitions is the
    nodes' num.partitions, -1 replicas min(3, the number of nodes); `topic_configs` are the
    topic's configs by Kafka's names ("retention.ms": "3600000"). Tidelog places the
    replicas itself: `replica_assignments` must stay None."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignments: dict[int, list[int]] | None = None
    topic_configs: dict[str, str] | None = None


class ConfigSource(IntEnum):
    """Where a described value comes from, Kafka's DescribeConfigs codes, most specific first."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigResource(NamedTuple):
    """A topic by name, or a node by id ("" for the default of every node)."""

    resource_type: ConfigResourceType
    name: str


class ConfigEntry(NamedTuple):
    """One described config, as Kafka's admin client gives it."""

    name: str
    value: str | None
    source: ConfigSource
    is_read_only: bool
    is_sensitive: bool

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG
