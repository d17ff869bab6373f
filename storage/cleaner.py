"""Key compaction (``cleanup.policy=compact``): Kafka's log cleaner, for one log, in one pass.

A pass keeps, in every closed segment below the cleanable bound, only the newest record of
each key, and drops tombstones once they are old enough. What it relies on and why:

* The newest offset of a key is taken over every record below the bound, the active segment
  included, so an older value goes as soon as a newer one exists anywhere committed. The bound
  is the high watermark (or lower, e.g. the LSO, by the caller): a record above it may still
  be truncated away by a new leader, and a value it replaced would then be lost for good.
* Kept records keep their offsets, timestamps and epochs; each batch keeps its offset range
  (``retain_records``). A batch left empty is dropped, except the last of a rewritten segment,
  which stays as an empty batch so that the segment still ends where it did: the next
  segment, the log end offset found on reopen, and the completion of an interrupted swap
  (which deletes the old segments up to the swap's end) all depend on it.
* A tombstone stays while its segment was last written within ``delete.retention.ms`` of the
  pass, so a consumer that reads from the start in less time sees the delete. A rewritten
  segment keeps its sources' last-modified time, so rewriting does not extend that delay
  (Kafka's cleaner preserves it the same way).
* Control batches and transactional batches are copied untouched (with the segments'
  aborted-transaction entries) and transactional records never count as the newest value of
  a key: an aborted record must not make the committed value before it disappear, and
  markers stay as long as the records they decide.
* Records without a key cannot be compacted (the append path refuses them in compacted
  topics); ones written before the topic became compacted are dropped, as Kafka does.
* Consecutive segments are merged while their combined size stays within segment.bytes, so
  a log of many small cleaned segments shrinks to few files.
* Each group of segments is written as ``.cleaned`` files and swapped in by
  ``Log.replace_segments`` (``.swap``, then final names), oldest group first: a crash leaves
  either the old or the new segments of a group, and an older value is always removed no
  later than the tombstone that deletes its key, so a crash never brings a deleted key back.

The pass reads closed segments without holding the log's lock, so run it where retention
runs (the thread that appends and truncates); reads may go on meanwhile.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tidelog.records import (
    BatchHeader,
    iter_batches,
    read_header,
    record_keys,
    retain_records,
)
from tidelog.storage.index import INT32_MAX
from tidelog.storage.log import Log
from tidelog.storage.segment import CLEANED_SUFFIX, LogSegment

log = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20


@dataclass
class CleanerStats:
    """What one pass did: segments read and written, records removed, bytes before and after."""

    segments_read: int = 0
    segments_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


def _compactable(header: BatchHeader) -> bool:
    return not (header.is_control or header.is_transactional)


class LogCleaner:
    """Compacts one log; ``clean`` is a complete pass and may be repeated at any time."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def clean(self, now_ms: int, upper_bound: int | None = None) -> CleanerStats:
        """Compact the closed segments that lie entirely below the last stable offset (so the
        high watermark; and below `upper_bound` if given): the cleaner never passes the first
        offset of an undecided transaction, as Kafka's firstUncleanableDirtyOffset. A log whose
        cleanup.policy lacks compact is left alone."""
        stats = CleanerStats()
        config = self.log.config
        if not config.compact_enabled:
            return stats
        bound = self._bound(upper_bound)
        cleanable = self._cleanable(bound)
        if not cleanable:
            return stats
        latest = self._latest_offsets([s for s, _ in cleanable], cleanable[-1][1], bound)
        for group in self._groups(cleanable, config.segment_bytes):
            self._clean_group(group, latest, now_ms, stats)
        if stats.segments_written:
            self.log.checkpoint()  # the rewritten segments' last-modified times, with new sizes
        return stats

    def cleanable_end(self, upper_bound: int | None = None) -> int:
        """Where the closed segments that `clean` would compact end (the base offset of the
        first segment it leaves alone; the log start when there are none). While it stays put
        a pass finds what the last one found: only tombstones can have come of age since."""
        cleanable = self._cleanable(self._bound(upper_bound))
        return cleanable[-1][1] if cleanable else self.log.log_start_offset

    def _bound(self, upper_bound: int | None) -> int:
        bound = self.log.last_stable_offset
        return bound if upper_bound is None else min(bound, upper_bound)

    def _cleanable(self, bound: int) -> list[tuple[LogSegment, int]]:
        """The closed segments, each with its upper bound, up to the first reaching `bound`."""
        segments = self.log.segments
        cleanable: list[tuple[LogSegment, int]] = []
        for segment, following in itertools.pairwise(segments):
            if following.base_offset > bound:
                break
            cleanable.append((segment, following.base_offset))
        return cleanable

    def _latest_offsets(
        self, segments: Sequence[LogSegment], end: int, bound: int
    ) -> dict[bytes | None, int]:
        """The newest offset below `bound` of every key: first in the segments to clean, which
        end at `end`, then in the rest of the log up to the bound, read through the log."""
        latest: dict[bytes | None, int] = {}

        def note(buf: bytes, pos: int, header: BatchHeader) -> None:
            if _compactable(header):
                records = record_keys(buf, pos, header)
                latest.update(zip(records.keys, records.offsets, strict=True))

        for segment in segments:
            for batch in segment.batches_from(0):
                note(batch.buffer, batch.pos, batch.header)
        offset = max(end, self.log.log_start_offset)
        while offset < bound:
            data = self.log.read(offset, _READ_CHUNK, bound)
            if not data:
                break
            for pos, header in iter_batches(data):
                note(data, pos, header)
                offset = header.next_offset
        latest.pop(None, None)  # records without a key are not kept, whatever their offset
        return latest

    @staticmethod
    def _groups(
        cleanable: Sequence[tuple[LogSegment, int]], max_bytes: int
    ) -> Iterator[list[LogSegment]]:
        """Runs of consecutive segments whose total size fits one segment and whose offsets
        fit one segment's relative offsets (cleaning can only shrink them)."""
        group: list[LogSegment] = []
        size = 0
        for segment, upper in cleanable:
            if group and (
                size + segment.size > max_bytes or upper - 1 - group[0].base_offset > INT32_MAX
            ):
                yield group
                group, size = [], 0
            group.append(segment)
            size += segment.size
        if group:
            yield group

    def _clean_group(
        self,
        group: Sequence[LogSegment],
        latest: dict[bytes | None, int],
        now_ms: int,
        stats: CleanerStats,
    ) -> None:
        last_modified = max(s.last_modified_ms for s in group)
        cleaned = LogSegment.create(
            self.log.directory,
            group[0].base_offset,
            self.log.config,
            last_modified,
            temp_suffix=CLEANED_SUFFIX,
        )
        try:
            removed, tombstones = self._copy(group, cleaned, latest, now_ms)
        except BaseException:
            cleaned.delete()
            raise
        stats.segments_read += len(group)
        stats.bytes_read += sum(s.size for s in group)
        if len(group) == 1 and removed == 0:
            cleaned.delete()
            return
        self.log.replace_segments([cleaned], group)
        stats.segments_written += 1
        stats.bytes_written += cleaned.size
        stats.records_removed += removed
        stats.tombstones_removed += tombstones
        log.info(
            "%s: cleaned segments %s into %d bytes, removed %d records (%d tombstones)",
            self.log.directory,
            [s.base_offset for s in group],
            cleaned.size,
            removed,
            tombstones,
        )

    def _copy(
        self,
        group: Sequence[LogSegment],
        cleaned: LogSegment,
        latest: dict[bytes | None, int],
        now_ms: int,
    ) -> tuple[int, int]:
        """Write what `group` keeps into `cleaned`; returns records and tombstones removed."""
        delete_retention_ms = self.log.config.delete_retention_ms
        removed = tombstones = 0
        for i, segment in enumerate(group):
            retain_tombstones = now_ms - segment.last_modified_ms <= delete_retention_ms
            for buf, pos, file_position, header in segment.batches_from(0):
                data = buf[pos : pos + header.size]
                if _compactable(header):
                    records = record_keys(buf, pos, header)
                    newest = latest.get
                    keep = {offset for key, offset in zip(records.keys, records.offsets,
                                                          strict=True)
                            if newest(key) == offset}
                    if not retain_tombstones and records.tombstones:
                        expired = keep & records.tombstones
                        tombstones += len(expired)
                        keep -= expired
                    removed += header.records_count - len(keep)
                    ends_group = i == len(group) - 1 and file_position + header.size == segment.size
                    if not keep and not ends_group:
                        continue
                    if len(keep) < header.records_count:
                        data = retain_records(buf, pos, header, keep)
                        header = read_header(data)
                cleaned.append(data, header, cleaned.last_modified_ms)
            for txn in segment.txn_index.entries:  # their markers are all kept
                cleaned.txn_index.append(txn)
        cleaned.on_become_inactive()
        return removed, tombstones
