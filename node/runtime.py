"""A node's lifecycle: build its parts, load its logs, run its loops, stop them.

The parts, one job each: the hosted replicas and the Raft driver loops (`replicas.ReplicaSet`),
what the node knows of leaders elsewhere (`routing.Routing`), the controller's state machine
over its Raft log (`controller_driver.ControllerDriver`), the internal topic of consumer
offsets (`coordinator_topic.CoordinatorTopic`) and the group coordinator's state machines over its
partitions (`group_coordinator_driver.GroupCoordinatorDriver`), the same for transactions
(`__transaction_state`, `txn_coordinator_driver.TxnCoordinatorDriver`), periodic chores
(`housekeeping.Housekeeping`), the reassignments this node's partitions carry out
(`reassignment.Reassigner`), the moves the controller leader plans (`balancer.Balancer`), and
the check of old data on disk (`scrubber.Scrubber`). The
server wires them to the gRPC services.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Coroutine
from typing import Any

from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.cluster.balancer import Balancer
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.reassignment import Reassigner
from tidelog.node.cluster.registration import Identity, NodeRegistry, Registrant
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.consumer_group_driver import ConsumerGroupDriver
from tidelog.node.coordinators.group_driver import GroupCoordinatorDriver
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.coordinators.txn_driver import TxnCoordinatorDriver
from tidelog.node.coordinators.txn_markers import TxnMarkers
from tidelog.node.coordinators.txn_verification import TxnVerification
from tidelog.node.replicas.housekeeping import Housekeeping
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.scrubber import Scrubber
from tidelog.replication import NotLeaderError
from tidelog.storage.checkpoint import DATA_DIR_MODE
from tidelog.v1 import raft_pb2 as rpb

log = logging.getLogger("tidelog.node")

_TRANSFER_WAIT_S = 3.0
_METADATA_CATCH_UP_S = 10.0
#: How long a start waits for the controller to register the node (after the metadata caught
#: up, so a controller is likely there) before it serves regardless.
_REGISTER_AT_START_S = 5.0


class NodeRuntime:
    def __init__(self, config: NodeConfig, identity: Identity, epoch: int = -1) -> None:
        """`epoch`: of the registration a joining node made before it was built (-1: it
        registers once it serves)."""
        self.config = config
        self.node_id = config.node_id
        self.replicas = ReplicaSet(config)
        self.routing = Routing(config, self.replicas.partitions, METADATA_TP)
        self.controller = ControllerDriver(config, self.replicas, self.routing)
        self.offsets_topic = CoordinatorTopic.offsets(config, self.controller, self.routing)
        self.groups = GroupCoordinatorDriver(config, self.replicas, self.offsets_topic)
        self.consumer_groups = ConsumerGroupDriver(self.groups)
        self.housekeeping = Housekeeping(config, self.replicas, METADATA_TP)
        self.scrubber = Scrubber(config, self.replicas)
        #: WriteTxnMarkers: served for partitions led here, sent for a transaction coordinator.
        self.txn_markers = TxnMarkers(
            config, self.replicas.partitions, self.routing, self.replicas.dialer
        )
        self.txn_topic = CoordinatorTopic.transactions(config, self.controller, self.routing)
        self.txns = TxnCoordinatorDriver(
            config, self.replicas, self.txn_topic, self.offsets_topic, self.txn_markers.send
        )
        #: VerifyTxnPartitions: asked by Produce before a transaction's first batch on a
        #: partition, answered for the transactional ids coordinated here.
        self.txn_verification = TxnVerification(
            config.node_id, self.txn_topic, self.txns, self.routing, self.txn_markers.channel
        )
        self.reassigner = Reassigner(config, self.replicas, self.controller, self.routing)
        #: Cluster membership: the controller leader's sessions of every node, and this
        #: node's own registration and heartbeats.
        self.registry = NodeRegistry(config, self.controller, self.routing, self.replicas.dialer)
        self.registrant = Registrant(config, identity, self.routing, self.replicas.dialer,
                                     lambda: self.controller.voters, epoch,
                                     self._controller_high_watermark)
        #: Whether this start's sweep of stray replica directories ran (`node.strays`).
        self._strays_swept = False
        self.balancer = Balancer(config, self.controller)
        self._tasks: list[asyncio.Task[None]] = []

    def _controller_high_watermark(self, hw: int) -> None:
        """Sweep the stray replica directories once per start, as soon as this node's
        metadata holds every record committed before the controller said `hw` (so before this
        node started): only then does a directory no record assigns here belong to nobody."""
        if not self._strays_swept and self.controller.image.applied_offset + 1 >= hw:
            self._strays_swept = True
            self.replicas.delete_strays(self.controller.assigned_here())

    def on_envelope(self, env: rpb.RaftEnvelope, payload: memoryview) -> None:
        """One envelope from a peer: leadership announcements (leaders and where their logs
        start), then Raft messages."""
        if env.dst != self.node_id:
            return
        self.routing.learn(env.src, env.leaders)
        self.housekeeping.follow_log_starts(env.src, env.leaders)
        self.replicas.step(env, payload)

    async def start(self) -> None:
        """Load every log (metadata first, then the topics it names), run the loops, and
        return once the metadata is as current as the controller's committed state: the
        server reports SERVING only then."""
        self.config.data_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        self.replicas.start_links()
        await self.controller.load()
        loops = [
            self.replicas.tick_loop(),
            self.replicas.ready_loop(),
            self.housekeeping.loop(),
            self.groups.expiration_loop(),
            self.consumer_groups.expiry_loop(),
            self.txns.expiration_loop(),
            self.txns.id_expiration_loop(),
            self.reassigner.loop(),
            self.registry.session_loop(),
            self.balancer.loop(),
            # Idle while this node votes in the controller's quorum (it may stop voting).
            self.controller.pull_loop(),
        ]
        if self.config.log_scrub_bytes_per_second > 0:
            loops.append(self.scrubber.loop())
        self._tasks = [asyncio.create_task(_fail_fast(loop_)) for loop_ in loops]
        if await self.controller.catch_up(_METADATA_CATCH_UP_S):
            # Registered and unfenced once it serves: new replicas may come here from then on.
            await self.registrant.settle(_REGISTER_AT_START_S)
        self._tasks.append(asyncio.create_task(_fail_fast(self.registrant.run())))

    async def stop(self, graceful: bool) -> None:
        self.housekeeping.stopping = True
        if graceful:
            await self.registrant.goodbye()
            await self._move_leadership_away()
        self.groups.close()
        self.txns.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.txn_markers.close()
        await self.registrant.close()
        await self.registry.close()
        await self.replicas.close()

    async def _move_leadership_away(self) -> None:
        """Graceful shutdown: hand every led partition to a caught-up follower first."""
        deadline = time.monotonic() + _TRANSFER_WAIT_S
        lag_max_ms = self.config.replica_lag_max_ms
        while time.monotonic() < deadline:
            led = [
                r for r in self.replicas.partitions.values() if r.is_leader and len(r.replicas) > 1
            ]
            if not led:
                return
            for replica in led:
                if replica.core.transferring_to is None:
                    target = max(
                        (r for r in replica.replicas if r != self.node_id),
                        key=lambda r: r in replica.in_sync_replicas(lag_max_ms),
                    )
                    with contextlib.suppress(NotLeaderError, ValueError):
                        replica.core.transfer_leadership(target)
            self.replicas.wake()
            await asyncio.sleep(self.config.raft_tick_ms / 1000)
        log.warning("node %d: leadership not moved away in %.1fs", self.node_id, _TRANSFER_WAIT_S)


async def _fail_fast(loop_: Coroutine[Any, Any, None]) -> None:
    """A driver loop that dies would leave a node that answers but never commits: log the
    cause and end the process instead (its peers elect around it; a restart recovers)."""
    try:
        await loop_
    except asyncio.CancelledError:
        raise
    except BaseException:
        log.critical("node driver loop failed; exiting", exc_info=True)
        os._exit(70)
