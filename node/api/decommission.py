"""DecommissionNode (the handler of `tidelog decommission`): on the controller leader (others
forward it there), it records the decommission or its cancellation, describes how far the drain
got (planned as the balancer plans, `tidelog.node.cluster.balancer`), and unregisters the node
once it is drained and stopped (`MetadataImage.plan_unregister`).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.balance import drain_progress
from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.api.controller_api import ControllerApi
from tidelog.node.api.forwarding import at_controller
from tidelog.node.api.rules import error_answer
from tidelog.node.cluster.balancer import image_assignments, plan
from tidelog.v1 import tidelog_pb2 as pb

log = logging.getLogger("tidelog.node")

#: How long DecommissionNode waits for its record when the client set no deadline.
_DEFAULT_TIMEOUT_MS = 30_000

DESCRIBE, DECOMMISSION, CANCEL, UNREGISTER = 0, 1, 2, 3


class DecommissionApi(ControllerApi):
    """DecommissionNode: on the controller leader (others forward it there)."""

    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        return all_failed(method, request, exc)

    @at_controller("DecommissionNode")
    async def decommission_node(
        self, request: pb.DecommissionNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DecommissionNodeResponse:
        try:
            if request.action not in (DESCRIBE, DECOMMISSION, CANCEL, UNREGISTER):
                raise errors.InvalidRequestError(
                    f"unknown action {request.action} (0: describe, 1: decommission, 2: cancel, "
                    "3: unregister)"
                )
            refused = self.authorization.caller_cluster_refused(
                context, Operation.DESCRIBE if request.action == DESCRIBE else Operation.ALTER
            )
            if refused is not None:
                raise refused
            node_id = request.node_id
            timeout_s = (request.timeout_ms or _DEFAULT_TIMEOUT_MS) / 1000
            if request.action == UNREGISTER:
                await self.controller.propose_metadata_records(
                    lambda: [self.controller.image.plan_unregister(
                        node_id, self.controller.quorum.members + self.controller.voters
                    )],
                    timeout_s,
                )
                log.info("node %d unregistered", node_id,
                         extra={"event": "node_unregistered", "node": node_id})
                return pb.DecommissionNodeResponse()
            if request.action != DESCRIBE:
                await self.controller.propose_metadata_records(
                    lambda: self.controller.image.plan_decommission(
                        node_id, request.action == DECOMMISSION,
                        self.controller.known_node_ids(),
                    ),
                    timeout_s,
                )
            elif node_id not in self.controller.known_node_ids():
                raise errors.BrokerIdNotRegisteredError(f"node {node_id} is not a node of this "
                                                        "cluster")
        except errors.TidelogError as exc:
            return all_failed("DecommissionNode", request, exc)
        image = self.controller.image
        removing = {tp: moving.removing for tp, moving in image.reassignments().items()}
        progress = drain_progress(image_assignments(image), removing, node_id,
                                  plan(self.config, self.controller, wall_clock_ms())[0])
        # The controller's seat counts as a replica (of __cluster_metadata-0) until it moved.
        seat = self.controller.seat_held(node_id)
        leaving_seat = seat and bool(image.controller_target) \
            and node_id not in image.controller_target
        response = pb.DecommissionNodeResponse(
            decommissioning=node_id in image.decommissioning,
            replicas_left=progress.replicas_left + seat, moving=progress.moving + leaving_seat,
            controller_voter=node_id in self.controller.voters,
        )
        for tp, reason in progress.stuck:
            response.stuck.add(topic=tp.topic, partition=tp.partition, reason=reason)
        stuck_seat = image.controller_seat_stuck(node_id, self.controller.voters)
        if stuck_seat is not None:
            response.stuck.add(topic=METADATA_TP.topic, partition=METADATA_TP.partition,
                               reason=stuck_seat)
        return response


def all_failed(
    method: str, request: Any, exc: errors.TidelogError
) -> pb.DecommissionNodeResponse:
    """The answer of a DecommissionNode refused as a whole."""
    return error_answer(pb.DecommissionNodeResponse, exc)
