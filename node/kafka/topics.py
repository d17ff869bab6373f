"""CreateTopics (key 19) v2-7, DeleteTopics (20) v1-6, CreatePartitions (37) v0-3 and
DeleteRecords (21) v0-2, onto Tidelog's handlers of the same names (node/api/topics.py,
admin.py, records.py), which authorize, validate, forward to the controller and choose the
error codes; ``validate_only`` is theirs too.

What only the adapter decides, because Tidelog's request cannot say it:

- a CreateTopics topic with manual replica assignments is INVALID_REPLICA_ASSIGNMENT (39):
  Tidelog places replicas itself (give the partition count and replication factor instead);
- a CreateTopics config with a null value is INVALID_CONFIG (40), as Kafka answers it;
- DeleteTopics v6 names topics by id too: an id that names no topic is UNKNOWN_TOPIC_ID
  (100). A topic named twice (by name and by id, say) is INVALID_REQUEST (42) from Tidelog's
  handler, as any name given twice.

CreateTopics v5 and later answers carry each created topic's id, partition count and
replication factor, but no configs (an empty list: DescribeConfigs lists them with their
sources). The id is read from the answering node's image: Kafka clients send CreateTopics to
the controller Metadata names, whose image has the topic once it answers; a node that forwarded
the request there may not have applied it yet, and answers the null id then.

DeleteRecords goes to each partition's leader, as Kafka clients send it; a node that does not
lead a partition answers NOT_LEADER_OR_FOLLOWER (6) for it.
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.changes import change_timeout_ms, error_message
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code
from tidelog.node.kafka.metadata import tidelog_topic_id, topic_uuid
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

CREATE_TOPICS_KEY, DELETE_TOPICS_KEY, DELETE_RECORDS_KEY, CREATE_PARTITIONS_KEY = 19, 20, 21, 37
_NO_ID = uuid.UUID(int=0)
_NO_THROTTLE = datetime.timedelta(0)


class TopicsAdapter:
    def __init__(self, servicer: Any, controller: ControllerDriver) -> None:
        self._servicer = servicer
        self._controller = controller

    def _topic_id(self, name: str | None) -> uuid.UUID:
        topic = self._controller.image.topics.get(name or "")
        return topic_uuid(topic.topic_id) if topic is not None else _NO_ID

    async def create_topics(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(CREATE_TOPICS_KEY, call.api_version)
        result_type = entity_of(response, "CreatableTopicResult")
        given = Counter(topic.name for topic in request.topics)
        refused: dict[str, tuple[ErrorCode, str]] = {}
        creatable = []
        for topic in request.topics:
            # A name given twice goes to the handler whole, which refuses it as a duplicate.
            if given[topic.name] == 1 and topic.assignments:
                refused[topic.name] = (
                    ErrorCode.invalid_replica_assignment,
                    "Tidelog places replicas itself: give num_partitions and "
                    "replication_factor instead of replica assignments",
                )
            elif given[topic.name] == 1 and any(c.value is None for c in topic.configs):
                refused[topic.name] = (
                    ErrorCode.invalid_config, "null value not supported for topic configs"
                )
            else:
                creatable.append(pb.CreatableTopic(
                    name=topic.name, num_partitions=topic.num_partitions,
                    replication_factor=topic.replication_factor,
                    configs={c.name: c.value for c in topic.configs if c.value is not None},
                ))
        answer: pb.CreateTopicsResponse = await self._servicer.CreateTopics(
            pb.CreateTopicsRequest(
                topics=creatable, validate_only=request.validate_only,
                timeout_ms=change_timeout_ms(call, request.timeout),
            ),
            call,
        )
        results = {
            r.name: build(
                result_type, name=r.name, error_code=error_code(r.error_code),
                error_message=error_message(r.error_message), topic_config_error_code=0,
                topic_id=(_NO_ID if r.error_code or request.validate_only
                          else self._topic_id(r.name)),
                num_partitions=r.num_partitions, replication_factor=r.replication_factor,
                configs=None if r.error_code else (),
            )
            for r in answer.topics
        }
        for name, (code, message) in refused.items():
            results[name] = build(
                result_type, name=name, error_code=code, error_message=message,
                topic_config_error_code=0, topic_id=_NO_ID, num_partitions=-1,
                replication_factor=-1, configs=None,
            )
        return build(
            response, throttle_time=_NO_THROTTLE,
            topics=tuple(results[name] for name in given if name in results),
        )

    async def delete_topics(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DELETE_TOPICS_KEY, call.api_version)
        result_type = entity_of(response, "DeletableTopicResult")
        unknown_ids: list[uuid.UUID] = []
        ids: dict[str, uuid.UUID] = {}
        if hasattr(request, "topic_names"):
            names = list(request.topic_names)
        else:  # v6: by name or by id
            by_id = {topic.topic_id: name for name, topic in self._controller.image.topics.items()}
            names = []
            for topic in request.topics:
                name = topic.name
                if name is None:
                    name = by_id.get(tidelog_topic_id(topic.topic_id))
                    if name is None:
                        unknown_ids.append(topic.topic_id)
                        continue
                names.append(name)
        for name in names:
            ids[name] = self._topic_id(name)
        answer: pb.DeleteTopicsResponse = await self._servicer.DeleteTopics(
            pb.DeleteTopicsRequest(
                topic_names=names, timeout_ms=change_timeout_ms(call, request.timeout)
            ),
            call,
        )
        results = [
            build(result_type, name=r.name, topic_id=ids.get(r.name, _NO_ID),
                  error_code=error_code(r.error_code),
                  error_message=error_message(r.error_message))
            for r in answer.topics
        ]
        results += [
            build(result_type, name=None, topic_id=topic_id,
                  error_code=ErrorCode.unknown_topic_id,
                  error_message=f"no topic has the id {topic_id}")
            for topic_id in unknown_ids
        ]
        return build(response, throttle_time=_NO_THROTTLE, responses=tuple(results))

    async def create_partitions(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(CREATE_PARTITIONS_KEY, call.api_version)
        result_type = entity_of(response, "CreatePartitionsTopicResult")
        answer: pb.CreatePartitionsResponse = await self._servicer.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[
                    pb.CreatePartitionsTopic(
                        name=topic.name, count=topic.count,
                        assignments=[
                            pb.CreatePartitionsAssignment(broker_ids=a.broker_ids)
                            for a in topic.assignments or ()
                        ],
                    )
                    for topic in request.topics
                ],
                validate_only=request.validate_only,
                timeout_ms=change_timeout_ms(call, request.timeout),
            ),
            call,
        )
        return build(response, throttle_time=_NO_THROTTLE, results=tuple(
            build(result_type, name=r.name, error_code=error_code(r.error_code),
                  error_message=error_message(r.error_message))
            for r in answer.results
        ))

    async def delete_records(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DELETE_RECORDS_KEY, call.api_version)
        topic_type = entity_of(response, "DeleteRecordsTopicResult")
        partition_type = entity_of(response, "DeleteRecordsPartitionResult")
        change_timeout_ms(call, request.timeout)
        answer: pb.DeleteRecordsResponse = await self._servicer.DeleteRecords(
            pb.DeleteRecordsRequest(topics=[
                pb.DeleteRecordsTopic(name=topic.name, partitions=[
                    pb.DeleteRecordsPartition(partition=p.partition_index, offset=p.offset)
                    for p in topic.partitions
                ])
                for topic in request.topics
            ]),
            call,
        )
        return build(response, throttle_time=_NO_THROTTLE, topics=tuple(
            build(topic_type, name=t.name, partitions=tuple(
                build(partition_type, partition_index=p.partition,
                      low_watermark=p.low_watermark, error_code=error_code(p.error_code))
                for p in t.partitions
            ))
            for t in answer.topics
        ))


def add_topics(registry: ApiRegistry, servicer: Any, controller: ControllerDriver) -> None:
    adapter = TopicsAdapter(servicer, controller)
    registry.add(CREATE_TOPICS_KEY, 2, 7, adapter.create_topics)
    registry.add(DELETE_TOPICS_KEY, 1, 6, adapter.delete_topics)
    registry.add(DELETE_RECORDS_KEY, 0, 2, adapter.delete_records)
    registry.add(CREATE_PARTITIONS_KEY, 0, 3, adapter.create_partitions)
