"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (kafka-mapping §10.2, §10.9), translated
to the consumer-group driver's calls (`consumer_group_driver`).

Any node accepts them and forwards them, once, to the group's coordinator, as the offset
requests are (`group_api`). Authorization comes first where the request is answered: READ on
the group for a heartbeat, DESCRIBE on each group described (kafka-mapping §11.3). A
heartbeat's errors are the answer's error code; the gRPC call itself fails only when the
request is not protobuf at all.
"""

from __future__ import annotations

import uuid

import grpc

from tidelog import errors
from tidelog.acl import Operation
from tidelog.coordinator.consumer_group_records import Assignment
from tidelog.coordinator.consumer_groups import HeartbeatRequest
from tidelog.node.api.groups import GroupApi
from tidelog.node.api.rules import error_answer
from tidelog.node.coordinators.consumer_group_driver import ConsumerGroupDriver
from tidelog.v1 import tidelog_pb2 as pb


class ConsumerGroupApi:
    def __init__(self, group_api: GroupApi, driver: ConsumerGroupDriver) -> None:
        self.group_api = group_api
        self.driver = driver

    async def heartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupHeartbeatResponse:
        def failed(exc: errors.TidelogError) -> pb.ConsumerGroupHeartbeatResponse:
            return error_answer(
                pb.ConsumerGroupHeartbeatResponse, exc, member_id=request.member_id,
                member_epoch=request.member_epoch,
            )

        if request.member_epoch == 0 and not request.member_id:
            # The coordinator names a member that came without an id (this snapshot's Kafka);
            # the name travels with the request when it is forwarded.
            request.member_id = str(uuid.uuid4())
        forwarded = await self.group_api.coordinator_answer(
            "ConsumerGroupHeartbeat", request.group_id, request, context, failed
        )
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        _, refused = self.group_api._group_refused(context, Operation.READ, request.group_id)
        if refused is not None:
            return failed(refused)
        try:
            owned = (_assignment(request.topic_partitions)
                     if request.HasField("topic_partitions") else None)
            answer = await self.driver.heartbeat(HeartbeatRequest(
                group_id=request.group_id,
                member_id=request.member_id,
                member_epoch=request.member_epoch,
                instance_id=request.instance_id if request.HasField("instance_id") else None,
                rack_id=request.rack_id if request.HasField("rack_id") else None,
                rebalance_timeout_ms=request.rebalance_timeout_ms
                if request.HasField("rebalance_timeout_ms") else -1,
                subscribed_topics=tuple(request.subscribed_topic_names.names)
                if request.HasField("subscribed_topic_names") else None,
                server_assignor=request.server_assignor
                if request.HasField("server_assignor") else None,
                owned=owned,
                client_host=client_host(context.peer() or ""),
            ))
        except errors.TidelogError as exc:
            return failed(exc)
        response = pb.ConsumerGroupHeartbeatResponse(
            member_id=answer.member_id, member_epoch=answer.member_epoch,
            heartbeat_interval_ms=answer.heartbeat_interval_ms,
        )
        if answer.assignment is not None:
            response.assignment.CopyFrom(to_pb(answer.assignment))
        return response

    def read_refused(
        self, context: grpc.aio.ServicerContext, group: str
    ) -> errors.AuthorizationError | None:
        """The refusal of READ on `group`, which every member's request needs (the classic
        members' JoinGroup, SyncGroup, Heartbeat and LeaveGroup of the Kafka listener, which
        go to `driver` at the coordinator itself: a Kafka client finds the coordinator and
        is told NOT_COORDINATOR elsewhere); None when allowed."""
        return self.group_api._group_refused(context, Operation.READ, group)[1]

    async def describe(
        self, request: pb.ConsumerGroupDescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupDescribeResponse:
        """Each group described by its coordinator: this node's own here, every other one
        forwarded alone (a describe is rare: an operator's command)."""
        response = pb.ConsumerGroupDescribeResponse()
        for group_id in request.group_ids:
            single = pb.ConsumerGroupDescribeRequest(group_ids=[group_id])

            def failed(exc: errors.TidelogError, group_id: str = group_id
                       ) -> pb.ConsumerGroupDescribeResponse:
                return pb.ConsumerGroupDescribeResponse(groups=[pb.DescribedConsumerGroup(
                    group_id=group_id, error_code=exc.code, error_message=str(exc))])

            forwarded = await self.group_api.coordinator_answer(
                "ConsumerGroupDescribe", group_id, single, context, failed
            )
            if forwarded is not None:
                response.groups.extend(forwarded.groups)
                continue
            _, refused = self.group_api._group_refused(context, Operation.DESCRIBE, group_id)
            try:
                if refused is not None:
                    raise refused
                described = self.driver.describe(group_id)
            except errors.TidelogError as exc:
                response.groups.extend(failed(exc).groups)
                continue
            group = response.groups.add(
                group_id=group_id, group_state=described.state, group_epoch=described.epoch,
                assignment_epoch=described.assignment_epoch, assignor_name=described.assignor,
            )
            for member in described.members:
                out = group.members.add(
                    member_id=member.member_id, member_epoch=member.member_epoch,
                    client_id=member.client_id, client_host=member.client_host,
                    subscribed_topic_names=member.subscribed_topics,
                    assignment=to_pb(member.assignment),
                    target_assignment=to_pb(member.target),
                )
                if member.instance_id is not None:
                    out.instance_id = member.instance_id
                if member.rack_id is not None:
                    out.rack_id = member.rack_id
        return response


def to_pb(assignment: Assignment) -> pb.ConsumerGroupAssignment:
    return pb.ConsumerGroupAssignment(topics=[
        pb.ConsumerGroupTopicPartitions(topic=topic, partitions=partitions)
        for topic, partitions in sorted(assignment.items())
    ])


def _assignment(message: pb.ConsumerGroupAssignment) -> Assignment:
    """The owned partitions of a heartbeat; INVALID_REQUEST for a topic named twice or a
    negative or repeated partition."""
    out: Assignment = {}
    for entry in message.topics:
        partitions = tuple(entry.partitions)
        if entry.topic in out or any(p < 0 for p in partitions) \
                or len(set(partitions)) != len(partitions):
            raise errors.InvalidRequestError(f"owned partitions of {entry.topic!r}: {partitions}")
        if partitions:
            out[entry.topic] = tuple(sorted(partitions))
    return out


def client_host(peer: str) -> str:
    """The host part of a gRPC peer ("ipv4:127.0.0.1:5555" -> "/127.0.0.1", Kafka's form)."""
    _, _, address = peer.partition(":")
    host, _, _ = address.rpartition(":")
    return "/" + host if host else ""
