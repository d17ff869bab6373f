"""Metadata, CreateTopics and DeleteTopics.

Metadata is answered by any node from its metadata image and what it knows of leaders
(`cluster.routing`). Topic changes go through the controller (any node forwards them there):
the controller leader checks CREATE or DELETE on the cluster or on each topic, plans the
record on its image (`MetadataImage.plan_create` / `plan_delete`) and commits it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.coordinator.controller import INTERNAL_TOPICS
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.controller_api import ControllerApi, ControllerForward, check_topic
from tidelog.node.api.forwarding import at_controller, change_timeout_s
from tidelog.node.api.rules import each_once, or_unset
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb


class TopicsApi(ControllerApi):
    def __init__(
        self,
        config: NodeConfig,
        controller: ControllerDriver,
        replicas: ReplicaSet,
        routing: Routing,
        authorization: Authorization,
        forward: ControllerForward,
    ) -> None:
        super().__init__(config, controller, authorization, forward)
        self.replicas = replicas
        self.routing = routing

    async def metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        routing = self.routing
        response = pb.MetadataResponse(controller_id=routing.controller_id)
        leaders: set[int] = set()
        names = list(dict.fromkeys(request.topics) or sorted(self.controller.image.topics))
        refused = self.authorization.refusals(
            self.authorization.principal(context), Operation.DESCRIBE, ResourceType.TOPIC, names
        )
        for name in names:
            if (error := refused.get(name)) is not None:
                if request.topics:  # a topic asked for by name says why; the others hide
                    response.topics.add(name=name, error_code=error.code)
                continue
            topic = self.controller.image.topics.get(name)
            if topic is None:
                response.topics.add(name=name, error_code=errors.UnknownTopicOrPartitionError.code)
                continue
            entry = response.topics.add(
                name=name, configs=dict(topic.configs), is_internal=name in INTERNAL_TOPICS
            )
            for p, replicas in enumerate(topic.assignment):
                tp = TopicPartition(name, p)
                leader, epoch = routing.leader_of(tp)
                leaders.add(leader)
                entry.partitions.add(
                    error_code=0 if leader >= 0 else errors.LeaderNotAvailableError.code,
                    partition=p,
                    leader_id=leader,
                    leader_epoch=epoch,
                    replicas=replicas,
                    isr=routing.isr_of(tp),
                )
        # Fenced nodes are left out, as Kafka's Metadata leaves them, unless asked for (an
        # operator's view, Kafka's DescribeCluster) or a partition here is led there: Raft,
        # not the controller, elects leaders, so a fenced node may lead until its groups
        # elect another, and clients must reach it meanwhile.
        voters = self.controller.voters
        for node in self.controller.known_nodes():
            if node.fenced and not request.include_fenced_nodes and node.node_id not in leaders:
                continue
            response.nodes.add(
                node_id=node.node_id, address=routing.address_of(node.node_id),
                is_fenced=node.fenced, registered=node.registered,
                internal_address=node.internal_address if request.include_fenced_nodes else "",
                controller_voter=node.node_id in voters,
            )
        return response

    @at_controller("CreateTopics")
    async def create_topics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicsResponse:
        timeout_s = change_timeout_s(request)
        response = pb.CreateTopicsResponse()
        topics, twice = each_once((topic.name, topic) for topic in request.topics)
        refused = self._refused_unless_cluster(context, Operation.CREATE, topics)
        config = self.config
        for topic in topics.values():
            # Kafka: -1 (and, here, unset) takes the node's default; 0 is refused by the plan.
            partitions = or_unset(topic, "num_partitions", -1)
            factor = or_unset(topic, "replication_factor", -1)
            result = response.topics.add(
                name=topic.name,
                num_partitions=config.num_partitions if partitions == -1 else partitions,
                replication_factor=(
                    config.default_replication_factor if factor == -1 else factor
                ),
            )
            configs = dict(topic.configs)

            def plan(
                result: Any = result, name: str = topic.name, configs: dict[str, str] = configs
            ) -> Any:
                check_topic(name, twice, refused)
                self.replicas.validate_topic_configs(configs)
                return [self.controller.image.plan_create(
                    name,
                    result.num_partitions,
                    result.replication_factor,
                    configs,
                    self.controller.placement_node_ids(),
                )]

            await self.change(result, plan, request.validate_only, timeout_s)
            if result.error_code:
                result.num_partitions = result.replication_factor = -1
        return response
    @at_controller("DeleteTopics")
    async def delete_topics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        timeout_s = change_timeout_s(request)
        response = pb.DeleteTopicsResponse()
        names, twice = each_once((name, name) for name in request.topic_names)
        refused = self._refused_unless_cluster(context, Operation.DELETE, names)
        for name in names:
            result = response.topics.add(name=name)

            def plan(name: str = name) -> Any:
                check_topic(name, twice, refused)
                return [self.controller.image.plan_delete(name)]

            await self.change(result, plan, False, timeout_s)
        return response

    def _refused_unless_cluster(
        self, context: grpc.aio.ServicerContext, operation: Operation, names: Iterable[str]
    ) -> dict[str, errors.AuthorizationError]:
        """CreateTopics and DeleteTopics: the operation on the cluster allows every topic,
        else each topic needs it (kafka-mapping §11.3)."""
        principal = self.authorization.principal(context)
        if self.authorization.cluster_refused(principal, operation) is None:
            return {}
        return self.authorization.refusals(principal, operation, ResourceType.TOPIC, names)


    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        """The answer of a CreateTopics or DeleteTopics that could not reach the controller:
        `exc` for each topic."""
        if method == "CreateTopics":
            response = pb.CreateTopicsResponse()
            for name in dict.fromkeys(topic.name for topic in request.topics):
                response.topics.add(
                    name=name,
                    error_code=exc.code,
                    error_message=str(exc),
                    num_partitions=-1,
                    replication_factor=-1,
                )
            return response
        deleted = pb.DeleteTopicsResponse()
        for name in dict.fromkeys(request.topic_names):
            deleted.topics.add(name=name, error_code=exc.code, error_message=str(exc))
        return deleted
