"""AlterPartitionReassignments and ListPartitionReassignments (Kafka's apis 45 and 46, KIP-455).

Both go to the controller as Kafka's do (any node forwards them there). The controller leader
checks ALTER (DESCRIBE to list) on the cluster, decides each partition on its image
(`MetadataImage.plan_alter_reassignment`) and commits the PartitionChangeRecords; the answer
means the reassignments are recorded, not done: each partition's leader carries its own out
as Raft membership changes (`tidelog.node.cluster.reassignment`), and the reassignment
disappears from the list once the leader has reported its group at the target and the
controller recorded it.

Every partition an operator reassigns (or whose reassignment the operator cancels) is also held
out of continuous balancing for balancer.operator.hold.ms; a partition sent with ``release``
has only its hold released (`tidelog reassign --release`).
"""

from __future__ import annotations

from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation
from tidelog.node.api.controller_api import ControllerApi, cluster_allowed
from tidelog.node.api.forwarding import at_controller, change_timeout_s
from tidelog.node.api.rules import each_once, error_answer
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb


class ReassignmentApi(ControllerApi):
    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        return all_failed(method, request, exc)

    @at_controller("AlterPartitionReassignments")
    @cluster_allowed("AlterPartitionReassignments", Operation.ALTER)
    async def alter(
        self, request: pb.AlterPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterPartitionReassignmentsResponse:
        timeout_s = change_timeout_s(request)
        partitions, twice = each_once(
            (TopicPartition(t.name, p.partition_index), p)
            for t in request.topics for p in t.partitions
        )
        outcomes: dict[TopicPartition, errors.TidelogError | None] = dict.fromkeys(
            twice, errors.InvalidRequestError("the partition appears more than once")
        )
        for tp, p in partitions.items():
            if p.release and (p.cancel or p.replicas):
                outcomes[tp] = errors.InvalidRequestError(
                    "release goes alone: without replicas and without cancel"
                )
        targets = {
            tp: None if p.cancel else list(p.replicas)
            for tp, p in partitions.items() if tp not in outcomes and not p.release
        }
        releases = [tp for tp, p in partitions.items() if tp not in outcomes and p.release]
        if targets or releases:
            outcomes.update(
                await self.controller.alter_reassignments(targets, timeout_s, releases)
            )
        response = pb.AlterPartitionReassignmentsResponse()
        topics: dict[str, Any] = {}
        for tp in partitions:
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = response.responses.add(name=tp.topic)
            result = topic.partitions.add(partition_index=tp.partition)
            error = outcomes[tp]
            if error is not None:
                result.error_code, result.error_message = error.code, str(error)
        return response

    @at_controller("ListPartitionReassignments")
    @cluster_allowed("ListPartitionReassignments", Operation.DESCRIBE)
    async def list(
        self, request: pb.ListPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPartitionReassignmentsResponse:
        asked = [
            TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes
        ] if request.topics else None
        response = pb.ListPartitionReassignmentsResponse()
        topics: dict[str, Any] = {}
        for tp, moving in self.controller.image.reassignments(asked).items():
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = response.topics.add(name=tp.topic)
            topic.partitions.add(
                partition_index=tp.partition, replicas=moving.replicas,
                adding_replicas=(*moving.adding, *moving.restoring),
                removing_replicas=moving.removing,
            )
        return response


def all_failed(method: str, request: Any, exc: errors.TidelogError) -> Any:
    """The answer of a request refused as a whole (not the controller, not allowed): the
    error at the top, as Kafka answers these two apis."""
    if method == "AlterPartitionReassignments":
        return error_answer(pb.AlterPartitionReassignmentsResponse, exc)
    return error_answer(pb.ListPartitionReassignmentsResponse, exc)
