"""Carrying out the reassignments the controller recorded, on the partitions' leaders.

The controller's PartitionChangeRecord lists every node that may be a member while a partition
moves; each node applies it (`ControllerDriver._reconcile`), so a node the reassignment adds
opens its replica as a learner. On the node that leads the partition, this loop steps the
group toward the target each interval (`tidelog.replication.mover.MembershipMover`: learners,
catch-up, promotion, leadership off a leaving replica, removal; the safety argument is there)
and, once the group's committed configuration is the target, reports it to the controller
leader (`ReassignmentDone`, as Kafka's AlterPartition); the controller then records the
reassignment done and the nodes left out delete their replicas. A report that is lost, or
that reaches a node that no longer is the controller, is simply sent again at the next
interval: the completion record is idempotent (the plan refuses a second one), and the step
decisions need no memory of earlier intervals, so a new leader or a new controller picks the
work up where the log says it stands.

The controller's own group moves the same way, toward the target its image holds
(`MetadataImage.controller_target`), stepped here on the node that leads it; nothing is reported:
the configurations it commits are in the metadata log itself, which every node applies
(`ControllerDriver._quorum_changed`).
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.replication.mover import MembershipMover, Step
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb
from tidelog.v1 import raft_pb2_grpc

log = logging.getLogger("tidelog.node")

#: The step interval's floor while reassignments are under way: a reassignment moves a step per
#: commit of the group, a few milliseconds at best, and the loop looks at every reassignment
#: under way each time.
_MIN_INTERVAL_S = 0.02
#: The interval while none is: a new one starts at most this late, and an idle node wakes 5
#: times a second for it, not 50.
_IDLE_INTERVAL_S = 0.2
#: How often a leader whose group reached its target reports it again while the image still
#: shows the reassignment (the report was lost, or the controller changed).
_REPORT_EVERY_S = 1.0
_REPORT_CALL_S = 5.0


class Reassigner:
    def __init__(self, config: NodeConfig, replicas: ReplicaSet, controller: ControllerDriver,
                 routing: Routing) -> None:
        self.config = config
        self.replicas = replicas
        self.controller = controller
        self.routing = routing
        #: When each partition's completion was last reported, and the reports under way.
        self._reported: dict[TopicPartition, float] = {}
        self._reporting: set[asyncio.Task[None]] = set()
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def loop(self) -> None:
        interval = max(_MIN_INTERVAL_S, self.config.raft_tick_ms / 1000)
        try:
            while True:
                await asyncio.sleep(interval if self.step_all() else _IDLE_INTERVAL_S)
        finally:
            for task in self._reporting:
                task.cancel()
            for channel in self._channels.values():
                await channel.close()

    def step_all(self) -> bool:
        """One step of each reassignment whose partition this node leads; whether any
        reassignment is under way in the cluster."""
        image = self.controller.image
        moving = image.reassignments()
        for tp in [tp for tp in self._reported if tp not in moving]:
            del self._reported[tp]
        quorum_moving = False
        controller = self.replicas.partitions.get(METADATA_TP)
        if image.controller_target and controller is not None and controller.is_leader:
            quorum_moving = self._step(controller, image.controller_target) is not Step.DONE
        for tp, reassignment in moving.items():
            replica = self.replicas.partitions.get(tp)
            if replica is None or not replica.is_leader:
                continue
            if self._step(replica, reassignment.target) is Step.DONE:
                now = time.monotonic()
                if now - self._reported.get(tp, -_REPORT_EVERY_S) >= _REPORT_EVERY_S:
                    self._reported[tp] = now
                    request = rpb.ReassignmentDoneRequest(
                        node_id=self.config.node_id, topic=tp.topic,
                        topic_id=image.topics[tp.topic].topic_id, partition=tp.partition,
                        voters=replica.core.conf_state.membership.voters,
                    )
                    task = asyncio.create_task(self._report(request))
                    self._reporting.add(task)
                    task.add_done_callback(self._reporting.discard)
        return bool(moving) or quorum_moving

    def _step(self, replica: PartitionReplica, target: tuple[int, ...]) -> Step:
        """One step of `replica`'s group (led here) toward `target`."""
        step = MembershipMover(target).step(replica.core)
        if step.changed or step is Step.PENDING:
            # PENDING may have appended the leader's marker (a change waits for a commit of
            # the leader's term): an idle, quiesced group sends it only if told to.
            self.replicas.changed(replica)
        if step.changed:
            tp, membership = replica.tp, replica.core.membership
            log.info("%s: reassignment to %s: %s (voters %s, learners %s)", tp,
                     list(target), step.value, list(membership.voters),
                     list(membership.learners),
                     extra={"topic": tp.topic, "partition": tp.partition,
                            "event": "reassignment_step", "step": step.name.lower()})
        return step

    async def _report(self, request: rpb.ReassignmentDoneRequest) -> None:
        controller = self.routing.controller_id
        try:
            if controller == self.config.node_id:
                response = await self.controller.reassignment_done(request)
            elif address := self.routing.internal_address_of(controller):
                channel = self._channels.get(address)
                if channel is None:
                    channel = self._channels[address] = self.replicas.connect_peer(address)
                response = await raft_pb2_grpc.RaftTransportStub(channel).ReassignmentDone(
                    request, timeout=_REPORT_CALL_S
                )
            else:
                return  # no controller known: the next interval tries again
        except grpc.aio.AioRpcError as exc:
            log.info("%s-%d: the reassignment's completion did not reach controller %d (%s); "
                     "reporting again", request.topic, request.partition, controller, exc.code())
            return
        if response.error_code:
            log.info("%s-%d: the controller did not record the reassignment done: %s",
                     request.topic, request.partition, response.error_message)
        else:
            log.info("%s-%d: reassignment done: replicas %s", request.topic, request.partition,
                     list(request.voters), extra={"topic": request.topic,
                                                  "partition": request.partition,
                                                  "event": "reassignment_done"})
