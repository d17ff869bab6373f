"""Continuous partition balancing and decommissioning, on the controller leader.

Every interval, the node that leads the controller's group plans the next moves on its image
(`tidelog.coordinator.balance`: drain the nodes being decommissioned, then even replicas and
preferred leaders over the live nodes, at most partition.autobalancing.max.moves partitions
moving at once) and records them as reassignments, which the partitions' leaders carry out as
Raft membership changes (`tidelog.node.cluster.reassignment`). The plan and its records are made in
one step on the image the proposal is checked against, so a move is never planned on an
image older than the one that records it (a partition whose move, or an operator's
reassignment, is under way is planned around, never retargeted). Nothing of the balancer's
is stored: a new controller leader plans from the reassignments the image holds.

Operator plans win: a partition an operator reassigned is held (`PartitionHoldRecord`, the
controller leader's wall clock in the record) and balancing leaves it alone for
balancer.operator.hold.ms from then, or from the move's completion when that is later, or
until the operator releases it. The hold is in the metadata log, so it outlives a controller
failover; this module only passes the time in.

DecommissionNode's handler (`tidelog.node.api.decommission`) records a decommission, and asks
this module how far the drain got.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.balance import Plan, plan_moves
from tidelog.coordinator.controller import MetadataImage
from tidelog.coordinator.metadata_records import MetadataRecord
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.config import NodeConfig
from tidelog.types import TopicPartition

log = logging.getLogger("tidelog.node")

_PROPOSE_TIMEOUT_S = 10.0


def settings(config: NodeConfig, image: MetadataImage) -> NodeConfig:
    """This node's config with the dynamic node configs in force on it."""
    configs = image.node_configs
    return config.with_dynamic(configs.get("", {}), configs.get(str(config.node_id), {}))


def plan(config: NodeConfig, controller: ControllerDriver, now_ms: int) -> tuple[Plan, int | None]:
    """The next moves on the controller's image, over the nodes that are not fenced, with the
    autobalancing settings in force, leaving alone the partitions operators hold at
    ``now_ms``; and when the first of those holds ends (None: none is in force)."""
    image = controller.image
    in_flight = {tp: moving.target for tp, moving in image.reassignments().items()}
    now = settings(config, image)
    held, hold_ends_ms = image.held(now_ms, now.balancer_operator_hold_ms)
    return plan_moves(
        image_assignments(image), controller.placement_node_ids(), image.decommissioning,
        in_flight, now.partition_autobalancing_max_moves,
        balance=now.partition_autobalancing_enable, held=held,
    ), hold_ends_ms


class Balancer:
    def __init__(self, config: NodeConfig, controller: ControllerDriver) -> None:
        self.config = config
        self.controller = controller
        #: The image (its applied offset) on which the last plan had no move: everything a
        #: plan reads (assignments, moves under way, nodes and their fencing, settings,
        #: decommissions, operators' holds) is in the image, so it needs no plan again until
        #: a record lands, or until an operator's hold ends (`_settled_until_ms`).
        self._settled_at = -1
        self._settled_until_ms: int | None = None
        #: Called once per pass on the controller leader (the node counts them as a metric).
        self.on_pass: Callable[[], None] = lambda: None

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.partition_autobalancing_tick_interval_ms / 1000)
            if self.controller.is_leader:
                await self.balance_once()
                self.on_pass()

    async def balance_once(self) -> None:
        """Record the next moves, if any (on the controller leader)."""
        now_ms = wall_clock_ms()
        if self.controller.image.applied_offset == self._settled_at and (
                self._settled_until_ms is None or now_ms < self._settled_until_ms):
            return
        planned: list[str] = []

        def records() -> list[MetadataRecord]:
            image = self.controller.image
            out: list[MetadataRecord] = []
            planned.clear()
            seat = image.plan_controller_voters(self.controller.voters)
            if seat is not None:
                out.append(seat)
                planned.append(f"the controller's seats to {list(seat.voters)} (decommission)")
            moves, hold_ends_ms = plan(self.config, self.controller, now_ms)
            for move in moves.moves:
                tp = move.partition
                record = image.plan_alter_reassignment(
                    tp.topic, tp.partition, move.replicas, self.controller.known_node_ids()
                )
                if record is not None:
                    out.append(record)
                    planned.append(f"{tp} to {list(move.replicas)} ({move.reason})")
                    if tp.partition in image.topics[tp.topic].holds:
                        # An ended hold (or a drain's move): the operator's placement is
                        # gone, and so is the hold, which would otherwise be renewed when
                        # this move completes.
                        out.append(image.plan_hold(tp.topic, tp.partition, None))
            if not out:
                self._settled_at, self._settled_until_ms = image.applied_offset, hold_ends_ms
            return out

        try:
            await self.controller.propose_metadata_records(records, _PROPOSE_TIMEOUT_S)
        except errors.TidelogError as exc:
            log.info("node %d: balancing moves not recorded (%s); planning again",
                     self.config.node_id, exc)
            return
        for move in planned:
            log.info("balancing: moving %s", move, extra={"event": "balance_move"})


def image_assignments(image: MetadataImage) -> dict[TopicPartition, tuple[int, ...]]:
    """Every partition's replicas (during a reassignment, every node that may be a member)."""
    return {
        TopicPartition(topic.name, p): replicas
        for topic in image.topics.values() for p, replicas in enumerate(topic.assignment)
    }
