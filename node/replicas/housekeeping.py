"""A node's periodic chores over its replicas: leadership announcements, preferred leaders,
checkpoints, retention and log cleaning.

None of it is on a request's path; the disk work runs on the replica set's disk thread, the
only writer of every log, between rounds of the Ready loop. The replicas it works on are a
snapshot of the registry taken on the loop (`_in_service`): the loop adds and removes replicas
at any time, and the disk thread walking the registry itself crashed a node ("dictionary
changed size during iteration") when a topic of 10,000 partitions was created during a pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable

from tidelog.clock import wall_clock_ms
from tidelog.errors import CorruptMessageError, UnsupportedCompressionTypeError
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.transport import Outgoing
from tidelog.replication import NotLeaderError
from tidelog.storage import Log, LogConfig
from tidelog.storage.cleaner import LogCleaner
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

_ANNOUNCE_EVERY_S = 0.2
#: A peer whose link may have lost a frame (it broke, the peer restarted, the queue was full)
#: is told everything again, at most this often.
_ANNOUNCE_ALL_EVERY_S = 2.0
#: Every partition led here is looked at, and those whose epoch, in-sync replicas or log start
#: changed since the peer was told are announced, when node liveness changed (a quiet
#: group's in-sync replicas are its followers' live nodes) and at least this often (a quiet
#: log's start that retention moved); in between, only the awake ones and those handed over
#: in `ReplicaSet.restated` are. Looking at 1,667 led partitions every 2 s was a fifth of an
#: idle node's CPU at 5,000 partitions.
_LOOK_AT_ALL_EVERY_S = 10.0
#: (log end, log start, HW) of a log that never held a batch.
_NEVER_WRITTEN = (0, 0, 0)
#: How often a compacted partition whose closed segments did not change is cleaned all the same
#: (for its tombstones coming of age, after delete.retention.ms).
_RECLEAN_EVERY_MS = 5 * 60 * 1000
#: The checkpoint pass takes at most this many changed logs (the least recently checkpointed
#: first), unless more are needed for every changed log to be checkpointed within
#: `_CHECKPOINT_PASSES_MAX` passes; and it hands them to the disk thread this many at a time.
_CHECKPOINT_LOGS_PER_PASS = 32
_CHECKPOINT_PASSES_MAX = 12
_CHECKPOINT_SLICE = 32

log = logging.getLogger(__name__)


class Housekeeping:
    def __init__(
        self, config: NodeConfig, replicas: ReplicaSet, controller_tp: TopicPartition
    ) -> None:
        self.config = config
        self.replicas = replicas
        self._controller_tp = controller_tp
        #: Set once the node is stopping: leadership then only moves away, never back.
        self.stopping = False
        #: Compacted partitions whose log holds a batch the cleaner cannot read: not cleaned
        #: again until the node restarts (Kafka's cleaner marks such a partition uncleanable).
        self.uncleanable: set[TopicPartition] = set()
        #: Per compacted partition, where its closed segments ended at its last cleaner pass,
        #: and when that was (ms): see `_retention_pass`.
        self._cleaned: dict[TopicPartition, tuple[int, int]] = {}
        #: What each peer was last told of the partitions led here: tp -> (epoch, isr, log
        #: start offset).
        self._announced: dict[int, dict[TopicPartition, tuple[int, list[int], int]]] = {}
        #: When every partition led here was last looked at, and `ReplicaSet.liveness_changes`
        #: then (-1: never looked).
        self._looked_at_all_at = 0.0
        self._liveness_seen = -1
        #: Per peer: its link's `PeerLink.losses` when it was last told everything, and when.
        self._told_all: dict[int, tuple[tuple[int, int], float]] = {}
        #: The moves of followers' log start offsets under way (`follow_log_starts`).
        self._following: set[asyncio.Task[None]] = set()
        #: What each log held at its last checkpoint (`_state`), in the order of those
        #: checkpoints, the oldest first.
        self._checkpointed: dict[PartitionReplica, tuple[int, int, int]] = {}
        #: Each log (not compacted) as the last retention pass left it: the log, what it held
        #: (`_state`), its config, and when retention.ms may delete from it next (`_retained`).
        self._retained: dict[PartitionReplica, tuple[Log, tuple[int, int, int], LogConfig,
                                                     float]] = {}

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        last_checkpoint = last_retention = last_balance = time.monotonic()
        checkpoint_every_s = self.config.replica_high_watermark_checkpoint_interval_ms / 1000
        retention_every_s = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(_ANNOUNCE_EVERY_S)
            self._announce_leadership()
            now = time.monotonic()
            balance_every_s = self.config.leader_imbalance_check_interval_ms / 1000
            if self.config.auto_leader_rebalance_enable and now - last_balance >= balance_every_s:
                last_balance = now
                self._prefer_preferred_leaders()
            failed: list[tuple[PartitionReplica, OSError]] = []
            if now - last_checkpoint >= checkpoint_every_s:
                last_checkpoint = now
                failed += await self._checkpoint_pass()
            if now - last_retention >= retention_every_s:
                last_retention = now
                failed += await loop.run_in_executor(
                    self.replicas.disk, self._retention_pass, self._in_service())
            for replica, exc in failed:
                self.replicas.storage_failed(replica, exc)

    def _announce_leadership(self) -> None:
        """Tell every peer which partitions this node leads, so any node answers Metadata, and
        where their logs start, so the followers' do too (`follow_log_starts`): what changed
        since the peer was last told. Only replicas whose cores are awake change, and those
        that just went quiet (`ReplicaSet.restated`), apart from a quiet partition's: the
        liveness of its followers (every partition led here is looked at when it changes), a
        DeleteRecords (its handler notes the replica) and retention (a look at every partition
        now and then finds it). A peer whose link may have lost a frame is told everything
        again (`PeerLink.losses`). Every leader telling every peer everything every 2 s cost
        5,000 idle partitions a fifth of each node's idle CPU, on both ends; looking at all of
        them every 2 s, a fifth of what was left."""
        now = time.monotonic()
        links = self.replicas.links
        due = {peer: link.losses for peer, link in links.items()
               if (last := self._told_all.get(peer)) is None
               or (last[0] != link.losses and now - last[1] >= _ANNOUNCE_ALL_EVERY_S)}
        replicas = self.replicas
        full = (bool(due) or replicas.liveness_changes != self._liveness_seen
                or now - self._looked_at_all_at >= _LOOK_AT_ALL_EVERY_S)
        if full:
            self._looked_at_all_at = now
            self._liveness_seen = replicas.liveness_changes
        candidates: Iterable[PartitionReplica] = (
            replicas.led if full else [*replicas.awake(), *replicas.restated])
        replicas.restated.clear()
        lag_max_ms = self.config.replica_lag_max_ms
        led = [(r.tp, (r.leader_epoch, r.in_sync_replicas(lag_max_ms), r.log.log_start_offset))
               for r in candidates if r.is_leader]
        for peer_id, link in links.items():
            told = self._announced.setdefault(peer_id, {})
            everything = peer_id in due
            if everything:
                self._told_all[peer_id] = (due[peer_id], now)
            outgoing = Outgoing(self.config.node_id, peer_id)
            sent = False
            for tp, state in led:
                if everything or told.get(tp) != state:
                    told[tp] = state
                    outgoing.announce(tp, *state)
                    sent = True
            if sent:
                link.send(outgoing)

    def follow_log_starts(
        self, src: int, announcements: Iterable[rpb.LeaderAnnouncement]
    ) -> None:
        """The log start offsets node `src` announced for partitions it leads (DeleteRecords
        moves them): each follower here of that leader at that epoch moves its own log start
        up to it, as far as its high watermark, as Kafka's follower takes its leader's from
        every fetch answer. The move writes the log's checkpoint, on the disk thread."""
        starts: dict[PartitionReplica, int] = {}
        for announcement in announcements:
            start = announcement.log_start_offset
            replica = self.replicas.partitions.get(
                TopicPartition(announcement.group.topic, announcement.group.partition))
            if (replica is not None and not replica.is_leader
                    and replica.tp != self._controller_tp  # its start is the controller's
                    and replica.core.leader_id == src
                    and replica.leader_epoch == announcement.epoch
                    and start > replica.log.log_start_offset):
                starts[replica] = start
        if starts:
            task = asyncio.create_task(self._follow(starts))
            self._following.add(task)
            task.add_done_callback(self._following.discard)

    async def _follow(self, starts: dict[PartitionReplica, int]) -> None:
        def follow(replica: PartitionReplica) -> None:
            log_ = replica.log
            if log_.maybe_increment_log_start_offset(min(starts[replica], log_.high_watermark)):
                log_.checkpoint()

        failed = await asyncio.get_running_loop().run_in_executor(
            self.replicas.disk, lambda: self._each_log(follow, list(starts), side_by_side=False))
        for replica, exc in failed:
            self.replicas.storage_failed(replica, exc)

    def _prefer_preferred_leaders(self) -> None:
        """Hand leadership back to a partition's preferred (first) replica once it is in sync,
        as Kafka's auto leader rebalance does, so leaders stay spread as assigned."""
        if self.stopping:
            return
        for replica in self.replicas.led:
            preferred = replica.replicas[0]
            if (
                preferred != self.config.node_id
                and replica.tp != self._controller_tp  # the controller stays put, as Kafka's
                and replica.is_leader
                and replica.core.transferring_to is None
                and preferred in replica.in_sync_replicas(self.config.replica_lag_max_ms)
            ):
                with contextlib.suppress(NotLeaderError, ValueError):
                    replica.core.transfer_leadership(preferred)
                    # Its round looks at the replicas moved alone: a round over every
                    # replica (5,000 of them) held a loaded node's loop long enough for its
                    # peers to take it for dead.
                    self.replicas.changed(replica)

    def _in_service(self) -> list[PartitionReplica]:
        """On the loop: the replicas in service now, a list the disk thread may walk while the
        loop changes the registry."""
        return [r for r in self.replicas.partitions.values() if not (r.closed or r.offline)]

    async def _checkpoint_pass(self) -> list[tuple[PartitionReplica, OSError]]:
        """Every few seconds, as Kafka's flusher: the changed logs' indexes synced, their
        recovery points moved up to what is on disk and their offsets checkpointed, so a crash
        recovers little. `_due_checkpoints` picks the logs, `_checkpoint` checkpoints them a
        slice at a time, each slice its own trip to the disk thread: the rounds of writes
        queued meanwhile go between two slices, so a round waits for one slice at most, never
        for the whole pass."""
        loop = asyncio.get_running_loop()
        due = await loop.run_in_executor(
            self.replicas.disk, self._due_checkpoints, self._in_service())
        failed: list[tuple[PartitionReplica, OSError]] = []
        for i in range(0, len(due), _CHECKPOINT_SLICE):
            failed += await loop.run_in_executor(
                self.replicas.disk, self._checkpoint, due[i : i + _CHECKPOINT_SLICE])
        return failed

    def _due_checkpoints(self, in_service: list[PartitionReplica]) -> list[PartitionReplica]:
        """On the disk thread: the logs of `in_service` the next pass checkpoints. A log
        unchanged since its last checkpoint is left alone: thousands of idle partitions would
        otherwise cost two file replacements each, every time. So is a log that never held a
        batch (a new partition's): it has nothing to checkpoint, and the flush and two file
        replacements of each of the 1,000 logs of a new topic held the disk thread, and with it
        every round of writes and the topic's first elections, for tens of seconds.

        Of the changed logs, the least recently checkpointed come first, and a pass takes
        `_CHECKPOINT_LOGS_PER_PASS` of them, or more when that is needed for each to be
        checkpointed within `_CHECKPOINT_PASSES_MAX` passes (a minute at Kafka's 5 s: its own
        recovery-point checkpoint, log.flush.offset.checkpoint.interval.ms, is every 60 s).
        A log costs the pass seven fsyncs (its segment and two indexes, and two file
        replacements of two fsyncs each): produce over 1,000 partitions changed every log of
        every node within each interval, and the pass over all of them held each node's disk
        thread 3.4 s of every 5 (load 38), behind which every round of writes waited.
        Deferring a log's checkpoint only makes its crash recovery re-read more: what the
        acknowledgements promised is synced by the rounds themselves, and a truncation
        rewrites the offsets checkpoint at once (`Log.truncate_to`)."""
        done = self._checkpointed
        for gone in [r for r in done if r.closed]:
            del done[gone]
        changed = [r for r in in_service
                   if r not in done and not (r.closed or r.offline)
                   and _state(r) != _NEVER_WRITTEN]
        # `done` is kept in the order of the last checkpoints, the oldest first.
        changed += [r for r, state in done.items()
                    if not (r.closed or r.offline) and _state(r) != state]
        return changed[:max(_CHECKPOINT_LOGS_PER_PASS, -(-len(changed) // _CHECKPOINT_PASSES_MAX))]

    def _checkpoint(
        self, replicas: list[PartitionReplica]
    ) -> list[tuple[PartitionReplica, OSError]]:
        """On the disk thread: flush and checkpoint `replicas`' logs, side by side on the
        helpers (one after another, after produce over 1,000 partitions, they held the disk
        thread for seconds)."""
        done = self._checkpointed

        def checkpoint(replica: PartitionReplica) -> None:
            if replica.closed or replica.offline:
                return
            now = _state(replica)
            replica.log.flush()
            replica.log.checkpoint()
            done.pop(replica, None)
            done[replica] = now

        return self._each_log(checkpoint, replicas, side_by_side=True)

    def _retention_pass(
        self, in_service: list[PartitionReplica]
    ) -> list[tuple[PartitionReplica, OSError]]:
        """Retention and, for compacted topics, a cleaner pass bounded by the last stable
        offset, over the logs of `in_service`; on the disk thread, which is the only writer of
        every log.

        A compacted partition is cleaned again only once a segment closed since its last pass
        (or after `_RECLEAN_EVERY_MS`, for tombstones): a pass reads the whole log, in Python
        on the disk thread that every fsync of the node waits for, and the offsets topic, whose
        small segments keep a new coordinator's replay short, is written to all the time.

        A log that is not compacted is looked at again only once it changed (its end, start
        or HW: an append, a truncation, a DeleteRecords), its config changed, or the time came
        when retention.ms may delete its oldest segment (`_retained`): retention over 5,000
        idle logs every 5 s was a tenth of a node's idle CPU."""
        now_ms = wall_clock_ms()
        retained = self._retained
        for gone in [r for r in retained if r.closed]:
            del retained[gone]

        def retain(replica: PartitionReplica) -> None:
            log_ = replica.log
            compacted = log_.config.compact_enabled
            seen = None if compacted else retained.get(replica)
            if (seen is not None and seen[0] is log_ and seen[1] == _state(replica)
                    and seen[2] is log_.config and now_ms < seen[3]):
                return
            log_.delete_old_segments()
            if not compacted:
                retained[replica] = (log_, _state(replica), log_.config, _retained(log_))
            if log_.config.compact_enabled and replica.tp not in self.uncleanable:
                cleaner = LogCleaner(replica.log)
                bound = replica.last_stable_offset
                end = cleaner.cleanable_end(bound)
                last = self._cleaned.get(replica.tp)
                if last is None or last[0] != end or now_ms - last[1] >= _RECLEAN_EVERY_MS:
                    self._clean(replica.tp, cleaner, now_ms, bound)
                    self._cleaned[replica.tp] = (end, now_ms)

        return self._each_log(retain, in_service, side_by_side=False)

    def _each_log(
        self, chore: Callable[[PartitionReplica], None], replicas: list[PartitionReplica],
        *, side_by_side: bool,
    ) -> list[tuple[PartitionReplica, OSError]]:
        """On the disk thread: `chore` for each of `replicas` still in service, one after
        another, or side by side on the disk thread's helpers (ext4 folds concurrent fsyncs
        into shared journal commits); those whose disk refused a write are returned, for the
        loop to take offline (`ReplicaSet.storage_failed`). Only the few logs a checkpoint
        pass picked go to the helpers: a future per log of 5,000 idle ones, every retention
        pass, was a third of a loaded node's GIL time (py-spy --gil during creation)."""

        def run(replica: PartitionReplica) -> OSError | None:
            try:
                chore(replica)
            except OSError as exc:
                return exc
            return None

        replicas = [r for r in replicas if not (r.closed or r.offline)]
        results: Iterable[OSError | None] = (
            self.replicas.flushers.map(run, replicas) if side_by_side else map(run, replicas))
        return [(r, exc) for r, exc in zip(replicas, results, strict=True) if exc is not None]

    def _clean(self, tp: TopicPartition, cleaner: LogCleaner, now_ms: int, bound: int) -> None:
        """One cleaner pass. A batch it cannot read (a corrupt record in the log) stops the
        cleaning of that partition only, with an error in the log: raised here, it would end
        this loop, and a driver loop that fails ends the node (again after every restart)."""
        try:
            cleaner.clean(now_ms, bound)
        except (CorruptMessageError, UnsupportedCompressionTypeError) as exc:
            self.uncleanable.add(tp)
            log.error("%s: compaction stopped until restart, a batch cannot be read: %s", tp, exc)


def _retained(log_: Log) -> float:
    """When (wall clock ms) retention.ms may delete the oldest segment of `log_` next, if the
    log does not change meanwhile: never when the policy keeps records or the log is empty
    (retention keeps an empty active segment)."""
    config = log_.config
    if not config.delete_enabled or config.retention_ms < 0:
        return math.inf
    oldest = log_.segments[0]
    if oldest.size == 0:
        return math.inf
    return oldest.largest_timestamp + config.retention_ms


def _state(replica: PartitionReplica) -> tuple[int, int, int]:
    """What a checkpoint records of a log: (log end, log start, HW)."""
    log_ = replica.log
    return log_.log_end_offset, log_.log_start_offset, log_.high_watermark
