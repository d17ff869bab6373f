"""The Kafka APIs a node serves: `kafka_registry` adds each family's handlers to one registry
(node/kafka/__init__.py says how to add one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.kafka.acls import add_acls
from tidelog.node.kafka.api_versions import add_api_versions
from tidelog.node.kafka.classic_members import add_classic_members
from tidelog.node.kafka.cluster import add_cluster
from tidelog.node.kafka.cluster_admin import add_cluster_admin
from tidelog.node.kafka.configs import add_configs
from tidelog.node.kafka.consumer_groups import add_consumer_groups
from tidelog.node.kafka.fetch import add_fetch
from tidelog.node.kafka.groups import add_groups
from tidelog.node.kafka.metadata import add_metadata
from tidelog.node.kafka.produce import add_produce
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.node.kafka.sasl import add_sasl
from tidelog.node.kafka.scram_credentials import add_scram_credentials
from tidelog.node.kafka.topics import add_topics
from tidelog.node.kafka.transactions import add_transactions


@dataclass(frozen=True)
class KafkaParts:
    """What the Kafka adapters are given: the Tidelog service's servicer (its methods take a
    pb request and a call context: node/api/servicer.py), and the node's parts they read."""

    config: NodeConfig
    servicer: Any
    controller: ControllerDriver
    routing: Routing


def kafka_registry(parts: KafkaParts) -> ApiRegistry:
    """Every served Kafka API, ready for the listener."""
    registry = ApiRegistry()
    add_api_versions(registry)
    add_metadata(registry, parts.config, parts.servicer, parts.controller, parts.routing)
    add_produce(registry, parts.servicer, parts.routing)
    add_fetch(registry, parts.servicer)
    add_topics(registry, parts.servicer, parts.controller)
    add_configs(registry, parts.servicer)
    add_acls(registry, parts.servicer)
    add_cluster(registry, parts.servicer, parts.controller, parts.routing)
    add_cluster_admin(registry, parts.config, parts.servicer, parts.controller, parts.routing)
    add_groups(registry, parts.servicer, parts.routing)
    add_transactions(registry, parts.servicer)
    add_classic_members(registry, parts.servicer)
    add_consumer_groups(registry, parts.servicer, parts.controller)
    add_sasl(registry)
    add_scram_credentials(registry, parts.servicer)
    return registry
