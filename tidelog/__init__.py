"""Tidelog: a Kafka-style replicated, partitioned log.

This package is everything a user imports: the record-batch codec, errors, the client library,
the CLI and the test harness. Importing it never imports the server packages or pyspark, and
the client modules load on first use of their names (``from tidelog import Client``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tidelog.errors import ConfigurationError, NodeUnavailableError, TidelogError
from tidelog.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    GroupListing,
    IsolationLevel,
    ListOffsetsResult,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    OffsetSpec,
    RecordMetadata,
    TopicPartition,
)

if TYPE_CHECKING:
    from tidelog.admin import AdminClient, ClusterDescription
    from tidelog.aio import AIOConsumer, AIOProducer
    from tidelog.client import Client
    from tidelog.configs import NewTopic
    from tidelog.connections import ClientConfig
    from tidelog.consumer import Consumer, ConsumerConfig
    from tidelog.membership import ConsumerGroupDescription, ConsumerRebalanceListener
    from tidelog.metadata import PartitionInfo, TopicInfo
    from tidelog.producer import Producer, ProducerConfig, RecordFuture
    from tidelog.transport import CallObserver

__version__ = "0.1.0"

_LAZY = {
    "AIOConsumer": "tidelog.aio",
    "AIOProducer": "tidelog.aio",
    "AdminClient": "tidelog.admin",
    "Client": "tidelog.client",
    "ClientConfig": "tidelog.connections",
    "ClusterDescription": "tidelog.admin",
    "Consumer": "tidelog.consumer",
    "ConsumerConfig": "tidelog.consumer",
    "ConsumerGroupDescription": "tidelog.membership",
    "ConsumerRebalanceListener": "tidelog.membership",
    "NewTopic": "tidelog.configs",
    "PartitionInfo": "tidelog.metadata",
    "TopicInfo": "tidelog.metadata",
    "Producer": "tidelog.producer",
    "ProducerConfig": "tidelog.producer",
    "RecordFuture": "tidelog.producer",
    "CallObserver": "tidelog.transport",
}

__all__ = [
    "AIOConsumer",
    "AIOProducer",
    "AdminClient",
    "CallObserver",
    "Client",
    "ClientConfig",
    "ClusterDescription",
    "ConfigurationError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupDescription",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "GroupListing",
    "IsolationLevel",
    "ListOffsetsResult",
    "NewTopic",
    "NodeUnavailableError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "PartitionInfo",
    "Producer",
    "ProducerConfig",
    "RecordFuture",
    "RecordMetadata",
    "TidelogError",
    "TopicInfo",
    "TopicPartition",
]


def __getattr__(name: str) -> Any:
    """Load the client modules (and grpc) only when a program uses them."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tidelog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
