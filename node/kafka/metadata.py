"""Metadata (key 3), v0-12: Tidelog's own Metadata handler answers (node/api/topics.py, with its
authorization: a topic the caller may not describe is TOPIC_AUTHORIZATION_FAILED when asked for
by name and left out of "every topic"), and this adapter adds what only Kafka clients need:
each node's Kafka address as the brokers, the cluster id, topic ids, offline replicas.

A topic asked for by name that does not exist is UNKNOWN_TOPIC_OR_PARTITION, unless the node
has auto.create.topics.enable and the request allows it (allow_auto_topic_creation from v4 on,
always before): it is then created through Tidelog's CreateTopics handler (its authorization,
CREATE on the cluster or the topic, and its defaults, num.partitions and
default.replication.factor) and answered LEADER_NOT_AVAILABLE, as Kafka answers a topic it just
created (the client asks again); a topic that cannot be created gets CreateTopics' error.
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
from tidelog.node.config import NodeConfig
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


#: Metadata's first version with allow_auto_topic_creation; before it, creation is allowed.
_ALLOW_AUTO_CREATE_VERSION = 4
#: The leader epoch of a partition no leader has led yet: the epoch it was created in (the
#: first elected leader's is 1).
_CREATION_EPOCH = 0


def known_leader_epoch(epoch: int) -> int:
    """The leader epoch Kafka's answers name for a partition the node knows: its own, or
    ``_CREATION_EPOCH`` while it has not heard of a leader yet (the node without the replica
    hears of the first election a moment later). Never -1: Kafka never answers -1 for a
    partition it knows, and librdkafka takes -1 as "no epoch", which replaces whatever leader
    it cached, even one another node just named at a later epoch; its DeleteRecords and
    ListOffsets then fail at once with "No leaders found"."""
    return max(epoch, _CREATION_EPOCH)


class MetadataAdapter:
    def __init__(
        self, auto_create: bool, servicer: Any, controller: ControllerDriver, routing: Routing
    ) -> None:
        self._auto_create = auto_create
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
        created = await self._created(request, version, names, answer, call)
        image = self._controller.image  # the answer is of this image (or has the created too)
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
                if entry.name in created:
                    topics.append(build(
                        topic_type, error_code=created[entry.name], name=entry.name,
                        topic_id=uuid.UUID(int=0), is_internal=False, partitions=(),
                    ))
                    continue
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
                            leader_id=p.leader_id,
                            leader_epoch=known_leader_epoch(p.leader_epoch),
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


    async def _created(
        self, request: Any, version: int, names: list[str], answer: pb.MetadataResponse,
        call: KafkaCall,
    ) -> dict[str, ErrorCode]:
        """The topics asked for by name that did not exist and were auto-created now, each
        with its answer: LEADER_NOT_AVAILABLE once created (by this request or a concurrent
        one), else CreateTopics' error (TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION,
        ...)."""
        allowed = (version < _ALLOW_AUTO_CREATE_VERSION
                   or bool(getattr(request, "allow_auto_topic_creation", False)))
        if not (self._auto_create and allowed):
            return {}
        wanted = set(names)
        missing = [entry.name for entry in answer.topics if entry.name in wanted
                   and entry.error_code == ErrorCode.unknown_topic_or_partition]
        if not missing:
            return {}
        result: pb.CreateTopicsResponse = await self._servicer.CreateTopics(
            pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name=name) for name in missing]),
            call,
        )
        return {
            r.name: (ErrorCode.leader_not_available
                     if r.error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
                     else error_code(r.error_code))
            for r in result.topics
        }


def add_metadata(
    registry: ApiRegistry, config: NodeConfig, servicer: Any, controller: ControllerDriver,
    routing: Routing,
) -> None:
    registry.add(
        METADATA_KEY, MIN_VERSION, MAX_VERSION,
        MetadataAdapter(config.auto_create_topics_enable, servicer, controller, routing).handle,
    )
