"""The ordered set of a log's segments (Kafka's ``LogSegments``)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator

from tidelog.storage.segment import LogSegment


class LogSegments:
    """Segments by base offset, with O(log n) "which segment holds offset o" and "first segment
    whose max timestamp reaches T", so lookups do not slow down as the log grows."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._segments: list[LogSegment] = []
        #: Running max of the closed segments' max timestamps (non-decreasing, so bisectable);
        #: rebuilt lazily after a change: a closed segment's max only moves when segments are
        #: added, removed or truncated, which is rare next to lookups.
        self._running_max: list[int] | None = None

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(list(self._segments))

    def __getitem__(self, i: int) -> LogSegment:
        return self._segments[i]

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    def add(self, segment: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, segment.base_offset)
        if i < len(self._bases) and self._bases[i] == segment.base_offset:
            raise ValueError(f"a segment with base offset {segment.base_offset} already exists")
        self._bases.insert(i, segment.base_offset)
        self._segments.insert(i, segment)
        self.timestamps_changed()

    def remove(self, segment: LogSegment) -> None:
        i = self._segments.index(segment)
        del self._bases[i], self._segments[i]
        self.timestamps_changed()

    def timestamps_changed(self) -> None:
        """A closed segment's max timestamp may have changed (truncation, replacement)."""
        self._running_max = None

    def floor_index(self, offset: int) -> int:
        """Index of the segment with the largest base offset <= `offset` (0 if none)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def floor(self, offset: int) -> LogSegment:
        return self._segments[self.floor_index(offset)]

    def upper_bound(self, i: int, log_end_offset: int) -> int:
        """The offset after the last one segment `i` can hold: the next base, or the LEO."""
        return self._bases[i + 1] if i + 1 < len(self._bases) else log_end_offset

    def first_reaching_timestamp(self, target_ms: int, start: int) -> Iterator[LogSegment]:
        """The segments from index `start` whose max timestamp is >= target, in order; the
        first closed one is found by bisecting the running max instead of walking them all."""
        running = self._running_max
        if running is None:
            maxes = (s.max_timestamp_so_far for s in self._segments[:-1])
            running = self._running_max = list(itertools.accumulate(maxes, max, initial=-1))[1:]
        i = max(start, bisect.bisect_left(running, target_ms))
        for segment in self._segments[i:]:
            if segment.max_timestamp_so_far >= target_ms:
                yield segment
