"""Opening a partition directory: what survives a crash, and how little a clean restart reads.

Kafka's ``LogLoader``, reduced to what Tidelog keeps on disk:

* Leftovers of interrupted work go first: checkpoint temp files, segments a cleaner was still
  writing (``.cleaned``), and a replacement that was already committed (``.swap``) is finished.
* After a clean shutdown (the marker file exists) nothing is scanned: indexes are loaded and
  sanity-checked, and only the tail of the active segment after its last index entry is read
  to find the log end offset. Reopening a cleanly closed 1 GiB log costs milliseconds.
* After a crash, every segment from the one holding the recovery point onwards is scanned batch
  by batch (CRC, offsets), its indexes rebuilt. The first invalid batch ends the log: the
  segment is cut there and every later segment deleted, with a warning naming the file and the
  position, so exactly the intact prefix survives.
* Any segment whose indexes are missing or fail their sanity check is recovered the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import CorruptMessageError
from tidelog.storage.checkpoint import TMP_SUFFIX, CheckpointFile, fsync_dir
from tidelog.storage.config import LogConfig
from tidelog.storage.epoch import LeaderEpochFileCache
from tidelog.storage.index import base_offset_from_path
from tidelog.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file,
)
from tidelog.storage.segments import LogSegments

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".tidelog_cleanshutdown"
OFFSETS_CHECKPOINT = "log-offsets-checkpoint"
LAST_MODIFIED_CHECKPOINT = "segment-last-modified-checkpoint"

RECOVERY_POINT = "recovery-point"
LOG_START_OFFSET = "log-start-offset"
HIGH_WATERMARK = "high-watermark"
#: Where the log is known to have reached durably: the recovery point and the epoch of the
#: batch before it, or, while the log is damaged, the position it held before (see
#: `LoadedLog.repair_floor`). Absent from checkpoints written before they existed.
DURABLE_END = "durable-end"
DURABLE_END_EPOCH = "durable-end-epoch"
_OFFSET_KEYS = {RECOVERY_POINT, LOG_START_OFFSET, HIGH_WATERMARK, DURABLE_END, DURABLE_END_EPOCH}


def offsets_checkpoint(directory: Path) -> CheckpointFile:
    """recovery point, log start offset and high watermark, one ``name value`` line each."""
    return CheckpointFile(directory / OFFSETS_CHECKPOINT, version=0, width=2, named=True)


def last_modified_checkpoint(directory: Path) -> CheckpointFile:
    """``base_offset last_modified_ms size`` per segment; the size tells whether the segment
    changed after the value was written (then the value is stale)."""
    return CheckpointFile(directory / LAST_MODIFIED_CHECKPOINT, version=0, width=3)


@dataclass
class LoadedLog:
    segments: LogSegments
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    high_watermark: int
    epoch_cache: LeaderEpochFileCache
    #: (last epoch, log end offset) that the checkpoint says this log durably held when the
    #: log now ends before it: storage lost acknowledged batches. None for an intact log.
    repair_floor: tuple[int, int] | None


class LogLoader:
    """Turns a partition directory into a consistent LoadedLog (one use per open)."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: int) -> None:
        self.directory = directory
        self.config = config
        self.now_ms = now_ms

    def load(self) -> LoadedLog:
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        offsets = self._read_offsets()
        last_modified = {
            int(base): (int(ms), int(size))
            for base, ms, size in last_modified_checkpoint(self.directory).read() or []
            if 0 <= int(ms) <= self.now_ms
        }
        epoch_cache = LeaderEpochFileCache(self.directory)
        self._remove_leftovers()
        self._complete_swaps()
        segments, needs_rebuild = self._open_segments()
        recovery_point = offsets.get(RECOVERY_POINT, 0)
        first_unclean = len(segments) if clean else segments.floor_index(recovery_point)
        if not len(segments):
            base = offsets.get(LOG_START_OFFSET, 0)
            segments.add(LogSegment.create(self.directory, base, self.config, self.now_ms))
        recovered = self._recover(segments, first_unclean, needs_rebuild, epoch_cache)
        for segment in segments:
            ms, size = last_modified.get(segment.base_offset, (self.now_ms, -1))
            unchanged = size == segment.size and segment not in recovered
            segment.last_modified_ms = ms if unchanged else self.now_ms
        log_end_offset = segments.active.read_next_offset()
        log_start_offset = max(offsets.get(LOG_START_OFFSET, 0), segments.first.base_offset)
        if log_start_offset > log_end_offset:
            log.warning(
                "%s: log start offset %d is beyond the log end %d; starting empty there",
                self.directory,
                log_start_offset,
                log_end_offset,
            )
            for segment in segments:
                segments.remove(segment)
                segment.delete()
            segments.add(
                LogSegment.create(self.directory, log_start_offset, self.config, self.now_ms)
            )
            epoch_cache.clear()
            log_end_offset = log_start_offset
        if epoch_cache.needs_rebuild and log_end_offset > segments.first.base_offset:
            self._rebuild_epochs(segments, epoch_cache)
        epoch_cache.truncate_from_end(log_end_offset)
        epoch_cache.truncate_from_start(log_start_offset)
        high_watermark = min(max(offsets.get(HIGH_WATERMARK, 0), log_start_offset), log_end_offset)
        repair_floor = None
        if DURABLE_END in offsets and DURABLE_END_EPOCH in offsets:
            floor = (offsets[DURABLE_END_EPOCH], offsets[DURABLE_END])
            if (epoch_cache.latest_epoch, log_end_offset) < floor:
                log.warning(
                    "%s: the log ends at %d (epoch %d) but held offsets up to %d (epoch %d): "
                    "batches were lost; this replica is damaged until a leader repairs it",
                    self.directory,
                    log_end_offset,
                    epoch_cache.latest_epoch,
                    floor[1],
                    floor[0],
                )
                repair_floor = floor
        if clean:
            marker.unlink()
        fsync_dir(self.directory)
        return LoadedLog(
            segments=segments,
            log_start_offset=log_start_offset,
            log_end_offset=log_end_offset,
            recovery_point=min(max(recovery_point, log_start_offset), log_end_offset),
            high_watermark=high_watermark,
            epoch_cache=epoch_cache,
            repair_floor=repair_floor,
        )

    def _read_offsets(self) -> dict[str, int]:
        """The offsets checkpoint, or nothing (a full recovery) when its values cannot be
        the log's: a negative offset, an unknown name, a high watermark below the start."""
        offsets = {k: int(v) for k, v in offsets_checkpoint(self.directory).read() or []}
        if (
            any(v < 0 for k, v in offsets.items() if k != DURABLE_END_EPOCH)
            or offsets.get(DURABLE_END_EPOCH, -1) < -1
            or not offsets.keys() <= _OFFSET_KEYS
            or offsets.get(HIGH_WATERMARK, 0) < offsets.get(LOG_START_OFFSET, 0)
        ):
            log.warning(
                "%s: ignoring invalid %s %s", self.directory, OFFSETS_CHECKPOINT, offsets
            )
            return {}
        return offsets

    @staticmethod
    def _rebuild_epochs(segments: LogSegments, epoch_cache: LeaderEpochFileCache) -> None:
        """The leader-epoch file was missing or unusable while the log holds batches: the
        history is read back from the batch headers (every batch carries its epoch), since
        without it replication could not match this log against a leader's."""
        epoch_cache.clear()
        try:
            for segment in segments:
                for batch in segment.batches_from(0):
                    epoch = batch.header.partition_leader_epoch
                    if epoch > epoch_cache.latest_epoch:
                        epoch_cache.assign(epoch, batch.header.base_offset)
        except CorruptMessageError as exc:
            log.warning("rebuilding the leader epochs stopped early: %s", exc)
        if epoch_cache.entries:
            log.warning("rebuilt the leader-epoch history from the log: %s", epoch_cache.entries)

    def _remove_leftovers(self) -> None:
        """Half-written checkpoints and cleaner output that never became a swap (a segment's
        files are renamed to ``.swap`` before its .log, so a ``.txnindex.swap`` without its
        ``.log.swap`` is such output); and the sparse indexes of a swap, which are rebuilt
        when the swap is completed."""
        rebuilt = (INDEX_SUFFIX + SWAP_SUFFIX, TIME_INDEX_SUFFIX + SWAP_SUFFIX)
        for path in self.directory.iterdir():
            unfinished = path.name.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX) and not (
                segment_file(
                    self.directory, base_offset_from_path(path), LOG_SUFFIX, SWAP_SUFFIX
                ).exists()
            )
            if unfinished or path.name.endswith((TMP_SUFFIX, CLEANED_SUFFIX, *rebuilt)):
                log.info("removing leftover %s", path)
                path.unlink()

    def _complete_swaps(self) -> None:
        """A ``.log.swap`` is a rewritten segment whose replacement was decided: the segments
        it covers go, then it takes its final name (Kafka's swap-file recovery)."""
        for swap_path in sorted(self.directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            base = base_offset_from_path(swap_path)
            final_txn = segment_file(self.directory, base, TXN_INDEX_SUFFIX)
            if final_txn.exists() and not segment_file(self.directory, base, LOG_SUFFIX).exists():
                # The swap was taking its final names (the .log last) when it stopped, after
                # the old segments had gone with their .log last: this file is the swap's.
                final_txn.replace(segment_file(self.directory, base, TXN_INDEX_SUFFIX, SWAP_SUFFIX))
            swap, _ = LogSegment.open(
                self.directory,
                base,
                self.config,
                now_ms=self.now_ms,
                last_modified_ms=self.now_ms,
                next_base_offset=None,
                temp_suffix=SWAP_SUFFIX,
            )
            swap.recover(None)
            end = swap.read_next_offset()
            for path in self.directory.glob(f"*{LOG_SUFFIX}"):
                if base <= base_offset_from_path(path) < end:
                    self._delete_segment_files(base_offset_from_path(path))
            swap.change_temp_suffix("")
            swap.close_handles()
            log.info("completed the replacement of segments [%d, %d)", base, end)

    def _delete_segment_files(self, base: int) -> None:
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
            segment_file(self.directory, base, suffix).unlink(missing_ok=True)

    def _open_segments(self) -> tuple[LogSegments, set[int]]:
        """The segments in the directory, and the base offsets of those whose indexes must be
        rebuilt."""
        bases = sorted(base_offset_from_path(p) for p in self.directory.glob(f"*{LOG_SUFFIX}"))
        known = set(bases)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            for path in self.directory.glob(f"*{suffix}"):
                if base_offset_from_path(path) not in known:
                    log.info("removing index %s without a .log", path)
                    path.unlink()
        segments = LogSegments()
        needs_rebuild: set[int] = set()
        for i, base in enumerate(bases):
            segment, rebuild = LogSegment.open(
                self.directory,
                base,
                self.config,
                now_ms=self.now_ms,
                last_modified_ms=self.now_ms,
                next_base_offset=bases[i + 1] if i + 1 < len(bases) else None,
            )
            segments.add(segment)
            if rebuild:
                needs_rebuild.add(base)
        return segments, needs_rebuild

    def _recover(
        self,
        segments: LogSegments,
        first_unclean: int,
        needs_rebuild: set[int],
        epoch_cache: LeaderEpochFileCache,
    ) -> list[LogSegment]:
        """Scan what may not have reached the disk intact; cut the log at the first damage."""
        recovered: list[LogSegment] = []
        all_segments = list(segments)
        for i, segment in enumerate(all_segments):
            trusted = i < first_unclean and segment.base_offset not in needs_rebuild
            if trusted and self._tail_intact(segment):
                continue
            truncated = segment.recover(epoch_cache)
            segment.mark_dirty()
            recovered.append(segment)
            if truncated:
                later = all_segments[i + 1 :]
                log.warning(
                    "%s: corrupt or torn data at position %d; truncated %d bytes and deleted "
                    "%d later segments",
                    segment.log_path,
                    segment.size,
                    truncated,
                    len(later),
                )
                for gone in later:
                    segments.remove(gone)
                    gone.delete()
                break
        self._drop_empty_tail(segments)
        return recovered

    @staticmethod
    def _tail_intact(segment: LogSegment) -> bool:
        """Even a segment that needs no recovery has the batches after its last index entry
        parsed (a few KiB): a torn end is found now rather than by a reader later."""
        try:
            segment.read_next_offset()
        except CorruptMessageError as exc:
            log.warning("%s; recovering the segment", exc)
            return False
        return True

    @staticmethod
    def _drop_empty_tail(segments: LogSegments) -> None:
        """A roll creates the next segment at the log end offset, so an empty last segment
        starting above the previous segment's end means that segment lost its tail in the
        crash, after the roll reached the disk: the empty segment would leave a hole."""
        while len(segments) > 1 and segments.active.size == 0:
            previous_end = segments[len(segments) - 2].read_next_offset()
            if previous_end >= segments.active.base_offset:
                return
            empty = segments.active
            log.warning(
                "%s: removing empty segment %d after a segment ending at %d",
                empty.log_path,
                empty.base_offset,
                previous_end,
            )
            segments.remove(empty)
            empty.delete()
