"""The node runtime: Raft cores over storage, driven by one event loop, plus the controller.

Everything that touches a core runs on the asyncio loop. Disk work runs on one writer thread:
each round of the Ready loop collects the Readies of every partition that has one, applies and
fsyncs them all in a single trip to the thread (group commit: one fsync per touched log per
round, however many requests arrived meanwhile), and only then sends their messages and
publishes their high watermarks, which is the core's persist-before-send contract honoured per
round rather than per entry.

The controller is the partition ``__cluster_metadata-0``, a Raft group over the first min(3, N)
nodes. Its committed records (topic creations and deletions) are applied in order by every node
to a `MetadataImage`; nodes outside its quorum pull the committed records from a voter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from tidelog import errors
from tidelog.node.config import NodeConfig
from tidelog.node.metadata import (
    METADATA_TOPIC,
    MetadataImage,
    TopicInfo,
    decode_record,
    encode_record,
)
from tidelog.node.partition import PartitionReplica
from tidelog.node.transport import Outgoing, PeerLink, add_raft_transport, messages_of
from tidelog.records import RecordInput, build_batch, decode_records, iter_batches
from tidelog.replication import (
    AppendResponse,
    HeartbeatResponse,
    NotLeaderError,
    RaftConfig,
    Ready,
    Role,
)
from tidelog.storage import LogConfig
from tidelog.storage.cleaner import LogCleaner
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb
from tidelog.v1 import raft_pb2_grpc, tidelog_pb2_grpc

log = logging.getLogger("tidelog.node")

METADATA_TP = TopicPartition(METADATA_TOPIC, 0)
_ANNOUNCE_EVERY_S = 0.2
_CHECKPOINT_EVERY_S = 5.0
_RETENTION_EVERY_S = 5.0
_METADATA_PULL_EVERY_S = 0.2
_TRANSFER_WAIT_S = 3.0
_PRODUCER_ID_BLOCK = 1000
_FLUSH_THREADS = 8


class NodeRuntime:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.partitions: dict[TopicPartition, PartitionReplica] = {}
        self.image = MetadataImage()
        #: What this node knows of partitions it does not host: tp -> (leader, epoch, isr).
        self.leaders: dict[TopicPartition, tuple[int, int, tuple[int, ...]]] = {}
        self.metadata_voters = tuple(sorted(config.peers)[: min(3, len(config.peers))])
        self._links: dict[int, PeerLink] = {}
        self._disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"disk-{self.node_id}")
        #: Helpers of the disk thread for one round of writes: see `_persist_all`.
        self._flushers = ThreadPoolExecutor(
            max_workers=_FLUSH_THREADS, thread_name_prefix=f"flush-{self.node_id}"
        )
        self._work = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._outbox: dict[int, Outgoing] = {}
        self._pending_topics: set[str] = set()
        self._metadata_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._stopping = False
        self._producer_id_lock = asyncio.Lock()
        self._producer_ids_next = self._producer_ids_end = 0
        self.raft_config = RaftConfig(
            election_ticks=max(2, config.election_timeout_ms // config.raft_tick_ms),
            heartbeat_ticks=max(1, config.heartbeat_interval_ms // config.raft_tick_ms),
        )

    # ---- lifecycle -------------------------------------------------------------------------

    def register(self, server: grpc.aio.Server) -> None:
        from tidelog.node.api import TidelogServicer

        tidelog_pb2_grpc.add_TidelogServicer_to_server(TidelogServicer(self), server)
        add_raft_transport(server, self.on_envelope, self.fetch_metadata)

    async def start(self) -> None:
        """Load every log (metadata first, then the topics it names) before serving."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        for peer_id, address in self.config.peers.items():
            if peer_id != self.node_id:
                link = PeerLink(self.node_id, peer_id, address)
                link.start()
                self._links[peer_id] = link
        loop = asyncio.get_running_loop()
        if self.node_id in self.metadata_voters:
            await loop.run_in_executor(
                self._disk, self._open_replica, METADATA_TP, self.metadata_voters, {}
            )
            self._apply_committed_metadata()
        await loop.run_in_executor(self._disk, self._open_assigned_replicas)
        loops = [self._tick_loop(), self._ready_loop(), self._housekeeping_loop()]
        if self.node_id not in self.metadata_voters:
            loops.append(self._metadata_pull_loop())
        self._tasks = [asyncio.create_task(_fail_fast(loop_)) for loop_ in loops]

    async def stop(self, graceful: bool) -> None:
        self._stopping = True
        if graceful:
            await self._move_leadership_away()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for link in self._links.values():
            await link.close()
        loop = asyncio.get_running_loop()
        for replica in list(self.partitions.values()):
            replica.abandon()
            await loop.run_in_executor(self._disk, replica.log.close)
        self._disk.shutdown(wait=True)
        self._flushers.shutdown(wait=True)

    async def _move_leadership_away(self) -> None:
        """Graceful shutdown: hand every led partition to a caught-up follower first."""
        deadline = time.monotonic() + _TRANSFER_WAIT_S
        while time.monotonic() < deadline:
            led = [r for r in self.partitions.values() if r.is_leader and len(r.replicas) > 1]
            if not led:
                return
            for replica in led:
                if replica.core.transferring_to is None:
                    target = max(
                        (r for r in replica.replicas if r != self.node_id),
                        key=lambda r: r in replica.in_sync_replicas(self.config.replica_lag_max_ms),
                    )
                    with contextlib.suppress(NotLeaderError, ValueError):
                        replica.core.transfer_leadership(target)
            self._work.set()
            await asyncio.sleep(self.config.raft_tick_ms / 1000)
        log.warning("node %d: leadership not moved away in %.1fs", self.node_id, _TRANSFER_WAIT_S)

    def wake(self) -> None:
        """New proposals are waiting in some core: run a round of the Ready loop."""
        self._work.set()

    def validate_topic_configs(self, configs: dict[str, str]) -> None:
        """Raises INVALID_CONFIG (40) for a topic config storage would refuse."""
        self._log_config(configs)

    # ---- replicas --------------------------------------------------------------------------

    def _log_config(self, topic_configs: dict[str, str]) -> LogConfig:
        defaults = {
            "segment.bytes": str(self.config.segment_bytes),
            "index.interval.bytes": str(self.config.index_interval_bytes),
            "segment.ms": str(self.config.segment_ms),
            "retention.ms": str(self.config.retention_ms),
            "retention.bytes": str(self.config.retention_bytes),
        }
        return LogConfig.from_kafka_props({**defaults, **self.config.extra, **topic_configs})

    def _open_replica(
        self, tp: TopicPartition, replicas: tuple[int, ...], configs: dict[str, str]
    ) -> None:
        if tp in self.partitions:
            return
        directory = self.config.data_dir / f"{tp.topic}-{tp.partition}"
        seed = hash((self.node_id, tp.topic, tp.partition)) & 0xFFFFFFFF
        self.partitions[tp] = PartitionReplica(
            tp, self.node_id, replicas, directory, self._log_config(configs), self.raft_config, seed
        )

    def _open_assigned_replicas(self) -> None:
        for topic in list(self.image.topics.values()):
            for p, replicas in enumerate(topic.assignment):
                if self.node_id in replicas:
                    self._open_replica(TopicPartition(topic.name, p), replicas, dict(topic.configs))

    def _remove_replica(self, tp: TopicPartition) -> None:
        """Forget a deleted topic's replica now; its files go on the disk thread, after any
        round of writes already under way for it."""
        replica = self.partitions.pop(tp, None)
        if replica is not None:
            replica.abandon()
            self._disk.submit(_delete_replica_files, replica)

    # ---- the Raft driver -------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        """One tick per interval. Ticks a stalled loop missed are dropped, not replayed back
        to back: a node that was starved of CPU for 300 ms must not count 30 ticks at once
        and start an election against a leader whose heartbeats are merely queued."""
        interval = self.config.raft_tick_ms / 1000
        next_tick = time.monotonic()
        while True:
            next_tick = max(next_tick + interval, time.monotonic())
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
            for replica in self.partitions.values():
                replica.core.tick()
                replica.observe_role()
            self._work.set()

    def on_envelope(self, env: rpb.RaftEnvelope, payload: memoryview) -> None:
        if env.dst != self.node_id:
            return
        for announcement in env.leaders:
            tp = TopicPartition(announcement.group.topic, announcement.group.partition)
            known = self.leaders.get(tp)
            if known is None or announcement.epoch >= known[1]:
                self.leaders[tp] = (env.src, announcement.epoch, tuple(announcement.isr))
        for tp, message in messages_of(env, payload):
            replica = self.partitions.get(tp)
            if replica is None:
                continue
            replica.core.step(message)
            replica.observe_role()
            if replica.is_leader and isinstance(message, AppendResponse | HeartbeatResponse):
                replica.record_follower(message.src)
        self._work.set()

    async def _ready_loop(self) -> None:
        loop = asyncio.get_running_loop()
        flush = self.config.log_flush_policy == "always"
        while True:
            await self._work.wait()
            self._work.clear()
            while True:
                batch = [(r, r.core.ready()) for r in list(self.partitions.values())
                         if r.core.has_ready()]
                if not batch:
                    break
                # A Ready that writes nothing (a new HW alone is not written, see
                # `PartitionReplica.writes`) promises nothing new about this node's disk (what
                # came before it is durable: a core has one Ready in flight at most), so it
                # completes now rather than after other partitions' fsyncs: heartbeats and
                # their answers never wait for a slow disk, which would cost elections, and a
                # HW that advances completes acks=all requests without waiting for one.
                durable = [(r, rd) for r, rd in batch if r.writes(rd)]
                self._complete_round([(r, rd) for r, rd in batch if not r.writes(rd)])
                if not durable:
                    self._flush_outbox()
                else:
                    # A leader's appends go out before its own fsync, so that the followers'
                    # fsyncs overlap it instead of following it (Raft thesis §10.2.1, as etcd
                    # does): the core counts its own replica only up to its durable prefix, so
                    # a commit still takes a majority of fsynced copies. Acknowledgements and
                    # votes (any Ready of a follower or candidate) still wait for the disk.
                    early: list[tuple[PartitionReplica, Ready]] = []
                    late: list[tuple[PartitionReplica, Ready]] = []
                    for item in durable:
                        (early if _promises_nothing(*item) else late).append(item)
                    for replica, rd in early:
                        for message in rd.messages:
                            self._queue_message(replica.tp, message)
                    self._flush_outbox()
                    await loop.run_in_executor(
                        self._disk, _persist_all, durable, flush, self._flushers
                    )
                    self._complete_round(early, sent=True)
                    self._complete_round(late)
                    self._flush_outbox()

    def _complete_round(
        self, items: list[tuple[PartitionReplica, Ready]], sent: bool = False
    ) -> None:
        """The Readies are durable: queue their messages (unless `sent` already), publish,
        advance the cores. The caller flushes the outbox, so that a round's messages to a
        peer travel as one frame."""
        for replica, rd in items:
            if not sent:
                for message in rd.messages:
                    self._queue_message(replica.tp, message)
            replica.publish(rd)
            if replica.tp == METADATA_TP:
                self._apply_committed_metadata()
        for replica, rd in items:
            replica.core.advance(rd)

    def _queue_message(self, tp: TopicPartition, message: Any) -> None:
        outgoing = self._outbox.get(message.dst)
        if outgoing is None:
            outgoing = self._outbox[message.dst] = Outgoing(self.node_id, message.dst)
        outgoing.add(tp, message)

    def _flush_outbox(self) -> None:
        for dst, outgoing in self._outbox.items():
            link = self._links.get(dst)
            if link is not None:
                link.send(outgoing)
        self._outbox = {}

    # ---- housekeeping ----------------------------------------------------------------------

    async def _housekeeping_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last_checkpoint = last_retention = last_balance = time.monotonic()
        while True:
            await asyncio.sleep(_ANNOUNCE_EVERY_S)
            self._announce_leadership()
            now = time.monotonic()
            balance_every_s = self.config.leader_imbalance_check_interval_ms / 1000
            if self.config.auto_leader_rebalance_enable and now - last_balance >= balance_every_s:
                last_balance = now
                self._prefer_preferred_leaders()
            if now - last_checkpoint >= _CHECKPOINT_EVERY_S:
                last_checkpoint = now
                await loop.run_in_executor(self._disk, self._checkpoint_all)
            if now - last_retention >= _RETENTION_EVERY_S:
                last_retention = now
                await loop.run_in_executor(self._disk, self._retention_pass)

    def _announce_leadership(self) -> None:
        """Tell every peer which partitions this node leads, so any node answers Metadata."""
        led = [r for r in self.partitions.values() if r.is_leader]
        if not led:
            return
        for peer_id, link in self._links.items():
            outgoing = Outgoing(self.node_id, peer_id)
            for replica in led:
                outgoing.env.leaders.add(
                    group=rpb.GroupId(topic=replica.tp.topic, partition=replica.tp.partition),
                    epoch=replica.leader_epoch,
                    isr=replica.in_sync_replicas(self.config.replica_lag_max_ms),
                )
            link.send(outgoing)

    def _prefer_preferred_leaders(self) -> None:
        """Hand leadership back to a partition's preferred (first) replica once it is in sync,
        as Kafka's auto leader rebalance does, so leaders stay spread as assigned."""
        if self._stopping:
            return
        for replica in self.partitions.values():
            preferred = replica.replicas[0]
            if (
                replica.tp != METADATA_TP  # the controller stays put, as Kafka's does
                and replica.is_leader
                and preferred != self.node_id
                and replica.core.transferring_to is None
                and preferred in replica.in_sync_replicas(self.config.replica_lag_max_ms)
            ):
                with contextlib.suppress(NotLeaderError, ValueError):
                    replica.core.transfer_leadership(preferred)
        self._work.set()

    def _checkpoint_all(self) -> None:
        """Every few seconds, as Kafka's flusher: indexes synced, the recovery point moved up
        to what is on disk, and the offsets checkpointed, so a crash recovers little."""
        for replica in list(self.partitions.values()):
            if not replica.closed:
                replica.log.flush()
                replica.log.checkpoint()

    def _retention_pass(self) -> None:
        """Retention and, for compacted topics, a cleaner pass bounded by the last stable
        offset; on the disk thread, which is the only writer of every log."""
        now_ms = int(time.time() * 1000)
        for replica in list(self.partitions.values()):
            if not replica.closed:
                replica.log.delete_old_segments()
                if replica.log.config.compact_enabled:
                    LogCleaner(replica.log).clean(now_ms, replica.last_stable_offset)

    # ---- routing knowledge -----------------------------------------------------------------

    def leader_of(self, tp: TopicPartition) -> tuple[int, int]:
        """(leader id, epoch) as this node knows it; (-1, -1) when unknown."""
        replica = self.partitions.get(tp)
        if replica is not None and replica.core.leader_id is not None:
            return replica.core.leader_id, replica.leader_epoch
        known = self.leaders.get(tp)
        if known is not None:
            return known[0], known[1]
        return -1, -1

    def isr_of(self, tp: TopicPartition) -> list[int]:
        replica = self.partitions.get(tp)
        if replica is not None and replica.is_leader:
            return replica.in_sync_replicas(self.config.replica_lag_max_ms)
        known = self.leaders.get(tp)
        return list(known[2]) if known is not None else []

    def address_of(self, node_id: int) -> str:
        """The address a client should use for `node_id` (Metadata, leader hints)."""
        return self.config.client_address_of(node_id)

    @property
    def controller_id(self) -> int:
        return self.leader_of(METADATA_TP)[0]

    # ---- the controller --------------------------------------------------------------------

    def _apply_committed_metadata(self) -> None:
        """Apply metadata records below the HW, then create or remove local replicas."""
        replica = self.partitions.get(METADATA_TP)
        if replica is None:
            return
        hw = replica.high_watermark
        start = max(self.image.applied_offset + 1, replica.log.log_start_offset)
        if start >= hw:
            return
        self._apply_metadata_bytes(replica.log.read(start, 1 << 30, upper_bound=hw))

    def _apply_metadata_bytes(self, data: bytes) -> None:
        before = dict(self.image.topics)
        for pos, header in iter_batches(data):
            if header.is_control:
                self.image.applied_offset = max(self.image.applied_offset, header.last_offset)
                continue
            for record in decode_records(data, pos, header):
                if record.value is not None:
                    self.image.apply(record.offset, decode_record(record.value))
        self._reconcile(before)
        done = [(o, f) for o, f in self._metadata_waiters if o <= self.image.applied_offset]
        for item in done:
            self._metadata_waiters.remove(item)
            if not item[1].done():
                item[1].set_result(None)

    async def _applied(self, offset: int, timeout_s: float) -> None:
        """Wait until this node's image includes the metadata record at `offset`."""
        if offset <= self.image.applied_offset:
            return
        applied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._metadata_waiters.append((offset, applied))
        await _wait(applied, timeout_s)

    def _reconcile(self, before: dict[str, TopicInfo]) -> None:
        for name, topic in self.image.topics.items():
            if before.get(name) is topic:
                continue
            for p, replicas in enumerate(topic.assignment):
                if self.node_id in replicas:
                    self._open_replica(TopicPartition(name, p), replicas, dict(topic.configs))
        for name, topic in before.items():
            if self.image.topics.get(name) is not topic:
                for p in range(topic.partition_count):
                    tp = TopicPartition(name, p)
                    self.leaders.pop(tp, None)
                    self._remove_replica(tp)

    def fetch_metadata(self, request: rpb.FetchMetadataRequest) -> rpb.FetchMetadataResponse:
        replica = self.partitions.get(METADATA_TP)
        if replica is None:
            return rpb.FetchMetadataResponse(error_code=errors.NotControllerError.code)
        hw = replica.high_watermark
        start = max(request.from_offset, replica.log.log_start_offset)
        data = replica.log.read(start, 4 << 20, upper_bound=hw) if start < hw else b""
        return rpb.FetchMetadataResponse(
            records=data, high_watermark=hw, log_start_offset=replica.log.log_start_offset
        )

    async def _metadata_pull_loop(self) -> None:
        """Nodes outside the metadata quorum pull its committed records from a voter."""
        channels = {
            v: grpc.aio.insecure_channel(self.config.peers[v]) for v in self.metadata_voters
        }
        try:
            turn = 0
            while True:
                voter = self.metadata_voters[turn % len(self.metadata_voters)]
                try:
                    stub = raft_pb2_grpc.RaftTransportStub(channels[voter])
                    response = await stub.FetchMetadata(
                        rpb.FetchMetadataRequest(
                            from_offset=self.image.applied_offset + 1, node_id=self.node_id
                        ),
                        timeout=2.0,
                    )
                    if response.error_code == 0 and response.records:
                        self._apply_metadata_bytes(response.records)
                        continue
                except grpc.aio.AioRpcError:
                    turn += 1
                await asyncio.sleep(_METADATA_PULL_EVERY_S)
        finally:
            for channel in channels.values():
                await channel.close()

    async def propose_metadata(
        self, plan: Callable[[], dict[str, object]], timeout_s: float
    ) -> None:
        """On the controller leader: decide (validate) and commit one metadata record, then wait
        until this node has applied it. Raises the Kafka error of the decision."""
        replica = self.partitions.get(METADATA_TP)
        if replica is None or not replica.is_leader:
            raise errors.NotControllerError("this node is not the controller")
        record = plan()
        name = str(record.get("name", record["type"]))
        if name in self._pending_topics:
            raise errors.ConcurrentTransactionsError(f"another change to {name!r} is in flight")
        self._pending_topics.add(name)
        try:
            batch = build_batch(
                [RecordInput(value=encode_record(record), timestamp=int(time.time() * 1000))]
            )
            try:
                produced = replica.propose(batch, acks=-1)
            except errors.NotLeaderOrFollowerError as exc:
                raise errors.NotControllerError(str(exc)) from None
            assert produced.done is not None
            self.wake()
            try:
                await _wait(produced.done, timeout_s)
            except errors.NotLeaderOrFollowerError as exc:  # deposed before it committed
                raise errors.NotControllerError(str(exc)) from None
            self._apply_committed_metadata()
            await self._applied(produced.base_offset, timeout_s)
        finally:
            self._pending_topics.discard(name)

    async def allocate_producer_id(self, timeout_s: float) -> int:
        """On the controller leader: the next producer id of the block this node holds,
        committing a new block when it runs out."""
        async with self._producer_id_lock:
            if self._producer_ids_next >= self._producer_ids_end:
                record: dict[str, object] = {}

                def plan() -> dict[str, object]:
                    record.update(self.image.plan_allocate_producer_ids(_PRODUCER_ID_BLOCK))
                    return record

                await self.propose_metadata(plan, timeout_s)
                self._producer_ids_next = int(str(record["first"]))
                self._producer_ids_end = self._producer_ids_next + _PRODUCER_ID_BLOCK
            producer_id = self._producer_ids_next
            self._producer_ids_next += 1
            return producer_id


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


def _delete_replica_files(replica: PartitionReplica) -> None:
    replica.log.close()
    directory = replica.log.directory
    doomed = directory.with_name(f"{directory.name}.deleted")
    shutil.rmtree(doomed, ignore_errors=True)
    directory.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _promises_nothing(replica: PartitionReplica, rd: Ready) -> bool:
    """Whether `rd`'s messages may leave before `rd` is durable: those of a leader that keeps
    the term and vote already on disk and truncates nothing, i.e. appends and heartbeats
    (a node cannot stop leading and lead again within one term, so nothing in `rd` was
    decided in another role)."""
    hs = rd.hard_state
    return (
        rd.role is Role.LEADER
        and rd.truncate_to is None
        and rd.reset_to is None
        and (hs is None or (hs.term, hs.vote) == replica.persisted_term_vote)
    )


def _persist_all(
    items: list[tuple[PartitionReplica, Ready]], flush: bool, flushers: ThreadPoolExecutor
) -> None:
    """On the disk thread: apply and fsync a round of Readies (group commit).

    The partitions' writes and fsyncs run side by side on `flushers`: one after another, a
    round costs the sum of a few fsyncs per partition (several ms each on a busy VM), while
    ext4 folds concurrent fsyncs into one journal commit. The disk thread still waits for the
    whole round, so work it runs later (deleting a replica, closing a log) never overlaps it,
    and the loop sends nothing of the round before all of it is durable."""

    def persist(item: tuple[PartitionReplica, Ready]) -> None:
        replica, rd = item
        if not replica.closed:
            replica.persist(rd, flush)

    if len(items) == 1:
        persist(items[0])
        return
    for _ in flushers.map(persist, items):  # re-raises the first failure
        pass


async def _wait(future: Awaitable[None], timeout_s: float) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(future), timeout_s)
    except TimeoutError:
        raise errors.RequestTimedOutError(f"not committed within {timeout_s:.1f}s") from None
