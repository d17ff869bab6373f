"""The group coordinator's state machine: the committed offsets of one `__consumer_offsets`
partition, and the records that change them.

Contract §8: a group's offsets are records of the group's partition of the compacted
`__consumer_offsets` topic, one record per (group, topic, partition) (`offsets_records`). The
leader of that partition replays it into an `OffsetTable` and serves OffsetFetch from the table;
an OffsetCommit becomes records that the leader appends, and the table takes them only when they
come back committed (`apply`). So a failed append changes nothing, and what a fetch returns was
committed in the replicated log.

Deterministic, like the Raft core and the controller: no I/O, no clock (callers pass `now_ms`),
no threads, no event loop. The node's driver feeds committed batches to `apply` and appends what
the `plan_*` methods return; planning never touches the table.

Atomicity (contract §8.5): every record of one commit request carries the same
commit id and the number of records in the set, and the set is appended as one batch. On replay
a set changes the table only when all its records are there, together and in a row; a set found
short is ignored, and `finish_loading` returns records that write the previous values of its keys
again at the end of the log, so the cleaner, which keeps only a key's newest record, does not
remove the last good value in favour of part of a set. A batch with fewer records than offsets
was compacted: its missing records were replaced by newer values and cleaned, not lost, so its
sets are applied as they stand.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from tidelog.coordinator import consumer_group_records
from tidelog.coordinator.consumer_groups import ConsumerGroupConfig, ConsumerGroups
from tidelog.coordinator.offset_table import CommittedOffset, OffsetTable
from tidelog.coordinator.offsets_records import (
    MAX_KEY_STRING_BYTES,
    OffsetKey,
    OffsetRecordError,
    OffsetValue,
    decode_key,
    decode_value,
    encode_commit_records,
    encode_key,
    encode_value,
)
from tidelog.coordinator.record_codec import checked_records, new_batches
from tidelog.coordinator.txn_offsets import PendingTxnOffsets
from tidelog.errors import (
    CorruptMessageError,
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidRequestError,
    OffsetMetadataTooLargeError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.records import (
    NO_TIMESTAMP,
    BatchHeader,
    ControlType,
    RecordInput,
    build_batch_of,
    control_type_of,
    crc_matches,
    decode_records,
    read_header,
)
from tidelog.types import TopicPartition

log = logging.getLogger(__name__)

_GROUP_RECORD_TYPES = consumer_group_records.RECORD_TYPES
#: The leader epoch of an offset committed without one.
NO_LEADER_EPOCH = -1
_INT32_MAX = 0x7FFF_FFFF
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class OffsetsConfig:
    """The node options the state machine decides with (Kafka's names and defaults)."""

    #: offset.metadata.max.bytes; counted, as Kafka does, in Java chars (UTF-16 code units).
    metadata_max_bytes: int = 4096
    #: offsets.retention.minutes, in ms.
    retention_ms: int = 7 * 24 * 3600 * 1000


#: One partition of a commit request: (topic, partition, offset, leader epoch (-1 when
#: unknown), metadata), as the handler reads it off the request and the commit set keeps it.
CommitEntry = tuple[str, int, int, int, str]


@dataclass(frozen=True, slots=True)
class CommitSet:
    """A planned commit set: what `apply` would decode from its records, and what encodes them
    (a `tidelog.records.RecordSource`). The node's group commit encodes a round's sets straight
    into its batch (no `RecordInput` per record), and the leader keeps them beside its append
    (`PlannedBatch`) so that applying its own commits costs no decoding."""

    group: str
    commit_timestamp_ms: int
    #: The entry of each record, in record order.
    entries: list[CommitEntry]
    commit_id: int

    @property
    def records_count(self) -> int:
        return len(self.entries)

    @property
    def first_timestamp(self) -> int:
        return self.commit_timestamp_ms  # every record of the set has the commit's time

    def encode_into(self, out: list[bytes], first_delta: int, first_timestamp: int) -> int:
        encode_commit_records(
            out, self.group, self.entries, self.commit_timestamp_ms, self.commit_id,
            first_delta, self.commit_timestamp_ms - first_timestamp,
        )
        return self.commit_timestamp_ms


class CommitPlan(NamedTuple):
    """What a commit request becomes: the commit set to append as ONE batch (None when nothing
    is to be written) and the partitions answered with an error instead."""

    refused: dict[TopicPartition, TidelogError]
    commit_set: CommitSet | None = None

    @property
    def records(self) -> list[RecordInput]:
        """The set's records as `RecordInput`s, read back from the batch it encodes to (for a
        caller that wants them one by one; the node appends the set itself)."""
        if self.commit_set is None:
            return []
        batch, _ = build_batch_of([self.commit_set])
        return [RecordInput(r.value, r.key, r.timestamp)
                for r in decode_records(batch, 0, read_header(batch))]


class PlannedBatch(NamedTuple):
    """A batch this leader built from planned sets and appended (`apply`'s `planned`)."""

    leader_epoch: int
    records_count: int
    sets: list[CommitSet]


def java_length(text: str) -> int:
    """`String.length()` of `text` in Java: UTF-16 code units, two for a character beyond the
    BMP (Kafka limits metadata so, not in bytes)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class GroupCoordinatorState:
    """The state of ONE `__consumer_offsets` partition, kept by its leader."""

    def __init__(
        self, config: OffsetsConfig, groups_config: ConsumerGroupConfig | None = None
    ) -> None:
        self.config = config
        self.table = OffsetTable()
        #: The consumer groups (KIP-848) whose records share this partition with the offsets.
        self.consumer_groups = ConsumerGroups(groups_config or ConsumerGroupConfig())
        #: The last log offset applied; -1 before any.
        self.applied_offset = -1
        #: Past every commit id planned here or seen in the log. Sets are told apart inside a
        #: batch, where one leader's ids increase; continuing past the log's highest keeps them
        #: increasing across leaders. An id whose records were all cleaned away may come again,
        #: which is harmless: a set never spans batches.
        self._next_commit_id = 0
        #: Keys whose newest record in the log was not applied (part of an incomplete set, or
        #: an undecodable value), in the order found: their current value is written again.
        self._unapplied: dict[OffsetKey, None] = {}
        #: Offsets of TxnOffsetCommit waiting for their transaction's marker.
        self.txn_offsets = PendingTxnOffsets()

    # -- committed records (load and steady state) --------------------------------------------

    def apply(
        self, data: bytes | memoryview, planned: dict[int, PlannedBatch] | None = None
    ) -> None:
        """Apply committed record batches of the partition, in log order. Batches at or below
        `applied_offset` were applied already and are skipped. Nothing in `data` can make this
        raise: a damaged batch or record is logged and skipped.

        `planned`: the batches this leader appended from planned sets, by base offset (taken
        out as they are applied). Such a batch is applied from its sets, not decoded (7-12 us a
        record less, most of what a commit cost the coordinator): the leader wrote those very
        bytes in its epoch, where nothing can replace them; the batch's leader epoch and record
        count are still checked against the plan, and a batch that does not match is decoded.
        Followers and a new leader's replay decode everything."""
        for pos, header in new_batches(data, self.applied_offset, "offsets"):
            mine = planned.pop(header.base_offset, None) if planned else None
            if (
                mine is not None
                and mine.leader_epoch == header.partition_leader_epoch
                and mine.records_count == header.records_count
                and not (header.is_control or header.is_transactional)
            ):
                self._apply_sets(mine.sets)
            else:
                self._apply_batch(data, pos, header)
            self.applied_offset = header.last_offset

    def _apply_sets(self, sets: list[CommitSet]) -> None:
        put_many = self.table.put_many
        for commit_set in sets:
            group, entries = commit_set.group, commit_set.entries
            put_many(group, entries, commit_set.commit_timestamp_ms)
            if self._unapplied or self.txn_offsets:
                keys = [OffsetKey(group, topic, partition) for topic, partition, *_ in entries]
                for key in keys:
                    self._unapplied.pop(key, None)
                if self.txn_offsets:
                    self.txn_offsets.outranked(keys)

    def _apply_batch(self, data: bytes | memoryview, pos: int, header: BatchHeader) -> None:
        if header.is_transactional:
            self._apply_transactional(data, pos, header)
            return
        if header.is_control:
            return  # a leader-change marker: no offsets
        where = f"offsets batch {header.base_offset}-{header.last_offset}"
        records = checked_records(data, pos, header, where)
        if records is None:
            return
        compacted = header.records_count < header.last_offset_delta + 1
        # The set being read: its records so far, its commit id and size. A set's records are
        # consecutive, so another id, a tombstone or the batch's end closes it.
        open_set: list[tuple[OffsetKey, OffsetValue]] = []
        set_id = set_size = -1
        for record in records:
            if record.key is None:
                log.warning("offsets record %d skipped: it has no key", record.offset)
                continue
            if consumer_group_records.record_type_of(record.key) in _GROUP_RECORD_TYPES:
                # Written in batches of their own, so never inside a commit set.
                try:
                    self.consumer_groups.apply_record(record.key, record.value)
                except consumer_group_records.GroupRecordError as exc:
                    log.warning("consumer group record %d skipped: %s", record.offset, exc)
                continue
            try:
                key = decode_key(record.key)
            except OffsetRecordError as exc:
                log.warning("offsets record %d skipped: bad key: %s", record.offset, exc)
                continue
            if record.value is None:
                self._close_set(open_set, compacted)
                open_set = []
                self.table.remove(key.group, key.topic, key.partition)
                self._unapplied.pop(key, None)
                self.txn_offsets.discard(key)
                continue
            try:
                value = decode_value(record.value)
            except OffsetRecordError as exc:
                log.warning("offsets record %d skipped: bad value: %s", record.offset, exc)
                self._close_set(open_set, compacted)
                open_set = []
                self._unapplied[key] = None
                continue
            if value.commit_id >= self._next_commit_id:
                self._next_commit_id = value.commit_id + 1
            if open_set and (value.commit_id != set_id or value.commit_size != set_size):
                self._close_set(open_set, compacted)
                open_set = []
            if not open_set:
                set_id, set_size = value.commit_id, value.commit_size
            open_set.append((key, value))
            if len(open_set) == set_size:
                self._put_plain(open_set)
                open_set = []
        self._close_set(open_set, compacted)

    def _apply_transactional(
        self, data: bytes | memoryview, pos: int, header: BatchHeader
    ) -> None:
        """A TxnOffsetCommit's batch parks its offsets under its producer id; the producer's
        COMMIT marker applies them, its ABORT drops them (`txn_offsets`)."""
        where = f"transactional offsets batch {header.base_offset}-{header.last_offset}"
        try:
            if not crc_matches(data, pos, header):
                raise CorruptMessageError("CRC mismatch")
            if header.is_control:
                control_type = control_type_of(data, pos, header)
                if control_type in (ControlType.COMMIT, ControlType.ABORT):
                    committed = self.txn_offsets.end(
                        header.producer_id, control_type == ControlType.COMMIT
                    )
                    if committed:
                        self._put_all(committed)
                return
            records = decode_records(data, pos, header)
        except TidelogError as exc:
            log.warning("%s skipped: %s", where, exc)
            return
        entries = []
        for record in records:
            try:
                if record.key is None or record.value is None:
                    raise OffsetRecordError("no key or no value")
                entries.append((decode_key(record.key), decode_value(record.value),
                                record.offset))
            except OffsetRecordError as exc:
                log.warning("transactional offsets record %d skipped: %s", record.offset, exc)
        self.txn_offsets.park(header.producer_id, entries)

    def _close_set(self, entries: list[tuple[OffsetKey, OffsetValue]], compacted: bool) -> None:
        """A set ended before all its records came: the records it lacks were cleaned if its
        batch was compacted, else they never made it to the log and the set is ignored."""
        if not entries:
            return
        if compacted:
            self._put_plain(entries)
            return
        commit_id, size = entries[0][1].commit_id, entries[0][1].commit_size
        log.warning(
            "offsets commit set %d is incomplete (%d of %d records): ignored, its keys' "
            "previous values are to be written again", commit_id, len(entries), size,
        )
        for key, _ in entries:
            self._unapplied[key] = None

    def _put_plain(self, entries: list[tuple[OffsetKey, OffsetValue]]) -> None:
        """A plain commit set (no transaction's): it outranks the parked transactional
        offsets of its keys, all from earlier in the log (kafka-mapping §8.5)."""
        self._put_all(entries)
        if self.txn_offsets:
            self.txn_offsets.outranked([key for key, _ in entries])

    def _put_all(self, entries: list[tuple[OffsetKey, OffsetValue]]) -> None:
        put = self.table.put
        for key, value in entries:
            put(
                key.group,
                key.topic,
                key.partition,
                CommittedOffset(value.offset, value.leader_epoch, value.metadata),
                value.commit_timestamp_ms,
            )
        if self._unapplied:
            for key, _ in entries:
                self._unapplied.pop(key, None)

    def finish_loading(self, now_ms: int) -> list[RecordInput]:
        """Records to append once the partition is replayed: the current values of the keys
        whose newest record was not applied, as one commit set, and tombstones for those of
        them with no value (so that part of a set never outlives compaction); append them as
        one batch. Empty when there is nothing to repair. It plans only: the keys stay due
        until the records come back committed, so after a failed append it returns them again."""
        self.consumer_groups.start_timers(now_ms)
        keys = list(self._unapplied)
        if not keys:
            return []
        present: list[tuple[OffsetKey, CommittedOffset]] = []
        absent: list[OffsetKey] = []
        for key in keys:
            current = self.table.get(key.group, key.topic, key.partition)
            if current is None:
                absent.append(key)
            else:
                present.append((key, current))
        records: list[RecordInput] = []
        if present:
            commit_id = self._take_commit_id()
            for key, current in present:
                # The group's newest commit time: a repair is no commit of the group's, so it
                # must not put its offsets' expiration off.
                last_commit_ms = self.table.last_commit_ms(key.group)
                value = OffsetValue(
                    current.offset,
                    current.leader_epoch,
                    current.metadata,
                    now_ms if last_commit_ms is None else last_commit_ms,
                    commit_id,
                    len(present),
                )
                records.append(RecordInput(encode_value(value), encode_key(key), now_ms))
        # After the set: a tombstone ends a set, so none may sit among its records.
        records.extend(_tombstone(key, now_ms) for key in absent)
        return records

    # -- decisions (leader only) ----------------------------------------------------------------

    def plan_commit(
        self, group: str, offsets: Iterable[CommitEntry], now_ms: int
    ) -> CommitPlan:
        """The commit set of one OffsetCommit request, from its (topic, partition, offset,
        leader epoch, metadata) each: every accepted partition, under one new commit id. A
        partition whose metadata is longer than `metadata_max_bytes` Java chars is refused with
        OFFSET_METADATA_TOO_LARGE while the others commit (Kafka's
        `OffsetMetadataManager.commitOffset`).

        Negative offsets are stored as given, as Kafka's coordinator does: it checks only the
        metadata length (group-coordinator/src/main/java/org/apache/kafka/coordinator/group/
        OffsetMetadataManager.java, commitOffset); refusing them is the Java client's job
        (`OffsetAndMetadata`: "Invalid negative offset"). A negative leader epoch is stored as
        -1 (unknown), the one negative epoch a record may hold. An offset or epoch no record
        field holds (beyond int64, int32: not from the wire) is INVALID_REQUEST.

        Plain tuples in and out, no object per partition: this is the commit path's per-record
        loop, and the entries it accepts are the commit set's as they stand.
        """
        refused: dict[TopicPartition, TidelogError] = {}
        entries: list[CommitEntry] = []
        group_bytes = len(group.encode())
        limit = self.config.metadata_max_bytes
        topic_fits: dict[str, bool] = {}
        for entry in offsets:
            topic, partition, offset, leader_epoch, metadata = entry
            fits = topic_fits.get(topic)
            if fits is None:
                fits = topic_fits[topic] = len(topic.encode()) <= MAX_KEY_STRING_BYTES
            if (
                fits and 0 <= partition <= _INT32_MAX and group_bytes <= MAX_KEY_STRING_BYTES
                and -1 <= leader_epoch <= _INT32_MAX and _INT64_MIN <= offset <= _INT64_MAX
                and not metadata
            ):
                entries.append(entry)  # the common entry, as it stands
                continue
            tp = TopicPartition(topic, partition)
            if group_bytes > MAX_KEY_STRING_BYTES:
                refused[tp] = InvalidGroupIdError(
                    f"group id is {group_bytes} bytes of UTF-8, the limit is {MAX_KEY_STRING_BYTES}"
                )
            elif not (fits and 0 <= partition <= _INT32_MAX):
                refused[tp] = UnknownTopicOrPartitionError(f"no partition {tp}")
            elif not (_INT64_MIN <= offset <= _INT64_MAX and leader_epoch <= _INT32_MAX):
                refused[tp] = InvalidRequestError(
                    f"offset {offset} or leader epoch {leader_epoch} of {tp} out of range"
                )
            elif (
                2 * len(metadata) > limit  # a Java char per code point, two beyond the BMP
                and (length := java_length(metadata)) > limit
            ):
                refused[tp] = OffsetMetadataTooLargeError(
                    f"metadata of {tp} is {length} characters long, the limit is {limit}"
                )
            else:
                entries.append((topic, partition, offset, max(leader_epoch, NO_LEADER_EPOCH),
                                metadata))
        if not entries:
            return CommitPlan(refused)
        return CommitPlan(refused, CommitSet(group, now_ms, entries, self._take_commit_id()))

    def _take_commit_id(self) -> int:
        commit_id = self._next_commit_id
        self._next_commit_id += 1
        return commit_id

    def fetch(
        self, group: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """The committed offsets of `group`: None for a partition with none (the node answers
        -1 and no error, as Kafka); `partitions` None means every partition it has one for."""
        if partitions is None:
            return {
                TopicPartition(topic, partition): value
                for topic, partition, value in self.table.group_offsets(group)
            }
        return {tp: self.table.get(group, tp.topic, tp.partition) for tp in partitions}

    def plan_offset_delete(
        self, group: str, partitions: Iterable[TopicPartition], *, now_ms: int = NO_TIMESTAMP
    ) -> list[RecordInput]:
        """Tombstones for those of `partitions` that have a committed offset (OffsetDelete).

        A tombstone belongs to no commit set: tombstones may go in any number of batches."""
        return [
            _tombstone(OffsetKey(group, tp.topic, tp.partition), now_ms)
            for tp in dict.fromkeys(partitions)
            if self.table.get(group, tp.topic, tp.partition) is not None
        ]

    def plan_delete_groups(
        self, groups: Iterable[str], *, now_ms: int = NO_TIMESTAMP
    ) -> tuple[list[RecordInput], dict[str, TidelogError]]:
        """Tombstones for every offset of each group and for an empty consumer group's records;
        NON_EMPTY_GROUP for a consumer group with members, GROUP_ID_NOT_FOUND for a group with
        neither offsets nor consumer-group records."""
        records: list[RecordInput] = []
        errors: dict[str, TidelogError] = {}
        for group in dict.fromkeys(groups):
            try:
                group_records = self.consumer_groups.plan_delete(group, now_ms)
            except TidelogError as exc:
                errors[group] = exc
                continue
            tombstones = self._group_tombstones(group, now_ms)
            if tombstones or group_records is not None:
                records += tombstones + (group_records or [])
            else:
                errors[group] = GroupIdNotFoundError(f"group {group!r} has no committed offsets")
        return records, errors

    def plan_expiration(self, now_ms: int) -> list[RecordInput]:
        """Tombstones for every offset of each group whose newest commit is at least
        `retention_ms` old: Kafka's rule for a simple group (no members), whose expiration base
        is the commit time (kafka-mapping §7.8), taken per group as the table keeps it; a
        consumer group's offsets do not expire while it has members."""
        return [record for step in self.expiration_steps(now_ms, len(self.table) + 1)
                for record in step]

    def expiration_steps(self, now_ms: int, groups_per_step: int) -> Iterator[list[RecordInput]]:
        """`plan_expiration` in steps that each look at `groups_per_step` groups: the
        tombstones of each step, for a caller that lets others run between steps (at 10^6
        groups the whole scan is seconds of Python). The table may change between steps."""
        cutoff_ms = now_ms - self.config.retention_ms
        cursor = 0
        while True:
            groups, cursor = self.table.groups_committed_by(cutoff_ms, cursor, groups_per_step)
            yield [record for group in groups if not self._has_members(group)
                   for record in self._group_tombstones(group, now_ms)]
            if cursor == 0:
                return

    def _has_members(self, group: str) -> bool:
        """A consumer group with members keeps its offsets however old (Kafka expires a
        group's offsets only once it is empty)."""
        consumer_group = self.consumer_groups.groups.get(group)
        return consumer_group is not None and bool(consumer_group.members)

    def _group_tombstones(self, group: str, now_ms: int) -> list[RecordInput]:
        """A partition whose transactional offsets await their marker does not expire (Kafka's
        offset expiry skips it: its commit is about to be replaced)."""
        pending = self.txn_offsets.partitions(group)
        return [
            _tombstone(OffsetKey(group, topic, partition), now_ms)
            for topic, partition, _ in self.table.group_offsets(group)
            if (topic, partition) not in pending
        ]

    def groups(self) -> list[str]:
        """The groups with at least one committed offset, and the consumer groups."""
        return sorted(set(self.table.groups()) | set(self.consumer_groups.groups))


def _tombstone(key: OffsetKey, now_ms: int) -> RecordInput:
    return RecordInput(None, encode_key(key), now_ms)
