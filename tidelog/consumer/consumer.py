"""The consumer facade: `Consumer`, what `client.consumer(...)` returns. It holds the lock
that serialises the application's calls and drives its parts (the package's other modules):
the positions, the fetcher, the commits and, for a subscribed consumer, the group membership.

Retriable errors never reach the caller of poll(): they refresh metadata (or follow a leader
hint) and the poll goes on until its timeout. Positions follow Kafka: ``seek_to_beginning``/
``seek_to_end`` and ``auto_offset_reset`` are resolved lazily, when a position is next needed.

A consumer with a ``group_id`` keeps its positions in the cluster (contract §8): a partition
without a position starts from the group's committed offset, and only without one from
``auto_offset_reset``; ``commit()`` commits the positions (each with the leader epoch of the
last record consumed), ``commit_async()`` does so without waiting, and auto-commit runs inside
``poll()`` (`commits`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import ItemsView, Iterable, KeysView, Mapping, ValuesView
from typing import TYPE_CHECKING, SupportsIndex, overload

from tidelog.consumer.commits import CommitCallback, Commits
from tidelog.consumer.config import ConsumerConfig
from tidelog.consumer.fetcher import Fetcher
from tidelog.consumer.group import Group
from tidelog.consumer.positions import Positions
from tidelog.coordinated import checked_offsets
from tidelog.errors import (
    ConfigurationError,
    IllegalStateError,
    InvalidGroupIdError,
    RetriableError,
    StaleMemberEpochError,
    TidelogError,
    UnknownMemberIdError,
)
from tidelog.lookups import fresh_topics, list_offsets, topic_names
from tidelog.membership import ConsumerRebalanceListener
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
    checked_partition,
    checked_partitions,
)

if TYPE_CHECKING:
    from tidelog.connections import Connections

log = logging.getLogger("tidelog.consumer")

#: Iteration without consumer_timeout_ms polls in waits this long, for ever.
_ITER_WAIT_MS = 1000


class PolledRecords(list[ConsumerRecord]):
    """What `Consumer.poll` returns: the records in the order read, a list as Tidelog's poll()
    always returned, that also answers as kafka-python's ``{TopicPartition: [records]}``, so
    that code written for either reads it: ``for tp, records in consumer.poll().items()``,
    ``keys()``, ``values()``, ``get(tp)`` and ``polled[tp]`` group the records by partition,
    each partition's in offset order. Iterating it gives the records themselves (a dict would
    give its keys): ``keys()`` gives the partitions."""

    def by_partition(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        grouped: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in self:
            grouped.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        return grouped

    def items(self) -> ItemsView[TopicPartition, list[ConsumerRecord]]:
        return self.by_partition().items()

    def keys(self) -> KeysView[TopicPartition]:
        return self.by_partition().keys()

    def values(self) -> ValuesView[list[ConsumerRecord]]:
        return self.by_partition().values()

    def get(
        self, tp: TopicPartition, default: list[ConsumerRecord] | None = None
    ) -> list[ConsumerRecord] | None:
        return self.by_partition().get(tp, default)

    @overload
    def __getitem__(self, index: SupportsIndex) -> ConsumerRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[ConsumerRecord]: ...
    @overload
    def __getitem__(self, index: TopicPartition) -> list[ConsumerRecord]: ...

    def __getitem__(
        self, index: SupportsIndex | slice | TopicPartition
    ) -> ConsumerRecord | list[ConsumerRecord]:
        """A record by its index, or (a TopicPartition) the partition's records, as a dict
        of kafka-python's gives them (KeyError when it has none)."""
        if isinstance(index, tuple):
            return self.by_partition()[index]
        return super().__getitem__(index)


class Consumer:
    """Reads assigned partitions from their positions. Calls are serialised by a lock, so
    sharing one consumer between threads is safe (if rarely useful)."""

    def __init__(self, connections: Connections, config: ConsumerConfig) -> None:
        self.connections = connections
        self.config = config
        self.isolation_level = IsolationLevel.parse(config.isolation_level)
        self._lock = threading.RLock()
        self._positions = Positions(connections, config, self.isolation_level)
        self._fetcher = Fetcher(connections, config, self.isolation_level, self._positions)
        self._commits = Commits(connections, config, self._fetcher)
        self._group = Group(connections, config, self._fetcher, self._commits)
        self._closed = False
        #: Records handed out so far (records-consumed-total).
        self._consumed = 0

    # ---- assignment and positions ------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their positions. Each partition is
        checked here (a str topic, a str or negative partition: ConfigurationError)."""
        wanted = checked_partitions(partitions, "assign")
        with self._lock:
            self._check_open()
            if self._group.membership is not None:
                raise ConfigurationError("the consumer is subscribed: unsubscribe() first")
            # An auto-commit first, as Kafka's, so the dropped partitions keep their positions
            self._commits.maybe_auto_commit(self._group.member)
            self._fetcher.assign(wanted)

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
            if self._positions.offsets and self._group.membership is None:
                raise ConfigurationError("the consumer has assigned partitions: assign([]) first")
            self._group.join(group_id, names, pattern, listener)

    def subscription(self) -> set[str]:
        with self._lock:
            membership = self._group.membership
            return set(membership.topics) if membership is not None else set()

    def unsubscribe(self) -> None:
        """Leave the group: the partitions' positions are committed (auto-commit on), the
        listener's on_partitions_revoked runs, and the member leaves at once."""
        with self._lock:
            if self._group.membership is not None:
                self._group.leave()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's place in its group now, for a transactional producer's
        `send_offsets_to_transaction` (Kafka's groupMetadata(), KIP-447): the group id, the
        member id and epoch of `subscribe()`'s membership ("" and -1 before it joins, and
        for a consumer of assign()ed partitions), and the static instance id. Take it for
        each transaction: a rebalance moves the epoch on, and the coordinator refuses offsets
        committed with an epoch that is not the member's current one."""
        with self._lock:
            group_id = self._group_id()
            member_id, epoch = self._group.joined_member() or ("", -1)
            return ConsumerGroupMetadata(group_id, epoch, member_id,
                                         self.config.group_instance_id)

    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._positions.offsets)

    def _assigned(self, tp: TopicPartition) -> TopicPartition:
        self._check_open()
        return self._positions.assigned(tp)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigurationError(f"seek(): an offset is an int >= 0, got {offset!r:.80}")
        with self._lock:
            tp = self._assigned(partition)
            self._positions.seek(tp, offset)
            self._fetcher.drop(tp)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_lazily(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_lazily(partitions, LATEST_TIMESTAMP)

    def _seek_lazily(self, partitions: Iterable[TopicPartition], spec: int) -> None:
        """Kafka evaluates these at the next poll() or position(); so do we. No partitions
        means every assigned one."""
        with self._lock:
            for tp in [self._assigned(tp) for tp in partitions] or list(self._positions.offsets):
                self._positions.seek(tp, None, spec)
                self._fetcher.drop(tp)

    def position(self, partition: TopicPartition, *, timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() returns for the partition."""
        with self._lock:
            tp = self._assigned(partition)
            self._positions.resolve(
                self.connections.deadline(timeout_ms), self._group.joined_member
            )
            position = self._fetcher.position(tp)
            assert position is not None
            return position

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching the partitions: poll() returns none of their records until resume(),
        and they keep their positions (Kafka's pause; a partition must be assigned)."""
        with self._lock:
            paused = [self._assigned(tp) for tp in partitions]
            self._positions.paused.update(paused)
            for tp in paused:  # a Fetch in flight for it is not taken (Kafka drops it too)
                self._fetcher.forget(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch the paused partitions again, from where they stopped."""
        with self._lock:
            self._positions.paused.difference_update([self._assigned(tp) for tp in partitions])

    def paused(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._positions.paused)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as the last Fetch answer for it said (kafka-python's
        ``highwater``): None before one, or for a partition not assigned. No request is made;
        ``end_offsets`` asks the leader."""
        tp = checked_partition(partition)
        with self._lock:
            return self._fetcher.highwaters.get(tp) if tp in self._positions.offsets else None

    # ---- metadata ----------------------------------------------------------------------------

    def topics(self, *, timeout_ms: int | None = None) -> set[str]:
        """The names of the topics this client may see, but the internal ones, from metadata
        fetched now (kafka-python's ``topics()``)."""
        return set(topic_names(self.connections, self.connections.deadline(timeout_ms)))

    def partitions_for_topic(self, topic: str, *, timeout_ms: int | None = None) -> set[int] | None:
        """The topic's partition ids, from metadata fetched now; None for a topic that does
        not exist (kafka-python's ``partitions_for_topic``)."""
        if type(topic) is not str or not topic:
            raise ConfigurationError(f"a topic name is a non-empty str, got {topic!r:.80}")
        info = fresh_topics(self.connections, self.connections.deadline(timeout_ms)).get(topic)
        return None if info is None else set(range(len(info.partitions)))

    def metrics(self) -> dict[str, dict[str, float | int | str]]:
        """The consumer's figures now, grouped as kafka-python's ``metrics()`` gives them
        ({group: {name: value}}): records handed out (records-consumed-total), partitions
        assigned, paused and with fetched records waiting; and the connections' own."""
        with self._lock:
            consumer: dict[str, float | int | str] = {
                "records-consumed-total": self._consumed,
                "assigned-partitions": len(self._positions.offsets),
                "paused-partitions": len(self._positions.paused),
                "buffered-partitions": len(self._fetcher.buffer),
            }
        return {"consumer-metrics": consumer, "client-metrics": self.connections.metrics()}

    # ---- offset lookups ----------------------------------------------------------------------

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset at or after each timestamp; None when no record matches."""
        if not isinstance(timestamps, Mapping):
            raise ConfigurationError(
                f"offsets_for_times() takes a mapping of TopicPartition to timestamp, got "
                f"{timestamps!r:.80}"
            )
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ConfigurationError(f"{tp}: a timestamp is an int >= 0 (ms), got {ts!r:.80}")
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
        wanted = checked_partitions(partitions, "beginning_offsets" if spec == EARLIEST_TIMESTAMP
                                    else "end_offsets")
        found = list_offsets(self.connections, dict.fromkeys(wanted, spec),
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
            self._commits.run_callbacks()
            chosen = self._commits.consumed() if offsets is None else checked_offsets(offsets)
            deadline = self.connections.deadline(timeout_ms)
            self.connections.run(self.connections.coordinators.commit(
                group_id, chosen, deadline, member=self._group.member()
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
            self._commits.run_callbacks()
            chosen = self._commits.consumed() if offsets is None else checked_offsets(offsets)
            return self._commits.commit_async(group_id, chosen, callback, self._group.member)

    def committed(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (assigned or not), read from the
        coordinator; None for a partition the group has not committed."""
        wanted = checked_partitions(partitions, "committed")
        with self._lock:
            group_id = self._group_id()
            self._commits.run_callbacks()
            deadline = self.connections.deadline(timeout_ms)
            found = self.connections.run(self.connections.coordinators.fetch(
                group_id, wanted, deadline, require_stable=self._positions.require_stable,
                member=self._group.joined_member(),
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
                if self._group.membership is not None:  # commits what it owns, then leaves
                    if not autocommit:
                        self._commits.auto_commit = False
                    self._group.leave()
                if self._commits.auto_commit and autocommit:
                    try:
                        self.connections.run(self.connections.coordinators.commit(
                            self.config.group_id or "", self._commits.consumed(), deadline
                        ))
                    except TidelogError as exc:
                        log.warning("the commit of the positions on close failed: %s", exc)
                concurrent.futures.wait(self._commits.in_flight, timeout=deadline.remaining())
                self._commits.run_callbacks()
            finally:
                self._fetcher.close()
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

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> PolledRecords:
        """Records from the assigned partitions' positions, at most `max_records` (default
        max_poll_records); none when none arrived within `timeout_ms` (paused partitions give
        none). The answer is a list of records in the order read, which also answers as
        kafka-python's ``{TopicPartition: [records]}`` does (``items()``, ``keys()``,
        ``values()``, ``answer[tp]``; `PolledRecords`). With nothing assigned or subscribed it
        raises IllegalStateError. Only non-retriable errors raise (naming the partition), among
        them CorruptRecordError for a batch that cannot be read: records before it come first,
        and the position stays on it until the application seeks past it."""
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int | float) or not (
            timeout_ms >= 0
        ):
            raise ConfigurationError(f"poll(): timeout_ms is a number >= 0, got {timeout_ms!r:.80}")
        if max_records is None:
            max_records = self.config.max_poll_records
        elif isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise ConfigurationError(
                f"poll(): max_records is an int >= 1 or None, got {max_records!r:.80}"
            )
        return PolledRecords(self._poll(timeout_ms, max_records))

    def _poll(self, timeout_ms: float, max_records: int) -> list[ConsumerRecord]:
        records = self._fetch(timeout_ms, max_records)
        self._consumed += len(records)
        key, value = self.config.key_deserializer, self.config.value_deserializer
        if records and (key is not None or value is not None):
            records = [
                r._replace(key=r.key if key is None else key(r.key),
                           value=r.value if value is None else value(r.value))
                for r in records
            ]
        return records

    def _fetch(self, timeout_ms: float, max_records: int) -> list[ConsumerRecord]:
        deadline = Deadline(timeout_ms)
        fetcher = self._fetcher
        with self._lock:
            self._check_open()
            #: Whether this poll sent a round of its own (it then waits for that round's
            #: answer, as a poll with nothing in flight always did).
            sent = False
            while True:
                self._commits.run_callbacks()
                self._group.reconcile()
                self._commits.maybe_auto_commit(self._group.member)
                self._fetcher.raise_corrupt()
                if self._group.membership is None and not self._positions.offsets:
                    raise IllegalStateError(
                        "poll() needs partitions to read: assign() or subscribe() first"
                    )
                collected, failed_leaders = fetcher.collect()
                records = fetcher.drain(max_records)
                if records:
                    fetcher.send_round(self.config.fetch_max_wait_ms)  # the next, in flight
                    return records
                if failed_leaders is not None:
                    fetcher.await_leaders(failed_leaders, deadline)
                elif collected:
                    fetcher.failed_rounds = 0
                if sent and deadline.expired:
                    return []
                if fetcher.idle():
                    # Nothing assigned by the group yet, or every partition paused: wait for
                    # the membership (or out the timeout), not for a Fetch.
                    membership = self._group.membership
                    if membership is not None:
                        membership.changed.wait(min(deadline.remaining(), 0.1))
                    else:
                        time.sleep(deadline.remaining())
                    if deadline.expired:
                        return []
                    continue
                try:
                    self._positions.resolve(self.connections.deadline(), self._group.joined_member)
                except (RetriableError, StaleMemberEpochError, UnknownMemberIdError):
                    # The last two: the member's epoch moved (or it was fenced) while its
                    # OffsetFetch was under way; the heartbeat brings the news, the next
                    # round fetches again with it.
                    fetcher.await_leaders({}, deadline)
                    if deadline.expired:
                        return []
                    continue
                wait_ms = min(self.config.fetch_max_wait_ms, int(deadline.remaining() * 1000))
                if fetcher.send_round(wait_ms):
                    sent = True  # bounded by its own long-poll wait: waited for whole
                    timeout: float | None = None
                elif deadline.expired:
                    return []
                else:
                    timeout = deadline.remaining()
                concurrent.futures.wait(
                    [rnd.future for rnd in fetcher.rounds], timeout,
                    concurrent.futures.FIRST_COMPLETED,
                )
