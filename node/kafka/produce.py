"""Produce (key 0), v3-10, and InitProducerId (key 22), v0-4: Tidelog's own handlers answer
(node/api/data_plane.py's produce, node/api/transactions.py's init_producer_id), with their
authorization, validation and error codes; this adapter only translates.

A Kafka producer's batch is Tidelog's batch (both are Kafka's v2 record batches), so each
partition's record bytes go to the leader untouched: the leader validates them, assigns their
offsets and stores them as they came (compressed or not). Produce is answered at the ceiling
of Kafka 4.0's versions that do not carry transactions v2 (v12 would tell clients the node
speaks it); acks=0 gets no answer, as Kafka sends none.

A partition this node does not lead gets NOT_LEADER_OR_FOLLOWER with the leader and its epoch
(v10's ``current_leader``) and the leader's Kafka address in ``node_endpoints`` (KIP-951), so
a client can go there without asking for metadata first.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.coordinator.metadata_records import split_address
from tidelog.node.cluster.routing import Routing
from tidelog.node.edge.limits import CLIENT_LIMITS
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import (
    build,
    entity_if,
    entity_of,
    error_code,
    millis,
    timestamp,
)
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.node.kafka.transactions import older_fenced
from tidelog.v1 import tidelog_pb2 as pb

PRODUCE_KEY = 0
PRODUCE_VERSIONS = (3, 10)
INIT_PRODUCER_ID_KEY = 22
INIT_PRODUCER_ID_VERSIONS = (0, 4)


def leader_of(response: type[Any], entity: str, hint: pb.LeaderHint | None) -> Any:
    """The ``current_leader`` tagged field (`entity` of `response`'s version) of a partition's
    answer: the leader and epoch of `hint`, or "unknown" (-1, -1) without one; None for a
    version without the field."""
    leader_type = entity_if(response, entity)
    if leader_type is None:
        return None
    if hint is None:
        return leader_type()
    return leader_type(leader_id=hint.leader_id, leader_epoch=hint.leader_epoch)


class ProduceAdapter:
    def __init__(self, servicer: Any, routing: Routing) -> None:
        self._servicer = servicer
        self._routing = routing

    async def handle(self, request: Any, call: KafkaCall) -> Any | None:
        asked = pb.ProduceRequest(
            acks=request.acks,
            timeout_ms=max(millis(request.timeout), 0),
            topics=[
                pb.TopicProduceData(name=topic.name, partitions=[
                    pb.PartitionProduceData(partition=part.index, records=part.records or b"")
                    for part in topic.partition_data
                ])
                for topic in request.topic_data
            ],
        )
        if request.transactional_id is not None:
            asked.transactional_id = request.transactional_id
        answer: pb.ProduceResponse = await self._servicer.Produce(asked, call)
        if request.acks == 0:
            return None
        response = response_type(PRODUCE_KEY, call.api_version)
        topic_type = entity_of(response, "TopicProduceResponse")
        part_type = entity_of(response, "PartitionProduceResponse")
        leaders: set[int] = set()
        topics = []
        for topic in answer.topics:
            parts = []
            for part in topic.partitions:
                hint = part.current_leader if part.HasField("current_leader") else None
                if hint is not None and hint.leader_id >= 0:
                    leaders.add(hint.leader_id)
                parts.append(build(
                    part_type,
                    index=part.partition, error_code=error_code(part.error_code),
                    base_offset=part.base_offset,
                    log_append_time=timestamp(part.log_append_time_ms),
                    log_start_offset=part.log_start_offset, record_errors=(),
                    error_message=part.error_message or None,
                    current_leader=leader_of(response, "LeaderIdAndEpoch", hint),
                ))
            topics.append(build(topic_type, name=topic.name, partition_responses=tuple(parts)))
        return build(
            response,
            responses=tuple(topics), throttle_time=datetime.timedelta(0),
            node_endpoints=self._endpoints(response, leaders),
        )

    def _endpoints(self, response: type[Any], node_ids: set[int]) -> tuple[Any, ...]:
        """The Kafka addresses of `node_ids` that have one (v10's ``node_endpoints``)."""
        endpoint_type = entity_if(response, "NodeEndpoint")
        if endpoint_type is None:
            return ()
        endpoints = []
        for node_id in sorted(node_ids):
            parts = split_address(self._routing.kafka_address_of(node_id))
            if parts is not None:
                endpoints.append(
                    endpoint_type(node_id=node_id, host=parts[0], port=parts[1], rack=None)
                )
        return tuple(endpoints)


async def init_producer_id(servicer: Any, request: Any, call: KafkaCall) -> Any:
    """An idempotent producer's id (no transactional id) or a transactional one's, from the
    Tidelog handler (which forwards a transactional id to its coordinator)."""
    asked = pb.InitProducerIdRequest(
        transaction_timeout_ms=max(millis(request.transaction_timeout), 0),
        producer_id=getattr(request, "producer_id", -1),
        producer_epoch=getattr(request, "producer_epoch", -1),
    )
    response = response_type(INIT_PRODUCER_ID_KEY, call.api_version)
    if request.transactional_id is not None:
        if asked.transaction_timeout_ms <= 0:
            # Kafka's check; Tidelog's request reads 0 as "the default timeout".
            return build(response, throttle_time=datetime.timedelta(0),
                         error_code=ErrorCode.invalid_transaction_timeout,
                         producer_id=-1, producer_epoch=-1)
        asked.transactional_id = request.transactional_id
    answer: pb.InitProducerIdResponse = await servicer.InitProducerId(asked, call)
    return build(
        response,
        throttle_time=datetime.timedelta(0), error_code=older_fenced(answer.error_code, call),
        producer_id=answer.producer_id, producer_epoch=answer.producer_epoch,
    )


def add_produce(registry: ApiRegistry, servicer: Any, routing: Routing) -> None:
    registry.add(
        PRODUCE_KEY, *PRODUCE_VERSIONS, ProduceAdapter(servicer, routing).handle,
        max_request_bytes=CLIENT_LIMITS["Produce"],
    )

    async def handle_init_producer_id(request: Any, call: KafkaCall) -> Any:
        return await init_producer_id(servicer, request, call)

    registry.add(INIT_PRODUCER_ID_KEY, *INIT_PRODUCER_ID_VERSIONS, handle_init_producer_id)
