"""DescribeQuorum (Kafka's api 55): the controller's Raft quorum, the group of the partition
``__cluster_metadata-0``, as its leader sees it.

As in Kafka, only the quorum's leader can describe it (it alone knows how far each voter's log
reaches), so any other node forwards the request to the controller leader. The leader reports
its node id, its epoch (its Raft term), the high watermark, and each voter and learner with the
end of its log as the leader knows it (a follower: what it is known to hold; the leader: its own
log end), when the leader last heard from it (Kafka's last fetch: a Tidelog leader sends and its
followers answer) and when it last held the leader's whole log. The leader keeps those times on
its process's monotonic clock and reports them as wall-clock times; one it does not know (a
follower not heard from since this leader was elected) is -1, as in Kafka, and the leader's own
are now.
"""

from __future__ import annotations

from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.api.controller_api import ControllerApi, cluster_allowed
from tidelog.node.api.forwarding import at_controller
from tidelog.node.api.rules import error_answer
from tidelog.v1 import tidelog_pb2 as pb


class QuorumApi(ControllerApi):
    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        return error_answer(pb.DescribeQuorumResponse, exc)

    @at_controller("DescribeQuorum")
    @cluster_allowed("DescribeQuorum", Operation.DESCRIBE)
    async def describe_quorum(
        self, request: pb.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeQuorumResponse:
        """The quorum as this node, its leader, sees it; NOT_CONTROLLER when this node does not
        lead it (the request was forwarded here as leadership moved)."""
        replica = self.controller.replicas.partitions.get(METADATA_TP)
        if replica is None or not replica.is_leader:
            return error_answer(pb.DescribeQuorumResponse, errors.NotControllerError(
                f"node {self.config.node_id} does not lead the controller's quorum"))
        core = replica.core
        membership = core.membership

        def described(node_id: int) -> pb.QuorumReplica:
            if node_id == self.config.node_id:
                now = wall_clock_ms()
                return pb.QuorumReplica(node_id=node_id, log_end_offset=core.log_end_offset,
                                        last_caught_up_timestamp_ms=now,
                                        last_heard_timestamp_ms=now)
            heard, caught_up = replica.follower_times(node_id)
            return pb.QuorumReplica(node_id=node_id, log_end_offset=core.match_of(node_id),
                                    last_caught_up_timestamp_ms=caught_up,
                                    last_heard_timestamp_ms=heard)

        return pb.DescribeQuorumResponse(
            leader_id=self.config.node_id, leader_epoch=core.term,
            high_watermark=core.high_watermark,
            voters=[described(n) for n in membership.voters],
            observers=[described(n) for n in membership.learners],
        )
