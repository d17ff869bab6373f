"""One partition replica on a node: its storage log, its Raft core, and what clients see of it.

The node's event loop owns the core (steps, ticks, Readies); this class holds the per-partition
state the client API needs on top: produce waiters completed by the high watermark (Kafka's
purgatory, keyed by offset, never polled), fetch long-poll waiters, the in-sync replica view,
and the ListOffsets rules of contract §6 (epoch checks before leadership, bounds by requester,
the KIP-207 window after a leader change).
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import logging
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.node.replicas.reads import LeaderReads
from tidelog.records import (
    ControlType,
    TimestampType,
    build_txn_marker,
    iter_batches,
    read_header,
)
from tidelog.replication import NotLeaderError, RaftConfig, RaftCore, Ready, Role
from tidelog.replication.driver import DrivenReplica, Leadership
from tidelog.replication.lease import lease_seconds
from tidelog.replication.log_store import LogCodec, LogStore
from tidelog.replication.term_votes import TermVotes
from tidelog.storage import AbortedTxn, Log, LogConfig, TimestampAndOffset
from tidelog.storage.producer_state import ProducerEntry, ProducerStateManager, VerificationGuard
from tidelog.types import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    IsolationLevel,
    ListOffsetsResult,
    TopicPartition,
)

UNKNOWN = -1

log = logging.getLogger("tidelog.node")


@dataclass(order=True)
class _ProduceWaiter:
    last_offset: int
    epoch: int = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


def _fail_waiter(waiter: _ProduceWaiter, exc: errors.TidelogError) -> None:
    """Fail a write's waiter. Its Produce call may have stopped waiting already (timed out,
    or cancelled when the client gave up or the node stopped): the exception is marked as
    retrieved, so asyncio does not log it as never retrieved, once per write, at every
    failover; a call still waiting gets it all the same."""
    waiter.future.set_exception(exc)
    waiter.future.exception()


@dataclass(frozen=True)
class ProduceResult:
    """Where a produced batch went; `done` completes per acks (None for acks=0)."""

    base_offset: int
    log_append_time_ms: int
    done: asyncio.Future[None] | None


class PartitionReplica:
    """A hosted replica. All methods run on the node's event loop."""

    def __init__(
        self,
        tp: TopicPartition,
        node_id: int,
        replicas: tuple[int, ...],
        directory: Path,
        log_config: LogConfig,
        raft_config: RaftConfig,
        seed: int,
        term_votes: TermVotes,
        sync_writes: bool = True,
        tick_s: float = 0.0,
        touched: Callable[[PartitionReplica], None] | None = None,
        peer_live: Callable[[int], bool] | None = None,
        adding: tuple[int, ...] = (),
        replica_lag_max_ms: int = 30_000,
        verify_transactions: bool = True,
    ) -> None:
        """``tick_s`` is the real time of a Raft tick: it sizes the read lease and the vote
        refusal of a new core (both off at 0). ``touched`` is called after a proposal changed
        the core (the Ready loop then looks at this replica), ``peer_live`` says whether node
        liveness hears from a peer (a quiesced leader's followers stay in sync while it does),
        ``replica_lag_max_ms`` how long a follower stays in sync after it last held the log's
        end (the in-sync replicas that min.insync.replicas counts), ``verify_transactions``
        whether a client's transactional batch is appended only once its transaction
        coordinator vouched for it (transaction.partition.verification.enable,
        `verification_guard`).

        ``replicas`` are the nodes the metadata lists for the partition (the preferred leader
        first), ``adding`` those among them that a reassignment is adding: the bootstrap
        configuration of a core that has stored none makes them learners and the others
        voters, so a replica created by a reassignment starts as a learner, counted in no
        quorum, and learns from the leader's log when it becomes a voter."""
        self._touched = touched
        self._peer_live = peer_live
        self._lag_max_ms = replica_lag_max_ms
        self.verify_transactions = verify_transactions
        self.tp = tp
        self.node_id = node_id
        self.replicas = replicas
        self._bootstrap = (tuple(r for r in replicas if r not in adding),
                           tuple(r for r in replicas if r in adding))
        self.log = Log.open(directory, log_config, clock=wall_clock_ms)
        self._sync_writes = sync_writes
        self.store = LogStore(self.log, term_votes, sync_writes)
        self.replica_log = self.store.replica_log
        self._rng = random.Random(seed)
        self._raft_config = raft_config
        self._vote_refusal_s = raft_config.election_ticks * tick_s if raft_config.check_quorum \
            else 0.0
        #: Until when (time.monotonic) this replica's core ignores vote requests: see `_new_core`.
        self.refuses_votes_until = 0.0
        self.core, self.driven = self._new_core()
        #: Linearizable reads while this replica leads (`tidelog.node.replicas.reads`).
        self.reads = LeaderReads(lease_seconds(raft_config, tick_s))
        #: Start offset of the current leader epoch while this replica leads (KIP-207).
        self.leader_epoch_start_offset: int | None = None
        #: Idempotent-producer state; None until rebuilt from the log after winning leadership.
        self._producers: ProducerStateManager | None = None
        #: First offset -> start (first timestamp) of each open transaction read so far
        #: (`open_transactions`); emptied with `_producers`, on the loop's side alone.
        self._txn_starts: dict[int, int] = {}
        self._acks_all: list[_ProduceWaiter] = []
        #: The timer of `_recheck_acks_all` while a committed acks=all write waits for more
        #: replicas than a majority.
        self._recheck: asyncio.TimerHandle | None = None
        self._acks_local: list[_ProduceWaiter] = []
        self._data_waiters: list[asyncio.Future[None]] = []
        self._caught_up_ms: dict[int, float] = {}
        #: When each follower last answered this leader (time.monotonic, ms).
        self._heard_ms: dict[int, float] = {}
        #: Out of the Ready loop while its storage is being repaired or refuses writes:
        #: its core neither ticks nor steps, and clients get KAFKA_STORAGE_ERROR.
        self.offline = False
        #: Leaderships gained and lost since the node started (the node's metrics).
        self.leaderships_won = 0
        self.leaderships_lost = 0
        #: Batches proposed to the core here, since the node started (the node's metrics).
        self.proposals = 0
        #: The leader this replica last knew of (its log line when another is elected).
        self._leader_seen: int | None = None

    def _new_core(self) -> tuple[RaftCore, DrivenReplica]:
        """A core from what storage holds, and what the node's Raft driver keeps of it.

        A new core does not know whom this replica heard from an instant before (the node or
        the replica restarted), so for an election timeout it takes no part in elections, as a
        follower that just heard from its leader would not: otherwise a leader's read lease,
        which counts on every follower that acknowledged it refusing votes for that long,
        could be outlived by a new leader elected with this replica's vote."""
        self.refuses_votes_until = time.monotonic() + self._vote_refusal_s
        hard_state = self.store.hard_state()
        if hard_state.term == 0 and hard_state.vote is None:
            # A replica that never had a term promised no leader anything: nobody's lease
            # counts on its refusal, and refusing would leave a new topic leaderless.
            self.refuses_votes_until = 0.0
        voters, learners = self._bootstrap
        core = RaftCore(
            self.node_id,
            voters,
            self.replica_log,
            self._rng,
            self._raft_config,
            hard_state,
            LogCodec(self.log),
            repair_floor=self.log.repair_floor,
            learners=learners,
            conf_state=self.store.conf_state(),
        )
        return core, DrivenReplica(core, self.store, hard_state)

    def restart_core(self) -> None:
        """A new core from what storage holds now, as a restart of the node would build it,
        after storage changed under the old one (on the loop, once the replica's last round
        of writes is done). What the old core decided and did not write is forgotten, as in
        a crash; the driver drops a Ready of the old core still in flight when it completes
        (`DrivenReplica.retired`)."""
        self.driven.retired = True
        self.core, self.driven = self._new_core()
        self.leader_epoch_start_offset = None
        self._producers = None
        self._fail_waiters(errors.NotLeaderOrFollowerError("the replica restarted"))

    @property
    def closed(self) -> bool:
        return self.store.closed

    def storage_failed(self) -> None:
        """Its disk refused a write (on the loop): out of the Ready loop, with the Ready in
        flight dropped (not durable, so nothing it promised may leave) and waiters failed."""
        self.offline = True
        self.driven.retired = True
        self._fail_waiters(errors.KafkaStorageError(f"the log of {self.tp} is offline"))
        self.wake_fetchers()

    def reopen_log(self) -> None:
        """On the disk thread, after `storage_failed`: the log let go of as a crash would and
        opened again, which recovers it (dropping what a failed write left), then its
        checkpoints written to see that the disk takes writes again. Raises OSError while it
        does not, or while it has less room than the largest batch allowed (max.message.bytes):
        a replica back on a nearly full disk would fail again at once. `restart_core` then
        builds the core on the reopened log. A replica removed meanwhile is left alone: its
        directory may be gone, and an open would create it again."""
        if self.closed:
            return
        self.log.abandon()
        reopened = Log.open(self.log.directory, self.log.config, clock=wall_clock_ms)
        try:
            reopened.checkpoint()
            free = shutil.disk_usage(reopened.directory).free
            if free < reopened.config.max_message_bytes:
                raise OSError(errno.ENOSPC, f"{free} bytes free, less than max.message.bytes")
        except OSError:
            reopened.abandon()
            raise
        store = LogStore(reopened, self.store.term_votes, self._sync_writes)
        store.closed = self.store.closed
        self.log, self.store, self.replica_log = reopened, store, store.replica_log

    # ---- leadership ----------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.core.role is Role.LEADER and not self.offline

    @property
    def leader_epoch(self) -> int:
        return self.core.term

    def on_leadership(self, change: Leadership) -> None:
        """The driver saw this replica win leadership (the epoch starts where its marker went,
        or at the log end when it wrote none) or lose it."""
        self._producers = None
        if change.epoch_start is not None:
            self.leader_epoch_start_offset = change.epoch_start
            self._caught_up_ms = {}
            self._heard_ms = {}
            self.leaderships_won += 1
            log.info("%s: elected leader in term %d (its epoch starts at offset %d)",
                     self.tp, change.term, change.epoch_start,
                     extra={"topic": self.tp.topic, "partition": self.tp.partition,
                            "event": "election_won", "term": change.term})
        elif self.leader_epoch_start_offset is not None:
            self.leader_epoch_start_offset = None
            self._fail_waiters(errors.NotLeaderOrFollowerError("leadership moved"))
            self.leaderships_lost += 1
            log.info("%s: leadership lost (term now %d)", self.tp, change.term,
                     extra={"topic": self.tp.topic, "partition": self.tp.partition,
                            "event": "leadership_lost", "term": change.term})

    # ---- high watermark and waiters ------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it hold no undecided transaction: the first offset of the oldest
        transaction that is open or whose marker is not committed yet, else the high watermark
        (kafka-mapping §6.1). Every replica knows it from its log's producer state."""
        return self.log.last_stable_offset

    def publish(self, rd: Ready) -> None:
        """After a Ready is durable: expose its HW and complete what it decided."""
        leader = self.core.leader_id
        if leader != self._leader_seen and leader is not None:
            self._leader_seen = leader
            if leader != self.node_id:  # its own election has its line (`on_leadership`)
                log.info("%s: the leader is node %d in term %d", self.tp, leader, self.core.term,
                         extra={"topic": self.tp.topic, "partition": self.tp.partition,
                                "event": "leader_changed", "leader": leader,
                                "term": self.core.term})
        if rd.high_watermark != self.log.high_watermark:
            self.log.update_high_watermark(rd.high_watermark)
        self.reads.on_ready(rd, self.core)
        self._complete_acks_all()
        self._complete(self._acks_local, self.log.log_end_offset)
        if self._data_waiters and (rd.entries or rd.hard_state is not None):
            self.wake_fetchers()

    def publish_hw(self, high_watermark: int) -> None:
        """A leader's HW, published as its Ready leaves for the disk (`Driver.begin`): what
        it commits is durable here already, so acks=all producers and fetchers waiting for it
        go now rather than after the fsync of the entries proposed since. The rest of the Ready
        (acks=1, reads, hooks) waits for `publish`."""
        if high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(high_watermark)
            self._complete_acks_all()
            if self._data_waiters:
                self.wake_fetchers()

    def _complete(
        self, waiters: list[_ProduceWaiter], end: int,
        short: errors.TidelogError | None = None,
    ) -> None:
        """Complete the waiters of writes below `end`: with `short` when it says the write
        is not acknowledged as asked although it is in the log."""
        done = 0
        for waiter in waiters:
            if waiter.last_offset >= end:
                break
            done += 1
            if waiter.future.done():
                continue
            if self.replica_log.epoch_at(waiter.last_offset) != waiter.epoch:
                _fail_waiter(waiter, errors.NotLeaderOrFollowerError(
                    "the write was replaced by a newer leader"
                ))
            elif short is not None:
                _fail_waiter(waiter, short)
            else:
                waiter.future.set_result(None)
        del waiters[:done]

    # ---- min.insync.replicas -------------------------------------------------------------
    #
    # Raft already acknowledges acks=all only once a majority holds the write (contract §7), so the
    # config can only ask for more: acks=all is refused before anything is written while fewer
    # replicas than it are in sync (NOT_ENOUGH_REPLICAS, 19); a write is acknowledged once it
    # is committed and that many replicas hold it; and one committed while too few are in
    # sync gets NOT_ENOUGH_REPLICAS_AFTER_APPEND (20), as in Kafka. At most a majority (the
    # default 1, or 2 of 3) it changes nothing a commit does not give, but refuses at once a
    # write that could not commit anyway. Kafka's effective value: at most the replica count.

    def _min_insync(self) -> int:
        return min(self.log.config.min_insync_replicas, len(self.replicas))

    def _check_min_insync(self) -> None:
        need = self._min_insync()
        if need > 1:
            in_sync = len(self.in_sync_replicas(self._lag_max_ms))
            if in_sync < need:
                raise errors.NotEnoughReplicasError(
                    f"{self.tp}: {in_sync} in-sync replica(s), min.insync.replicas is {need}"
                )

    def _complete_acks_all(self) -> None:
        """Complete the acks=all writes that are committed and, when min.insync.replicas is
        above a majority, held by that many replicas (the leader's log, the followers'
        matched ends); a committed write gets NOT_ENOUGH_REPLICAS_AFTER_APPEND once fewer
        than that many are in sync. A committed write left waiting for a replica beyond the
        majority is looked at again a lag interval later (`_recheck_acks_all`): if that
        replica went silent, nothing else would wake it before it falls out of sync."""
        waiters = self._acks_all
        end = self.high_watermark
        need = self._min_insync()
        if not waiters or waiters[0].last_offset >= end or need == 1:
            self._complete(waiters, end)
            return
        in_sync = len(self.in_sync_replicas(self._lag_max_ms))
        short = None
        if in_sync < need:
            short = errors.NotEnoughReplicasAfterAppendError(
                f"{self.tp}: written, but {in_sync} in-sync replica(s) where "
                f"min.insync.replicas is {need}"
            )
        elif need > len(self.replicas) // 2 + 1:
            held = sorted((self.log.log_end_offset if r == self.node_id
                           else self.core.match_of(r) for r in self.replicas), reverse=True)
            end = min(end, held[need - 1])
        self._complete(waiters, end, short)
        if waiters and waiters[0].last_offset < self.high_watermark and self._recheck is None:
            self._recheck = asyncio.get_running_loop().call_later(
                self._lag_max_ms / 1000, self._recheck_acks_all)

    def _recheck_acks_all(self) -> None:
        self._recheck = None
        if self.is_leader:
            self._complete_acks_all()

    def _fail_waiters(self, exc: errors.TidelogError) -> None:
        self.reads.fail_all(errors.NotLeaderOrFollowerError(str(exc)))
        for waiter in self._acks_all + self._acks_local:
            if not waiter.future.done():
                _fail_waiter(waiter, exc)
        self._acks_all.clear()
        self._acks_local.clear()

    def abandon(self) -> None:
        """Stop serving (on the loop): pending requests fail, the disk thread closes the log."""
        self.store.closed = True
        self._fail_waiters(errors.NotLeaderOrFollowerError("the replica is closing"))
        self.wake_fetchers()

    # ---- produce -------------------------------------------------------------------------

    def propose(self, batch: bytes, acks: int, *, from_client: bool = True) -> ProduceResult:
        """Validate, deduplicate and propose one produced batch; `from_client` False for a
        batch the node builds itself (a group coordinator's records, which may be
        transactional and carry no sequence)."""
        batch, header = self.log.validate_produced_batch(batch, from_client=from_client)
        producers = self._producer_state()
        if acks == -1:
            self._check_min_insync()
        original = producers.check(header)
        if original is not None:  # a retry of a batch already written: acknowledge, don't write
            return ProduceResult(
                original.base_offset,
                UNKNOWN,
                self._waiter(original.last_offset, original.leader_epoch, acks),
            )
        if from_client and self.verify_transactions and producers.needs_verification(header):
            raise errors.InvalidTxnStateError(
                f"producer {header.producer_id} epoch {header.producer_epoch}: {self.tp} is not "
                f"in a transaction its coordinator knows of (or the transaction ended while "
                f"it was being asked)"
            )
        try:
            entry = self.core.propose(batch, header.records_count)
        except NotLeaderError as exc:
            raise errors.NotLeaderOrFollowerError(str(exc)) from None
        self.proposals += 1
        if self._touched is not None:
            self._touched(self)
        stamped = read_header(entry.data)
        producers.update(stamped)
        append_time = (
            stamped.max_timestamp
            if stamped.timestamp_type is TimestampType.LOG_APPEND_TIME
            else UNKNOWN
        )
        return ProduceResult(
            entry.base_offset, append_time, self._waiter(entry.last_offset, entry.epoch, acks)
        )

    def verification_guard(self, batch: bytes) -> VerificationGuard | None:
        """What must be verified with the transaction coordinator before `propose` takes
        `batch` from a client (KIP-890 part 1): None when nothing need be (verification off, not
        a transactional batch, the producer's transaction open here already at its epoch or
        verified, or a batch `propose` refuses anyway). Otherwise the guard to set `verified`
        on once the coordinator says the partition is in the producer's ongoing transaction; a
        marker of the producer written meanwhile drops it, and the batch is refused."""
        if not self.verify_transactions:
            return None
        try:
            header = read_header(batch)
            producers = self._producer_state()
        except errors.TidelogError:
            return None
        if not producers.needs_verification(header):
            return None
        return producers.verification_guard(header.producer_id, header.producer_epoch)

    def producers(self) -> dict[int, ProducerEntry]:
        """A copy of the leader's producer state, by producer id (DescribeProducers). Raises
        NOT_LEADER_OR_FOLLOWER, or NOT_ENOUGH_REPLICAS while a new leader settles."""
        return {pid: entry.copy() for pid, entry in self._producer_state().producers.items()}

    def open_transactions(self) -> dict[int, tuple[int, int]]:
        """Producer id -> (first offset, start) of each transaction open on this leader; the
        start is the first timestamp of the transaction's first batch, -1 while it cannot be
        read (a batch still on its way to the log). DescribeProducers answers with these, and
        the metrics count the late ones at every scrape: a start is read from the log once and
        kept while its transaction stays open. Raises as `producers` does."""
        opened = self._producer_state().open_transactions()
        starts: dict[int, int] = {}
        for first in opened.values():
            start = self._txn_starts.get(first, UNKNOWN)
            starts[first] = start if start != UNKNOWN else self._first_timestamp_at(first)
        self._txn_starts = starts
        return {pid: (first, starts[first]) for pid, first in opened.items()}

    def _first_timestamp_at(self, offset: int) -> int:
        """The first timestamp of the batch holding `offset` (when an open transaction
        began), -1 when it cannot be read."""
        try:
            data = self.log.read(offset, 1)
            return read_header(data).first_timestamp if data else UNKNOWN
        except (errors.TidelogError, OSError):
            return UNKNOWN

    def write_txn_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> asyncio.Future[None]:
        """Propose the COMMIT or ABORT marker of a producer's transaction (WriteTxnMarkers);
        the future completes once it is committed. Raises NOT_LEADER_OR_FOLLOWER,
        INVALID_PRODUCER_EPOCH (an epoch older than the producer's here) and
        TRANSACTION_COORDINATOR_FENCED (a coordinator epoch older than the last marker's)."""
        producers = self._producer_state()
        self._check_min_insync()
        producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = build_txn_marker(
            commit, producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
        )
        try:
            entry = self.core.propose(batch, 1)
        except NotLeaderError as exc:
            raise errors.NotLeaderOrFollowerError(str(exc)) from None
        self.proposals += 1
        if self._touched is not None:
            self._touched(self)
        stamped = read_header(entry.data)
        producers.update_marker(
            stamped, ControlType.COMMIT if commit else ControlType.ABORT, coordinator_epoch
        )
        done = self._waiter(entry.last_offset, entry.epoch, -1)
        assert done is not None  # acks=all always waits
        return done

    def _producer_state(self) -> ProducerStateManager:
        if self._producers is None:
            if not self.is_leader:
                raise errors.NotLeaderOrFollowerError(f"not the leader of {self.tp}")
            if (
                self.leader_epoch_start_offset is None
                or self.log.log_end_offset != self.core.log_end_offset
            ):
                # Rebuilt from the durable log only once the driver has seen the election and
                # its writes are on disk.
                raise errors.NotEnoughReplicasError("the new leader is still settling its log")
            # The log's own state, as of its end (= the core's: nothing is in flight).
            self._producers = self.log.producer_state.clone()
            self._txn_starts = {}  # a log truncated meanwhile may hold other batches there
        return self._producers

    def _waiter(self, last_offset: int, epoch: int, acks: int) -> asyncio.Future[None] | None:
        if acks == 0:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if acks == -1:
            bisect.insort(self._acks_all, _ProduceWaiter(last_offset, epoch, future))
            self._complete_acks_all()
        else:
            bisect.insort(self._acks_local, _ProduceWaiter(last_offset, epoch, future))
            self._complete(self._acks_local, self.log.log_end_offset)
        return future

    # ---- fetch ---------------------------------------------------------------------------

    def fetch_bound(self, replica_id: int, isolation: IsolationLevel) -> int:
        if replica_id == CONSUMER_REPLICA_ID:
            if isolation is IsolationLevel.READ_COMMITTED:
                return self.last_stable_offset
            return self.high_watermark
        return self.log.log_end_offset

    def aborted_in(self, fetch_offset: int, data: bytes) -> list[AbortedTxn]:
        """The aborted transactions a read_committed consumer needs to drop what it fetched
        from `fetch_offset`: those overlapping the batches of `data`, up to the offset after
        the last of them (kafka-mapping §8.10)."""
        end = fetch_offset
        for _, header in iter_batches(data):
            end = header.next_offset
        return self.log.aborted_transactions(fetch_offset, end)

    def wait_for_data(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._data_waiters.append(future)
        return future

    def wake_fetchers(self) -> None:
        waiters, self._data_waiters = self._data_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    # ---- in-sync replicas ----------------------------------------------------------------

    def record_follower(self, follower: int) -> None:
        """A follower answered this leader (after the core stepped the answer): it is in sync
        while what it holds reaches the leader's log end."""
        now = self._heard_ms[follower] = time.monotonic() * 1000
        if self.core.match_of(follower) >= self.core.log_end_offset:
            self._caught_up_ms[follower] = now
        if self._acks_all and self._min_insync() > len(self.replicas) // 2 + 1:
            self._complete_acks_all()  # more replicas than a commit needs hold more now

    def follower_times(self, follower: int) -> tuple[int, int]:
        """(last heard, last caught up) of `follower` as this leader knows them, in wall-clock
        ms (-1 when unknown; DescribeQuorum's last fetch and caught-up times). A quiesced
        group's follower whose node is heard holds the whole log now: both are now, as
        `in_sync_replicas` counts it."""
        now_ms = wall_clock_ms()
        if self.core.quiesced and self._peer_live is not None and self._peer_live(follower):
            return now_ms, now_ms
        mono_ms = time.monotonic() * 1000

        def wall(at: float | None) -> int:
            return -1 if at is None else now_ms - int(mono_ms - at)

        return wall(self._heard_ms.get(follower)), wall(self._caught_up_ms.get(follower))

    def in_sync_replicas(self, lag_max_ms: int) -> list[int]:
        if not self.is_leader:
            return []
        if self.core.quiesced and self._peer_live is not None:
            # Every follower held the whole log when the group went quiet, and holds it still
            # while nothing changes: in sync as long as its node lives.
            live = self._peer_live
            return [r for r in self.replicas if r == self.node_id or live(r)]
        now = time.monotonic() * 1000
        return [
            r
            for r in self.replicas
            if r == self.node_id or now - self._caught_up_ms.get(r, -1e18) <= lag_max_ms
        ]

    # ---- ListOffsets (contract §6, kafka-mapping §2) -----------------------------------------

    def check_epoch(self, current_leader_epoch: int) -> errors.TidelogError | None:
        """The epoch check that precedes the leadership check (contract §5)."""
        if current_leader_epoch < 0:
            return None
        if current_leader_epoch < self.leader_epoch:
            return errors.FencedLeaderEpochError(
                f"epoch {current_leader_epoch} is older than {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            return errors.UnknownLeaderEpochError(
                f"epoch {current_leader_epoch} is newer than {self.leader_epoch}"
            )
        return None

    def list_offset(
        self, timestamp: int, replica_id: int, isolation: IsolationLevel, max_num_offsets: int
    ) -> ListOffsetsResult:
        """The answer of this replica, once epoch and leadership checks have passed; raises
        OFFSET_NOT_AVAILABLE and UNSUPPORTED_VERSION."""
        consumer = replica_id == CONSUMER_REPLICA_ID
        if max_num_offsets >= 1:
            return ListOffsetsResult(
                old_style_offsets=tuple(
                    self.log.offsets_before(
                        timestamp, max_num_offsets, cap_at_high_watermark=consumer
                    )
                )
            )
        bound = self.fetch_bound(replica_id, isolation)
        start = self.leader_epoch_start_offset
        lagging = consumer and start is not None and start > self.high_watermark
        not_available = errors.OffsetNotAvailableError(
            "the new leader's high watermark has not reached its epoch start"
        )
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            earliest = self.log.fetch_earliest()
            return ListOffsetsResult(offset=earliest.offset, leader_epoch=earliest.leader_epoch)
        if timestamp == LATEST_TIMESTAMP:
            if lagging:
                raise not_available
            return ListOffsetsResult(offset=bound, leader_epoch=self.leader_epoch)
        found: TimestampAndOffset | None
        if timestamp == LATEST_TIERED_TIMESTAMP:
            found = None
        elif timestamp == MAX_TIMESTAMP:
            found = self.log.fetch_max_timestamp()
        elif timestamp >= 0:
            found = self.log.fetch_offset_by_timestamp(timestamp)
        else:
            raise errors.UnsupportedVersionError(
                f"timestamp {timestamp} is not a supported special value"
            )
        if lagging:
            raise not_available
        if found is None or found.offset >= bound:
            return ListOffsetsResult()
        return ListOffsetsResult(
            timestamp=found.timestamp, offset=found.offset, leader_epoch=found.leader_epoch
        )


def is_debug_or_leader(replica: PartitionReplica, replica_id: int) -> bool:
    """Who may answer: the leader, or any replica for a debug request (replica_id -2)."""
    return replica.is_leader or replica_id == DEBUGGING_REPLICA_ID
