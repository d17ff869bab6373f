"""DescribeCluster (key 60) v0-1, AlterPartitionReassignments (45) v0 and
ListPartitionReassignments (46) v0.

DescribeCluster needs no rights, as in Kafka: it names the cluster id, the controller (the
metadata quorum's leader, as Metadata names it) and the nodes that are not fenced with their
Kafka addresses (a node without a Kafka listener is left out, as from Metadata). Only broker
endpoints are described: asking for controller endpoints (v1's endpoint_type 2) is
UNSUPPORTED_ENDPOINT_TYPE (115), as a Kafka broker answers it. Authorized operations are not
computed: the answer carries Kafka's "not requested" value.

The reassignments go to Tidelog's handlers (node/api/reassignment.py), which check ALTER
(DESCRIBE to list) on the cluster, forward to the controller and decide each partition; a
null replica list cancels the partition's reassignment under way, as in Kafka.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from tidelog.coordinator.metadata_records import split_address
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.changes import change_timeout_ms, error_message
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_of, error_code
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.v1 import tidelog_pb2 as pb

ALTER_REASSIGNMENTS_KEY, LIST_REASSIGNMENTS_KEY, DESCRIBE_CLUSTER_KEY = 45, 46, 60
#: DescribeCluster v1's endpoint types: brokers (the default), controllers.
_BROKERS = 1
#: Kafka's authorized operations when they were not asked for (or are not computed).
_NOT_REQUESTED = -(2**31)
_NO_THROTTLE = datetime.timedelta(0)


class ClusterAdapter:
    def __init__(self, servicer: Any, controller: ControllerDriver, routing: Routing) -> None:
        self._servicer = servicer
        self._controller = controller
        self._routing = routing

    async def describe_cluster(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_CLUSTER_KEY, call.api_version)
        broker_type = entity_of(response, "DescribeClusterBroker")
        endpoint_type = getattr(request, "endpoint_type", _BROKERS)
        common = {"throttle_time": _NO_THROTTLE, "endpoint_type": endpoint_type,
                  "cluster_id": self._controller.image.cluster_id,
                  "cluster_authorized_operations": _NOT_REQUESTED}
        if endpoint_type != _BROKERS:
            return build(
                response, **common, error_code=ErrorCode.unsupported_endpoint_type,
                error_message="only broker endpoints are described: every node is a broker",
                controller_id=-1, brokers=(),
            )
        brokers = []
        for node in self._controller.known_nodes():
            parts = split_address(self._routing.kafka_address_of(node.node_id))
            if parts is not None and not node.fenced:
                brokers.append(build(broker_type, broker_id=node.node_id, host=parts[0],
                                     port=parts[1], rack=None))
        return build(
            response, **common, error_code=ErrorCode.none, error_message=None,
            controller_id=self._routing.controller_id, brokers=tuple(brokers),
        )

    async def alter_reassignments(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(ALTER_REASSIGNMENTS_KEY, call.api_version)
        topic_type = entity_of(response, "ReassignableTopicResponse")
        partition_type = entity_of(response, "ReassignablePartitionResponse")
        answer: pb.AlterPartitionReassignmentsResponse = (
            await self._servicer.AlterPartitionReassignments(
                pb.AlterPartitionReassignmentsRequest(
                    timeout_ms=change_timeout_ms(call, request.timeout),
                    topics=[
                        pb.ReassignableTopic(name=t.name, partitions=[
                            pb.ReassignablePartition(
                                partition_index=p.partition_index,
                                replicas=p.replicas or (), cancel=p.replicas is None,
                            )
                            for p in t.partitions
                        ])
                        for t in request.topics
                    ],
                ),
                call,
            )
        )
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=error_code(answer.error_code),
            error_message=error_message(answer.error_message),
            responses=tuple(
                build(topic_type, name=t.name, partitions=tuple(
                    build(partition_type, partition_index=p.partition_index,
                          error_code=error_code(p.error_code),
                          error_message=error_message(p.error_message))
                    for p in t.partitions
                ))
                for t in answer.responses
            ),
        )

    async def list_reassignments(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(LIST_REASSIGNMENTS_KEY, call.api_version)
        topic_type = entity_of(response, "OngoingTopicReassignment")
        partition_type = entity_of(response, "OngoingPartitionReassignment")
        answer: pb.ListPartitionReassignmentsResponse = (
            await self._servicer.ListPartitionReassignments(
                pb.ListPartitionReassignmentsRequest(topics=[
                    pb.ListPartitionReassignmentsTopics(
                        name=t.name, partition_indexes=t.partition_indexes
                    )
                    for t in request.topics or ()
                ]),
                call,
            )
        )
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=error_code(answer.error_code),
            error_message=error_message(answer.error_message),
            topics=tuple(
                build(topic_type, name=t.name, partitions=tuple(
                    build(partition_type, partition_index=p.partition_index,
                          replicas=tuple(p.replicas), adding_replicas=tuple(p.adding_replicas),
                          removing_replicas=tuple(p.removing_replicas))
                    for p in t.partitions
                ))
                for t in answer.topics
            ),
        )


def add_cluster(
    registry: ApiRegistry, servicer: Any, controller: ControllerDriver, routing: Routing
) -> None:
    adapter = ClusterAdapter(servicer, controller, routing)
    registry.add(ALTER_REASSIGNMENTS_KEY, 0, 0, adapter.alter_reassignments)
    registry.add(LIST_REASSIGNMENTS_KEY, 0, 0, adapter.list_reassignments)
    registry.add(DESCRIBE_CLUSTER_KEY, 0, 1, adapter.describe_cluster)
