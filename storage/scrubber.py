"""A background check of a log's segments: every batch parsed and its CRC verified again.

Recovery verifies only what lies above the recovery point, and a clean shutdown skips even
that, so a batch damaged on disk after it was written (a bit flip, a bad sector, a stray write)
is otherwise found only when a reader happens to fetch it. A scrub walks every segment batch by
batch, applying the checks recovery applies (`LogSegment.is_valid_batch`), a bounded number of
bytes per step, so its caller decides the rate (the node: ``log.scrub.bytes.per.second``). The
active segment counts: with the default segment size a quiet partition has no other.

The walk reads without the log's lock (written bytes never change in place, appends only add
after them, and a closed segment is read through a descriptor of its own, so a segment deleted
meanwhile is only a failed read), so it never holds up an append. What it finds is only a
suspicion until `Log.damaged_at` confirms it under the lock (one batch read) against the same
segment object, which retention, the cleaner, a roll or a truncation would have replaced or
cut; `Log.truncate_damaged` confirms it again before it cuts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tidelog.errors import CorruptMessageError
from tidelog.storage.log import Log
from tidelog.storage.segment import LogSegment, ScannedBatch


@dataclass(frozen=True)
class Damage:
    """The first batch of `segment` that is not intact: at byte `position`, where the batches
    from `offset` (the end of the intact prefix) should start."""

    segment: LogSegment
    position: int
    offset: int
    reason: str


@dataclass(frozen=True)
class ScrubStep:
    """What one step read, whether it reached the end of a pass over the segments, and
    the damage it stopped at."""

    bytes_read: int
    pass_complete: bool
    damage: Damage | None


class LogScrubber:
    """Walks one log's segments in order, resuming where the previous step stopped: the closed
    ones whole, the active one up to where it ended when the walk reached it (so a pass over a
    busy log ends). It is used by one thread at a time (not the log's writer)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self._segment: LogSegment | None = None
        #: Base offset of the last segment this pass verified (-1: none yet).
        self._after = -1
        self._position = 0
        #: Where the walk of the current segment ends.
        self._end = 0
        self._next_offset = 0
        #: Complete passes over the log.
        self.passes = 0

    def step(self, budget: int) -> ScrubStep:
        """Verify batches until about `budget` bytes were read (at least one batch, however
        large), the pass ends or damage is found and confirmed under the log's lock
        (`Log.damaged_at`; a segment that changed under the read is walked again). After
        damage the walk goes on from the damaged segment's start: the log is expected to have
        been cut there."""
        read = 0
        while read < budget:
            segment = self._current()
            if segment is None:
                self.passes += 1
                self._after = -1
                return ScrubStep(read, True, None)
            start = self._position
            damage = self._verify(segment, budget - read)
            read += self._position - start
            if damage is not None:
                self._segment = None
                self._after = segment.base_offset - 1
                if self.log.damaged_at(segment, damage.position, damage.offset):
                    return ScrubStep(read, False, damage)
            if self._position >= self._end:
                self._segment = None
                self._after = segment.base_offset
        return ScrubStep(read, False, None)

    def _current(self) -> LogSegment | None:
        """The segment to continue with: the current one while the log still holds it, else
        the first segment after the last one verified, from its start (one that replaced the
        current segment has the same base offset and is verified again)."""
        segments = self.log.segments
        current = self._segment
        if current is not None:
            if any(s is current for s in segments) and self._end <= current.size:
                return current
            self._after = current.base_offset - 1
        for segment in segments:
            if segment.base_offset > self._after:
                self._segment = segment
                self._position = 0
                self._end = segment.size
                self._next_offset = segment.base_offset
                return segment
        self._segment = None
        return None

    def _verify(self, segment: LogSegment, budget: int) -> Damage | None:
        try:
            for batch in self._batches(segment, budget):
                header = batch.header
                if not segment.is_valid_batch(batch.buffer, batch.pos, header, self._next_offset):
                    return Damage(
                        segment, batch.file_position, self._next_offset,
                        "offsets out of order or CRC mismatch",
                    )
                self._position = batch.file_position + header.size
                self._next_offset = header.next_offset
        except CorruptMessageError as exc:
            return Damage(segment, self._position, self._next_offset, str(exc))
        except OSError:
            # Deleted or closed since the segment list was read: `_current` moves on.
            self._position = self._end
        return None

    def _batches(self, segment: LogSegment, budget: int) -> Iterator[ScannedBatch]:
        any_batch = False
        limit = min(self._position + budget, self._end)
        for batch in segment.batches_from(self._position, budget, limit):
            any_batch = True
            yield batch
        if not any_batch and self._position < self._end:
            # The next batch alone is larger than the budget: it is read whole.
            for batch in segment.batches_from(self._position):
                yield batch
                return
