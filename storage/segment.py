"""One segment of a partition log: a ``.log`` file of record batches and its three indexes.

Index bookkeeping follows kafka-mapping §5.4 exactly, batch by batch, and recovery rebuilds
indexes with the same function, so an index rebuilt after a crash equals the one written live.
Batches are handled as bytes plus their parsed header; only lookups by timestamp look at
records, and only at their fixed-size prefix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from tidelog.errors import CorruptMessageError
from tidelog.records import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    crc_matches,
    first_record_reaching,
    read_header,
    record_timestamps,
)
from tidelog.storage.checkpoint import DATA_FILE_MODE, pwrite_all
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochFileCache
from tidelog.storage.errors import CorruptIndexError
from tidelog.storage.index import (
    INT32_MAX,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
)

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
#: A rewritten segment while the cleaner writes it, and once it is ready to replace the old ones.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_SCAN_CHUNK = 64 * 1024
_BATCH_LENGTH = struct.Struct(">i")  # the length field at offset 8, to size a read of one batch


def segment_file(directory: Path, base_offset: int, suffix: str, temp_suffix: str = "") -> Path:
    return directory / f"{base_offset:020d}{suffix}{temp_suffix}"


class TimestampAndOffset(NamedTuple):
    """A lookup answer: a record's own timestamp and offset, and the epoch of its batch."""

    timestamp: int
    offset: int
    leader_epoch: int


class ScannedBatch(NamedTuple):
    """A batch met by a scan: `buffer[pos:pos + header.size]` is the batch, found at
    `file_position` in the segment's .log."""

    buffer: bytes
    pos: int
    file_position: int
    header: BatchHeader


def batch_max_timestamp(header: BatchHeader) -> int:
    """A control batch never counts as timestamped (contract §7), whatever its header says."""
    return NO_TIMESTAMP if header.is_control else header.max_timestamp


class LogSegment:
    """A ``.log`` with its ``.index``, ``.timeindex`` and ``.txnindex`` (kafka-mapping §5.2)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        size: int,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
        created_ms: int,
        last_modified_ms: int,
        temp_suffix: str,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.size = size
        #: The largest batch this segment has seen written or read (in memory only): scans
        #: read at least two such batches at a time, so that a lookup landing in a segment of
        #: large batches costs one pread, not a short read and a re-read per batch.
        self._largest_batch = 0
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.created_ms = created_ms
        #: Wall-clock time of the last write (persisted by the log; the legacy lookup and
        #: retention of untimestamped segments use it instead of the file's mtime).
        self.last_modified_ms = last_modified_ms
        self.temp_suffix = temp_suffix
        self.log_path = segment_file(directory, base_offset, LOG_SUFFIX, temp_suffix)
        self._fd: int | None = None
        self._dirty = False
        self._bytes_since_last_index_entry = 0
        last = time_index.last_entry()
        self.max_timestamp_so_far = last.timestamp
        self.offset_of_max_timestamp_so_far = last.offset
        #: The first batch's max timestamp, what segment.ms measures against (§5.8); read
        #: lazily because only the active segment needs it.
        self._rolling_based_timestamp: int | None = None

    # ------------------------------------------------------------------------------------------
    # Creating and opening

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        temp_suffix: str = "",
    ) -> LogSegment:
        """A new, empty segment; fails if its .log already exists."""
        path = segment_file(directory, base_offset, LOG_SUFFIX, temp_suffix)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, DATA_FILE_MODE))
        segment = cls(
            directory,
            base_offset,
            config,
            size=0,
            offset_index=OffsetIndex.create(
                segment_file(directory, base_offset, INDEX_SUFFIX, temp_suffix),
                base_offset,
                config.segment_index_bytes,
            ),
            time_index=TimeIndex.create(
                segment_file(directory, base_offset, TIME_INDEX_SUFFIX, temp_suffix),
                base_offset,
                config.segment_index_bytes,
            ),
            txn_index=TransactionIndex.create(
                segment_file(directory, base_offset, TXN_INDEX_SUFFIX, temp_suffix)
            ),
            created_ms=now_ms,
            last_modified_ms=now_ms,
            temp_suffix=temp_suffix,
        )
        segment._dirty = True
        segment._rolling_based_timestamp = NO_TIMESTAMP
        return segment

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        now_ms: int,
        last_modified_ms: int,
        next_base_offset: int | None,
        temp_suffix: str = "",
    ) -> tuple[LogSegment, bool]:
        """Open an existing segment; the flag says whether its indexes must be rebuilt
        (missing, or failing their sanity check against the .log and the next segment)."""
        log_path = segment_file(directory, base_offset, LOG_SUFFIX, temp_suffix)
        size = log_path.stat().st_size
        index_path = segment_file(directory, base_offset, INDEX_SUFFIX, temp_suffix)
        time_path = segment_file(directory, base_offset, TIME_INDEX_SUFFIX, temp_suffix)
        txn_path = segment_file(directory, base_offset, TXN_INDEX_SUFFIX, temp_suffix)
        rebuild = False
        try:
            offset_index = OffsetIndex.load(
                index_path,
                base_offset,
                config.segment_index_bytes,
                offset_limit=next_base_offset,
                position_limit=size,
            )
            time_index = TimeIndex.load(
                time_path, base_offset, config.segment_index_bytes, offset_limit=next_base_offset
            )
        except (OSError, CorruptIndexError) as exc:
            log.warning("rebuilding the indexes of %s: %s", log_path, exc)
            offset_index = OffsetIndex.create(index_path, base_offset, config.segment_index_bytes)
            time_index = TimeIndex.create(time_path, base_offset, config.segment_index_bytes)
            rebuild = True
        try:
            txn_index = TransactionIndex.load(txn_path)
        except (OSError, CorruptIndexError) as exc:
            log.warning("%s: starting an empty transaction index: %s", txn_path, exc)
            txn_index = TransactionIndex.create(txn_path)
        segment = cls(
            directory,
            base_offset,
            config,
            size=size,
            offset_index=offset_index,
            time_index=time_index,
            txn_index=txn_index,
            created_ms=now_ms,
            last_modified_ms=last_modified_ms,
            temp_suffix=temp_suffix,
        )
        return segment, rebuild

    # ------------------------------------------------------------------------------------------
    # Reading

    @contextlib.contextmanager
    def _reader(self) -> Iterator[int]:
        """The segment's descriptor if it has one (active segment), else a short-lived one, so
        that a log with thousands of closed segments does not hold thousands of descriptors."""
        if self._fd is not None:
            yield self._fd
            return
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            yield fd
        finally:
            os.close(fd)

    def read_bytes(self, position: int, size: int) -> bytes:
        with self._reader() as fd:
            return os.pread(fd, size, position)

    def batches_from(
        self, position: int, chunk_size: int = _SCAN_CHUNK, limit: int | None = None
    ) -> Iterator[ScannedBatch]:
        """Every batch from `position` on, read in chunks of about `chunk_size`; with `limit`,
        the scan ends quietly before the first batch that does not end by that position.

        Raises CorruptMessageError naming the file and position at the first batch that cannot
        be parsed or is cut short by the end of the file. CRCs are not checked here (recovery
        does); a scan that only walks headers must not pay for them.
        """
        file_end = self.size
        end = file_end if limit is None else min(limit, file_end)
        file_pos = position
        chunk_size = max(chunk_size, 2 * self._largest_batch)
        want = chunk_size
        with self._reader() as fd:
            while file_pos < end:
                buf = os.pread(fd, min(want, end - file_pos), file_pos)
                want = chunk_size
                pos = 0
                while len(buf) - pos >= LOG_OVERHEAD:
                    batch_size = _BATCH_LENGTH.unpack_from(buf, pos + 8)[0] + LOG_OVERHEAD
                    if pos + batch_size > len(buf):
                        if file_pos + pos + batch_size <= end:
                            break  # complete within reach: read it with the next chunk
                        if end < file_end:
                            return  # beyond the caller's limit
                    try:
                        header = read_header(buf, pos)
                    except CorruptMessageError as exc:
                        raise CorruptMessageError(
                            f"{self.log_path}: corrupt batch at position {file_pos + pos}: {exc}"
                        ) from None
                    yield ScannedBatch(buf, pos, file_pos + pos, header)
                    pos += header.size
                if pos == 0:
                    if len(buf) < LOG_OVERHEAD:
                        if end < file_end:
                            return
                        raise CorruptMessageError(
                            f"{self.log_path}: truncated batch at position {file_pos}"
                        )
                    want = _BATCH_LENGTH.unpack_from(buf, 8)[0] + LOG_OVERHEAD
                    self._largest_batch = max(self._largest_batch, want)
                    chunk_size = max(chunk_size, 2 * want)
                    want = chunk_size
                file_pos += pos

    def translate_offset(self, offset: int, chunk_size: int = _SCAN_CHUNK) -> ScannedBatch | None:
        """The first batch whose last offset is >= `offset`, found from the offset index."""
        start = self.offset_index.lookup(offset).position
        for batch in self.batches_from(start, chunk_size):
            if batch.header.last_offset >= offset:
                return batch
        return None

    def read(
        self, start_offset: int, max_bytes: int, upper_bound: int, min_one_batch: bool
    ) -> tuple[bytes, bool]:
        """Whole batches from the one holding `start_offset`, each entirely below
        `upper_bound`, up to `max_bytes` (at least one batch if `min_one_batch`). The flag
        says whether the read stopped inside this segment (budget or bound reached)."""
        # The index entry may be a whole batch before the answer: read enough to pass it.
        first = self.translate_offset(
            start_offset, max(_SCAN_CHUNK, 2 * self.config.index_interval_bytes + max_bytes)
        )
        if first is None:
            return b"", False
        start = first.file_position
        # One read of exactly the budget: batches that do not fit are never read.
        limit = start + max(max_bytes, first.header.size if min_one_batch else 0)
        end = start
        chunk, chunk_pos = b"", 0
        for buf, pos, file_position, h in self.batches_from(start, limit - start, limit):
            if h.last_offset >= upper_bound:
                break
            if end == start:
                chunk, chunk_pos = buf, pos
            end = file_position + h.size
        else:
            if end == self.size:
                return self._slice(chunk, chunk_pos, start, end), False
        return self._slice(chunk, chunk_pos, start, end), True

    def _slice(self, chunk: bytes, chunk_pos: int, start: int, end: int) -> bytes:
        if chunk_pos + end - start <= len(chunk):
            return chunk[chunk_pos : chunk_pos + end - start]
        return self.read_bytes(start, end - start)

    def find_offset_by_timestamp(
        self, target_ms: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after `starting_offset` whose timestamp is >= target.

        The time index gives the last offset known to be before any such record, the offset
        index the position of its batch; the scan from there is short, because the next time
        index entry already holds a timestamp above the target (kafka-mapping §2.5).
        """
        ts_entry = self.time_index.lookup(target_ms)
        position = self.offset_index.lookup(max(ts_entry.offset, starting_offset)).position
        for buf, pos, _, header in self.batches_from(position):
            if batch_max_timestamp(header) < target_ms or header.last_offset < starting_offset:
                continue
            found = first_record_reaching(buf, pos, header, target_ms, starting_offset)
            if found is not None:
                return TimestampAndOffset(found[1], found[0], header.partition_leader_epoch)
        return None

    def max_timestamp_and_offset(self, starting_offset: int) -> TimestampAndOffset | None:
        """The earliest record at or after `starting_offset` carrying the segment's largest
        timestamp among those records.

        With the whole segment in range this is the §2.5 path: the segment remembers the batch
        that first reached its max. When the log start offset cuts into the segment, that
        record may be gone, so the remaining part is scanned.
        """
        if self.max_timestamp_so_far < 0:
            return None
        if starting_offset <= self.base_offset:
            position = self.offset_index.lookup(self.offset_of_max_timestamp_so_far).position
            for buf, pos, _, header in self.batches_from(position):
                if batch_max_timestamp(header) == self.max_timestamp_so_far:
                    return self._first_record_at(buf, pos, header, self.max_timestamp_so_far, 0)
            return None
        best: ScannedBatch | None = None
        best_ts = NO_TIMESTAMP
        first = self.translate_offset(starting_offset)
        if first is None:
            return None
        for batch in self.batches_from(first.file_position):
            if batch_max_timestamp(batch.header) > best_ts:
                candidate = max(
                    (
                        ts
                        for off, ts in record_timestamps(batch.buffer, batch.pos, batch.header)
                        if off >= starting_offset
                    ),
                    default=NO_TIMESTAMP,
                )
                if candidate > best_ts:
                    best, best_ts = batch, candidate
        if best is None:
            return None
        return self._first_record_at(best.buffer, best.pos, best.header, best_ts, starting_offset)

    @staticmethod
    def _first_record_at(
        buf: bytes, pos: int, header: BatchHeader, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        for offset, ts in record_timestamps(buf, pos, header):
            if ts == timestamp and offset >= starting_offset:
                return TimestampAndOffset(ts, offset, header.partition_leader_epoch)
        return None

    def read_next_offset(self) -> int:
        """The offset after the last batch, scanning only from the last offset index entry."""
        if self.offset_index.entries:
            start = self.offset_index.entry(self.offset_index.entries - 1).position
        else:
            start = 0
        next_offset = self.base_offset
        for batch in self.batches_from(start):
            next_offset = batch.header.next_offset
        return next_offset

    def first_batch_timestamp(self) -> int:
        if self._rolling_based_timestamp is None:
            first = next(iter(self.batches_from(0)), None)
            self._rolling_based_timestamp = (
                NO_TIMESTAMP if first is None else batch_max_timestamp(first.header)
            )
        return self._rolling_based_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What time-based retention compares with: the largest record timestamp, or the
        last-modified time for a segment holding none (kafka-mapping §5.6)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    # ------------------------------------------------------------------------------------------
    # Writing

    def _writer(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR)
        return self._fd

    def should_roll(self, batch_size: int, header: BatchHeader, now_ms: int) -> bool:
        """Kafka's ``shouldRoll`` (kafka-mapping §5.8). Apart from an offset that does not fit
        the segment, no rule rolls an empty segment: the new one would be just as empty (and,
        for a tiny index, just as full)."""
        if not 0 <= header.last_offset - self.base_offset <= INT32_MAX:
            return True
        if self.size == 0:
            return False
        first_ts = self.first_batch_timestamp()
        if first_ts >= 0:
            waited = batch_max_timestamp(header) - first_ts
        else:
            waited = now_ms - self.created_ms
        return (
            self.size > self.config.segment_bytes - batch_size
            or waited > self.config.segment_ms
            or self.offset_index.is_full
            or self.time_index.is_full
        )

    def append(self, data: bytes | memoryview, header: BatchHeader, now_ms: int) -> None:
        """Write one batch (already validated, offsets assigned) at the end of the segment.

        The batch is written with one positional write; if the write fails the file is cut
        back, so a failed append leaves nothing partial behind.
        """
        if (
            not self.base_offset
            <= header.base_offset
            <= header.last_offset
            <= (self.base_offset + INT32_MAX)
        ):
            raise ValueError(
                f"batch {header.base_offset}..{header.last_offset} does not fit segment "
                f"{self.base_offset}"
            )
        fd = self._writer()
        position = self.size
        try:
            pwrite_all(fd, data, position)
        except BaseException:
            os.ftruncate(fd, position)
            raise
        if position == 0:
            self._rolling_based_timestamp = batch_max_timestamp(header)
        self.size = position + len(data)
        if len(data) > self._largest_batch:
            self._largest_batch = len(data)
        self._index_batch(position, header)
        self.last_modified_ms = now_ms
        self._dirty = True

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        """kafka-mapping §5.4, shared by appends and recovery so both build the same index."""
        max_ts = batch_max_timestamp(header)
        if max_ts > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_ts
            self.offset_of_max_timestamp_so_far = header.last_offset
        if self._bytes_since_last_index_entry > self.config.index_interval_bytes:
            if not self.offset_index.is_full:
                self.offset_index.append(header.last_offset, position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(
                    self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
                )
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size

    def is_valid_batch(
        self, buf: bytes | memoryview, pos: int, header: BatchHeader, next_offset: int
    ) -> bool:
        """What recovery and the scrubber require of a parsed batch of this segment: its
        offsets continue upwards from `next_offset` (the end of the batch before it, or the
        segment's base) and fit the segment, and its CRC matches."""
        return (
            header.base_offset >= next_offset
            and header.last_offset - self.base_offset <= INT32_MAX
            and crc_matches(buf, pos, header)
        )

    def recover(self, epoch_cache: LeaderEpochFileCache | None) -> int:
        """Rebuild the indexes from the .log, keeping the longest valid prefix of batches.

        A batch is valid when it parses, its CRC matches, its offsets continue upwards from the
        previous batch and fit the segment. Returns the number of bytes cut off; the caller
        decides what that means for later segments. Epochs met are recorded in the cache
        (Kafka's ``LogSegment.recover``), which rebuilds a lost epoch history.
        """
        self.offset_index.truncate_to(self.base_offset)
        self.time_index.truncate_to(self.base_offset)
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = self.base_offset
        self._bytes_since_last_index_entry = 0
        valid = 0
        next_offset = self.base_offset
        try:
            for buf, pos, file_position, header in self.batches_from(0):
                if not self.is_valid_batch(buf, pos, header, next_offset):
                    log.warning("%s: invalid batch at position %d", self.log_path, file_position)
                    break
                self._index_batch(file_position, header)
                if (
                    epoch_cache is not None
                    and header.partition_leader_epoch > epoch_cache.latest_epoch
                ):
                    epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
                valid = file_position + header.size
                next_offset = header.next_offset
        except CorruptMessageError as exc:
            log.warning("%s", exc)
        truncated = self.size - valid
        if truncated:
            os.truncate(self.log_path, valid)
            self.size = valid
            self._dirty = True
        self.txn_index.truncate_to(next_offset)
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp = None
        return truncated

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove every batch holding an offset >= `offset`; returns the bytes removed.

        A batch straddling `offset` goes entirely (batches are never split). The segment's
        max timestamp is recomputed from the remaining time index entry plus a scan of the
        batches after it (kafka-mapping §5.6).
        """
        found = self.translate_offset(offset)
        if found is None:
            return 0
        return self.truncate_at(found.file_position, offset, now_ms)

    def truncate_at(self, cut: int, offset: int, now_ms: int) -> int:
        """Remove everything from byte position `cut`, a batch boundary, where the batches
        from `offset` on start; returns the bytes removed. `truncate_to` finds the position
        of an offset; a scrub that found the batch at `cut` damaged cannot trust its header
        to be found by offset, so it names the position itself."""
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        os.ftruncate(self._writer(), cut)
        removed = self.size - cut
        self.size = cut
        last = self.time_index.last_entry()
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = last
        start = self.offset_index.lookup(last.offset).position if last.timestamp >= 0 else 0
        for batch in self.batches_from(start):
            max_ts = batch_max_timestamp(batch.header)
            if max_ts > self.max_timestamp_so_far:
                self.max_timestamp_so_far = max_ts
                self.offset_of_max_timestamp_so_far = batch.header.last_offset
        self._bytes_since_last_index_entry = 0
        if cut == 0:
            self.created_ms = now_ms
            self._rolling_based_timestamp = NO_TIMESTAMP
        self.last_modified_ms = now_ms
        self._dirty = True
        return removed

    def on_become_inactive(self) -> None:
        """Before a roll or a clean close: the time index gets the segment's final max entry,
        so that a reopened log knows every segment's max timestamp without a scan."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )

    # ------------------------------------------------------------------------------------------
    # Files

    def sync_data(self) -> None:
        """fsync the .log only: what makes appended batches durable. The indexes can always be
        rebuilt from it, so they wait for `flush`."""
        if self._dirty:
            with self._reader() as fd:
                os.fsync(fd)
            self._dirty = False

    def flush(self) -> None:
        """fsync the .log and the indexes (an index below the recovery point is trusted on
        the next open, so it must be as durable as the data it points into)."""
        self.sync_data()
        self.offset_index.file.flush()
        self.time_index.file.flush()
        self.txn_index.file.flush()

    def mark_synced(self) -> None:
        """The caller made the .log durable another way (a ``syncfs`` of its filesystem after
        the writes: `tidelog.storage.fs_sync`): `sync_data` has nothing left to do."""
        self._dirty = False

    def mark_dirty(self) -> None:
        """Data read back by recovery may exist only in the page cache (the process died, not
        the machine): the next flush must fsync it before the recovery point passes it."""
        self._dirty = True

    def close_handles(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.offset_index.file.close()
        self.time_index.file.close()
        self.txn_index.file.close()

    def _index_files(self) -> list[tuple[str, OffsetIndex | TimeIndex | TransactionIndex]]:
        return [
            (INDEX_SUFFIX, self.offset_index),
            (TIME_INDEX_SUFFIX, self.time_index),
            (TXN_INDEX_SUFFIX, self.txn_index),
        ]

    def change_temp_suffix(self, temp_suffix: str) -> None:
        """Rename all four files (the .log last), e.g. ``.cleaned`` -> ``.swap`` -> ``""``."""
        for suffix, index in self._index_files():
            index.file.rename(segment_file(self.directory, self.base_offset, suffix, temp_suffix))
        new_log = segment_file(self.directory, self.base_offset, LOG_SUFFIX, temp_suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.temp_suffix = temp_suffix

    def delete(self) -> None:
        self.close_handles()
        for _, index in self._index_files():
            index.file.delete()
        self.log_path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
