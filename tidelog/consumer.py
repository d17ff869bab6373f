"""The consumer of manually assigned partitions: positions, Fetch long polls, offset lookups.

``poll()`` fetches from every assigned partition's leader at once (one Fetch per leader) and
decodes the batches only here, at the end of the path (design notes). As Kafka's consumer does,
``poll()`` sends the next Fetch for the partitions it has nothing left of before it returns
records, so the network and the node's read overlap with the application's work and the
next poll's decoding; an answer is taken only for a partition whose position is still the one
it was fetched from and that was not paused or unassigned meanwhile (`_Round`). Control
batches (epoch markers, transaction markers) advance the position but are never returned; under
read_committed, batches of aborted transactions are dropped with Kafka's algorithm (the
aborted list of the answer, closed by each producer's ABORT marker). Retriable errors never
reach the caller of poll(): they refresh metadata (or follow a leader hint) and the poll goes
on until its timeout. Positions follow Kafka: ``seek_to_beginning``/``seek_to_end`` and
``auto_offset_reset`` are resolved lazily, when a position is next needed.

A consumer with a ``group_id`` keeps its positions in the cluster (contract §8): a partition
without a position starts from the group's committed offset, and only without one from
``auto_offset_reset``; ``commit()`` commits the positions (each with the leader epoch of the
last record consumed), ``commit_async()`` does so without waiting, and auto-commit (on by
default, every ``auto_commit_interval_ms``, and on ``close()``) runs inside ``poll()``, as in
kafka-python and the Java client: no thread of its own. Callbacks of asynchronous commits run
in the application's thread, inside the consumer's next ``poll()``, ``commit()``,
``commit_async()`` or ``close()`` (Kafka's ``invokeCompletedOffsetCommitCallbacks``), never on
the client's loop, where a blocking call would wait for itself.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidelog import wire
from tidelog.coordinated import checked_offsets
from tidelog.errors import (
    ConfigurationError,
    CorruptMessageError,
    CorruptRecordError,
    IllegalStateError,
    InvalidGroupIdError,
    OffsetOutOfRangeError,
    RetriableError,
    StaleMemberEpochError,
    TidelogError,
    UnknownMemberIdError,
    UnsupportedCompressionTypeError,
)
from tidelog.lookups import list_offsets, topic_names
from tidelog.membership import ConsumerRebalanceListener, Membership
from tidelog.partitioned import Attempt, PartitionedRequest
from tidelog.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    ControlType,
    check_crc,
    consumer_records,
    control_type_of,
    read_header,
)
from tidelog.retry import Deadline
from tidelog.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ConsumerGroupMetadata,
    ConsumerRecord,
    IsolationLevel,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

if TYPE_CHECKING:
    from tidelog.connections import Connections

log = logging.getLogger("tidelog.consumer")

_RESETS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}
#: What an asynchronous commit's callback is given: the offsets, and the error or None.
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]
#: A Fetch RPC may take its long-poll wait plus this much.
_RPC_SLACK_S = 5.0
#: Iteration without consumer_timeout_ms polls in waits this long, for ever.
_ITER_WAIT_MS = 1000


#: Kafka consumer settings (kafka-python's names) of features Tidelog does not have, with
#: what the feature is: such a setting fails with that name rather than a TypeError.
_NOT_BUILT = {
    "key_deserializer": "deserializers (records carry bytes: decode them in the application)",
    "value_deserializer": "deserializers (records carry bytes: decode them in the application)",
    "partition_assignment_strategy": "client-side assignors (the group coordinator assigns "
    "partitions, KIP-848: group_remote_assignor='uniform' or 'range')",
    "session_timeout_ms": "client-set session timeouts (the group coordinator sets it, KIP-848)",
    "heartbeat_interval_ms": "client-set heartbeat intervals (the group coordinator sets it, "
    "KIP-848)",
    "client_rack": "rack-aware fetching from followers (KIP-392)",
    "check_crcs": "turning CRC checks off (every fetched batch is checked)",
    "interceptor_classes": "consumer interceptors",
    "metric_reporters": "metrics reporters",
    "enable_incremental_fetch_sessions": "incremental fetch sessions (KIP-227)",
    "sasl_mechanism": "SASL authentication",
    "sasl_plain_username": "SASL authentication",
    "sasl_plain_password": "SASL authentication",
}
#: Connection settings a kafka-python consumer takes and Tidelog's Client does.
_CLIENT_SETTINGS = frozenset({
    "bootstrap_servers", "security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
    "request_timeout_ms", "retry_backoff_ms", "retry_backoff_max_ms",
})


@dataclass(frozen=True)
class ConsumerConfig:
    """A consumer's settings, with Kafka's names and defaults; picklable."""

    #: The consumer group whose committed offsets the consumer uses; None: no commits.
    group_id: str | None = None
    isolation_level: IsolationLevel | str = "read_uncommitted"
    #: Where a partition without a position (and no committed offset) starts: "latest",
    #: "earliest" or "none" (raise).
    auto_offset_reset: str = "latest"
    #: Commit the positions every auto_commit_interval_ms, from poll(), and on close(); only
    #: with a group_id (kafka-python's reading of Kafka's default).
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    #: group.instance.id: a static member of a subscribed group (its partitions wait for it
    #: through a restart within the session timeout).
    group_instance_id: str | None = None
    #: group.remote.assignor: the server-side assignor asked for ("uniform" or "range").
    group_remote_assignor: str | None = None
    #: How long a subscribed member may take to revoke partitions (sent as the rebalance
    #: timeout); Kafka's default.
    max_poll_interval_ms: int = 300_000
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 1024 * 1024
    #: The most records one poll() returns; the rest wait in the consumer, unfetched again.
    max_poll_records: int = 500
    #: How long iterating over the consumer waits for the next record before it stops
    #: (kafka-python's consumer_timeout_ms); None: for ever.
    consumer_timeout_ms: int | None = None

    @classmethod
    def from_settings(cls, **settings: Any) -> ConsumerConfig:
        """The config of `client.consumer(**settings)`: a setting Tidelog does not know fails
        with a ConfigurationError that says why (a feature not built, a setting of the Client,
        or a name that is no setting at all) instead of the dataclass's TypeError."""
        known = set(cls.__dataclass_fields__)
        for name in settings.keys() - known:
            if name in _NOT_BUILT:
                raise ConfigurationError(
                    f"{name}: Tidelog's consumer has no {_NOT_BUILT[name]}"
                )
            if name in _CLIENT_SETTINGS:
                raise ConfigurationError(
                    f"{name} is a connection setting: give it to Client(...), whose consumers "
                    "share its connections"
                )
            raise ConfigurationError(
                f"unknown consumer setting {name!r}; the settings are {', '.join(sorted(known))}"
            )
        return cls(**settings)

    def __post_init__(self) -> None:
        if self.group_id is not None and (not isinstance(self.group_id, str) or not self.group_id):
            raise ConfigurationError(
                f"group_id must be a non-empty string or None, got {self.group_id!r}"
            )
        if self.auto_commit_interval_ms < 0:
            raise ConfigurationError("auto_commit_interval_ms must be >= 0")
        IsolationLevel.parse(self.isolation_level)
        if self.auto_offset_reset not in _RESETS:
            raise ConfigurationError(
                f"auto_offset_reset must be latest, earliest or none, got "
                f"{self.auto_offset_reset!r}"
            )
        if self.fetch_max_wait_ms < 0 or self.fetch_min_bytes < 0:
            raise ConfigurationError("fetch_max_wait_ms and fetch_min_bytes must be >= 0")
        if self.fetch_max_bytes < 1 or self.max_partition_fetch_bytes < 1:
            raise ConfigurationError("fetch_max_bytes and max_partition_fetch_bytes must be >= 1")
        if self.max_poll_records < 1:
            raise ConfigurationError("max_poll_records must be >= 1")
        if self.consumer_timeout_ms is not None and self.consumer_timeout_ms < 0:
            raise ConfigurationError("consumer_timeout_ms must be >= 0 or None")


@dataclass(slots=True)
class _Fetched:
    """A partition's records fetched and not yet handed out: ``records[at:]``, decoded, then
    those of the data batches of `data` listed in `batches`, each with the position before it
    (where the consumer stands once the records before it are handed out). As Kafka's
    CompletedFetch does, a batch is checked and decoded only when poll() needs its records:
    the ConsumerRecords are built just before they are returned and die with the
    application's use of them, rather than waiting in the buffer for later polls (about a
    fetch's worth of objects that every young garbage collection would walk again), and a
    value is still in the CPU's cache when the application reads it."""

    data: bytes
    batches: collections.deque[tuple[int, BatchHeader, int]]
    records: list[ConsumerRecord] = field(default_factory=list)
    at: int = 0
    #: The partitions whose records came in the same answer (this one included): none of
    #: them is fetched again while this one has records left (`Consumer._fetchable`).
    mates: frozenset[TopicPartition] = frozenset()

    def position(self) -> int:
        """The offset of the next record handed out (or of the next batch's first)."""
        if self.at < len(self.records):
            return self.records[self.at].offset
        return self.batches[0][2]


@dataclass(slots=True)
class _Round:
    """A Fetch in flight to one leader: the positions it asked for, and the
    partitions whose answers are still wanted. A seek, a pause or the end of the assignment
    takes a partition out of `live` (`Consumer._forget`): its answer is then dropped, and it
    may be fetched again at once."""

    future: concurrent.futures.Future[Attempt[wire.FetchAnswer]]
    work: dict[TopicPartition, wire.FetchPosition]
    live: set[TopicPartition]


class Consumer:
    """Reads assigned partitions from their positions. Calls are serialised by a lock, so
    sharing one consumer between threads is safe (if rarely useful)."""

    def __init__(self, connections: Connections, config: ConsumerConfig) -> None:
        self.connections = connections
        self.config = config
        self.isolation_level = IsolationLevel.parse(config.isolation_level)
        self._lock = threading.RLock()
        #: Assigned partitions -> next offset to return; None until resolved.
        self._positions: dict[TopicPartition, int | None] = {}
        #: Pending seek_to_beginning/seek_to_end, by ListOffsets spec.
        self._resets: dict[TopicPartition, int] = {}
        self._failed_rounds = 0
        #: A bad batch met after records were already taken: raised by the next poll round.
        self._corrupt: CorruptRecordError | None = None
        #: The leader epoch of the record before each position (the last one consumed, or
        #: the committed one), committed with it; absent when unknown.
        self._epochs: dict[TopicPartition, int] = {}
        self._auto_commit = config.enable_auto_commit and config.group_id is not None
        #: A read_committed consumer waits for pending transactional commits, as Kafka's does.
        self._require_stable = self.isolation_level is IsolationLevel.READ_COMMITTED
        self._next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000
        self._auto_commit_future: concurrent.futures.Future[Any] | None = None
        #: Asynchronous commits not yet done, and the callbacks of finished ones, queued
        #: (from the loop thread) for the application's thread.
        self._in_flight: list[concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]]
        self._in_flight = []
        self._callbacks: collections.deque[Callable[[], None]] = collections.deque()
        self._closed = False
        #: The group membership of `subscribe()`; None while partitions are assigned by hand.
        self._membership: Membership | None = None
        self._listener = ConsumerRebalanceListener()
        #: Partitions the application paused: kept assigned with their positions, not fetched.
        self._paused: set[TopicPartition] = set()
        #: Records fetched but not yet returned (beyond max_poll_records), by partition; such
        #: a partition is not fetched again until they are, and its position (`_positions`)
        #: is then the offset after them.
        self._buffer: dict[TopicPartition, _Fetched] = {}
        #: Fetch rounds in flight; a partition is in at most one round's `live` set.
        self._rounds: list[_Round] = []

    # ---- assignment and positions ------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their positions."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        with self._lock:
            self._check_open()
            if self._membership is not None:
                raise ConfigurationError("the consumer is subscribed: unsubscribe() first")
            self._maybe_auto_commit()  # Kafka does too, so the dropped partitions keep theirs
            self._set_assignment(wanted)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        kept = {tp: self._positions.get(tp) for tp in partitions}
        for tp in self._positions.keys() - kept.keys():
            self._forget(tp)
        self._positions = kept
        self._resets = {tp: s for tp, s in self._resets.items() if tp in self._positions}
        self._epochs = {tp: e for tp, e in self._epochs.items() if tp in self._positions}
        self._paused &= self._positions.keys()
        self._buffer = {tp: b for tp, b in self._buffer.items() if tp in self._positions}

    # ---- group membership (KIP-848) ----------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the consumer group: its coordinator assigns the partitions of `topics` (or of
        every topic whose whole name matches the regular expression `pattern`) among the
        members, and moves them as members come and go (`membership`). The listener's
        callbacks run inside poll(). Needs a group_id."""
        if (topics is None) == (pattern is None):
            raise ConfigurationError("subscribe() takes topics or pattern=..., one of them")
        if isinstance(topics, str):
            raise ConfigurationError("subscribe() takes a list of topics: subscribe([topic])")
        names = None if topics is None else list(topics)
        if names is not None and (not names or not all(isinstance(t, str) and t for t in names)):
            raise ConfigurationError("subscribe() needs at least one non-empty topic name")
        with self._lock:
            group_id = self._group_id()
            if self._positions and self._membership is None:
                raise ConfigurationError("the consumer has assigned partitions: assign([]) first")
            if self._membership is not None:
                self._leave_group()
            self._listener = listener or ConsumerRebalanceListener()
            self._membership = Membership(
                self.connections, group_id, names, pattern,
                instance_id=self.config.group_instance_id,
                rebalance_timeout_ms=self.config.max_poll_interval_ms,
                server_assignor=self.config.group_remote_assignor,
            )
            self._membership.refresh_pattern(self._topic_names)

    def _topic_names(self) -> list[str]:
        return topic_names(self.connections, self.connections.deadline())

    def subscription(self) -> set[str]:
        with self._lock:
            return set(self._membership.topics) if self._membership is not None else set()

    def unsubscribe(self) -> None:
        """Leave the group: the partitions' positions are committed (auto-commit on), the
        listener's on_partitions_revoked runs, and the member leaves at once."""
        with self._lock:
            if self._membership is not None:
                self._leave_group()

    def _leave_group(self) -> None:
        membership = self._membership
        assert membership is not None
        owned = set(self._positions)
        try:
            if owned and (membership.lost or membership.fatal is not None):
                self._listener.on_partitions_lost(owned)
            elif owned:
                self._commit_revoked(owned)
                self._listener.on_partitions_revoked(owned)
        finally:
            self._set_assignment(())
            self._membership = None
            membership.leave(self.connections.deadline().remaining())

    def _reconcile(self) -> None:
        """Do what the membership asks of the application (`membership.Membership`)."""
        membership = self._membership
        if membership is None:
            return
        membership.refresh_pattern(self._topic_names)
        work = membership.take_work()
        if work is None:
            return
        kind, revoked, added = work
        if kind == "lost":
            if revoked:
                self._listener.on_partitions_lost(revoked)
            self._set_assignment(())
        else:
            if revoked:  # committed and revoked while still assigned, as in Kafka
                self._commit_revoked(revoked)
                self._listener.on_partitions_revoked(revoked)
                self._set_assignment(tp for tp in self._positions if tp not in revoked)
            self._set_assignment([*self._positions, *sorted(added)])
            self._listener.on_partitions_assigned(added)
        membership.done(kind, revoked, added)

    def _commit_revoked(self, revoked: set[TopicPartition]) -> None:
        """With auto-commit on, the positions of partitions about to be revoked, committed
        before they go (a failure is logged and the revocation goes on, as in Kafka)."""
        membership = self._membership
        if not self._auto_commit or membership is None:
            return
        offsets = {tp: o for tp, o in self._consumed().items() if tp in revoked}
        if not offsets:
            return
        assert self.config.group_id is not None
        for attempt in range(2):  # STALE_MEMBER_EPOCH: again with the newer epoch, once
            try:
                self.connections.run(self.connections.coordinators.commit(
                    self.config.group_id, offsets, self.connections.deadline(),
                    member=membership.member(),
                ))
                return
            except StaleMemberEpochError:
                if attempt:
                    raise
            except TidelogError as exc:
                log.warning("the commit of revoked partitions failed: %s", exc)
                return

    def _member(self) -> tuple[str, int] | None:
        return self._membership.member() if self._membership is not None else None

    def _joined_member(self) -> tuple[str, int] | None:
        """What an OffsetFetch carries: the member's id and epoch once it has joined (as the
        Java consumer, which sends them only with a member epoch); before, none, which the
        coordinator does not check."""
        member = self._member()
        return member if member is not None and member[1] > 0 else None

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's place in its group now, for a transactional producer's
        `send_offsets_to_transaction` (Kafka's groupMetadata(), KIP-447): the group id, the
        member id and epoch of `subscribe()`'s membership ("" and -1 before it joins, and
        for a consumer of assign()ed partitions), and the static instance id. Take it for
        each transaction: a rebalance moves the epoch on, and the coordinator refuses offsets
        committed with an epoch that is not the member's current one."""
        with self._lock:
            group_id = self._group_id()
            member_id, epoch = self._joined_member() or ("", -1)
            return ConsumerGroupMetadata(group_id, epoch, member_id,
                                         self.config.group_instance_id)

    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._positions)

    def _assigned(self, tp: TopicPartition) -> TopicPartition:
        self._check_open()
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            raise ConfigurationError(f"{tp} is not assigned to this consumer")
        return tp

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ConfigurationError(f"an offset must be >= 0, got {offset}")
        with self._lock:
            tp = self._assigned(partition)
            self._positions[tp] = offset
            self._resets.pop(tp, None)
            self._epochs.pop(tp, None)
            self._buffer.pop(tp, None)
            self._forget(tp)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_lazily(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_lazily(partitions, LATEST_TIMESTAMP)

    def _seek_lazily(self, partitions: Iterable[TopicPartition], spec: int) -> None:
        """Kafka evaluates these at the next poll() or position(); so do we. No partitions
        means every assigned one."""
        with self._lock:
            for tp in [self._assigned(tp) for tp in partitions] or list(self._positions):
                self._positions[tp] = None
                self._resets[tp] = spec
                self._epochs.pop(tp, None)
                self._buffer.pop(tp, None)
                self._forget(tp)

    def position(self, partition: TopicPartition, *, timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() returns for the partition."""
        with self._lock:
            tp = self._assigned(partition)
            self._resolve_positions(self.connections.deadline(timeout_ms))
            position = self._position(tp)
            assert position is not None
            return position

    def _position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record the application gets: the first buffered one, else
        where the next Fetch starts."""
        buffered = self._buffer.get(tp)
        return buffered.position() if buffered else self._positions[tp]

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching the partitions: poll() returns none of their records until resume(),
        and they keep their positions (Kafka's pause; a partition must be assigned)."""
        with self._lock:
            paused = [self._assigned(tp) for tp in partitions]
            self._paused.update(paused)
            for tp in paused:  # a Fetch in flight for it is not taken (Kafka drops it too)
                self._forget(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch the paused partitions again, from where they stopped."""
        with self._lock:
            self._paused.difference_update([self._assigned(tp) for tp in partitions])

    def paused(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._paused)

    def _resolve_positions(self, deadline: Deadline) -> None:
        """Positions for the partitions without one: a pending seek_to_*, else the group's
        committed offset, else auto_offset_reset."""
        missing = [tp for tp, pos in self._positions.items() if pos is None]
        group_id = self.config.group_id
        unreset = [tp for tp in missing if tp not in self._resets]
        if group_id is not None and unreset:
            committed = self.connections.run(self.connections.coordinators.fetch(
                group_id, unreset, deadline, require_stable=self._require_stable,
                member=self._joined_member(),
            ))
            for tp, value in committed.items():
                if value is not None and tp in self._positions:
                    self._positions[tp] = value.offset
                    if value.leader_epoch is not None:
                        self._epochs[tp] = value.leader_epoch
            missing = [tp for tp in missing if self._positions[tp] is None]
        if not missing:
            return
        specs: dict[TopicPartition, int] = {}
        for tp in missing:
            spec = self._resets.get(tp, self._reset_spec())
            if spec is None:
                raise OffsetOutOfRangeError(
                    f"{tp}: no position and auto_offset_reset is 'none'; seek() first"
                )
            specs[tp] = spec
        found = list_offsets(self.connections, specs, self.isolation_level, deadline)
        for tp, result in found.items():
            self._positions[tp] = result.offset
            self._resets.pop(tp, None)

    # ---- offset lookups ----------------------------------------------------------------------

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset at or after each timestamp; None when no record matches."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ConfigurationError(f"{tp}: a timestamp must be >= 0, got {ts}")
        found = list_offsets(self.connections, timestamps, self.isolation_level,
                             self.connections.deadline(timeout_ms))
        return {
            tp: None if r.offset < 0 else OffsetAndTimestamp(
                r.offset, r.timestamp, None if r.leader_epoch < 0 else r.leader_epoch
            )
            for tp, r in found.items()
        }

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        return self._offsets(partitions, EARLIEST_TIMESTAMP, timeout_ms)

    def end_offsets(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """The high watermark (read_uncommitted) or last stable offset (read_committed)."""
        return self._offsets(partitions, LATEST_TIMESTAMP, timeout_ms)

    def _offsets(
        self, partitions: Iterable[TopicPartition], spec: int, timeout_ms: int | None
    ) -> dict[TopicPartition, int]:
        found = list_offsets(self.connections, dict.fromkeys(partitions, spec),
                             self.isolation_level, self.connections.deadline(timeout_ms))
        return {tp: r.offset for tp, r in found.items()}

    # ---- committed offsets -------------------------------------------------------------------

    def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit `offsets`, or (None) the current position of every assigned partition that
        has one, and wait until the commit is in the log: all of them or none (contract §8).
        Retriable failures are retried up to the deadline; others raise, typed
        (OffsetMetadataTooLargeError names its partition, and the other partitions of the
        request are committed, as Kafka)."""
        with self._lock:
            group_id = self._group_id()
            self._run_callbacks()
            chosen = self._consumed() if offsets is None else checked_offsets(offsets)
            deadline = self.connections.deadline(timeout_ms)
            self.connections.run(self.connections.coordinators.commit(
                group_id, chosen, deadline, member=self._member()
            ))

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]:
        """Start a commit (as `commit`) and return at once: a future of the committed offsets,
        and `callback(offsets, error or None)` run in this thread by a later call of the
        consumer. As in Kafka, an asynchronous commit is not retried (a retry could land
        after a newer commit and move the group back); a retriable error reaches the callback
        and the next commit carries newer positions anyway."""
        with self._lock:
            group_id = self._group_id()
            self._run_callbacks()
            chosen = self._consumed() if offsets is None else checked_offsets(offsets)
            return self._commit_async(group_id, chosen, callback)

    def _commit_async(
        self,
        group_id: str,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback | None,
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]:
        coordinators = self.connections.coordinators
        deadline = self.connections.deadline()
        member = self._member()

        async def commit() -> dict[TopicPartition, OffsetAndMetadata]:
            await coordinators.commit(group_id, offsets, deadline, retry=False, member=member)
            return offsets

        future = self.connections.transport.submit(commit())
        self._in_flight = [f for f in self._in_flight if not f.done()] + [future]
        if callback is not None:
            future.add_done_callback(
                lambda done: self._callbacks.append(
                    lambda: callback(offsets, done.exception())
                )
            )
        return future

    def committed(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (assigned or not), read from the
        coordinator; None for a partition the group has not committed."""
        if isinstance(partitions, TopicPartition):
            raise ConfigurationError("committed() takes a list of partitions: committed([tp])")
        wanted = [TopicPartition(*tp) for tp in partitions]
        with self._lock:
            group_id = self._group_id()
            self._run_callbacks()
            deadline = self.connections.deadline(timeout_ms)
            found = self.connections.run(self.connections.coordinators.fetch(
                group_id, wanted, deadline, require_stable=self._require_stable,
                member=self._joined_member(),
            ))
        return {tp: found.get(tp) for tp in wanted}

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _group_id(self) -> str:
        self._check_open()
        if self.config.group_id is None:
            raise InvalidGroupIdError(
                "committing or reading committed offsets needs a consumer group: "
                "client.consumer(group_id=...)"
            )
        return self.config.group_id

    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The positions to commit: every assigned partition that has one."""
        positions = {tp: self._position(tp) for tp in self._positions}
        return {
            tp: OffsetAndMetadata(position, "", self._epochs.get(tp))
            for tp, position in positions.items()
            if position is not None
        }

    def _maybe_auto_commit(self) -> None:
        """Commit the positions asynchronously when auto-commit is due, unless the previous
        auto-commit is still under way (a slow coordinator is not sent a pile of them)."""
        if not self._auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        previous = self._auto_commit_future
        offsets = self._consumed()
        if offsets and (previous is None or previous.done()):
            assert self.config.group_id is not None
            self._auto_commit_future = self._commit_async(
                self.config.group_id, offsets, _log_auto_commit
            )

    def _run_callbacks(self) -> None:
        while self._callbacks:
            self._callbacks.popleft()()

    # ---- closing -----------------------------------------------------------------------------

    def close(self, *, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit the positions (with auto-commit on and `autocommit`; a failure is logged,
        as Kafka's close does), wait for asynchronous commits under way and run their
        callbacks, all within the timeout; the client stays open."""
        with self._lock:
            if self._closed:
                return
            deadline = self.connections.deadline(timeout_ms)
            try:
                if self._membership is not None:  # commits what it owns, then leaves
                    if not autocommit:
                        self._auto_commit = False
                    self._leave_group()
                if self._auto_commit and autocommit:
                    try:
                        self.connections.run(self.connections.coordinators.commit(
                            self.config.group_id or "", self._consumed(), deadline
                        ))
                    except TidelogError as exc:
                        log.warning("the commit of the positions on close failed: %s", exc)
                concurrent.futures.wait(self._in_flight, timeout=deadline.remaining())
                self._run_callbacks()
            finally:
                for rnd in self._rounds:
                    rnd.future.cancel()
                self._rounds = []
                self._closed = True

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- poll --------------------------------------------------------------------------------

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record, one at a time, as kafka-python's consumer iterates: waits for it
        for ever, or up to consumer_timeout_ms, after which the iteration stops. Each record
        moves the position past it only when it is handed out."""
        timeout_ms = self.config.consumer_timeout_ms
        deadline = None if timeout_ms is None else Deadline(timeout_ms)
        while True:
            wait_ms = _ITER_WAIT_MS if deadline is None else deadline.remaining() * 1000
            records = self._poll(wait_ms, 1)
            if records:
                return records[0]
            if deadline is not None and deadline.expired:
                raise StopIteration

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Records from the assigned partitions' positions, at most max_poll_records; an empty
        list when none arrived within `timeout_ms` (paused partitions give none). With nothing
        assigned or subscribed it raises IllegalStateError. Only non-retriable errors raise
        (naming the partition), among them CorruptRecordError for a batch that cannot be read:
        records before it come first, and the position stays on it until the application seeks
        past it."""
        return self._poll(timeout_ms, self.config.max_poll_records)

    def _poll(self, timeout_ms: float, max_records: int) -> list[ConsumerRecord]:
        deadline = Deadline(timeout_ms)
        with self._lock:
            self._check_open()
            #: Whether this poll sent a round of its own (it then waits for that round's
            #: answer, as a poll with nothing in flight always did).
            sent = False
            while True:
                self._run_callbacks()
                self._reconcile()
                self._maybe_auto_commit()
                self._raise_corrupt()
                if self._membership is None and not self._positions:
                    raise IllegalStateError(
                        "poll() needs partitions to read: assign() or subscribe() first"
                    )
                collected, failed_leaders = self._collect()
                records = self._drain(max_records)
                if records:
                    self._send_round(self.config.fetch_max_wait_ms)  # the next, in flight
                    return records
                if failed_leaders is not None:
                    self._failed_rounds += 1
                    self._await_leaders(failed_leaders, deadline)
                elif collected:
                    self._failed_rounds = 0
                if sent and deadline.expired:
                    return []
                if not self._rounds and all(
                    tp in self._paused or tp in self._buffer for tp in self._positions
                ):
                    # Nothing assigned by the group yet, or every partition paused: wait for
                    # the membership (or out the timeout), not for a Fetch.
                    if self._membership is not None:
                        self._membership.changed.wait(min(deadline.remaining(), 0.1))
                    else:
                        time.sleep(deadline.remaining())
                    if deadline.expired:
                        return []
                    continue
                try:
                    self._resolve_positions(self.connections.deadline())
                except (RetriableError, StaleMemberEpochError, UnknownMemberIdError):
                    # The last two: the member's epoch moved (or it was fenced) while its
                    # OffsetFetch was under way; the heartbeat brings the news, the next
                    # round fetches again with it.
                    self._failed_rounds += 1
                    self._await_leaders({}, deadline)
                    if deadline.expired:
                        return []
                    continue
                wait_ms = min(self.config.fetch_max_wait_ms, int(deadline.remaining() * 1000))
                if self._send_round(wait_ms):
                    sent = True  # bounded by its own long-poll wait: waited for whole
                    timeout: float | None = None
                elif deadline.expired:
                    return []
                else:
                    timeout = deadline.remaining()
                concurrent.futures.wait(
                    [rnd.future for rnd in self._rounds], timeout,
                    concurrent.futures.FIRST_COMPLETED,
                )

    def _await_leaders(
        self, failed_leaders: dict[TopicPartition, tuple[int, int]], deadline: Deadline
    ) -> None:
        """The backoff after a round that needs new metadata, spent watching for the new
        leaders (`MetadataSource.await_new_leaders`)."""
        self.connections.metadata.await_new_leaders(
            failed_leaders, self.connections.backoff.delay_s(self._failed_rounds), deadline,
        )
        with contextlib.suppress(RetriableError):
            self.connections.metadata.check_described(
                (tp.topic for tp in self._positions), self.connections.deadline()
            )

    def _fetchable(self) -> dict[TopicPartition, int]:
        """The positions to fetch: partitions with one, not paused, with nothing buffered and
        no Fetch in flight, whose last answer's other partitions have nothing buffered either
        (unless paused): a leader's partitions drained one after the other are fetched
        again together, in one request, rather than one request each (half the Fetch
        requests, and their cost on the node and in the client, for a consumer reading two
        partitions of a leader), while the records still buffered keep poll() busy."""
        in_flight = set().union(*(rnd.live for rnd in self._rounds))
        held = set().union(*(
            buffered.mates for tp, buffered in self._buffer.items() if tp not in self._paused
        ))
        return {
            tp: position for tp, position in self._positions.items()
            if position is not None and tp not in self._paused and tp not in held
            and tp not in self._buffer and tp not in in_flight
        }

    def _forget(self, tp: TopicPartition) -> None:
        """Drop the answer of any Fetch in flight for `tp` (seeked, paused or unassigned)."""
        for rnd in self._rounds:
            rnd.live.discard(tp)

    def _drain(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` buffered records of unpaused partitions, partition after
        partition, decoding their batches as they are needed (`_Fetched`); each partition's
        commit epoch becomes that of its last record handed out.

        A batch whose records cannot be read stops its partition there, as in `_take`: the
        records before it are handed out, the position goes back to it, and the
        CorruptRecordError waits in `_corrupt` for the next round of poll()."""
        out: list[ConsumerRecord] = []
        for tp, buffered in list(self._buffer.items()):
            if len(out) >= max_records:
                break
            if tp in self._paused:
                continue
            taken: list[ConsumerRecord] = []
            while len(out) + len(taken) < max_records:
                at = buffered.at
                if at == len(buffered.records):
                    if not buffered.batches:
                        break
                    pos, header, position = buffered.batches.popleft()
                    try:
                        buffered.records = consumer_records(
                            buffered.data, pos, header, tp, position
                        )
                    except (CorruptMessageError, UnsupportedCompressionTypeError) as exc:
                        self._corrupt = _corrupt_at(tp, position, buffered.data, pos, exc)
                        self._positions[tp] = position
                        buffered.records, buffered.batches = [], collections.deque()
                        buffered.at = 0
                        break
                    buffered.at = at = 0
                more = buffered.records[at : at + max_records - len(out) - len(taken)]
                buffered.at = at + len(more)
                taken += more
            if buffered.at == len(buffered.records) and not buffered.batches:
                del self._buffer[tp]
            if taken:
                if taken[-1].leader_epoch >= 0:
                    self._epochs[tp] = taken[-1].leader_epoch
                out += taken
        return out

    def _send_round(self, max_wait_ms: int) -> bool:
        """Send one Fetch per leader for the fetchable partitions (`_fetchable`), on the
        client's loop, without waiting; False when there are none. Each leader's Fetch is a
        round of its own, taken as soon as it is answered, as Kafka's consumer fetches from
        each node apart: a long poll on a leader with nothing new holds back no other's
        records."""
        work = {
            tp: wire.FetchPosition(position, self.connections.metadata.cluster.leader_epoch(tp))
            for tp, position in self._fetchable().items()
        }
        if not work:
            return False
        request: PartitionedRequest[wire.FetchPosition, wire.FetchAnswer] = PartitionedRequest(
            self.connections.transport,
            self.connections.metadata,
            self.connections.backoff,
            "Fetch",
            "Fetch",
            lambda positions: wire.fetch_request(
                positions,
                isolation=self.isolation_level,
                max_wait_ms=max_wait_ms,
                min_bytes=self.config.fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes,
                partition_max_bytes=self.config.max_partition_fetch_bytes,
            ),
            wire.parse_fetch,
        )
        groups, leaderless = request.by_leader(work)
        for tps in [*groups.values(), list(leaderless)]:
            if tps:  # the leaderless ones fail at once, asking for new metadata
                part = {tp: work[tp] for tp in tps}
                future = self.connections.transport.submit(
                    request.attempt(part, max_wait_ms / 1000 + _RPC_SLACK_S)
                )
                self._rounds.append(_Round(future, part, set(part)))
        return True

    def _collect(self) -> tuple[bool, dict[TopicPartition, tuple[int, int]] | None]:
        """Take the answers of the rounds that have come back into the buffer: whether any
        had, and when metadata must be refreshed before the next round, the (leader, epoch)
        that failed each partition that needs it (None when none does). A partition's answer
        (records or error) counts only if it is still live and still at the position it was
        fetched from; a final error raises, after the round's records are buffered."""
        failed: dict[TopicPartition, tuple[int, int]] | None = None
        done = [rnd for rnd in self._rounds if rnd.future.done()]
        for rnd in done:
            self._rounds.remove(rnd)
            outcome = rnd.future.result()
            wanted = {
                tp for tp in rnd.live if self._positions.get(tp) == rnd.work[tp].offset
            }
            for tp, answer in outcome.answers.items():
                if tp in wanted:
                    self._take(tp, rnd.work[tp].offset, answer)
            mates = frozenset(tp for tp in outcome.answers if tp in wanted and tp in self._buffer)
            for tp in mates:
                self._buffer[tp].mates = mates
            if outcome.refresh:
                failed = {**(failed or {}), **outcome.failed_leaders}
            for tp, error in sorted(outcome.final.items()):
                if tp not in wanted:
                    continue
                if not isinstance(error, OffsetOutOfRangeError) or self._reset_spec() is None:
                    raise error
                self._positions[tp] = None  # auto_offset_reset at the next round
        return bool(done), failed

    def _reset_spec(self) -> int | None:
        return _RESETS[self.config.auto_offset_reset]

    def _take(self, tp: TopicPartition, position: int, answer: wire.FetchAnswer) -> None:
        """Buffer the answer's data batches from `position` (decoded by `_drain` as poll()
        needs them), advancing the position past control batches and (read_committed)
        aborted ones.

        Every batch is checked (CRC here, every record's framing when it is decoded) before
        its records are taken, as Kafka's consumer does with check.crcs. A batch that fails
        stops the walk: the records before it are returned, the position stays on it, and the
        CorruptRecordError waits in `_corrupt` for the next round of poll() (Kafka's
        behaviour: nothing is skipped silently, and nothing already decoded is lost)."""
        data = answer.records
        committed_only = self.isolation_level is IsolationLevel.READ_COMMITTED
        aborted = [(first, pid) for pid, first in answer.aborted] if committed_only else []
        heapq.heapify(aborted)
        aborted_producers: set[int] = set()
        batches: collections.deque[tuple[int, BatchHeader, int]] = collections.deque()
        pos = 0
        while len(data) - pos >= HEADER_SIZE:
            size = _batch_size(data, pos)
            if pos + size > len(data) and pos and size >= HEADER_SIZE:
                break  # a partial batch after whole ones: fetched again from here next time
            try:
                header = read_header(data, pos)
                if header.next_offset > position:
                    check_crc(data, pos, header)
                    while aborted and aborted[0][0] <= header.last_offset:
                        aborted_producers.add(heapq.heappop(aborted)[1])
                    if header.is_control:
                        if control_type_of(data, pos, header) == ControlType.ABORT:
                            aborted_producers.discard(header.producer_id)
                    elif not (header.is_transactional and header.producer_id in aborted_producers):
                        batches.append((pos, header, position))
                    position = header.next_offset
            except (CorruptMessageError, UnsupportedCompressionTypeError) as exc:
                self._corrupt = _corrupt_at(tp, position, data, pos, exc)
                break
            pos += header.size
        self._positions[tp] = position
        if batches:
            self._buffer[tp] = _Fetched(data, batches)

    def _raise_corrupt(self) -> None:
        """Raise the CorruptRecordError a previous round met, unless its partition was seeked
        or unassigned since (the application already chose what to do)."""
        corrupt, self._corrupt = self._corrupt, None
        if corrupt is not None:
            tp = TopicPartition(corrupt.topic, corrupt.partition)
            if tp in self._buffer:  # the records before the bad batch come first
                self._corrupt = corrupt
            elif self._positions.get(tp) == corrupt.offset:
                raise corrupt


def _log_auto_commit(
    offsets: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None
) -> None:
    """An auto-commit that failed is only logged: the next one carries newer positions."""
    if error is not None:
        log.warning("auto-commit of %d partition(s) failed: %s", len(offsets), error)


def _corrupt_at(
    tp: TopicPartition, position: int, data: bytes, pos: int, exc: TidelogError
) -> CorruptRecordError:
    """The consumer's error for the bad batch at `pos`, saying how to skip it if its header
    still says where it ends."""
    try:
        skip = f"; seek to {read_header(data, pos).next_offset} to skip the batch"
    except CorruptMessageError:
        skip = ""
    return CorruptRecordError(
        tp.topic, tp.partition, position, f"the fetched batch cannot be read ({exc}){skip}"
    )


def _batch_size(data: bytes, pos: int) -> int:
    """The whole size of the batch at `pos`, read from its length field."""
    return int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True) + LOG_OVERHEAD
