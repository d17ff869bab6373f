"""The node side of the controller: drives its state machine (`coordinator.controller`)
over its Raft log.

The controller is the partition ``__cluster_metadata-0``, a Raft group that starts over the first
min(3, N) nodes of the static peers list (a node that joined is told the voters when it
registers) and changes its members as a partition's group does (a decommissioned voter hands
its seat over: `MetadataImage.plan_controller_voters`, carried out by
`tidelog.node.cluster.reassignment`).
Its committed records (topics, producer-id blocks, ACLs, configs, the registered nodes) are applied
in order by every node to a `MetadataImage`, and each node then opens or removes its replicas
and dials the nodes it learned of;
nodes outside the quorum pull the committed records from a voter. The committed configurations
of the group are in the log too (membership control batches, `MetadataImage.quorum`): a node
that a configuration names opens the metadata replica (a new voter starts as a learner), one it
leaves out deletes it and pulls, and each node keeps the configuration it last applied in its
data dir (`QUORUM_FILE`), so that a removed voter never comes back as one from its static peers
list after a restart. On the controller leader,
admin requests are decided by the image and proposed as records here. The state machine holds
the rules; this module holds the I/O, the waiting and the producer-id block being handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.controller import METADATA_TP, MetadataImage, TopicImage
from tidelog.coordinator.metadata_records import (
    MetadataRecord,
    ProducerIdsRecord,
    encode_record,
)
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.files import write_atomically
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.properties import read_properties
from tidelog.records import RecordInput, build_batch
from tidelog.replication.membership import Membership
from tidelog.storage import LogConfig
from tidelog.storage.log import Log
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb
from tidelog.v1 import raft_pb2_grpc

_METADATA_PULL_EVERY_S = 0.2
#: The metadata log is the only copy of the cluster's metadata (no snapshots): no retention
#: may trim it, whatever the topic defaults of the node's properties or dynamic configs say.
#: Nor may a default min.insync.replicas stop the controller while a majority commits (as
#: Kafka's metadata log, it is a Raft quorum's alone).
METADATA_LOG_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete",
                        "min.insync.replicas": "1"}
_PRODUCER_ID_BLOCK = 1000
#: How long one voter may take to report its metadata high watermark at start.
_CATCH_UP_CALL_S = 1.0
_PULL_CALL_S = 2.0
#: The dynamic node configs that are topic defaults (the others are node settings).
_TOPIC_KEYS = LogConfig.property_names()
#: How long the completion record of a reassignment may take to commit.
_REASSIGNMENT_DONE_S = 10.0
#: How soon a completion waiting for another change of its topic tries again.
_BUSY_RETRY_S = 0.005
#: The configuration of the controller's group this node last applied (its data dir's): which
#: node holds a seat survives a restart, whatever the static peers list says.
QUORUM_FILE = "controller-quorum.properties"

log = logging.getLogger("tidelog.node")


@dataclass(frozen=True)
class KnownNode:
    """A node of the cluster with the addresses this node uses for it."""

    node_id: int
    internal_address: str
    client_address: str
    fenced: bool
    #: False for a node of the static peers list that has not registered.
    registered: bool


class ControllerDriver:
    def __init__(self, config: NodeConfig, replicas: ReplicaSet, routing: Routing) -> None:
        self.config = config
        self.node_id = config.node_id
        self.replicas = replicas
        self.routing = routing
        self.image = MetadataImage()
        routing.registered = self.image.node
        #: The configuration of the controller's group this node knows when its image holds
        #: none yet: the one it kept, else the bootstrap voters (a joined node's were told it).
        self._quorum_path = config.data_dir / QUORUM_FILE
        self._kept_quorum = load_quorum(self._quorum_path) or Membership.of(
            config.controller_voters or sorted(config.peers)[: min(3, len(config.peers))]
        )
        self._pending_topics: set[str] = set()
        self._metadata_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._producer_id_lock = asyncio.Lock()
        self._producer_ids_next = self._producer_ids_end = 0
        #: Set once the metadata on disk is applied: topics changed later get a log line each
        #: (those loaded at start one line for all).
        self._loaded = False
        #: The metadata HW last handed to the disk thread to checkpoint, and that checkpoint.
        self._hw_saving = -1
        self._hw_saved: asyncio.Future[None] | None = None
        replicas.on_published(METADATA_TP, self._apply_committed_metadata)

    @property
    def quorum(self) -> Membership:
        """The newest committed configuration of the controller's group this node knows."""
        return self.image.quorum or self._kept_quorum

    @property
    def voters(self) -> tuple[int, ...]:
        """The controller's voters now: the committed configuration of the replica here, else
        the newest this node applied or kept. Read afresh by every user (the pulls,
        registration's answer, the forwarding, the decommission's checks): it changes."""
        replica = self.replicas.partitions.get(METADATA_TP)
        if replica is not None:
            return replica.core.conf_state.membership.voters
        return self.quorum.voters

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    def seat_held(self, node_id: int) -> bool:
        """Whether `node_id` holds a seat of the controller's quorum: a member of its group,
        or named by the target under way."""
        quorum = self.quorum
        return (node_id in self.voters or node_id in quorum.learners
                or node_id in self.image.controller_target)

    @property
    def is_leader(self) -> bool:
        """Whether this node leads the controller's group (decides and proposes records)."""
        replica = self.replicas.partitions.get(METADATA_TP)
        return replica is not None and replica.is_leader

    # ---- the nodes -------------------------------------------------------------------------

    def known_nodes(self) -> list[KnownNode]:
        """Every node of the cluster as this node knows it, by id: the registered ones, and
        the nodes of its static peers list that have not registered (yet), which count as
        alive (they are members by configuration; a cluster just started must not refuse a
        topic because a peer's registration is a moment late), except those unregistered
        since (they left for good: `MetadataImage.plan_unregister`). Configured addresses win
        over registered ones: they may route through proxies (chaos runs)."""
        nodes = {
            n: KnownNode(n, self.config.peers.get(n, node.internal_address),
                         self.config.client_addresses.get(n, node.client_address),
                         node.fenced, True)
            for n, node in self.image.nodes.items()
        }
        for n, address in self.config.peers.items():
            if n not in nodes and n not in self.image.unregistered:
                nodes[n] = KnownNode(n, address, self.config.client_address_of(n), False, False)
        return [nodes[n] for n in sorted(nodes)]

    def placement_node_ids(self) -> list[int]:
        """Where new replicas may go: the nodes that are not fenced."""
        return [node.node_id for node in self.known_nodes() if not node.fenced]

    def known_node_ids(self) -> list[int]:
        return [node.node_id for node in self.known_nodes()]

    def _nodes_changed(self) -> None:
        """Dial the registered nodes, at their configured address or else the one they
        registered (a joined node, every node on a joined node, a node registered again), and
        hang up on the nodes unregistered since: they left for good, and a link to one would
        redial it, and warn that it broke, for as long as this node runs."""
        for node in self.image.nodes.values():
            if node.node_id != self.node_id:
                self.replicas.link_peer(
                    node.node_id, self.config.peers.get(node.node_id, node.internal_address)
                )
        for node_id in self.image.unregistered:
            if node_id != self.node_id:
                self.replicas.unlink_peer(node_id)

    async def load(self) -> None:
        """Open the metadata log (on a voter) and apply it, then the replicas it assigns here."""
        quorum = self._kept_quorum
        # A node that left the quorum and stopped before its replica was deleted leaves the
        # directory to the sweep of strays (`tidelog.node.replicas.strays`).
        if self.node_id in quorum.members:
            await self.replicas.open_replicas([(
                METADATA_TP, quorum.voters + quorum.learners, METADATA_LOG_CONFIGS,
                quorum.learners,
            )])
            self._hw_saving = self.replicas.partitions[METADATA_TP].high_watermark
            self._apply_committed_metadata()
        await self.replicas.open_replicas(self._assigned_replicas())
        self._loaded = True
        log.info("node %d: metadata loaded up to offset %d: %d topics, %d replicas here",
                 self.node_id, self.image.applied_offset, len(self.image.topics),
                 len(self.replicas.partitions))

    def _assigned_replicas(
        self,
    ) -> list[tuple[TopicPartition, tuple[int, ...], dict[str, str], tuple[int, ...]]]:
        """The replicas the image assigns here (for `ReplicaSet.open_replicas`), read on the
        loop: the image is the loop's."""
        return [
            (TopicPartition(topic.name, p), replicas, dict(topic.configs), _adding(topic, p))
            for topic in self.image.topics.values()
            for p, replicas in enumerate(topic.assignment)
            if self.node_id in replicas
        ]

    # ---- applying committed records --------------------------------------------------------

    def _apply_committed_metadata(self) -> None:
        """Apply metadata records below the HW, then create or remove local replicas."""
        replica = self.replicas.partitions.get(METADATA_TP)
        if replica is None:
            return
        hw = replica.high_watermark
        start = max(self.image.applied_offset + 1, replica.log.log_start_offset)
        if start >= hw:
            return
        self._apply_metadata_bytes(replica.log.read(start, 1 << 30, upper_bound=hw))
        self._save_high_watermark(replica.log, hw)

    def _save_high_watermark(self, log_: Log, hw: int) -> None:
        """Checkpoint the metadata log's HW now, not at the next periodic checkpoint (every
        5 s): a restarted voter applies its log only up to the HW it checkpointed, so a node
        killed before that checkpoint came back without the topics it had created, until it
        committed something as leader again (a lone node, or a whole cluster restarted:
        nobody it can ask knows more, see `catch_up`). Metadata commits are rare, so this
        costs a file replacement per change, on the disk thread as every write."""
        if hw <= self._hw_saving:
            return
        self._hw_saving = hw
        loop = asyncio.get_running_loop()
        self._hw_saved = saved = loop.run_in_executor(self.replicas.disk, log_.checkpoint)
        saved.add_done_callback(_log_checkpoint_failure)

    def _apply_metadata_bytes(self, data: bytes) -> None:
        before = dict(self.image.topics)
        nodes_before = dict(self.image.nodes)
        quorum_before = self.image.quorum
        defaults_before = self.replicas.dynamic_defaults
        self.image.apply_batches(data)
        if self.image.nodes != nodes_before:
            self._nodes_changed()
        if self.image.quorum is not None and self.image.quorum != quorum_before:
            self._quorum_changed(self.image.quorum)
        self.replicas.dynamic_defaults = self.dynamic_defaults()
        self._reconcile(before, defaults_before != self.replicas.dynamic_defaults)
        done = [(o, f) for o, f in self._metadata_waiters if o <= self.image.applied_offset]
        for item in done:
            self._metadata_waiters.remove(item)
            if not item[1].done():
                item[1].set_result(None)

    def _quorum_changed(self, quorum: Membership) -> None:
        """The controller's group committed a new configuration: this node keeps it (before
        anything else on the disk thread, so that a replica deleted below is never created
        again at a restart), opens the metadata replica when it became a member (a learner,
        which the group's leader promotes once it caught up), or deletes it when it was left
        out (it pulls the records from then on, see `pull_loop`)."""
        if quorum != self._kept_quorum:
            self._kept_quorum = quorum
            saved = asyncio.get_running_loop().run_in_executor(
                self.replicas.disk, save_quorum, self._quorum_path, quorum
            )
            saved.add_done_callback(_log_quorum_failure)
        members = quorum.voters + quorum.learners
        if self.node_id in members:
            if self.replicas.hosts(METADATA_TP):
                self.replicas.set_replicas(METADATA_TP, members)
            else:
                log.info("node %d: joins the controller's quorum (voters %s) as a learner",
                         self.node_id, list(quorum.voters),
                         extra={"event": "controller_quorum_joined"})
                self.replicas.add_replica(METADATA_TP, members, dict(METADATA_LOG_CONFIGS),
                                          quorum.learners)
        elif self.replicas.hosts(METADATA_TP):
            log.info("node %d: left the controller's quorum (voters %s): its metadata replica "
                     "is deleted", self.node_id, list(quorum.voters),
                     extra={"event": "controller_quorum_left"})
            self.replicas.remove_replica(METADATA_TP)

    async def _applied(self, offset: int, timeout_s: float) -> None:
        """Wait until this node's image includes the metadata record at `offset`."""
        if offset <= self.image.applied_offset:
            return
        applied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._metadata_waiters.append((offset, applied))
        await _wait(applied, timeout_s)

    def dynamic_defaults(self) -> dict[str, str]:
        """The topic defaults the nodes' dynamic configs give this node: every node's, then
        its own on top (Kafka's order: a broker's own dynamic config wins)."""
        configs = self.image.node_configs
        merged = {**configs.get("", {}), **configs.get(str(self.node_id), {})}
        return {key: value for key, value in merged.items() if key in _TOPIC_KEYS}

    def _reconcile(self, before: dict[str, TopicImage], defaults_changed: bool) -> None:
        """Open the replicas the applied records assign here (new topics, new partitions),
        remove those of deleted topics, and hand changed configs to the running logs."""
        for name, topic in self.image.topics.items():
            old = before.get(name)
            if old is topic and not defaults_changed:
                continue
            if old is not None and old.topic_id == topic.topic_id:
                if self._loaded and old.partition_count != topic.partition_count:
                    log.info("topic %s: %d partition(s) added, now %d", name,
                             topic.partition_count - old.partition_count, topic.partition_count,
                             extra={"topic": name, "event": "partitions_created"})
                if old.configs != topic.configs or defaults_changed:
                    for p in range(old.partition_count):
                        self.replicas.reconfigure(TopicPartition(name, p), dict(topic.configs))
            elif self._loaded:
                log.info("topic %s created: %d partition(s), replication factor %d", name,
                         topic.partition_count, len(topic.assignment[0]),
                         extra={"topic": name, "event": "topic_created"})
            if not self._loaded:
                continue  # `load` opens every replica assigned here once the image is applied
            same = old is not None and old.topic_id == topic.topic_id
            for p, replicas in enumerate(topic.assignment):
                tp = TopicPartition(name, p)
                was = old.assignment[p] if same and old and p < old.partition_count else ()
                if self.node_id in replicas:
                    self.replicas.add_replica(tp, replicas, dict(topic.configs), _adding(topic, p))
                    if was and was != replicas:
                        self.replicas.set_replicas(tp, replicas)
                elif self.node_id in was:
                    # A completed reassignment left this node out: the partition's group
                    # committed a configuration without it before the controller recorded
                    # the completion, so nothing counts on this replica any more.
                    log.info("%s: reassigned to %s: the replica here is deleted", tp,
                             list(replicas), extra={"topic": name, "partition": p,
                                                    "event": "replica_reassigned_away"})
                    self.replicas.remove_replica(tp)
        for name, topic in before.items():
            now = self.image.topics.get(name)
            if now is not None and now.topic_id == topic.topic_id:
                continue
            if self._loaded and now is None:
                log.info("topic %s deleted", name, extra={"topic": name, "event": "topic_deleted"})
            for p in range(topic.partition_count):
                tp = TopicPartition(name, p)
                self.routing.forget(tp)
                self.replicas.remove_replica(tp)

    # ---- non-voters pull ---------------------------------------------------------------------

    def fetch_metadata(self, request: rpb.FetchMetadataRequest) -> rpb.FetchMetadataResponse:
        replica = self.replicas.partitions.get(METADATA_TP)
        if replica is None or replica.offline:
            return rpb.FetchMetadataResponse(error_code=errors.NotControllerError.code)
        hw = replica.high_watermark
        start = max(request.from_offset, replica.log.log_start_offset)
        data = replica.log.read(start, 4 << 20, upper_bound=hw) if start < hw else b""
        return rpb.FetchMetadataResponse(
            records=data, high_watermark=hw, log_start_offset=replica.log.log_start_offset
        )

    def _pulls(self) -> bool:
        """Whether this node pulls the metadata: it holds no voter's replica, or its seat is
        being moved away (a voter that the group removes hears no more from its leader, so it
        learns of its removal only by pulling the configuration that removed it)."""
        target = self.image.controller_target
        return not self.is_voter or (bool(target) and self.node_id not in target)

    def _sources(self) -> list[int]:
        """The nodes that may hold the metadata replica: the voters, and the target's."""
        nodes = dict.fromkeys([*self.voters, *self.image.controller_target])
        return [n for n in nodes if n != self.node_id]

    async def pull_loop(self) -> None:
        """Nodes outside the metadata quorum pull its committed records from a voter, each
        time from the voters as they are then (the quorum changes: `voters`), dialled where
        the node knows them (static peers, else registered addresses)."""
        channels: dict[str, grpc.aio.Channel] = {}
        try:
            turn = 0
            while True:
                sources = self._sources() if self._pulls() else []
                address = (self.routing.internal_address_of(sources[turn % len(sources)])
                           if sources else "")
                if address:
                    channel = channels.get(address)
                    if channel is None:
                        channel = channels[address] = self.replicas.connect_peer(address)
                    try:
                        pulled = await self._pull(channel, _PULL_CALL_S)
                    except grpc.aio.AioRpcError:
                        pulled = None
                    if pulled:
                        continue
                    if pulled is None:  # down, or holds no replica (left the quorum): the next
                        turn += 1
                else:
                    turn += 1
                await asyncio.sleep(_METADATA_PULL_EVERY_S)
        finally:
            for channel in channels.values():
                await channel.close()

    # ---- catching up before serving -----------------------------------------------------------

    async def catch_up(self, timeout_s: float) -> bool:
        """Return once this node's image holds every metadata record the other voters had
        committed when asked (each that answers within a second is asked: a freshly restarted
        one may lag the leader). A restarted voter's own high watermark is the one it last
        checkpointed, so without this a node restarted right after a topic was created reports
        SERVING and answers UNKNOWN_TOPIC_OR_PARTITION for it until the leader's next message
        (or the next election, if the leader is unreachable). Committed records are the same
        on every voter, so they are pulled as non-voters pull them. When no other voter answers
        within `timeout_s` (the rest of the quorum is down too), the node serves what it has
        and says so. Returns whether a voter answered."""
        addresses = [self.routing.internal_address_of(v) for v in self._sources()]
        if not addresses:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        channels = [self.replicas.connect_peer(a) for a in addresses if a]
        try:
            while loop.time() < deadline:
                answered = False
                for channel in channels:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        while (pulled := await self._pull(
                                channel, min(_CATCH_UP_CALL_S, remaining))):
                            pass
                        answered = answered or pulled is False
                if answered:
                    return True
                await asyncio.sleep(_METADATA_PULL_EVERY_S)
        finally:
            for channel in channels:
                await channel.close()
        log.warning("node %d: no metadata voter answered in %.1fs; serving the metadata it has "
                    "(applied up to offset %d)", self.node_id, timeout_s,
                    self.image.applied_offset)
        return False

    async def _pull(self, channel: grpc.aio.Channel, timeout_s: float) -> bool | None:
        """Pull and apply the committed metadata records after this node's image from a
        voter: True when some came (there may be more), False when the voter had none beyond
        it, None when the voter cannot answer (it holds no metadata replica yet)."""
        response = await raft_pb2_grpc.RaftTransportStub(channel).FetchMetadata(
            rpb.FetchMetadataRequest(
                from_offset=self.image.applied_offset + 1, node_id=self.node_id
            ),
            timeout=timeout_s,
        )
        if response.error_code != 0:
            return None
        if not response.records:
            return False
        self._apply_metadata_bytes(response.records)
        return True

    # ---- proposing (the controller leader) ---------------------------------------------------

    async def propose_metadata(
        self, plan: Callable[[], MetadataRecord], timeout_s: float
    ) -> MetadataRecord:
        """On the controller leader: decide (validate) and commit one metadata record, then wait
        until this node has applied it; returns the record. Raises the Kafka error of the
        decision."""
        (record,) = await self.propose_metadata_records(lambda: [plan()], timeout_s)
        return record

    def _active_replica(self) -> PartitionReplica:
        """The metadata replica when this node is the active controller: it leads, and its
        image holds every record committed before its election. Its log may hold records
        committed before then that its HW does not show yet (they commit with its epoch's
        marker): decided on the image without them, a topic could be created twice. Kafka's
        controller, likewise, becomes active only once it has replayed its log up to its
        epoch's start."""
        replica = self.replicas.partitions.get(METADATA_TP)
        if replica is None or not replica.is_leader:
            raise errors.NotControllerError("this node is not the controller")
        start = replica.leader_epoch_start_offset
        if start is None or self.image.applied_offset + 1 < start:
            raise errors.NotControllerError(
                "the new controller has not applied the metadata written before its election"
            )
        return replica

    def metadata_high_watermark(self) -> int | None:
        """The metadata HW on the active controller (`_active_replica`), None elsewhere: every
        record committed before the moment it is read lies below it, so a node whose image
        reaches it is caught up with everything committed before it asked."""
        try:
            return self._active_replica().high_watermark
        except errors.NotControllerError:
            return None

    def assigned_here(self) -> set[TopicPartition]:
        """The partitions the image assigns to this node, those being added to it included."""
        return {
            TopicPartition(topic.name, p)
            for topic in self.image.topics.values()
            for p, replicas in enumerate(topic.assignment)
            if self.node_id in replicas
        }

    async def propose_metadata_records(
        self, plan: Callable[[], Sequence[MetadataRecord]], timeout_s: float
    ) -> Sequence[MetadataRecord]:
        """As `propose_metadata`, for the records of one decision, committed together in one
        batch (the ACLs of one CreateAcls); a decision of no records commits nothing."""
        replica = self._active_replica()
        records = plan()
        if not records:
            return records
        names = {record.subject for record in records}
        busy = names & self._pending_topics
        if busy:
            raise errors.ConcurrentTransactionsError(
                f"another change to {sorted(busy)[0]!r} is in flight"
            )
        self._pending_topics |= names
        try:
            now = wall_clock_ms()
            batch = build_batch(
                [RecordInput(value=encode_record(record), timestamp=now) for record in records]
            )
            try:
                produced = replica.propose(batch, acks=-1)
            except errors.NotLeaderOrFollowerError as exc:
                raise errors.NotControllerError(str(exc)) from None
            assert produced.done is not None
            self.replicas.wake_touched()
            try:
                await _wait(produced.done, timeout_s)
            except errors.NotLeaderOrFollowerError as exc:
                # Deposed before it saw the change commit: the next controller may commit it
                # still, so the outcome is as unknown as after a timeout, and a client's retry
                # must not take "already exists" or "unknown topic" for a refusal.
                raise errors.RequestTimedOutError(
                    f"the controller lost its leadership before the change committed: {exc}"
                ) from None
            self._apply_committed_metadata()
            await self._applied(produced.base_offset + len(records) - 1, timeout_s)
            if self._hw_saved is not None:  # what is answered as done stays applied after a crash
                with contextlib.suppress(OSError):  # logged; the periodic checkpoint retries
                    await _wait(self._hw_saved, timeout_s)
            return records
        finally:
            self._pending_topics -= names

    async def alter_reassignments(
        self, targets: Mapping[TopicPartition, Sequence[int] | None], timeout_s: float,
        releases: Collection[TopicPartition] = (),
    ) -> dict[TopicPartition, errors.TidelogError | None]:
        """On the controller leader: an operator's AlterPartitionReassignments of each
        partition to its target replicas (None cancels its reassignment under way), decided
        on the image and committed in one batch; each partition's outcome (None: recorded, or
        nothing to change). Recorded is all it means: the partitions' leaders carry the
        changes out (`tidelog.node.cluster.reassignment`). Each partition is also held out of
        balancing from now (`MetadataImage.plan_hold`: the operator's plan wins, even one
        that changes nothing); those of ``releases`` only have their hold released."""
        outcomes: dict[TopicPartition, errors.TidelogError | None] = {}
        planned: list[TopicPartition] = []

        def plan() -> list[MetadataRecord]:
            records: list[MetadataRecord] = []
            outcomes.clear()
            planned.clear()
            node_ids = self.known_node_ids()
            now_ms = wall_clock_ms()
            for tp in releases:
                try:
                    records.append(self.image.plan_hold(tp.topic, tp.partition, None))
                except errors.TidelogError as exc:
                    outcomes[tp] = exc
                    continue
                outcomes[tp] = None
                planned.append(tp)
            for tp, target in targets.items():
                try:
                    record = self.image.plan_alter_reassignment(
                        tp.topic, tp.partition, target, node_ids
                    )
                except errors.TidelogError as exc:
                    outcomes[tp] = exc
                    continue
                outcomes[tp] = None
                if record is not None:
                    records.append(record)
                records.append(self.image.plan_hold(tp.topic, tp.partition, now_ms))
                planned.append(tp)
            return records

        try:
            await self.propose_metadata_records(plan, timeout_s)
        except errors.TidelogError as exc:
            if not outcomes:  # refused before planning (not the controller)
                return dict.fromkeys(targets, exc)
            for tp in planned:
                outcomes[tp] = exc
        return outcomes

    async def reassignment_done(
        self, request: rpb.ReassignmentDoneRequest
    ) -> rpb.ReassignmentDoneResponse:
        """A partition's leader reports its group at the target of its reassignment: on the
        controller leader, the completion record (`MetadataImage.plan_complete_reassignment`
        checks the report against the target). Another node answers NOT_CONTROLLER. Reports
        of partitions of one topic wait for each other's records (one change of a topic in
        flight at a time) rather than fail: a topic moved whole finishes its partitions
        together, and a report refused would be sent again only a second later."""
        deadline = asyncio.get_running_loop().time() + _REASSIGNMENT_DONE_S
        while True:
            try:
                await self.propose_metadata_records(
                    lambda: self._completion(request), _REASSIGNMENT_DONE_S
                )
            except errors.ConcurrentTransactionsError as exc:
                if asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(_BUSY_RETRY_S)
                    continue
                return rpb.ReassignmentDoneResponse(error_code=exc.code, error_message=str(exc))
            except errors.TidelogError as exc:
                return rpb.ReassignmentDoneResponse(error_code=exc.code, error_message=str(exc))
            return rpb.ReassignmentDoneResponse()

    def _completion(self, request: rpb.ReassignmentDoneRequest) -> list[MetadataRecord]:
        """The record that ends a reassignment, and, when an operator holds the partition,
        the hold again from now: a plan that took long to carry out is held for its full time
        once in effect, not only from when it was asked for."""
        done = self.image.plan_complete_reassignment(
            request.topic, request.topic_id, request.partition, list(request.voters)
        )
        topic = self.image.topics[request.topic]
        if request.partition not in topic.holds:
            return [done]
        return [done, self.image.plan_hold(request.topic, request.partition, wall_clock_ms())]

    async def allocate_producer_id(self, timeout_s: float) -> int:
        """On the controller leader: the next producer id of the block this node holds,
        committing a new block when it runs out."""
        async with self._producer_id_lock:
            if self._producer_ids_next >= self._producer_ids_end:
                block = await self.propose_metadata(
                    lambda: self.image.plan_allocate_producer_ids(_PRODUCER_ID_BLOCK), timeout_s
                )
                assert isinstance(block, ProducerIdsRecord)
                self._producer_ids_next = block.first
                self._producer_ids_end = block.first + block.count
            producer_id = self._producer_ids_next
            self._producer_ids_next += 1
            return producer_id


def _log_checkpoint_failure(saved: asyncio.Future[None]) -> None:
    """The periodic checkpoint (`Housekeeping`) tries again."""
    if not saved.cancelled() and (exc := saved.exception()) is not None:
        log.warning("cannot checkpoint the metadata high watermark: %s", exc)


def load_quorum(path: Path) -> Membership | None:
    """The configuration kept in `path`; None when there is none. A damaged file fails the
    start: guessing could bring a removed voter back into the quorum."""
    if not path.exists():
        return None
    props = read_properties(path)
    try:
        voters, learners = (
            [int(n) for n in props.get(key, "").split(",") if n] for key in ("voters", "learners")
        )
        if not voters or set(props) != {"voters", "learners"}:
            raise ValueError("voters and learners expected")
        return Membership.of(voters, learners)
    except ValueError as exc:
        raise errors.InvalidConfigError(f"{path} is damaged ({exc}): {props}") from None


def save_quorum(path: Path, quorum: Membership) -> None:
    write_atomically(path, f"voters={','.join(map(str, quorum.voters))}\n"
                           f"learners={','.join(map(str, quorum.learners))}\n")


def _log_quorum_failure(saved: asyncio.Future[None]) -> None:
    if not saved.cancelled() and (exc := saved.exception()) is not None:
        log.error("cannot keep the controller quorum's configuration: %s", exc)


def _adding(topic: TopicImage, partition: int) -> tuple[int, ...]:
    """The replicas a reassignment under way is adding to the partition (learners at first)."""
    moving = topic.reassignments.get(partition)
    return () if moving is None else moving.adding


async def _wait(future: Awaitable[None], timeout_s: float) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(future), timeout_s)
    except TimeoutError:
        raise errors.RequestTimedOutError(f"not committed within {timeout_s:.1f}s") from None
