"""Segments: when index entries are written (§5.4), what recovery rebuilds, every roll condition
(§5.8), offset overflow, truncation and timestamp search inside one segment (§2.5, §5.6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import FakeClock, batch, marker, open_log

from tidelog.records import read_header
from tidelog.storage import LogConfig, LogSegment, OffsetPosition, TimestampAndOffset
from tidelog.storage.index import INT32_MAX

SIZE_ONE = len(batch([1]))  # every one-record batch of the default value size


def fill(segment: LogSegment, timestamps: list[int], clock: FakeClock) -> list[int]:
    """Append one one-record batch per timestamp at consecutive offsets; returns positions."""
    positions = []
    offset = segment.base_offset + (segment.read_next_offset() - segment.base_offset)
    for ts in timestamps:
        data = batch([ts], base_offset=offset)
        positions.append(segment.size)
        segment.append(data, read_header(data), clock())
        offset += 1
    return positions


def new_segment(tmp_path: Path, **config: int) -> LogSegment:
    return LogSegment.create(tmp_path, 0, LogConfig(**config), 0)  # type: ignore[arg-type]


class TestIndexEntries:
    def test_interval_one_gives_an_entry_per_append_but_the_first(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        segment = new_segment(tmp_path, index_interval_bytes=1)
        positions = fill(segment, list(range(100, 200)), clock)
        assert segment.offset_index.entries == 99
        assert segment.time_index.entries == 99
        # (last offset of the append, position where that append starts)
        assert segment.offset_index.entry(0) == OffsetPosition(1, positions[1])
        assert segment.offset_index.entry(98) == OffsetPosition(99, positions[99])

    def test_entry_only_once_more_than_the_interval_was_written(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        segment = new_segment(tmp_path, index_interval_bytes=SIZE_ONE)
        positions = fill(segment, [1, 2], clock)
        assert segment.offset_index.entries == 0  # exactly the interval since: not "more than"
        positions += fill(segment, [3], clock)
        assert segment.offset_index.entries == 1
        assert segment.offset_index.entry(0) == OffsetPosition(2, positions[2])

    def test_time_index_keeps_max_so_far_with_backward_timestamps(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        segment = new_segment(tmp_path, index_interval_bytes=1)
        fill(segment, [0, 1, 2, 3, 4, 6, 5], clock)
        # 5 after 6: the entry written for offset 6 repeats (6, 5): nothing smaller is recorded
        assert [segment.time_index.lookup(ts) for ts in (1, 6, 100)] == [(1, 1), (6, 5), (6, 5)]
        assert segment.find_offset_by_timestamp(5, 0) == TimestampAndOffset(6, 5, -1)
        assert segment.find_offset_by_timestamp(7, 0) is None
        assert segment.max_timestamp_and_offset(0) == TimestampAndOffset(6, 5, -1)

    def test_control_batches_do_not_enter_the_time_index(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        segment = new_segment(tmp_path, index_interval_bytes=1)
        fill(segment, [10], clock)
        data = marker(base_offset=1)
        segment.append(data, read_header(data), clock())
        fill(segment, [5], clock)
        assert segment.max_timestamp_so_far == 10
        assert segment.time_index.entries == 1
        assert segment.offset_index.entries == 2

    def test_recover_rebuilds_the_same_index_files(self, tmp_path: Path, clock: FakeClock) -> None:
        segment = new_segment(tmp_path, index_interval_bytes=3 * SIZE_ONE)
        fill(segment, [5, 3, 9, 9, 12, 1, 15, 2, 30, 8, 7, 40, 41], clock)
        segment.on_become_inactive()
        index, timeindex = segment.offset_index.file.path, segment.time_index.file.path
        live = index.read_bytes(), timeindex.read_bytes()
        assert segment.recover(None) == 0
        assert (index.read_bytes(), timeindex.read_bytes()) == live

    def test_recover_cuts_a_torn_tail(self, tmp_path: Path, clock: FakeClock) -> None:
        segment = new_segment(tmp_path, index_interval_bytes=1)
        positions = fill(segment, [1, 2, 3, 4], clock)
        with open(segment.log_path, "r+b") as f:
            f.truncate(positions[3] + 10)
        segment.size = positions[3] + 10
        assert segment.recover(None) == 10
        assert segment.read_next_offset() == 3
        assert segment.max_timestamp_so_far == 3
        assert segment.offset_index.entry(segment.offset_index.entries - 1).offset == 2


class TestTruncate:
    def test_truncate_recomputes_max_timestamp(self, tmp_path: Path, clock: FakeClock) -> None:
        segment = new_segment(tmp_path, index_interval_bytes=2 * SIZE_ONE)
        fill(segment, [100, 400, 300, 200, 500, 600], clock)
        assert segment.truncate_to(4, clock()) == 2 * SIZE_ONE
        assert segment.read_next_offset() == 4
        assert segment.max_timestamp_so_far == 400
        assert segment.offset_of_max_timestamp_so_far == 1
        assert segment.truncate_to(0, clock()) == 4 * SIZE_ONE
        assert (segment.size, segment.max_timestamp_so_far, segment.offset_index.entries) == (
            0,
            -1,
            0,
        )

    def test_truncate_inside_a_batch_removes_the_whole_batch(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        segment = new_segment(tmp_path)
        data = batch([1, 2, 3])
        segment.append(data, read_header(data), clock())
        segment.truncate_to(1, clock())
        assert segment.size == 0


class TestRoll:
    """Each roll condition of kafka-mapping §5.8, at its boundary, through the log."""

    def test_segment_bytes(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, segment_bytes=3 * SIZE_ONE)
        for _ in range(3):
            log.append_as_leader(batch([clock()]), 0)
        assert len(log.segments) == 1  # size + incoming == segment.bytes: still fits
        log.append_as_leader(batch([clock()]), 0)
        assert [s.base_offset for s in log.segments] == [0, 3]

    def test_segment_ms_uses_record_timestamps(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, segment_ms=1000)
        t = clock()
        log.append_as_leader(batch([t]), 0)
        log.append_as_leader(batch([t + 1000]), 0)  # waited == segment.ms: no roll
        assert len(log.segments) == 1
        log.append_as_leader(batch([t + 1001]), 0)
        assert [s.base_offset for s in log.segments] == [0, 2]

    def test_empty_segment_never_rolls_on_time(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, segment_ms=10)
        clock.advance(10_000)
        log.append_as_leader(batch([clock()]), 0)
        assert len(log.segments) == 1

    def test_segment_ms_without_timestamps_uses_segment_age(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = open_log(tmp_path, clock, segment_ms=1000)
        log.append_as_leader(marker(), 0)  # first batch has no timestamp: age counts
        clock.advance(1000)
        log.append_as_leader(marker(), 0)
        assert len(log.segments) == 1
        clock.advance(1)
        log.append_as_leader(marker(), 0)
        assert [s.base_offset for s in log.segments] == [0, 2]

    def test_full_offset_index(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, index_interval_bytes=1, segment_index_bytes=2 * 12)
        # offset index: 3 entries; time index: 2 slots, one reserved -> full after 1 entry
        log.append_as_leader(batch([clock()]), 0)
        log.append_as_leader(batch([clock() + 1]), 0)  # first entry
        assert log.active_segment.time_index.is_full
        log.append_as_leader(batch([clock() + 2]), 0)
        assert [s.base_offset for s in log.segments] == [0, 2]
        assert log.segments[0].time_index.entries == 1  # the roll entry repeats (t+1, 1)

    def test_full_offset_index_with_a_roomy_time_index(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        # 4 offset entries, 3 time slots; equal timestamps add one time entry at most, so
        # only the offset index can fill up: after 5 appends (the first adds no entry).
        log = open_log(tmp_path, clock, index_interval_bytes=1, segment_index_bytes=36)
        for _ in range(6):
            log.append_as_leader(batch([clock()]), 0)
        assert [s.base_offset for s in log.segments] == [0, 5]
        assert log.segments[0].offset_index.entries == 4
        assert log.segments[0].time_index.entries == 1

    def test_relative_offset_overflow(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        log.append_as_follower(batch([1], base_offset=0))
        log.append_as_follower(batch([2], base_offset=INT32_MAX))  # still fits segment 0
        assert len(log.segments) == 1
        log.append_as_follower(batch([3, 3], base_offset=INT32_MAX + 1))  # last offset overflows
        assert [s.base_offset for s in log.segments] == [0, INT32_MAX + 1]
        assert log.log_end_offset == INT32_MAX + 3
        log.close()
        reopened = open_log(tmp_path, clock)
        assert reopened.fetch_offset_by_timestamp(3) == TimestampAndOffset(3, INT32_MAX + 1, -1)

    def test_overflow_replaces_an_empty_active_segment(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = open_log(tmp_path, clock)
        log.append_as_follower(batch([1], base_offset=2 * INT32_MAX))
        assert [s.base_offset for s in log.segments] == [2 * INT32_MAX]

    def test_roll_finalises_the_time_index(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, index_interval_bytes=10**6)
        log.append_as_leader(batch([5, 9, 7]), 0)
        assert log.active_segment.time_index.entries == 0
        log.roll()
        assert log.segments[0].time_index.last_entry() == (9, 2)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
