"""A partition's log: segments, offsets, lookups, retention and durability (Kafka's UnifiedLog).

Offsets (contract §1): ``log_start_offset <= high_watermark <= log_end_offset``, and the
``recovery_point`` (everything below it is fsynced) never passes the log end offset.

The append path stays on bytes: a leader append is ``validate_produced_batch`` (one pass over
every record's framing, no object per record), ``stamp`` (patch base offset and epoch in place),
one positional write, and a few integer comparisons for the indexes. A replicated leader runs
the same three steps at three times: it validates on the request's path, its Raft core stamps
when it assigns offsets, and its writer thread writes the stamped batch with ``append_stamped``;
``append_as_leader`` is the three at once, for a log without replication. Batches received from
another node go through ``append_as_follower``, which checks their CRCs first. Nothing fsyncs
except ``flush()``, so the caller (the node's writer thread) decides when to pay for durability,
once for many appends.

A lock serialises every public method: the writer thread appends while the event loop reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from tidelog.errors import (
    CorruptMessageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnsupportedVersionError,
)
from tidelog.records import (
    ATTR_COMPRESSION,
    MAX_BATCH_BYTES,
    NO_TIMESTAMP,
    BatchHeader,
    TimestampType,
    assign_offsets,
    check_crc,
    control_record_of,
    iter_batches,
    read_header,
    validate_batch,
    with_codec,
)
from tidelog.storage.checkpoint import DATA_DIR_MODE, DATA_FILE_MODE, fsync_dir
from tidelog.storage.config import LONG_MAX, LogConfig
from tidelog.storage.epoch import LeaderEpochFileCache
from tidelog.storage.errors import OffsetsOutOfOrderError, UnexpectedAppendOffsetError
from tidelog.storage.index import AbortedTxn
from tidelog.storage.loader import (
    CLEAN_SHUTDOWN_FILE,
    DURABLE_END,
    DURABLE_END_EPOCH,
    HIGH_WATERMARK,
    LOG_START_OFFSET,
    RECOVERY_POINT,
    LogLoader,
    last_modified_checkpoint,
    offsets_checkpoint,
)
from tidelog.storage.producer_state import (
    ProducerStateManager,
    delete_snapshots,
    snapshot_offsets,
    snapshot_path,
    write_snapshot,
)
from tidelog.storage.segment import SWAP_SUFFIX, LogSegment, TimestampAndOffset
from tidelog.storage.segments import LogSegments
from tidelog.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

log = logging.getLogger(__name__)

Clock = Callable[[], int]


class LogAppendInfo(NamedTuple):
    """What a produce response reports: the offsets given, the append time (-1 with
    CreateTime) and the log start offset."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int


class SegmentPosition(NamedTuple):
    """Where the batch holding an offset is: its segment and its byte position there."""

    segment_base_offset: int
    batch_base_offset: int
    position: int


class Log:
    """One partition's log in one directory. Open it with ``Log.open``."""

    def __init__(self, directory: Path, config: LogConfig, clock: Clock) -> None:
        self.directory = directory
        self._config = config
        self._clock = clock
        self._lock = threading.RLock()
        loaded = LogLoader(directory, config, clock()).load()
        self._segments: LogSegments = loaded.segments
        self._log_start_offset = loaded.log_start_offset
        self._log_end_offset = loaded.log_end_offset
        self._recovery_point = loaded.recovery_point
        self._high_watermark = loaded.high_watermark
        self.leader_epoch_cache: LeaderEpochFileCache = loaded.epoch_cache
        self._repair_floor = loaded.repair_floor
        self._dir_dirty = False
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._closed = False
        #: Every producer's state as of the log end (`storage.producer_state`).
        self.producer_state = self._load_producer_state()

    @classmethod
    def open(
        cls, directory: Path, config: LogConfig | None = None, *, clock: Clock
    ) -> Log:
        """Open (creating if needed) and recover the log in `directory`. The log has no clock
        of its own (`clock` gives milliseconds since the epoch): the simulator runs it on
        virtual time, the node on the wall clock."""
        if not directory.exists():
            directory.mkdir(mode=DATA_DIR_MODE, parents=True)
            fsync_dir(directory.parent)
        return cls(directory, config or LogConfig(), clock)

    # ------------------------------------------------------------------------------------------
    # State

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A topic's configs changed; they apply from the next append or retention pass."""
        with self._lock:
            self._config = config
            for segment in self._segments:
                segment.config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def repair_floor(self) -> tuple[int, int] | None:
        """(epoch, end offset) this log durably held before storage lost part of it, while
        its durable part has not reached that again; None for an intact log. It survives
        restarts (checkpointed) until a flush passes it."""
        return self._repair_floor

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def size(self) -> int:
        """Bytes in all segments (what retention.bytes limits)."""
        with self._lock:
            return sum(segment.size for segment in self._segments)

    # ------------------------------------------------------------------------------------------
    # Appending

    def append_as_leader(self, batch: bytes, leader_epoch: int) -> LogAppendInfo:
        """Validate one produced batch, give it the next offsets and `leader_epoch`, write it.

        A control batch (epoch or transaction marker written by the node itself) is appended
        as is: it keeps its -1 timestamp, even under LogAppendTime. This is the node's own
        append, so the producer-only rules are not applied; a client's batch reaches the log
        through the node's propose path, which validates it with `from_client=True`.
        """
        with self._lock:
            self._check_open()
            batch, _ = self.validate_produced_batch(batch, from_client=False)
            data = self.stamp(batch, self._log_end_offset, leader_epoch)
            header = read_header(data)
            now = self._clock()
            self._append(data, header, now)
            self._maybe_flush(now)
            return LogAppendInfo(
                header.base_offset,
                header.last_offset,
                header.max_timestamp if self._takes_append_time(data) else NO_TIMESTAMP,
                self._log_start_offset,
            )

    def stamp(self, batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
        """The leader's stamp on a validated batch: its offsets from `base_offset`, the leader
        epoch, and under LogAppendTime the broker's time (control batches keep -1).

        Takes no lock: a replicated leader stamps on its event loop, which must not wait for
        the writer thread's fsync."""
        append_time = self._clock() if self._takes_append_time(batch) else None
        return assign_offsets(batch, base_offset, leader_epoch, append_time)

    def _takes_append_time(self, batch: bytes) -> bool:
        """Under LogAppendTime a batch takes the broker's time; a control batch keeps its -1.
        The header is parsed only for such topics: CreateTime is the produce hot path."""
        return (
            self._config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
            and not read_header(batch).is_control
        )

    def validate_produced_batch(
        self, batch: bytes, *, from_client: bool
    ) -> tuple[bytes, BatchHeader]:
        """The leader's checks of a produced batch under this topic's config; nothing is written.
        Returns the batch to write and its header: the batch itself, or, when the topic's
        compression.type names a codec other than the batch's, the batch recompressed with it
        (`with_codec`; `producer`, the default, keeps the producer's codec and bytes).

        Refused: a batch over max.message.bytes or over records.MAX_BATCH_BYTES
        (MESSAGE_TOO_LARGE, as Kafka's RecordTooLargeException), one larger than a segment
        (RECORD_LIST_TOO_LARGE), a malformed one or a CRC mismatch (CORRUPT_MESSAGE), and with
        CreateTime a record timestamp outside the topic's allowed distance from now
        (INVALID_TIMESTAMP), and in a compacted topic a record without a key (INVALID_RECORD,
        as Kafka's LogValidator.validateKey, which no producer retries): the cleaner could
        never tell which value it replaces. With `from_client`, what only a producer may not
        write as well (`validate_batch`). A replicated leader calls this before proposing,
        then `stamp` and `append_stamped`.
        """
        self._check_size(len(batch), check_max_message_bytes=True)
        config = self._config
        log_append_time = config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
        header = validate_batch(
            batch,
            now_ms=self._clock(),
            timestamp_before_max_ms=LONG_MAX
            if log_append_time
            else config.message_timestamp_before_max_ms,
            timestamp_after_max_ms=LONG_MAX
            if log_append_time
            else config.message_timestamp_after_max_ms,
            from_client=from_client,
            require_keys=config.compact_enabled,
        )
        codec = config.codec
        if codec is None or header.is_control or header.attributes & ATTR_COMPRESSION == codec:
            return batch, header
        converted = with_codec(batch, codec)
        self._check_size(len(converted), check_max_message_bytes=True)
        return converted, read_header(converted)

    def append_as_follower(self, batches: bytes | memoryview) -> LogAppendInfo:
        """Append the leader's batches as they are (offsets, epochs, timestamps included).

        The whole set is checked before anything is written: each batch must parse and match
        its CRC, offsets must strictly increase, and the first batch must not start below the
        log end offset (the caller truncates first when the logs diverged). A gap above the
        log end offset is allowed, as a compacted leader's log has gaps.
        """
        return self._append_batches(batches, verify=True)

    def append_stamped(self, batches: bytes | memoryview) -> LogAppendInfo:
        """Append batches this node's leader validated (`validate_produced_batch`) or built
        itself (its markers), then stamped (`stamp`): their bytes never left this process, so
        their CRCs are not computed again; their offsets are checked as a follower's are."""
        return self._append_batches(batches, verify=False)

    def _append_batches(self, batches: bytes | memoryview, verify: bool) -> LogAppendInfo:
        with self._lock:
            self._check_open()
            now = self._clock()
            parsed: list[tuple[int, BatchHeader]] = []
            next_offset = self._log_end_offset
            for pos, header in iter_batches(batches):
                if verify:
                    check_crc(batches, pos, header)
                    self._check_size(header.size, check_max_message_bytes=False)
                if header.base_offset < next_offset:
                    error = OffsetsOutOfOrderError if parsed else UnexpectedAppendOffsetError
                    raise error(
                        f"batch at offset {header.base_offset} appended where offset "
                        f"{next_offset} or above was expected"
                    )
                parsed.append((pos, header))
                next_offset = header.next_offset
            if not parsed:
                return LogAppendInfo(
                    self._log_end_offset,
                    self._log_end_offset - 1,
                    NO_TIMESTAMP,
                    self._log_start_offset,
                )
            view = memoryview(batches)
            for pos, header in parsed:
                self._append(view[pos : pos + header.size], header, now)
            self._maybe_flush(now)
            return LogAppendInfo(
                parsed[0][1].base_offset,
                parsed[-1][1].last_offset,
                NO_TIMESTAMP,
                self._log_start_offset,
            )

    def _check_size(self, size: int, *, check_max_message_bytes: bool) -> None:
        if check_max_message_bytes and size > self._config.max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes={self._config.max_message_bytes}"
            )
        if check_max_message_bytes and size > MAX_BATCH_BYTES:
            # A topic may allow more; the node-to-node and client messages could not carry it.
            raise MessageTooLargeError(
                f"batch of {size} bytes exceeds the largest batch a node accepts "
                f"({MAX_BATCH_BYTES} bytes), whatever max.message.bytes says"
            )
        if size > self._config.segment_bytes:
            raise RecordListTooLargeError(
                f"batch of {size} bytes exceeds segment.bytes={self._config.segment_bytes}"
            )

    def _append(self, data: bytes | memoryview, header: BatchHeader, now: int) -> None:
        segment = self._segments.active
        if segment.should_roll(len(data), header, now):
            segment = self._roll(max(header.base_offset, self._log_end_offset), now)
        epoch = header.partition_leader_epoch
        if epoch >= 0 and epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(epoch, header.base_offset)
        segment.append(data, header, now)
        # Before the log end moves: a leader copies the state once the log end reaches its
        # core's (PartitionReplica._producer_state), from its loop, without the lock.
        self._update_producer_state(self.producer_state, segment, data, 0, header)
        self._log_end_offset = header.next_offset
        self._unflushed_messages += header.records_count

    def _update_producer_state(
        self,
        state: ProducerStateManager,
        segment: LogSegment,
        buf: bytes | memoryview,
        pos: int,
        header: BatchHeader,
    ) -> None:
        """Apply one batch of `segment` to `state`; a transaction ended by an ABORT marker
        gets its `.txnindex` entry in the marker's segment, unless the entry is there already
        (a scan on open meets markers whose entries were written before)."""
        if not header.is_control:
            state.update(header)
            return
        if not header.is_transactional:
            return  # an epoch marker
        try:
            control_type, coordinator_epoch = control_record_of(buf, pos, header)
        except CorruptMessageError as exc:  # a marker whose record does not parse decides nothing
            log.warning("%s: marker at offset %d skipped: %s", self.directory.name,
                        header.base_offset, exc)
            return
        done = state.update_marker(header, control_type, coordinator_epoch, self._high_watermark)
        if done is None or not done.aborted:
            return
        entries = segment.txn_index.entries
        if entries and entries[-1].last_offset >= done.marker_offset:
            return
        other = state.open_txn_first_offset_besides(done.producer_id)
        segment.txn_index.append(AbortedTxn(
            done.producer_id, done.first_offset, done.marker_offset,
            done.marker_offset + 1 if other is None else other,
        ))

    def _load_producer_state(self) -> ProducerStateManager:
        """The newest valid snapshot at or below the recovery point (what lies below it is on
        disk with its indexes), then the batches after it. Snapshots above the log end are
        stale (recovery cut the log below them) and go; a bad one is logged, removed, and an
        older one tried; with none, the whole log is scanned."""
        end = self._log_end_offset
        offsets = snapshot_offsets(self.directory)
        delete_snapshots(self.directory, [o for o in offsets if o > end])
        state, start = ProducerStateManager(), self._log_start_offset
        for offset in reversed([o for o in offsets if o <= min(end, self._recovery_point)]):
            path = snapshot_path(self.directory, offset)
            try:
                state = ProducerStateManager.decode(path.read_bytes(), offset)
            except (OSError, ValueError) as exc:
                log.warning("%s: ignoring the producer snapshot %s: %s",
                            self.directory.name, path.name, exc)
                path.unlink(missing_ok=True)
                continue
            start = max(offset, self._log_start_offset)
            break
        self._scan_producer_state(state, start)
        return state

    def _scan_producer_state(self, state: ProducerStateManager, start: int) -> None:
        """Apply the batches from `start` to the log end (headers, and the one record of
        each transaction marker)."""
        if start >= self._log_end_offset:
            return
        for segment in list(self._segments)[self._segments.floor_index(start):]:
            for scanned in segment.batches_from(0):
                if scanned.header.last_offset >= start:
                    self._update_producer_state(
                        state, segment, scanned.buffer, scanned.pos, scanned.header
                    )

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest undecided transaction, or the HW (kafka-mapping
        §6.1): what read_committed consumers may read below. Lock-free (the node's loop asks
        it on every read_committed fetch; see ProducerStateManager._open)."""
        return self.producer_state.last_stable_offset(self._high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), from the
        `.txnindex` of the segment holding `fetch_offset` on, until an entry says no later
        segment can hold more (Kafka's LocalLog.collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        with self._lock:
            for segment in list(self._segments)[self._segments.floor_index(fetch_offset):]:
                result = segment.txn_index.collect_aborted_txns(fetch_offset, upper_bound)
                found.extend(result.aborted)
                if result.is_complete or segment.base_offset >= upper_bound:
                    break
        return found

    def _maybe_flush(self, now: int) -> None:
        """flush.messages / flush.ms (off by default: durability is the caller's flush())."""
        if (
            self._unflushed_messages >= self._config.flush_messages
            or now - self._last_flush_ms >= self._config.flush_ms
        ):
            self.flush()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._log_end_offset, self._clock())

    def _roll(self, base_offset: int, now: int) -> LogSegment:
        active = self._segments.active
        if active.size == 0:
            if active.base_offset == base_offset:
                return active
            # Only a follower's batch far above an empty segment gets here (relative offset
            # overflow): the empty segment is replaced rather than left behind.
            self._segments.remove(active)
            active.delete()
        else:
            active.on_become_inactive()
            # Closed segments hold no descriptors; flush() fsyncs them through a fresh one.
            active.close_handles()
            log.info("%s: rolled the segment at %d (%d bytes); the next starts at %d",
                     self.directory.name, active.base_offset, active.size, base_offset)
            write_snapshot(self.directory, self.producer_state, self._log_end_offset)
        segment = LogSegment.create(self.directory, base_offset, self._config, now)
        self._segments.add(segment)
        self._dir_dirty = True
        return segment

    # ------------------------------------------------------------------------------------------
    # Reading

    def read(
        self,
        from_offset: int,
        max_bytes: int,
        upper_bound: int | None = None,
        *,
        min_one_batch: bool = True,
    ) -> bytes:
        """Whole batches (control batches included) from the one holding `from_offset`, each
        entirely below `upper_bound` (default and cap: the log end offset; HW or LSO for
        consumers), up to `max_bytes` — but at least one batch if `min_one_batch`, so that a
        batch larger than the budget can still be fetched (KIP-74).

        The first batch may start before `from_offset`: the reader skips those records.
        OFFSET_OUT_OF_RANGE below the log start offset or above the log end offset.
        """
        with self._lock:
            self._check_open()
            if not self._log_start_offset <= from_offset <= self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {from_offset} is outside [{self._log_start_offset}, "
                    f"{self._log_end_offset}]"
                )
            bound = (
                self._log_end_offset
                if upper_bound is None
                else min(upper_bound, self._log_end_offset)
            )
            parts: list[bytes] = []
            budget = max_bytes
            offset = from_offset
            first = self._segments.floor_index(from_offset)
            for i in range(first, len(self._segments)):
                if offset >= bound:
                    break
                segment = self._segments[i]
                data, stopped = segment.read(offset, budget, bound, min_one_batch and not parts)
                parts.append(data)
                budget -= len(data)
                if stopped or budget <= 0:
                    break
                offset = self._segments.upper_bound(i, self._log_end_offset)
            return b"".join(parts)

    def offset_position(self, offset: int) -> SegmentPosition | None:
        """The batch holding `offset` and where it is; None outside the log."""
        with self._lock:
            if not self._log_start_offset <= offset < self._log_end_offset:
                return None
            first = self._segments.floor_index(offset)
            for i in range(first, len(self._segments)):
                segment = self._segments[i]
                found = segment.translate_offset(max(offset, segment.base_offset))
                if found is not None:
                    return SegmentPosition(
                        segment.base_offset, found.header.base_offset, found.file_position
                    )
            return None

    # ------------------------------------------------------------------------------------------
    # Lookups (kafka-mapping §2.5, §2.6, §3)

    def fetch_offset_by_timestamp(self, target_ms: int) -> TimestampAndOffset | None:
        """The first record at or after the log start offset whose timestamp is >= target:
        its own timestamp, its offset, and the epoch of its batch. Control batches never match.

        Unlike Kafka, a segment without timestamps is skipped rather than matched by its
        last-modified time, and a segment that yields nothing does not end the search: the
        answer is always the one a linear scan gives. The caller applies the HW/LSO bound.
        """
        if target_ms < 0:
            raise ValueError(f"timestamp {target_ms}: special values are resolved by the caller")
        with self._lock:
            start = self._segments.floor_index(self._log_start_offset)
            for segment in self._segments.first_reaching_timestamp(target_ms, start):
                found = segment.find_offset_by_timestamp(target_ms, self._log_start_offset)
                if found is not None:
                    return found
            return None

    def fetch_max_timestamp(self) -> TimestampAndOffset | None:
        """The earliest record with the largest timestamp at or after the log start offset.

        Kafka (§2.5) does not exclude records below the log start offset; Tidelog does, since
        such an offset could not be fetched.
        """
        with self._lock:
            start = self._segments.floor_index(self._log_start_offset)
            candidates = list(self._segments)[start:]
            best: TimestampAndOffset | None = None
            if self._log_start_offset > candidates[0].base_offset:
                best = candidates[0].max_timestamp_and_offset(self._log_start_offset)
                candidates = candidates[1:]
            best_ts = NO_TIMESTAMP if best is None else best.timestamp
            winner: LogSegment | None = None
            for segment in candidates:
                if segment.max_timestamp_so_far > best_ts:
                    winner, best_ts = segment, segment.max_timestamp_so_far
            if winner is not None:
                return winner.max_timestamp_and_offset(self._log_start_offset)
            return best

    def fetch_earliest(self) -> TimestampAndOffset:
        """ListOffsets EARLIEST: the log start offset, with the epoch of the first leader-epoch
        entry if that entry starts at or below it, else -1 (kafka-mapping §2.5)."""
        with self._lock:
            first = self.leader_epoch_cache.earliest_entry()
            epoch = first.epoch if first and first.start_offset <= self._log_start_offset else -1
            return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset, epoch)

    def offsets_before(
        self, timestamp: int, max_num_offsets: int, *, cap_at_high_watermark: bool = False
    ) -> list[int]:
        """The legacy (v0) lookup, kafka-mapping §3 and contract §6.6: segment base offsets (raised
        to the log start offset) plus the LEO, picked by each segment's last-modified time,
        descending. -1 is latest, -2 earliest. With `cap_at_high_watermark` (consumers), the
        offsets above the HW are replaced by the HW."""
        if timestamp < EARLIEST_TIMESTAMP:
            raise UnsupportedVersionError(f"timestamp {timestamp} is not supported by v0")
        with self._lock:
            pairs = [
                (max(s.base_offset, self._log_start_offset), s.last_modified_ms)
                for s in self._segments
            ]
            if self._segments.active.size > 0:
                pairs.append((self._log_end_offset, self._clock()))
            if timestamp == LATEST_TIMESTAMP:
                start = len(pairs) - 1
            elif timestamp == EARLIEST_TIMESTAMP:
                start = 0
            else:
                start = next(
                    (i for i in range(len(pairs) - 1, -1, -1) if pairs[i][1] <= timestamp), -1
                )
            count = min(max_num_offsets, start + 1)
            offsets = sorted((pairs[start - j][0] for j in range(count)), reverse=True)
            hw = self._high_watermark
            if cap_at_high_watermark and any(o > hw for o in offsets):
                offsets = [hw, *(o for o in offsets if o <= hw)]
            return offsets

    # ------------------------------------------------------------------------------------------
    # High watermark, log start offset, truncation

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW the Raft core published, clamped into [log start offset, LEO]."""
        with self._lock:
            self._high_watermark = min(
                max(high_watermark, self._log_start_offset), self._log_end_offset
            )
            return self._high_watermark

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """DeleteRecords, or a follower taking the leader's log start offset: it never passes
        the HW and never goes back. The segments below it go with the next retention pass."""
        with self._lock:
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"log start offset {new_log_start_offset} is above the high watermark "
                    f"{self._high_watermark}"
                )
            if new_log_start_offset <= self._log_start_offset:
                return False
            self._advance_log_start_offset(new_log_start_offset)
            return True

    def _advance_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self._high_watermark = max(self._high_watermark, offset)
        self._recovery_point = max(self._recovery_point, offset)

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding an offset >= `offset` (a follower whose log diverged).

        Returns False when there is nothing to remove. A batch straddling `offset` goes
        entirely, so the LEO may end below `offset` (never the case at batch boundaries).
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return False
            log.info("%s: truncated to offset %d (the log end was %d): it diverged from the "
                     "leader's", self.directory.name, offset, self._log_end_offset)
            now = self._clock()
            if self._segments.first.base_offset > offset:
                self._truncate_fully(offset, now)
                return True
            for segment in list(self._segments):
                if segment.base_offset > offset:
                    self._segments.remove(segment)
                    segment.delete()
                    self._dir_dirty = True
            self._segments.active.truncate_to(offset, now)
            self._truncated()
            return True

    def _truncated(self) -> None:
        """After the active segment was cut: the offsets follow its new end, and the producer
        state is rebuilt from the snapshots and batches left."""
        self._segments.timestamps_changed()
        self._log_end_offset = end = self._segments.active.read_next_offset()
        self.leader_epoch_cache.truncate_from_end(end)
        self._log_start_offset = min(self._log_start_offset, end)
        self._high_watermark = min(self._high_watermark, end)
        self._recovery_point = min(self._recovery_point, end)
        self._write_offsets_checkpoint()
        self.producer_state = self._load_producer_state()

    def truncate_damaged(self, segment: LogSegment, position: int, offset: int) -> bool:
        """Cut the log where a scrub found `segment` damaged: at byte `position`, the first
        batch that is not intact, which should hold offsets from `offset` on.

        Nothing happens (False) unless the damage is still there under the lock: `segment`
        still one of the log's segments (retention, the cleaner or a truncation may have
        replaced or cut it since the scan) and the batch at `position` still invalid. Batches
        this log held are lost, so it becomes damaged (`repair_floor`: it held up to its log
        end) until appends from a leader bring it back there; the floor is checkpointed with
        the cut, so a crash before the repair cannot hide it. Damage below the log start
        offset empties the log there, since nothing after it can be found again."""
        with self._lock:
            self._check_open()
            if not self.damaged_at(segment, position, offset):
                return False
            segments = list(self._segments)
            floor = (self.leader_epoch_cache.latest_epoch, self._log_end_offset)
            if self._repair_floor is None or floor > self._repair_floor:
                self._repair_floor = floor
            now = self._clock()
            if offset < self._log_start_offset:
                self._truncate_fully(self._log_start_offset, now)
                return True
            for later in segments[segments.index(segment) + 1 :]:
                self._segments.remove(later)
                later.delete()
                self._dir_dirty = True
            segment.truncate_at(position, offset, now)
            self._truncated()
            return True

    def damaged_at(self, segment: LogSegment, position: int, next_offset: int) -> bool:
        """Whether `segment` is still one of the log's segments and the batch at `position`
        (where the batches from `next_offset` on should start) is not intact: what a scrub
        read without the lock, confirmed under it (one batch read), so that a segment
        rolled, cut or replaced meanwhile is never taken for a damaged one."""
        with self._lock:
            if not any(s is segment for s in self._segments) or position >= segment.size:
                return False
            try:
                first = next(segment.batches_from(position), None)
            except CorruptMessageError:
                return True
            return first is None or not segment.is_valid_batch(
                first.buffer, first.pos, first.header, next_offset
            )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything; the log restarts empty at `offset`, which becomes log start, LEO
        and HW (a follower far behind a leader whose log now starts later)."""
        with self._lock:
            self._check_open()
            log.info("%s: emptied to start at offset %d (it held [%d, %d)): the leader's log "
                     "starts later", self.directory.name, offset, self._log_start_offset,
                     self._log_end_offset)
            self._truncate_fully(offset, self._clock())

    def _truncate_fully(self, offset: int, now: int) -> None:
        for segment in list(self._segments):
            self._segments.remove(segment)
            segment.delete()
        self._segments.add(LogSegment.create(self.directory, offset, self._config, now))
        self._dir_dirty = True
        self.leader_epoch_cache.clear()
        self._log_start_offset = self._log_end_offset = offset
        self._high_watermark = self._recovery_point = offset
        self._write_offsets_checkpoint()
        delete_snapshots(self.directory, snapshot_offsets(self.directory))
        self.producer_state = ProducerStateManager()

    # ------------------------------------------------------------------------------------------
    # Retention (kafka-mapping §5.9)

    def delete_old_segments(self) -> int:
        """Delete the prefix of segments that retention allows; returns how many went.

        Segments below the log start offset always go; with cleanup.policy=delete, so do the
        oldest while the log exceeds retention.bytes and those older than retention.ms.
        Never a segment reaching the last stable offset (so the HW, and the start of an
        undecided transaction); the log start offset moves before files are removed.
        """
        with self._lock:
            self._check_open()
            deleted = self._delete_segments(
                lambda segment, upper: upper <= self._log_start_offset, "below the log start"
            )
            if self._config.delete_enabled:
                deleted += self._delete_retention_bytes_breached()
                deleted += self._delete_retention_ms_breached()
            return deleted

    def _delete_retention_ms_breached(self) -> int:
        retention_ms = self._config.retention_ms
        if retention_ms < 0:
            return 0
        now = self._clock()
        return self._delete_segments(
            lambda segment, upper: now - segment.largest_timestamp > retention_ms,
            f"older than retention.ms={retention_ms}",
        )

    def _delete_retention_bytes_breached(self) -> int:
        retention_bytes = self._config.retention_bytes
        excess = self.size - retention_bytes
        if retention_bytes < 0 or excess < 0:
            return 0

        def breached(segment: LogSegment, upper: int) -> bool:
            nonlocal excess
            if excess - segment.size < 0:
                return False
            excess -= segment.size
            return True

        return self._delete_segments(breached, f"over retention.bytes={retention_bytes}")

    def _delete_segments(
        self, predicate: Callable[[LogSegment, int], bool], reason: str
    ) -> int:
        doomed: list[LogSegment] = []
        stable = self.producer_state.last_stable_offset(self._high_watermark)
        for i, segment in enumerate(self._segments):
            upper = self._segments.upper_bound(i, self._log_end_offset)
            is_last = i == len(self._segments) - 1
            if (
                stable < upper
                or (is_last and segment.size == 0)
                or not predicate(segment, upper)
            ):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(self._log_end_offset, self._clock())
        survivor = self._segments[len(doomed)].base_offset
        log.info("%s: deleted %d segment(s) from %d to %d (%s)", self.directory.name,
                 len(doomed), doomed[0].base_offset, survivor, reason)
        if survivor > self._log_start_offset:
            self._advance_log_start_offset(survivor)
        for segment in doomed:
            self._segments.remove(segment)
            segment.delete()
        self._dir_dirty = True
        delete_snapshots(
            self.directory, [o for o in snapshot_offsets(self.directory) if o < survivor]
        )
        self.producer_state.forget_below(survivor)
        return len(doomed)

    # ------------------------------------------------------------------------------------------
    # Durability

    def flush(self) -> None:
        """fsync every segment written since the last flush (and the directory if files were
        created, renamed or deleted), then move the recovery point to the LEO."""
        with self._lock:
            self._check_open()
            active = self._segments.active
            for i in range(self._segments.floor_index(self._recovery_point), len(self._segments)):
                segment = self._segments[i]
                segment.flush()
                if segment is not active:
                    segment.close_handles()
            if self._dir_dirty:
                fsync_dir(self.directory)
                self._dir_dirty = False
            self._recovery_point = self._log_end_offset
            self._unflushed_messages = 0
            self._last_flush_ms = self._clock()

    def sync_data(self) -> None:
        """fsync the batches written since the last sync (and the directory if files were
        created or removed): what an acknowledgement needs, one fsync per touched file.

        Unlike `flush`, the indexes are not synced and the recovery point does not move, so a
        crash before the next `flush` recovers from the old recovery point, re-indexing the
        synced batches: per-write durability without three fsyncs per write."""
        with self._lock:
            self._check_open()
            for i in range(self._segments.floor_index(self._recovery_point), len(self._segments)):
                self._segments[i].sync_data()
            if self._dir_dirty:
                fsync_dir(self.directory)
                self._dir_dirty = False

    def mark_synced(self) -> None:
        """What `sync_data` would make durable was made so another way: a ``syncfs`` of the
        log's filesystem, begun after every write to sync (`tidelog.storage.fs_sync`), which
        covers the segments' data and the directory's entries alike."""
        with self._lock:
            self._check_open()
            for i in range(self._segments.floor_index(self._recovery_point), len(self._segments)):
                self._segments[i].mark_synced()
            self._dir_dirty = False

    def checkpoint(self) -> None:
        """Persist recovery point, log start offset, HW and segment last-modified times (each
        file replaced atomically). Cheap enough to call every few seconds, as Kafka does."""
        with self._lock:
            self._check_open()
            self._write_offsets_checkpoint()
            last_modified_checkpoint(self.directory).write(
                [(s.base_offset, s.last_modified_ms, s.size) for s in self._segments]
            )

    def _write_offsets_checkpoint(self) -> None:
        """Also after a truncation: the durable end it records must never be above what the
        log holds, or the next open would take a legitimately shortened log for a damaged
        one."""
        durable = self._recovery_point
        epoch = self.leader_epoch_cache.epoch_for_offset(durable - 1)
        end = (epoch, durable)
        if self._repair_floor is not None:
            if end >= self._repair_floor:
                log.info("%s: repaired up to %s", self.directory, self._repair_floor)
                self._repair_floor = None
            else:
                end = self._repair_floor
        offsets_checkpoint(self.directory).write(
            [
                (RECOVERY_POINT, self._recovery_point),
                (LOG_START_OFFSET, self._log_start_offset),
                (HIGH_WATERMARK, self._high_watermark),
                (DURABLE_END, end[1]),
                (DURABLE_END_EPOCH, end[0]),
            ]
        )

    def close(self) -> None:
        """Clean shutdown: final time index entry, flush, checkpoints, then the marker that
        lets the next open skip recovery."""
        with self._lock:
            if self._closed:
                return
            self._segments.active.on_become_inactive()
            self.flush()
            self.checkpoint()
            write_snapshot(self.directory, self.producer_state, self._log_end_offset)
            marker = self.directory / CLEAN_SHUTDOWN_FILE
            marker.touch(mode=DATA_FILE_MODE)
            fsync_dir(self.directory)
            for segment in self._segments:
                segment.close_handles()
            self._closed = True

    def abandon(self) -> None:
        """Let go of the log as a crash would: descriptors closed, nothing flushed, written
        or marked clean, so the next open recovers from the recovery point, dropping
        whatever a failed write left behind. For a log whose disk refused a write: a clean
        `close` would have to write."""
        with self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close_handles()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.directory} is closed")

    # ------------------------------------------------------------------------------------------
    # Segment replacement (for the cleaner)

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> None:
        """Atomically replace closed segments by rewritten ones (Kafka's replaceSegments).

        The new segments are written by the caller with the ``.cleaned`` suffix
        (``LogSegment.create(..., temp_suffix=CLEANED_SUFFIX)``). They are flushed and renamed
        to ``.swap``: from that moment a crash completes the replacement on the next open.
        Then the old segments are deleted and the new ones take their final names.
        """
        with self._lock:
            self._check_open()
            active = self._segments.active
            if any(s is active for s in old_segments):
                raise ValueError("the active segment cannot be replaced")
            for segment in new_segments:
                segment.flush()
                segment.change_temp_suffix(SWAP_SUFFIX)
            fsync_dir(self.directory)
            for segment in old_segments:
                self._segments.remove(segment)
                segment.delete()
            for segment in new_segments:
                segment.change_temp_suffix("")
                segment.close_handles()
                self._segments.add(segment)
            fsync_dir(self.directory)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory}, log_start_offset={self._log_start_offset}, "
            f"high_watermark={self._high_watermark}, log_end_offset={self._log_end_offset})"
        )
