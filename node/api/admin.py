"""CreatePartitions, DescribeConfigs and IncrementalAlterConfigs (Kafka's apis 37, 32, 44).

Changes go through the controller as topic creations do (any node forwards them there): the
controller leader checks the caller's rights (ALTER on a topic to add partitions,
ALTER_CONFIGS on a topic or the cluster), plans the records on its image
(`MetadataImage.plan_create_partitions` / `plan_alter_configs`: PartitionRecord, ConfigRecord)
and commits them; every node applies them, opens the new replicas assigned to it and hands
changed configs to its running logs (`ControllerDriver._reconcile`). DescribeConfigs is
answered from the answering node's image and its own properties.

A value's layers, most specific first, as Kafka's: a topic's own config (DYNAMIC_TOPIC_CONFIG),
this node's dynamic config (DYNAMIC_BROKER_CONFIG), every node's dynamic default
(DYNAMIC_DEFAULT_BROKER_CONFIG), the node's properties (STATIC_BROKER_CONFIG), the built-in
default (DEFAULT_CONFIG). The dynamic node configs are the topic defaults (every topic config
name, as Kafka's dynamic log.* settings); the node's other settings are read-only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.configs import ConfigResourceType, ConfigSource
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.controller_api import ControllerApi, ControllerForward, check_topic
from tidelog.node.api.forwarding import at_controller, change_timeout_s
from tidelog.node.api.rules import each_once
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.config import DYNAMIC_KEYS, KEYS, NodeConfig
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.storage import LogConfig
from tidelog.v1 import tidelog_pb2 as pb

#: Every topic config; as node configs, the topic defaults, the node configs that are dynamic.
TOPIC_KEYS = LogConfig.property_names()
_BUILT_IN = LogConfig().to_kafka_props()
#: NodeConfig field -> its default (None for the required fields and the collections, which
#: count as set when not empty).
_FIELD_DEFAULTS = {
    f.name: None if f.default is dataclasses.MISSING else f.default
    for f in dataclasses.fields(NodeConfig)
}


class AdminApi(ControllerApi):
    def __init__(
        self,
        config: NodeConfig,
        controller: ControllerDriver,
        replicas: ReplicaSet,
        authorization: Authorization,
        forward: ControllerForward,
    ) -> None:
        super().__init__(config, controller, authorization, forward)
        self.replicas = replicas

    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        return all_failed(method, request, exc)

    # ---- CreatePartitions ------------------------------------------------------------------

    @at_controller("CreatePartitions")
    async def create_partitions(
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePartitionsResponse:
        timeout_s = change_timeout_s(request)
        topics, twice = each_once((topic.name, topic) for topic in request.topics)
        refused = self.authorization.refusals(
            self.authorization.principal(context), Operation.ALTER, ResourceType.TOPIC, topics
        )
        response = pb.CreatePartitionsResponse()
        for name, topic in topics.items():
            result = response.results.add(name=name)
            assignment = [list(a.broker_ids) for a in topic.assignments] or None

            def plan(name: str = name, count: int = topic.count,
                     assignment: list[list[int]] | None = assignment) -> Any:
                check_topic(name, twice, refused)
                return self.controller.image.plan_create_partitions(
                    name, count, assignment, self.controller.placement_node_ids()
                )

            await self.change(result, plan, request.validate_only, timeout_s)
        return response

    # ---- IncrementalAlterConfigs -----------------------------------------------------------

    @at_controller("IncrementalAlterConfigs")
    async def incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.IncrementalAlterConfigsResponse:
        timeout_s = change_timeout_s(request)
        principal = self.authorization.principal(context)
        resources, twice = each_once(
            ((r.resource_type, r.resource_name), r) for r in request.resources
        )
        response = pb.IncrementalAlterConfigsResponse()
        for key, resource in resources.items():
            result = response.responses.add(resource_type=key[0], resource_name=key[1])
            ops = [
                (c.name, c.config_operation, c.value if c.HasField("value") else None)
                for c in resource.configs
            ]

            def plan(key: tuple[int, str] = key, ops: list[Any] = ops) -> Any:
                if key in twice:
                    raise errors.InvalidRequestError("the resource appears more than once")
                refusal = self._refused(principal, Operation.ALTER_CONFIGS, *key)
                if refusal is not None:
                    raise refusal
                resource_type, name = key
                return self.controller.image.plan_alter_configs(
                    resource_type, name, ops, self.controller.known_node_ids(),
                    self._effective_defaults(name if resource_type == ConfigResourceType.BROKER
                                             else str(self.config.node_id)),
                    _validator(resource_type, self.config),
                )

            await self.change(result, plan, request.validate_only, timeout_s)
        return response

    # ---- DescribeConfigs -------------------------------------------------------------------

    def describe_configs(
        self, request: pb.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        principal = self.authorization.principal(context)
        response = pb.DescribeConfigsResponse()
        for resource in request.resources:
            result = response.results.add(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            try:
                refusal = self._refused(principal, Operation.DESCRIBE_CONFIGS,
                                        resource.resource_type, resource.resource_name)
                if refusal is not None:
                    raise refusal
                entries = self._entries(resource.resource_type, resource.resource_name)
            except errors.TidelogError as exc:
                result.error_code, result.error_message = exc.code, str(exc)
                continue
            wanted = set(resource.configuration_keys)
            for name, (value, source, read_only) in sorted(entries.items()):
                if wanted and name not in wanted:
                    continue
                entry = result.configs.add(
                    name=name, read_only=read_only, config_source=source, is_sensitive=False
                )
                if value is not None:
                    entry.value = value
        return response

    def _entries(
        self, resource_type: int, name: str
    ) -> dict[str, tuple[str | None, ConfigSource, bool]]:
        """key -> (value, source, read only) of every config of the resource."""
        image = self.controller.image
        own = str(self.config.node_id)
        dynamic = image.configs_of(resource_type, name, self.controller.known_node_ids())
        if resource_type == ConfigResourceType.TOPIC:
            layers = self._layers(own)
            return {
                key: _layered(key, [(ConfigSource.DYNAMIC_TOPIC_CONFIG, dynamic), *layers])
                for key in TOPIC_KEYS
            }
        if name == "":  # every node's dynamic default: only what is set, as Kafka answers
            return {key: (value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
                    for key, value in dynamic.items()}
        if name != own:
            raise errors.InvalidRequestError(
                f"node {self.config.node_id} describes its own configs only; ask node {name}"
            )
        entries = {key: _layered(key, self._layers(own)) for key in TOPIC_KEYS}
        static = self.config.to_properties()
        node_configs = image.node_configs
        for key in DYNAMIC_KEYS:
            value = getattr(self.config, KEYS[key])
            entries[key] = _layered(key, [
                (ConfigSource.DYNAMIC_BROKER_CONFIG, node_configs.get(own, {})),
                (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, node_configs.get("", {})),
                (ConfigSource.STATIC_BROKER_CONFIG,
                 {} if value == _FIELD_DEFAULTS[KEYS[key]] else {key: static[key]}),
                (ConfigSource.DEFAULT_CONFIG, {key: static[key]}),
            ])
        for key, field_name in KEYS.items():
            if key in entries:
                continue
            value = getattr(self.config, field_name)
            default = _FIELD_DEFAULTS[field_name]
            is_default = value == default or (default is None and not value)
            entries[key] = (
                static.get(key),
                ConfigSource.DEFAULT_CONFIG if is_default else ConfigSource.STATIC_BROKER_CONFIG,
                True,
            )
        return entries

    def _layers(self, node: str) -> list[tuple[ConfigSource, dict[str, str]]]:
        """The node layers under a topic's own configs, most specific first."""
        node_configs = self.controller.image.node_configs
        return [
            (ConfigSource.DYNAMIC_BROKER_CONFIG, node_configs.get(node, {})),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, node_configs.get("", {})),
            (ConfigSource.STATIC_BROKER_CONFIG, self._static_topic_defaults()),
        ]

    def _static_topic_defaults(self) -> dict[str, str]:
        """The topic defaults the node's properties set, differing from the built-in ones."""
        return {key: value for key, value in self.replicas.static_topic_defaults().items()
                if _BUILT_IN.get(key) != value}

    def _effective_defaults(self, node: str) -> dict[str, str]:
        """The topic defaults in force for `node` ("" for every node's default): where APPEND
        and SUBTRACT start from when the resource has no value of its own."""
        layers = self._layers(node)[0 if node else 1 :]
        return {key: value for key in TOPIC_KEYS
                if (value := _layered(key, layers)[0]) is not None}

    def _refused(
        self, principal: str, operation: Operation, resource_type: int, name: str
    ) -> errors.AuthorizationError | None:
        if resource_type == ConfigResourceType.TOPIC:
            return self.authorization.refused(principal, operation, ResourceType.TOPIC, name)
        if resource_type == ConfigResourceType.BROKER:
            return self.authorization.cluster_refused(principal, operation)
        raise errors.InvalidRequestError(
            f"resource type {resource_type} has no configs here (2: topic, 4: node)"
        )


def _layered(
    key: str, layers: list[tuple[ConfigSource, dict[str, str]]]
) -> tuple[str | None, ConfigSource, bool]:
    """A topic config's (value, source, read only) from the most specific layer that has it:
    never read-only, every topic config being dynamic."""
    for source, configs in layers:
        if key in configs:
            return configs[key], source, False
    return _BUILT_IN.get(key), ConfigSource.DEFAULT_CONFIG, False


def _validator(resource_type: int, config: NodeConfig) -> Callable[[dict[str, str]], None]:
    """The rules a resource's dynamic configs must keep: topic configs that storage accepts;
    for a node, only the dynamic ones (the topic defaults and `DYNAMIC_KEYS`, whose values a
    node's properties would accept)."""

    def validate(configs: dict[str, str]) -> None:
        node_keys: frozenset[str] = frozenset()
        if resource_type == ConfigResourceType.BROKER:
            node_keys = DYNAMIC_KEYS
            fixed = sorted(key for key in configs
                           if key in KEYS and key not in TOPIC_KEYS and key not in node_keys)
            if fixed:
                raise errors.InvalidRequestError(
                    f"cannot update these configs dynamically: {', '.join(fixed)} (read-only "
                    "node settings: set them in the node's properties and restart it)"
                )
            config.with_dynamic(configs)
        for key in configs:
            if key not in TOPIC_KEYS and key not in node_keys:
                raise errors.InvalidConfigError(f"unknown config {key!r}")
        LogConfig.from_kafka_props({k: v for k, v in configs.items() if k in TOPIC_KEYS})

    return validate


def all_failed(method: str, request: Any, exc: errors.TidelogError) -> Any:
    """The answer of a change that could not reach the controller: `exc` for each item."""
    if method == "CreatePartitions":
        partitions = pb.CreatePartitionsResponse()
        for name in dict.fromkeys(topic.name for topic in request.topics):
            partitions.results.add(name=name, error_code=exc.code, error_message=str(exc))
        return partitions
    configs = pb.IncrementalAlterConfigsResponse()
    for key in dict.fromkeys((r.resource_type, r.resource_name) for r in request.resources):
        configs.responses.add(resource_type=key[0], resource_name=key[1], error_code=exc.code,
                              error_message=str(exc))
    return configs
