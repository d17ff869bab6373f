"""ConsumerGroupHeartbeat (68) 0-1 and ConsumerGroupDescribe (69) 0-1 (KIP-848, what
librdkafka speaks with ``group.protocol=consumer``), adapted onto Tidelog's handlers of the
same names (node/api/consumer_groups.py), which authorize, validate, forward to the group's
coordinator and answer the error codes.

What only Kafka clients need is done here: Kafka names topics by id in assignments (Tidelog's
API by name; `metadata.topic_uuid` maps one to the other), and answers durations as such.
A regular-expression subscription (v1) is INVALID_REQUEST: Tidelog's groups subscribe to
topic names only (an empty expression, which librdkafka sends, is none).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code, millis
from tidelog.node.kafka.metadata import tidelog_topic_id, topic_uuid
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69
#: ConsumerGroupDescribe v1's member type when it is not told (Tidelog's describe does not say
#: which protocol a member speaks).
_UNKNOWN_MEMBER_TYPE = -1
#: The authorized operations when they are not told.
_NO_AUTHORIZED_OPERATIONS = -(2**31)
_NO_THROTTLE = datetime.timedelta(0)


def add_consumer_groups(
    registry: ApiRegistry, servicer: Any, controller: ControllerDriver
) -> None:
    adapter = ConsumerGroupsAdapter(servicer, controller)
    registry.add(CONSUMER_GROUP_HEARTBEAT_KEY, 0, 1, adapter.heartbeat)
    registry.add(CONSUMER_GROUP_DESCRIBE_KEY, 0, 1, adapter.describe)


class ConsumerGroupsAdapter:
    def __init__(self, servicer: Any, controller: ControllerDriver) -> None:
        self._servicer = servicer
        self._controller = controller

    def _names(self) -> dict[int, str]:
        return {topic.topic_id: name for name, topic in self._controller.image.topics.items()}

    async def heartbeat(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(CONSUMER_GROUP_HEARTBEAT_KEY, call.api_version)
        if getattr(request, "subscribed_topic_regex", None):  # librdkafka sends "" for none
            return build(
                response, throttle_time=_NO_THROTTLE, error_code=ErrorCode.invalid_request,
                error_message="subscriptions by regular expression are not supported",
                member_id=request.member_id, member_epoch=request.member_epoch,
                heartbeat_interval=_NO_THROTTLE,
            )
        pb_request = pb.ConsumerGroupHeartbeatRequest(
            group_id=request.group_id, member_id=request.member_id,
            member_epoch=request.member_epoch,
        )
        if request.instance_id is not None:
            pb_request.instance_id = request.instance_id
        if request.rack_id is not None:
            pb_request.rack_id = request.rack_id
        rebalance_ms = millis(request.rebalance_timeout)
        if rebalance_ms != -1:
            pb_request.rebalance_timeout_ms = rebalance_ms
        if request.subscribed_topic_names is not None:
            pb_request.subscribed_topic_names.names.extend(request.subscribed_topic_names)
        if request.server_assignor is not None:
            pb_request.server_assignor = request.server_assignor
        if request.topic_partitions is not None:
            names = self._names()
            owned = pb_request.topic_partitions
            owned.SetInParent()
            for entry in request.topic_partitions:
                name = names.get(tidelog_topic_id(entry.topic_id))
                if name is not None:  # a topic deleted since: owned no more
                    owned.topics.add(topic=name, partitions=[int(p) for p in entry.partitions])
        answer: pb.ConsumerGroupHeartbeatResponse = \
            await self._servicer.ConsumerGroupHeartbeat(pb_request, call)
        assignment = None
        if answer.HasField("assignment"):
            assignment_type = entity_of(response, "Assignment")
            assignment = build(assignment_type, topic_partitions=self._by_id(
                entity_of(response, "TopicPartitions"), answer.assignment.topics))
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=error_code(answer.error_code),
            error_message=answer.error_message or None, member_id=answer.member_id or None,
            member_epoch=answer.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
            assignment=assignment,
        )

    def _by_id(
        self, entry: type[Any], topics: Iterable[pb.ConsumerGroupTopicPartitions]
    ) -> tuple[Any, ...]:
        """Tidelog's assignment with Kafka's topic ids (and names, for a describe); a topic
        the image no longer has is left out."""
        image = self._controller.image.topics
        out = []
        for topic in topics:
            known = image.get(topic.topic)
            if known is not None:
                out.append(build(entry, topic_id=topic_uuid(known.topic_id),
                                 topic_name=topic.topic, partitions=tuple(topic.partitions)))
        return tuple(out)

    async def describe(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(CONSUMER_GROUP_DESCRIBE_KEY, call.api_version)
        answer: pb.ConsumerGroupDescribeResponse = await self._servicer.ConsumerGroupDescribe(
            pb.ConsumerGroupDescribeRequest(group_ids=list(request.group_ids)), call
        )
        group_type = entity_of(response, "DescribedGroup")
        member_type = entity_of(response, "Member")
        assignment_type = entity_of(response, "Assignment")
        partitions_type = entity_of(response, "TopicPartitions")
        groups = []
        for group in answer.groups:
            groups.append(build(
                group_type, error_code=error_code(group.error_code),
                error_message=group.error_message or None, group_id=group.group_id,
                group_state=group.group_state, group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch, assignor_name=group.assignor_name,
                authorized_operations=_NO_AUTHORIZED_OPERATIONS,
                members=tuple(
                    build(
                        member_type, member_id=m.member_id,
                        instance_id=m.instance_id if m.HasField("instance_id") else None,
                        rack_id=m.rack_id if m.HasField("rack_id") else None,
                        member_epoch=m.member_epoch, client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=tuple(m.subscribed_topic_names),
                        subscribed_topic_regex=None,
                        assignment=build(assignment_type, topic_partitions=self._by_id(
                            partitions_type, m.assignment.topics)),
                        target_assignment=build(assignment_type, topic_partitions=self._by_id(
                            partitions_type, m.target_assignment.topics)),
                        member_type=_UNKNOWN_MEMBER_TYPE,
                    )
                    for m in group.members
                ),
            ))
        return build(response, throttle_time=_NO_THROTTLE, groups=tuple(groups))
