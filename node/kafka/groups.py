"""The offset and group requests (FindCoordinator, OffsetCommit, OffsetFetch, OffsetDelete,
DescribeGroups, ListGroups, DeleteGroups) adapted onto the Tidelog handlers of the same names
(node/api/find_coordinator.py, groups.py, consumer_groups.py), which stay the one place of
authorization, validation, forwarding to the coordinator and error codes: any node answers,
as a gRPC call to any node is answered.

What only Kafka clients need is added here: a coordinator is named by its Kafka address;
OffsetFetch v8+ and FindCoordinator v4+ carry many groups or keys in one request (each is one
Tidelog call); DescribeGroups, which Tidelog's API has no single call for, is the consumer
group's description (ConsumerGroupDescribe) or, for a group of committed offsets alone, an
``Empty`` group with no protocol, as Kafka's coordinator describes one; a group with neither
is ``Dead`` with no error, Kafka's answer before DescribeGroups v6.

A simple consumer (an assigned one: generation -1, empty member id) commits standalone, as in
Kafka: the Tidelog handler takes such a commit for a group with no members.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
from collections.abc import Iterable
from typing import Any

from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName

from tidelog import errors
from tidelog.coordinator.consumer_groups import PROTOCOL_TYPE
from tidelog.coordinator.metadata_records import split_address
from tidelog.node.cluster.routing import Routing
from tidelog.node.edge.limits import CLIENT_LIMITS
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.codec import encode, response_type
from tidelog.node.kafka.consumer_protocol import assignment_bytes
from tidelog.node.kafka.fields import build, entity_of
from tidelog.node.kafka.fields import error_code as error_code_of
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

FIND_COORDINATOR_KEY = 10
OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
OFFSET_DELETE_KEY = 47
DESCRIBE_GROUPS_KEY = 15
LIST_GROUPS_KEY = 16
DELETE_GROUPS_KEY = 42

#: FindCoordinator's key types: a consumer group, a transactional id.
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
#: DescribeGroups' answer when the node does not say which operations the caller may do.
NO_AUTHORIZED_OPERATIONS = -(2**31)
#: The state Kafka names a group that does not exist (DescribeGroups before v6).
DEAD = "Dead"
#: The version prefix of a consumer protocol Subscription v0.
SUBSCRIPTION_V0 = (0).to_bytes(2, "big")
_NO_THROTTLE = datetime.timedelta(0)


def add_groups(registry: ApiRegistry, servicer: Any, routing: Routing) -> None:
    """FindCoordinator 0-4 (v4 batches keys), OffsetCommit 2-9, OffsetFetch 1-9 (v8 batches
    groups), OffsetDelete 0, DescribeGroups 0-5, ListGroups 0-4, DeleteGroups 0-2."""
    adapter = GroupsAdapter(servicer, routing)
    registry.add(FIND_COORDINATOR_KEY, 0, 4, adapter.find_coordinator)
    registry.add(OFFSET_COMMIT_KEY, 2, 9, adapter.offset_commit,
                 max_request_bytes=CLIENT_LIMITS["OffsetCommit"])
    registry.add(OFFSET_FETCH_KEY, 1, 9, adapter.offset_fetch)
    registry.add(OFFSET_DELETE_KEY, 0, 0, adapter.offset_delete)
    registry.add(DESCRIBE_GROUPS_KEY, 0, 5, adapter.describe_groups)
    registry.add(LIST_GROUPS_KEY, 0, 4, adapter.list_groups)
    registry.add(DELETE_GROUPS_KEY, 0, 2, adapter.delete_groups)


def commit_topics(topics: Iterable[Any]) -> list[pb.OffsetCommitTopic]:
    """The topics of a Kafka OffsetCommit or TxnOffsetCommit as Tidelog's: a null metadata
    stays unset (stored as "", as Kafka stores it), a leader epoch of versions without one
    is -1 (unknown)."""
    return [
        pb.OffsetCommitTopic(name=t.name, partitions=[
            pb.OffsetCommitPartition(
                partition=p.partition_index, committed_offset=p.committed_offset,
                committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                committed_metadata=p.committed_metadata,
            )
            for p in t.partitions
        ])
        for t in topics
    ]


def commit_answer(response: type[Any], topics: Iterable[pb.OffsetCommitTopicResponse]) -> Any:
    """An OffsetCommit or TxnOffsetCommit answer of Tidelog's per-partition results."""
    topic_type = entity_of(response, response.__name__ + "Topic")
    partition_type = entity_of(response, response.__name__ + "Partition")
    return build(response, throttle_time=_NO_THROTTLE, topics=tuple(
        build(topic_type, name=t.name, partitions=tuple(
            build(partition_type, partition_index=p.partition,
                  error_code=error_code_of(p.error_code))
            for p in t.partitions
        ))
        for t in topics
    ))


class GroupsAdapter:
    def __init__(self, servicer: Any, routing: Routing) -> None:
        self._servicer = servicer
        self._routing = routing

    # ---- FindCoordinator ----------------------------------------------------------------------

    async def find_coordinator(self, request: Any, call: KafkaCall) -> Any:
        version = call.api_version
        response = response_type(FIND_COORDINATOR_KEY, version)
        key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
        keys = request.coordinator_keys if version >= 4 else (request.key,)
        found = await asyncio.gather(*(self._coordinator(key_type, key, call) for key in keys))
        if version < 4:
            return build(response, throttle_time=_NO_THROTTLE, **found[0])
        entry = entity_of(response, "Coordinator")
        return build(response, throttle_time=_NO_THROTTLE, coordinators=tuple(
            build(entry, key=key, **fields) for key, fields in zip(keys, found, strict=True)
        ))

    async def _coordinator(self, key_type: int, key: str, call: KafkaCall) -> dict[str, Any]:
        """The fields of one key's answer: the coordinator's Kafka address, or the error."""
        if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
            return _no_coordinator(ErrorCode.invalid_request, f"unknown key type {key_type}")
        answer: pb.FindCoordinatorResponse = await self._servicer.FindCoordinator(
            pb.FindCoordinatorRequest(key=key, key_type=key_type), call
        )
        if answer.error_code:
            return _no_coordinator(error_code_of(answer.error_code), answer.error_message)
        parts = split_address(self._routing.kafka_address_of(answer.node_id))
        if parts is None:
            return _no_coordinator(ErrorCode.coordinator_not_available,
                                   f"node {answer.node_id} has no Kafka listener known here")
        return {"error_code": ErrorCode.none, "error_message": None,
                "node_id": answer.node_id, "host": parts[0], "port": parts[1]}

    # ---- offsets ------------------------------------------------------------------------------

    async def offset_commit(self, request: Any, call: KafkaCall) -> Any:
        answer: pb.OffsetCommitResponse = await self._servicer.OffsetCommit(
            pb.OffsetCommitRequest(
                group_id=request.group_id,
                generation_id=request.generation_id_or_member_epoch,
                member_id=request.member_id, topics=commit_topics(request.topics),
            ),
            call,
        )
        return commit_answer(response_type(OFFSET_COMMIT_KEY, call.api_version), answer.topics)

    async def offset_fetch(self, request: Any, call: KafkaCall) -> Any:
        version = call.api_version
        response = response_type(OFFSET_FETCH_KEY, version)
        require_stable = bool(getattr(request, "require_stable", False))
        if version < 8:
            group = await self._fetch_group(
                request.group_id, request.topics, require_stable, "", -1, call
            )
            return build(response, throttle_time=_NO_THROTTLE, **_fetched(response, group))
        groups = await asyncio.gather(*(
            self._fetch_group(
                g.group_id, g.topics, require_stable, getattr(g, "member_id", None) or "",
                getattr(g, "member_epoch", -1), call,
            )
            for g in request.groups
        ))
        group_type = entity_of(response, "OffsetFetchResponseGroup")
        return build(response, throttle_time=_NO_THROTTLE, groups=tuple(
            build(group_type, group_id=g.group_id, **_fetched(response, answer))
            for g, answer in zip(request.groups, groups, strict=True)
        ))

    async def _fetch_group(
        self, group_id: str, topics: tuple[Any, ...] | None, require_stable: bool,
        member_id: str, member_epoch: int, call: KafkaCall,
    ) -> pb.OffsetFetchResponse:
        """One group's committed offsets: of `topics`, or every committed one when null (an
        empty list asks for none, and gets none, as in Kafka)."""
        if topics is not None and not topics:
            return pb.OffsetFetchResponse()
        answer: pb.OffsetFetchResponse = await self._servicer.OffsetFetch(
            pb.OffsetFetchRequest(
                group_id=group_id, require_stable=require_stable, member_id=member_id,
                member_epoch=member_epoch,
                topics=[pb.OffsetFetchTopic(name=t.name, partitions=t.partition_indexes)
                        for t in topics or ()],
            ),
            call,
        )
        if answer.error_code and call.api_version < 2:
            # v1 has no group-level error: Kafka gives it on every partition asked for.
            for t in topics or ():
                entry = answer.topics.add(name=t.name)
                for partition in t.partition_indexes:
                    entry.partitions.add(partition=partition, committed_offset=-1,
                                         committed_leader_epoch=-1,
                                         error_code=answer.error_code)
        return answer

    async def offset_delete(self, request: Any, call: KafkaCall) -> Any:
        answer: pb.OffsetDeleteResponse = await self._servicer.OffsetDelete(
            pb.OffsetDeleteRequest(group_id=request.group_id, topics=[
                pb.OffsetFetchTopic(name=t.name, partitions=[p.partition_index
                                                             for p in t.partitions])
                for t in request.topics
            ]),
            call,
        )
        response = response_type(OFFSET_DELETE_KEY, call.api_version)
        topic_type = entity_of(response, "OffsetDeleteResponseTopic")
        partition_type = entity_of(response, "OffsetDeleteResponsePartition")
        return build(
            response, error_code=error_code_of(answer.error_code), throttle_time=_NO_THROTTLE,
            topics=tuple(
                build(topic_type, name=t.name, partitions=tuple(
                    build(partition_type, partition_index=p.partition,
                          error_code=error_code_of(p.error_code))
                    for p in t.partitions
                ))
                for t in answer.topics
            ),
        )

    # ---- groups -------------------------------------------------------------------------------

    async def list_groups(self, request: Any, call: KafkaCall) -> Any:
        """The groups this node coordinates, as a Kafka broker lists its own (an admin
        client asks every node)."""
        answer: pb.ListGroupsResponse = await self._servicer.ListGroups(
            pb.ListGroupsRequest(states_filter=getattr(request, "states_filter", ())), call
        )
        response = response_type(LIST_GROUPS_KEY, call.api_version)
        listed = entity_of(response, "ListedGroup")
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=error_code_of(answer.error_code),
            groups=tuple(
                build(listed, group_id=g.group_id, protocol_type=g.protocol_type,
                      group_state=g.group_state)
                for g in answer.groups
            ),
        )

    async def delete_groups(self, request: Any, call: KafkaCall) -> Any:
        answer: pb.DeleteGroupsResponse = await self._servicer.DeleteGroups(
            pb.DeleteGroupsRequest(group_ids=request.groups_names), call
        )
        response = response_type(DELETE_GROUPS_KEY, call.api_version)
        result = entity_of(response, "DeletableGroupResult")
        return build(response, throttle_time=_NO_THROTTLE, results=tuple(
            build(result, group_id=r.group_id, error_code=error_code_of(r.error_code))
            for r in answer.results
        ))

    async def describe_groups(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_GROUPS_KEY, call.api_version)
        described = await asyncio.gather(
            *(self._describe(response, group_id, call) for group_id in request.groups)
        )
        return build(response, throttle_time=_NO_THROTTLE, groups=tuple(described))

    async def _describe(self, response: type[Any], group_id: str, call: KafkaCall) -> Any:
        """One group of a DescribeGroups answer (see the module's docstring)."""
        group_type = entity_of(response, "DescribedGroup")
        member_type = entity_of(response, "DescribedGroupMember")

        def group(error: ErrorCode = ErrorCode.none, state: str = DEAD, protocol_type: str = "",
                  protocol_data: str = "", members: tuple[Any, ...] = ()) -> Any:
            return build(group_type, error_code=error, group_id=group_id, group_state=state,
                         protocol_type=protocol_type, protocol_data=protocol_data,
                         members=members, authorized_operations=NO_AUTHORIZED_OPERATIONS)

        answer: pb.ConsumerGroupDescribeResponse = await self._servicer.ConsumerGroupDescribe(
            pb.ConsumerGroupDescribeRequest(group_ids=[group_id]), call
        )
        [consumer_group] = answer.groups
        if consumer_group.error_code == 0:
            return group(
                state=consumer_group.group_state, protocol_type=PROTOCOL_TYPE,
                protocol_data=consumer_group.assignor_name,
                members=tuple(
                    build(member_type, member_id=m.member_id,
                          group_instance_id=m.instance_id if m.HasField("instance_id") else None,
                          client_id=m.client_id, client_host=m.client_host,
                          member_metadata=subscription_bytes(m.subscribed_topic_names),
                          member_assignment=assignment_bytes(
                              {t.topic: tuple(t.partitions) for t in m.assignment.topics}))
                    for m in consumer_group.members
                ),
            )
        if consumer_group.error_code != errors.GroupIdNotFoundError.code:
            return group(error_code_of(consumer_group.error_code), state="")
        offsets: pb.OffsetFetchResponse = await self._servicer.OffsetFetch(
            pb.OffsetFetchRequest(group_id=group_id), call
        )
        if offsets.error_code:
            return group(error_code_of(offsets.error_code), state="")
        if any(p.committed_offset >= 0 for t in offsets.topics for p in t.partitions):
            return group(state="Empty")
        return group()


def _no_coordinator(error: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "node_id": -1, "host": "",
            "port": -1}


def _fetched(response: type[Any], answer: pb.OffsetFetchResponse) -> dict[str, Any]:
    """The fields of one group's OffsetFetch answer (the whole answer before v8, an entry of
    its groups from v8 on, whose nested entities are named in the plural)."""
    plural = "s" if hasattr(sys.modules[response.__module__], "OffsetFetchResponseGroup") else ""
    topic_type = entity_of(response, "OffsetFetchResponseTopic" + plural)
    partition_type = entity_of(response, "OffsetFetchResponsePartition" + plural)
    return {
        "error_code": error_code_of(answer.error_code),
        "topics": tuple(
            build(topic_type, name=t.name, partitions=tuple(
                build(partition_type, partition_index=p.partition,
                      committed_offset=p.committed_offset,
                      committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                      error_code=error_code_of(p.error_code))
                for p in t.partitions
            ))
            for t in answer.topics
        ),
    }


def subscription_bytes(topics: Iterable[str]) -> bytes:
    """The consumer protocol's Subscription v0 of `topics` (null user data): a member's
    DescribeGroups metadata (the member's assignment is `consumer_protocol.assignment_bytes`)."""
    entity = subscription_v0.ConsumerProtocolSubscription(
        topics=tuple(TopicName(topic) for topic in topics), user_data=None
    )
    return SUBSCRIPTION_V0 + encode(entity)
