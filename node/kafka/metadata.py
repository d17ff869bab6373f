"""Metadata (key 3), v0-12: Tidelog's own Metadata handler answers (node/api/topics.py, with its
authorization: a topic the caller may not describe is TOPIC_AUTHORIZATION_FAILED when asked for
by name and left out of "every topic"), and this adapter adds what only Kafka clients need:
each node's Kafka address as the brokers, the cluster id, topic ids, offline replicas.

Topics are never created by Metadata here (Tidelog has no auto.create.topics.enable): a topic
that does not exist is UNKNOWN_TOPIC_OR_PARTITION whatever allow_auto_topic_creation says.
Topic ids are Tidelog's (the metadata log numbers topics 1, 2, ... and never reuses one) in a
UUID whose high half is `TOPIC_ID_HIGH`, so an id names its topic in both directions.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.coordinator.metadata_records import split_address
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

METADATA_KEY = 3
MIN_VERSION, MAX_VERSION = 0, 12
#: The high 64 bits of every topic id: "tidelog!" in ASCII.
TOPIC_ID_HIGH = int.from_bytes(b"tidelog!", "big")


def topic_uuid(topic_id: int) -> uuid.UUID:
    """The Kafka topic id of Tidelog topic id `topic_id` (>= 1)."""
    return uuid.UUID(int=(TOPIC_ID_HIGH << 64) | topic_id)


def tidelog_topic_id(topic: uuid.UUID | None) -> int:
    """The Tidelog topic id a Kafka topic id names; 0 (no topic) for any other UUID."""
    if topic is None or topic.int >> 64 != TOPIC_ID_HIGH:
        return 0
    return topic.int & ((1 << 64) - 1)


class MetadataAdapter:
    def __init__(self, servicer: Any, controller: ControllerDriver, routing: Routing) -> None:
        self._servicer = servicer
        self._controller = controller
        self._routing = routing

    async def handle(self, request: Any, call: KafkaCall) -> Any:
        version = call.api_version
        response = response_type(METADATA_KEY, version)
        wanted = request.topics
        # v0: an empty list is every topic; from v1 on, null is every topic, empty is none.
        every = wanted is None or (version == 0 and not wanted)
        names: list[str] = []
        unknown_ids: list[uuid.UUID] = []
        image = self._controller.image
        by_id = {topic.topic_id: name for name, topic in image.topics.items()}
        for topic in wanted or ():
            name = getattr(topic, "name", None)
            if name is None:
                name = by_id.get(tidelog_topic_id(topic.topic_id))
                if name is None:
                    unknown_ids.append(topic.topic_id)
                    continue
            names.append(name)
        answer: pb.MetadataResponse = await self._servicer.Metadata(
            pb.MetadataRequest(topics=list(dict.fromkeys(names))), call
        )
        image = self._controller.image  # the answer is of this image: nothing awaited since
        alive = {node.node_id for node in answer.nodes if not node.is_fenced}
        brokers = []
        broker_type = entity_of(response, "MetadataResponseBroker")
        for node in answer.nodes:
            parts = split_address(self._routing.kafka_address_of(node.node_id))
            if parts is not None:
                brokers.append(build(broker_type, node_id=node.node_id, host=parts[0],
                                     port=parts[1], rack=None))
        topic_type = entity_of(response, "MetadataResponseTopic")
        partition_type = entity_of(response, "MetadataResponsePartition")
        topics = []
        if every or names:
            for entry in answer.topics:
                known = image.topics.get(entry.name)
                topics.append(build(
                    topic_type,
                    error_code=error_code(entry.error_code), name=entry.name,
                    topic_id=topic_uuid(known.topic_id) if known else uuid.UUID(int=0),
                    is_internal=entry.is_internal,
                    partitions=tuple(
                        build(
                            partition_type,
                            error_code=error_code(p.error_code), partition_index=p.partition,
                            leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                            replica_nodes=tuple(p.replicas), isr_nodes=tuple(p.isr),
                            offline_replicas=tuple(r for r in p.replicas if r not in alive),
                        )
                        for p in entry.partitions
                    ),
                ))
        for topic_id in unknown_ids:
            topics.append(build(
                topic_type, error_code=ErrorCode.unknown_topic_id,
                name=None if version >= 12 else "", topic_id=topic_id, partitions=(),
            ))
        return build(
            response,
            throttle_time=datetime.timedelta(0), brokers=tuple(brokers),
            cluster_id=image.cluster_id or None,
            controller_id=answer.controller_id, topics=tuple(topics),
        )


def add_metadata(
    registry: ApiRegistry, servicer: Any, controller: ControllerDriver, routing: Routing
) -> None:
    registry.add(
        METADATA_KEY, MIN_VERSION, MAX_VERSION,
        MetadataAdapter(servicer, controller, routing).handle,
    )
