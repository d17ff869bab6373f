"""DescribeConfigs (key 32) v1-4, IncrementalAlterConfigs (44) v0-1 and AlterConfigs (33) v0-2,
onto Tidelog's DescribeConfigs and IncrementalAlterConfigs handlers (node/api/admin.py), which
authorize, validate (INVALID_CONFIG for an unknown key or a bad value), honour
``validate_only`` and choose the error codes.

DescribeConfigs lists every config of a topic or a node, each with its value and its source
(the topic's own, the node's dynamic config, every node's dynamic default, the node's
properties, the built-in default), as Kafka does; with ``include_synonyms`` each config has
itself as its one synonym. Topic configs have Kafka's types for them; a node's other settings
are of type UNKNOWN, and no config has documentation (null). A node also lists Kafka's
``advertised.listeners`` (read-only, static), the Kafka listener's address as its settings
give it (``PROTOCOL://host:port`` from kafka.advertised.address and kafka.security.protocol),
since Kafka's tools read the address a broker publishes under that name.
A node's configs are described by that node (Kafka clients send the request there), and the
node default (the resource named "") by any node.

AlterConfigs replaces a resource's whole dynamic config: every config it does not name goes
back to its default. It becomes one IncrementalAlterConfigs on the controller, SET for the
configs named and DELETE for every other topic or dynamic node config, so the replacement
commits at once or not at all.
"""

from __future__ import annotations

import datetime
from typing import Any

from tidelog.configs import AlterConfigOpType
from tidelog.node.api.admin import TOPIC_KEYS
from tidelog.node.config import DYNAMIC_KEYS
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.changes import error_message
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

DESCRIBE_CONFIGS_KEY, ALTER_CONFIGS_KEY, INCREMENTAL_ALTER_CONFIGS_KEY = 32, 33, 44
#: Every config AlterConfigs may replace: the topic configs (of a topic, or a node's topic
#: defaults) and the node configs that are dynamic.
_REPLACEABLE = sorted(TOPIC_KEYS | DYNAMIC_KEYS)
_NO_THROTTLE = datetime.timedelta(0)
#: Kafka's ConfigType codes of the topic configs (Kafka's own types for the same names), so
#: that clients show and check them as Kafka's; a node's other settings are UNKNOWN (0).
_STRING, _INT, _LONG, _LIST = 2, 3, 5, 7
_TOPIC_CONFIG_TYPES = {
    "cleanup.policy": _LIST, "compression.type": _STRING, "delete.retention.ms": _LONG,
    "flush.messages": _LONG, "flush.ms": _LONG, "index.interval.bytes": _INT,
    "max.message.bytes": _INT, "message.timestamp.after.max.ms": _LONG,
    "message.timestamp.before.max.ms": _LONG, "message.timestamp.type": _STRING,
    "min.insync.replicas": _INT, "retention.bytes": _LONG, "retention.ms": _LONG,
    "segment.bytes": _INT, "segment.index.bytes": _INT, "segment.ms": _LONG,
}
_UNKNOWN_TYPE = 0
_BROKER_RESOURCE, _STATIC_BROKER_CONFIG = 4, 4
#: Kafka's name for the address a broker publishes, and the node settings it is made of.
_ADVERTISED_LISTENERS = "advertised.listeners"
_LISTENER_SETTINGS = ("kafka.advertised.address", "kafka.security.protocol", "security.protocol")


class ConfigsAdapter:
    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer

    async def describe_configs(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_CONFIGS_KEY, call.api_version)
        result_type = entity_of(response, "DescribeConfigsResult")
        entry_type = entity_of(response, "DescribeConfigsResourceResult")
        synonym_type = entity_of(response, "DescribeConfigsSynonym")
        answer: pb.DescribeConfigsResponse = await self._servicer.DescribeConfigs(
            pb.DescribeConfigsRequest(resources=[
                pb.DescribeConfigsResource(
                    resource_type=r.resource_type, resource_name=r.resource_name,
                    configuration_keys=(
                        (*r.configuration_keys, *_LISTENER_SETTINGS)
                        if _ADVERTISED_LISTENERS in (r.configuration_keys or ())
                        else r.configuration_keys or ()
                    ),
                )
                for r in request.resources
            ]),
            call,
        )
        results = []
        for asked, result in zip(request.resources, answer.results, strict=True):
            # Kafka: null keys are every config, an empty list none (Tidelog's empty is all).
            wanted = None if asked.configuration_keys is None else set(asked.configuration_keys)
            entries = []
            for entry in result.configs:
                if wanted is not None and entry.name not in wanted:
                    continue
                value = entry.value if entry.HasField("value") else None
                synonyms = (
                    (build(synonym_type, name=entry.name, value=value,
                           source=entry.config_source),)
                    if request.include_synonyms else ()
                )
                entries.append(build(
                    entry_type, name=entry.name, value=value, read_only=entry.read_only,
                    config_source=entry.config_source, is_sensitive=entry.is_sensitive,
                    synonyms=synonyms, documentation=None,
                    config_type=_TOPIC_CONFIG_TYPES.get(entry.name, _UNKNOWN_TYPE),
                ))
            listeners = _advertised_listeners(result)
            if listeners is not None and (wanted is None or _ADVERTISED_LISTENERS in wanted):
                entries.append(build(
                    entry_type, name=_ADVERTISED_LISTENERS, value=listeners, read_only=True,
                    config_source=_STATIC_BROKER_CONFIG, is_sensitive=False,
                    synonyms=(build(synonym_type, name=_ADVERTISED_LISTENERS, value=listeners,
                                    source=_STATIC_BROKER_CONFIG),)
                    if request.include_synonyms else (),
                    documentation=None, config_type=_STRING,
                ))
            results.append(build(
                result_type, error_code=error_code(result.error_code),
                error_message=error_message(result.error_message),
                resource_type=result.resource_type, resource_name=result.resource_name,
                configs=tuple(entries),
            ))
        return build(response, throttle_time=_NO_THROTTLE, results=tuple(results))

    async def incremental_alter_configs(self, request: Any, call: KafkaCall) -> Any:
        resources = [
            pb.AlterConfigsResource(
                resource_type=r.resource_type, resource_name=r.resource_name,
                configs=[
                    pb.AlterableConfig(name=c.name, config_operation=c.config_operation,
                                       value=c.value)
                    for c in r.configs
                ],
            )
            for r in request.resources
        ]
        return await self._alter(INCREMENTAL_ALTER_CONFIGS_KEY, resources, request, call)

    async def alter_configs(self, request: Any, call: KafkaCall) -> Any:
        resources = []
        for r in request.resources:
            named = {c.name for c in r.configs}
            configs = [
                pb.AlterableConfig(name=c.name, config_operation=AlterConfigOpType.SET,
                                   value=c.value)
                for c in r.configs
            ]
            configs += [
                pb.AlterableConfig(name=key, config_operation=AlterConfigOpType.DELETE)
                for key in _REPLACEABLE if key not in named
            ]
            resources.append(pb.AlterConfigsResource(
                resource_type=r.resource_type, resource_name=r.resource_name, configs=configs
            ))
        return await self._alter(ALTER_CONFIGS_KEY, resources, request, call)

    async def _alter(
        self, api_key: int, resources: list[pb.AlterConfigsResource], request: Any,
        call: KafkaCall,
    ) -> Any:
        """Both alters' answer (their responses have the same shape)."""
        response = response_type(api_key, call.api_version)
        result_type = entity_of(response, "AlterConfigsResourceResponse")
        answer: pb.IncrementalAlterConfigsResponse = (
            await self._servicer.IncrementalAlterConfigs(
                pb.IncrementalAlterConfigsRequest(
                    resources=resources, validate_only=request.validate_only
                ),
                call,
            )
        )
        return build(response, throttle_time=_NO_THROTTLE, responses=tuple(
            build(result_type, error_code=error_code(r.error_code),
                  error_message=error_message(r.error_message),
                  resource_type=r.resource_type, resource_name=r.resource_name)
            for r in answer.responses
        ))


def _advertised_listeners(result: pb.DescribeConfigsResult) -> str | None:
    """Kafka's advertised.listeners of a node's described configs (None: not a node's, or it
    has no Kafka listener)."""
    if result.resource_type != _BROKER_RESOURCE or not result.resource_name or result.error_code:
        return None
    settings = {c.name: c.value for c in result.configs if c.HasField("value")}
    address = settings.get("kafka.advertised.address")
    if not address:
        return None
    protocol = settings.get("kafka.security.protocol") or settings.get("security.protocol")
    return f"{protocol or 'PLAINTEXT'}://{address}"


def add_configs(registry: ApiRegistry, servicer: Any) -> None:
    adapter = ConfigsAdapter(servicer)
    registry.add(DESCRIBE_CONFIGS_KEY, 1, 4, adapter.describe_configs)
    registry.add(ALTER_CONFIGS_KEY, 0, 2, adapter.alter_configs)
    registry.add(INCREMENTAL_ALTER_CONFIGS_KEY, 0, 1, adapter.incremental_alter_configs)
