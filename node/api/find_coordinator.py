"""FindCoordinator: the node that coordinates a consumer group (the leader of its
`__consumer_offsets` partition) or a transactional id (of its `__transaction_state`
partition). The topic is created through the controller on the first call, as Kafka does.
"""

from __future__ import annotations

from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.controller_api import ControllerForward
from tidelog.node.api.rules import error_answer, invalid
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.v1 import tidelog_pb2 as pb

_GROUP_KEY = 0
_TRANSACTION_KEY = 1



class FindCoordinatorApi:
    def __init__(
        self,
        config: NodeConfig,
        routing: Routing,
        offsets_topic: CoordinatorTopic,
        txn_topic: CoordinatorTopic,
        authorization: Authorization,
        forward: ControllerForward,
    ) -> None:
        self.config = config
        self.routing = routing
        self.offsets_topic = offsets_topic
        self.txn_topic = txn_topic
        self.authorization = authorization
        self._forward = forward

    async def find_coordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        """The leader of the group's `__consumer_offsets` partition, or of the transactional
        id's `__transaction_state` partition; the topic is created on the first call (through
        the controller: a node that is not the controller forwards the call there)."""
        if request.key_type not in (_GROUP_KEY, _TRANSACTION_KEY):
            await invalid(context, f"unknown key_type {request.key_type} (0: consumer group, "
                                   f"1: transaction)")
        resource = ResourceType.GROUP if request.key_type == _GROUP_KEY else (
            ResourceType.TRANSACTIONAL_ID
        )
        refused = self.authorization.refused(
            self.authorization.principal(context), Operation.DESCRIBE, resource, request.key
        )
        if refused is not None:
            return error_answer(pb.FindCoordinatorResponse, refused, node_id=-1)
        topic = self.offsets_topic if request.key_type == _GROUP_KEY else self.txn_topic
        if not topic.exists:
            forwarded = await self._forward("FindCoordinator", request, context, _unavailable)
            if forwarded is not None:
                return forwarded  # type: ignore[no-any-return]
            if self.routing.controller_id == self.config.node_id:
                topic.create()
        try:
            _, leader = topic.coordinator_of(request.key)
        except errors.TidelogError as exc:
            return error_answer(pb.FindCoordinatorResponse, exc, node_id=-1)
        return pb.FindCoordinatorResponse(node_id=leader, address=self.routing.address_of(leader))


def _unavailable(exc: errors.TidelogError) -> Any:
    """The answer while the controller that would create the topic cannot be asked."""
    unavailable = errors.CoordinatorNotAvailableError(str(exc))
    return error_answer(pb.FindCoordinatorResponse, unavailable, node_id=-1)
