"""Fetch (key 1), v4-12, ListOffsets (key 2), v1-10, and OffsetForLeaderEpoch (key 23), v2-4:
Tidelog's own handlers answer (node/api/data_plane.py's fetch, list_offsets and
offsets_for_leader_epoch, with their authorization, long poll, bounds and error codes); this
adapter only translates.

Fetch returns the stored batches as they are: whole batches, the first one from its start even
when the fetch offset is inside it (a Kafka consumer skips the records below its position, as
with any Kafka broker), control batches included; read_committed reads up to the last stable
offset and gets the aborted transactions of what it read.

Fetch sessions (KIP-227) are not kept, as a Kafka broker whose session cache has no slots: a
full fetch (session epoch 0 or -1) is served and answered with session id 0, which tells the
client that no session was made, so that it sends full fetches again; an incremental fetch
(any other epoch) names a session the node cannot have and gets FETCH_SESSION_ID_NOT_FOUND.

OffsetForLeaderEpoch, v2-4, is what a consumer asks after a leader change to check that its
position is still in the log (KIP-320): the leader's data-plane handler answers it. It is
answered as to a consumer whatever the request's replica id (Tidelog's replicas do not use it).

ListOffsets serves every lookup Tidelog's handler has (earliest -2, latest -1, max timestamp
-3, earliest local -4, latest tiered -5, by timestamp), under either isolation level (the
latest offset is the high watermark or the last stable offset). As Kafka (3.9 on), a special
timestamp in a request older than the version that brought it (-3 before v7, -4 before v8, -5
before v9) is UNSUPPORTED_VERSION for that partition; v10's timeout_ms bounds lookups in
tiered storage, which Tidelog has not, so it is read and not needed.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code, millis
from tidelog.node.kafka.produce import leader_of
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.types import (
    EARLIEST_LOCAL_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    MAX_TIMESTAMP,
    IsolationLevel,
    TopicPartition,
)
from tidelog.v1 import tidelog_pb2 as pb

FETCH_KEY = 1
FETCH_VERSIONS = (4, 12)
LIST_OFFSETS_KEY = 2
LIST_OFFSETS_VERSIONS = (1, 10)
#: The first ListOffsets version that may ask each special timestamp.
_SPECIAL_SINCE = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}
OFFSET_FOR_LEADER_EPOCH_KEY = 23
OFFSET_FOR_LEADER_EPOCH_VERSIONS = (2, 4)
#: The session epochs of a full fetch: 0 asks for a new session, -1 for none (KIP-227).
_FULL_FETCH_EPOCHS = (0, -1)
#: The session id that says "no session" (Kafka's INVALID_SESSION_ID).
_NO_SESSION = 0


async def fetch(servicer: Any, request: Any, call: KafkaCall) -> Any:
    response = response_type(FETCH_KEY, call.api_version)
    if getattr(request, "session_epoch", -1) not in _FULL_FETCH_EPOCHS:
        return build(
            response, throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.fetch_session_id_not_found, session_id=_NO_SESSION,
            responses=(),
        )
    asked = pb.FetchRequest(
        replica_id=request.replica_id,
        max_wait_ms=max(millis(request.max_wait), 0),
        min_bytes=max(request.min_bytes, 0),
        max_bytes=max(request.max_bytes, 0),
        isolation_level=request.isolation_level,
        topics=[
            pb.FetchTopic(name=topic.topic, partitions=[
                pb.FetchPartition(
                    partition=part.partition,
                    current_leader_epoch=getattr(part, "current_leader_epoch", -1),
                    fetch_offset=part.fetch_offset,
                    partition_max_bytes=max(part.partition_max_bytes, 0),
                )
                for part in topic.partitions
            ])
            for topic in request.topics
        ],
    )
    answer: pb.FetchResponse = await servicer.Fetch(asked, call)
    committed = request.isolation_level == IsolationLevel.READ_COMMITTED
    topic_type = entity_of(response, "FetchableTopicResponse")
    part_type = entity_of(response, "PartitionData")
    aborted_type = entity_of(response, "AbortedTransaction")
    return build(
        response,
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=_NO_SESSION,
        responses=tuple(
            build(topic_type, topic=topic.name, partitions=tuple(
                build(
                    part_type,
                    partition_index=part.partition, error_code=error_code(part.error_code),
                    high_watermark=part.high_watermark,
                    last_stable_offset=part.last_stable_offset,
                    log_start_offset=part.log_start_offset,
                    aborted_transactions=tuple(
                        aborted_type(producer_id=txn.producer_id,
                                     first_offset=txn.first_offset)
                        for txn in part.aborted_transactions
                    ) if committed else None,
                    preferred_read_replica=-1,
                    records=part.records,
                    current_leader=leader_of(
                        response, "LeaderIdAndEpoch",
                        part.current_leader if part.HasField("current_leader") else None,
                    ),
                )
                for part in topic.partitions
            ))
            for topic in answer.topics
        ),
    )


async def list_offsets(servicer: Any, request: Any, call: KafkaCall) -> Any:
    version = call.api_version
    too_new = {  # (topic, partition) asking a special timestamp its version does not have
        (topic.name, part.partition_index)
        for topic in request.topics for part in topic.partitions
        if version < _SPECIAL_SINCE.get(part.timestamp, 0)
    }
    asked = pb.ListOffsetsRequest(
        replica_id=request.replica_id,
        # v1 has no isolation level: read_uncommitted, as Kafka reads it.
        isolation_level=getattr(request, "isolation_level", IsolationLevel.READ_UNCOMMITTED),
        topics=[
            pb.ListOffsetsTopic(name=topic.name, partitions=[
                pb.ListOffsetsPartition(
                    partition=part.partition_index,
                    current_leader_epoch=getattr(part, "current_leader_epoch", -1),
                    timestamp=part.timestamp,
                )
                for part in topic.partitions
                if (topic.name, part.partition_index) not in too_new
            ])
            for topic in request.topics
        ],
    )
    answer: pb.ListOffsetsResponse = await servicer.ListOffsets(asked, call)
    response = response_type(LIST_OFFSETS_KEY, version)
    topic_type = entity_of(response, "ListOffsetsTopicResponse")
    part_type = entity_of(response, "ListOffsetsPartitionResponse")
    answered: dict[str, list[Any]] = {}
    for topic in answer.topics:
        answered.setdefault(topic.name, []).extend(
            build(
                part_type,
                partition_index=part.partition, error_code=error_code(part.error_code),
                timestamp=part.timestamp, offset=part.offset, leader_epoch=part.leader_epoch,
            )
            for part in topic.partitions
        )
    for name, partition in sorted(too_new):
        answered.setdefault(name, []).append(build(
            part_type, partition_index=partition, error_code=ErrorCode.unsupported_version,
            timestamp=-1, offset=-1, leader_epoch=-1,
        ))
    return build(
        response,
        throttle_time=datetime.timedelta(0),
        topics=tuple(build(topic_type, name=name, partitions=tuple(parts))
                     for name, parts in answered.items()),
    )


async def offset_for_leader_epoch(servicer: Any, request: Any, call: KafkaCall) -> Any:
    answers = servicer.data_plane.offsets_for_leader_epoch(call, [
        (TopicPartition(topic.topic, part.partition),
         getattr(part, "current_leader_epoch", -1), part.leader_epoch)
        for topic in request.topics for part in topic.partitions
    ])
    response = response_type(OFFSET_FOR_LEADER_EPOCH_KEY, call.api_version)
    topic_type = entity_of(response, "OffsetForLeaderTopicResult")
    part_type = entity_of(response, "EpochEndOffset")
    by_topic: dict[str, list[Any]] = {}
    for tp, code, epoch, end in answers:
        by_topic.setdefault(tp.topic, []).append(build(
            part_type, error_code=error_code(code), partition=tp.partition,
            leader_epoch=epoch, end_offset=end,
        ))
    return build(
        response, throttle_time=datetime.timedelta(0),
        topics=tuple(build(topic_type, topic=topic, partitions=tuple(parts))
                     for topic, parts in by_topic.items()),
    )


def add_fetch(registry: ApiRegistry, servicer: Any) -> None:
    async def handle_fetch(request: Any, call: KafkaCall) -> Any:
        return await fetch(servicer, request, call)

    async def handle_list_offsets(request: Any, call: KafkaCall) -> Any:
        return await list_offsets(servicer, request, call)

    async def handle_offset_for_leader_epoch(request: Any, call: KafkaCall) -> Any:
        return await offset_for_leader_epoch(servicer, request, call)

    registry.add(FETCH_KEY, *FETCH_VERSIONS, handle_fetch)
    registry.add(LIST_OFFSETS_KEY, *LIST_OFFSETS_VERSIONS, handle_list_offsets)
    registry.add(OFFSET_FOR_LEADER_EPOCH_KEY, *OFFSET_FOR_LEADER_EPOCH_VERSIONS,
                 handle_offset_for_leader_epoch)
