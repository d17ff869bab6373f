"""The partition log: appends, reads, truncation, offsets, lookups against brute force,
retention, checkpoints, clean reopen and segment replacement."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import shutil
from pathlib import Path

import pytest
from storage_helpers import (
    T0,
    FakeClock,
    all_records,
    assert_lookups_match_brute_force,
    batch,
    batch_bounds,
    marker,
    open_log,
)

from tidelog.errors import (
    CorruptMessageError,
    InvalidConfigError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnsupportedVersionError,
)
from tidelog.records import (
    MAX_BATCH_BYTES,
    TimestampType,
    crc_matches,
    iter_batches,
    read_header,
)
from tidelog.storage import (
    CLEANED_SUFFIX,
    Log,
    LogConfig,
    LogSegment,
    OffsetsOutOfOrderError,
    TimestampAndOffset,
    UnexpectedAppendOffsetError,
)
from tidelog.storage.loader import CLEAN_SHUTDOWN_FILE


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def dir_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.iterdir()}


class TestAppend:
    def test_leader_assigns_offsets_and_epoch(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        assert log.append_as_leader(batch([T0, T0]), 3) == (0, 1, -1, 0)
        assert log.append_as_leader(batch([T0], base_offset=77), 4) == (2, 2, -1, 0)
        data = log.read(0, 1 << 20)
        headers = [h for _, h in iter_batches(data)]
        assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 3), (2, 4)]
        assert all(crc_matches(data, p, h) for p, h in iter_batches(data))
        assert log.leader_epoch_cache.entries == [(3, 0), (4, 2)]
        assert log.log_end_offset == 3

    def test_log_append_time(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
        info = log.append_as_leader(batch([1, 2]), 0)  # ancient CreateTime: not validated
        assert info.log_append_time_ms == clock.now
        log.append_as_leader(marker(), 0)  # a marker keeps its missing timestamp
        assert [r.timestamp for r in all_records(log)] == [clock.now, clock.now, -1]
        header = read_header(log.read(0, 1 << 20)[: len(batch([1, 2]))])
        assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert log.fetch_max_timestamp() == TimestampAndOffset(clock.now, 0, 0)

    @pytest.mark.parametrize(
        ("data", "config", "error"),
        [
            (batch([T0], value_size=200), {"max_message_bytes": 200}, MessageTooLargeError),
            (batch([T0], value_size=200), {"segment_bytes": 200}, RecordListTooLargeError),
            (batch([T0 - 1001]), {"message_timestamp_before_max_ms": 1000}, InvalidTimestampError),
            (batch([T0 + 1001]), {"message_timestamp_after_max_ms": 1000}, InvalidTimestampError),
            (batch([T0])[:-1] + b"\x01", {}, CorruptMessageError),
            (batch([T0]) + batch([T0]), {}, CorruptMessageError),
        ],
    )
    def test_bad_input_writes_nothing(
        self,
        tmp_path: Path,
        clock: FakeClock,
        data: bytes,
        config: dict[str, int],
        error: type[Exception],
    ) -> None:
        log = open_log(tmp_path, clock, **config)
        log.append_as_leader(batch([T0]), 0)
        before = dir_sizes(tmp_path)
        with pytest.raises(error):
            log.append_as_leader(data, 0)
        assert (log.log_end_offset, dir_sizes(tmp_path)) == (1, before)

    def test_error_codes(self) -> None:
        assert (RecordListTooLargeError.code, InvalidTimestampError.code) == (18, 32)

    def test_no_batch_above_the_node_cap_whatever_the_topic_allows(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        """Node-to-node and client messages are sized for MAX_BATCH_BYTES; a topic configured
        for more must not take a batch they could not carry."""
        log = open_log(tmp_path, clock, max_message_bytes=2**31 - 1)
        with pytest.raises(MessageTooLargeError, match="largest batch a node accepts"):
            log.validate_produced_batch(bytes(MAX_BATCH_BYTES + 1), from_client=True)

    def test_follower_appends_given_offsets(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        data = (
            batch([1, 2], base_offset=0, epoch=1)
            + marker(2, epoch=2)
            + batch([3], base_offset=3, epoch=2)
        )
        assert log.append_as_follower(data) == (0, 3, -1, 0)
        assert log.read(0, 1 << 20) == data
        assert log.leader_epoch_cache.entries == [(1, 0), (2, 2)]
        log.append_as_follower(batch([4], base_offset=10, epoch=2))  # a gap is allowed
        assert log.log_end_offset == 11

    @pytest.mark.parametrize(
        ("data", "error"),
        [
            (batch([1], base_offset=1), UnexpectedAppendOffsetError),  # below the LEO
            (batch([1], base_offset=2) + batch([1], base_offset=2), OffsetsOutOfOrderError),
            (batch([1], base_offset=5) + batch([1], base_offset=3), OffsetsOutOfOrderError),
            (batch([1], base_offset=2) + batch([1], base_offset=3)[:-3], CorruptMessageError),
            (batch([1], base_offset=2)[:-1] + b"\x07", CorruptMessageError),
        ],
    )
    def test_follower_rejects_without_writing(
        self, tmp_path: Path, clock: FakeClock, data: bytes, error: type[Exception]
    ) -> None:
        log = open_log(tmp_path, clock)
        log.append_as_follower(batch([1, 1], base_offset=0))
        before = dir_sizes(tmp_path)
        with pytest.raises(error):
            log.append_as_follower(data)
        assert (log.log_end_offset, dir_sizes(tmp_path)) == (2, before)

    @pytest.mark.parametrize("timestamp_type", list(TimestampType))
    def test_a_leader_append_in_steps_writes_what_append_as_leader_writes(
        self, tmp_path: Path, clock: FakeClock, timestamp_type: TimestampType
    ) -> None:
        """A replicated leader validates, stamps and writes at three times
        (`validate_produced_batch`, `stamp`, `append_stamped`): the same bytes as at once."""
        at_once = open_log(tmp_path / "a", clock, message_timestamp_type=timestamp_type)
        in_steps = open_log(tmp_path / "b", clock, message_timestamp_type=timestamp_type)
        for produced, epoch in [(batch([T0, T0 + 1]), 1), (marker(), 2), (batch([T0 + 2]), 2)]:
            info = at_once.append_as_leader(produced, epoch)
            in_steps.validate_produced_batch(produced, from_client=False)
            stamped = in_steps.stamp(produced, in_steps.log_end_offset, epoch)
            assert in_steps.append_stamped(stamped)[:2] == info[:2]
            clock.advance(7)
        assert in_steps.read(0, 1 << 20) == at_once.read(0, 1 << 20)
        stamps = [read_header(d).max_timestamp for d in (batch([T0]), marker())]
        if timestamp_type is TimestampType.LOG_APPEND_TIME:
            stamps[0] = clock.now
        assert [
            read_header(in_steps.stamp(d, 0, 0), 0).max_timestamp for d in (batch([T0]), marker())
        ] == stamps

    def test_stamped_appends_continue_the_log(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        log.append_stamped(batch([T0, T0], base_offset=0, epoch=1))
        with pytest.raises(UnexpectedAppendOffsetError):
            log.append_stamped(batch([T0], base_offset=1, epoch=1))
        assert log.log_end_offset == 2

    def test_flush_messages_policy(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, flush_messages=3)
        log.append_as_leader(batch([T0, T0]), 0)
        assert log.recovery_point == 0
        log.append_as_leader(batch([T0]), 0)
        assert log.recovery_point == 3


class TestRead:
    @pytest.fixture
    def log(self, tmp_path: Path, clock: FakeClock) -> Log:
        log = open_log(
            tmp_path, clock, segment_bytes=4 * len(batch([T0] * 3)), index_interval_bytes=1
        )
        for i in range(10):  # batches of 3 records: 0-2, 3-5, ..., 27-29
            log.append_as_leader(batch([T0 + i] * 3), 0)
        return log

    def test_batches_from_the_one_holding_the_offset(self, log: Log) -> None:
        size = len(batch([T0] * 3))
        data = log.read(4, 2 * size)
        assert [(h.base_offset, h.last_offset) for _, h in iter_batches(data)] == [(3, 5), (6, 8)]
        assert len(log.read(4, 2 * size - 1)) == size  # whole batches only

    def test_across_segments_and_bounds(self, log: Log) -> None:
        assert len(log.segments) == 3
        assert batch_bounds(log)[-1] == (27, 29)
        data = log.read(0, 1 << 20, upper_bound=15)
        assert [h.last_offset for _, h in iter_batches(data)] == [2, 5, 8, 11, 14]
        data = log.read(0, 1 << 20, upper_bound=16)  # a batch straddling the bound is left out
        assert [h.last_offset for _, h in iter_batches(data)][-1] == 14
        assert log.read(15, 1 << 20, upper_bound=15) == b""
        assert log.read(30, 100) == b""

    def test_at_least_one_batch(self, log: Log) -> None:
        assert len(log.read(0, 1)) == len(batch([T0] * 3))
        assert log.read(0, 1, min_one_batch=False) == b""

    def test_out_of_range(self, log: Log) -> None:
        with pytest.raises(OffsetOutOfRangeError):
            log.read(31, 100)
        log.update_high_watermark(30)
        log.maybe_increment_log_start_offset(6)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(5, 100)
        assert read_header(log.read(6, 1)).base_offset == 6

    def test_offset_position(self, log: Log) -> None:
        size = len(batch([T0] * 3))
        assert log.offset_position(0) == (0, 0, 0)
        assert log.offset_position(5) == (0, 3, size)
        assert log.offset_position(13) == (12, 12, 0)
        assert log.offset_position(29) == (24, 27, size)
        assert log.offset_position(30) is None


class TestOffsetsAndTruncation:
    def test_high_watermark_stays_in_range(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        log.append_as_leader(batch([T0] * 5), 0)
        assert log.update_high_watermark(10) == 5
        assert log.update_high_watermark(-3) == 0
        assert log.update_high_watermark(3) == 3
        with pytest.raises(OffsetOutOfRangeError):
            log.maybe_increment_log_start_offset(4)  # above the HW
        assert log.maybe_increment_log_start_offset(2)
        assert log.update_high_watermark(0) == 2

    def test_truncate_to(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, segment_bytes=2 * len(batch([T0, T0])))
        for epoch in range(5):  # batches [0,1] [2,3] ... [8,9], one epoch each
            log.append_as_leader(batch([T0 + epoch, T0 + epoch]), epoch)
        log.update_high_watermark(10)
        assert [s.base_offset for s in log.segments] == [0, 4, 8]
        assert not log.truncate_to(10)
        assert log.truncate_to(4)
        assert [s.base_offset for s in log.segments] == [0, 4]
        assert (log.log_end_offset, log.high_watermark) == (4, 4)
        assert log.leader_epoch_cache.entries == [(0, 0), (1, 2)]
        assert log.fetch_max_timestamp() == TimestampAndOffset(T0 + 1, 2, 1)
        log.append_as_leader(batch([T0 + 9]), 7)
        assert log.leader_epoch_cache.entries == [(0, 0), (1, 2), (7, 4)]
        assert [s.base_offset for s in log.segments] == [0, 4]
        assert log.truncate_to(3)  # inside batch [2,3]: the whole batch goes
        assert log.log_end_offset == 2

    def test_truncate_below_first_segment_and_fully(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        log.truncate_fully_and_start_at(100)
        log.append_as_leader(batch([T0]), 1)
        assert (log.log_start_offset, log.log_end_offset) == (100, 101)
        assert log.truncate_to(50)
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (50, 50, 50)
        assert log.leader_epoch_cache.entries == []
        assert [s.base_offset for s in log.segments] == [50]

    def test_fetch_earliest_epoch(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        assert log.fetch_earliest() == (-1, 0, -1)
        log.append_as_leader(batch([T0]), 4)
        log.append_as_leader(batch([T0]), 6)
        assert log.fetch_earliest() == (-1, 0, 4)
        log.update_high_watermark(2)
        log.maybe_increment_log_start_offset(1)
        assert log.fetch_earliest() == (-1, 1, 6)  # the epoch cache was cut at the start


def random_log(tmp_path: Path, clock: FakeClock, seed: int, n: int = 300) -> Log:
    rng = random.Random(seed)
    log = open_log(
        tmp_path,
        clock,
        segment_bytes=rng.choice([600, 2000, 10**6]),
        index_interval_bytes=rng.choice([0, 100, 500]),
    )
    for _ in range(n):
        if rng.random() < 0.1:
            log.append_as_leader(marker(), rng.randrange(3))
        else:
            count = rng.randrange(1, 5)
            stamps = [T0 + rng.randrange(-50, 1000) for _ in range(count)]
            log.append_as_leader(
                batch(stamps, rng.randrange(0, 40)), log.latest_epoch + rng.randrange(2)
            )
    return log


class TestLookups:
    @pytest.mark.parametrize("seed", range(6))
    def test_equal_brute_force(self, tmp_path: Path, clock: FakeClock, seed: int) -> None:
        log = random_log(tmp_path, clock, seed)
        assert_lookups_match_brute_force(log)
        log.update_high_watermark(log.log_end_offset)
        log.maybe_increment_log_start_offset(log.log_end_offset // 3 + 1)
        assert_lookups_match_brute_force(log)
        log.close()
        assert_lookups_match_brute_force(open_log(tmp_path, clock))

    def test_non_monotonic_timestamps(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock, index_interval_bytes=1)
        for ts in [0, 1, 2, 3, 4, 6, 5]:
            log.append_as_leader(batch([T0 + ts]), 2)
        assert log.fetch_offset_by_timestamp(T0 + 5) == TimestampAndOffset(T0 + 6, 5, 2)
        assert log.fetch_offset_by_timestamp(T0 + 7) is None
        assert log.fetch_max_timestamp() == TimestampAndOffset(T0 + 6, 5, 2)

    def test_max_timestamp_earliest_record_and_segment_wins_ties(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = open_log(tmp_path, clock)
        log.append_as_leader(batch([T0, T0 + 9, T0 + 9]), 1)
        log.roll()
        log.append_as_leader(batch([T0 + 9]), 2)
        assert log.fetch_max_timestamp() == TimestampAndOffset(T0 + 9, 1, 1)

    def test_control_batches_never_answer(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        log.append_as_leader(marker(), 1)
        assert log.fetch_max_timestamp() is None
        assert log.fetch_offset_by_timestamp(0) is None
        log.append_as_leader(batch([T0]), 1)
        assert log.fetch_offset_by_timestamp(0) == TimestampAndOffset(T0, 1, 1)

    def test_negative_target_is_for_the_caller(self, tmp_path: Path, clock: FakeClock) -> None:
        with pytest.raises(ValueError):
            open_log(tmp_path, clock).fetch_offset_by_timestamp(-1)


class TestLegacyOffsetsBefore:
    """kafka-mapping §3 worked examples: segments of 2 records, LEO 20."""

    @pytest.fixture
    def log(self, tmp_path: Path, clock: FakeClock) -> Log:
        log = open_log(tmp_path, clock, segment_bytes=2 * len(batch([T0])))
        for _ in range(20):
            clock.advance(10)
            log.append_as_leader(batch([clock.now]), 0)
        log.update_high_watermark(20)
        return log

    def test_latest_earliest(self, log: Log) -> None:
        assert log.offsets_before(-1, 15) == [20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0]
        assert log.offsets_before(-2, 10) == [0]
        assert log.offsets_before(-1, 1) == [20]
        with pytest.raises(UnsupportedVersionError):
            log.offsets_before(-3, 1)

    def test_after_log_start_moves_and_retention(self, log: Log) -> None:
        log.maybe_increment_log_start_offset(3)
        log.delete_old_segments()
        assert log.offsets_before(-1, 15) == [20, 18, 16, 14, 12, 10, 8, 6, 4, 3]

    def test_by_last_modified_time(self, log: Log, clock: FakeClock) -> None:
        # segment i (base 2i) was last written at T0 + 20i + 20
        assert log.offsets_before(T0 + 60, 2) == [4, 2]
        assert log.offsets_before(T0 + 59, 5) == [2, 0]
        assert log.offsets_before(T0, 5) == []
        assert log.offsets_before(clock.now, 1) == [20]  # the LEO pair carries "now"

    def test_consumer_cap_at_high_watermark(self, log: Log) -> None:
        log.update_high_watermark(15)
        assert log.offsets_before(-1, 3, cap_at_high_watermark=True) == [15]
        assert log.offsets_before(-1, 6, cap_at_high_watermark=True) == [15, 14, 12, 10]
        assert log.offsets_before(-1, 3) == [20, 18, 16]

    def test_last_modified_is_persisted_not_mtime(self, log: Log, tmp_path: Path) -> None:
        expected = log.offsets_before(T0 + 60, 2)
        log.close()
        for path in tmp_path.iterdir():
            os.utime(path, (0, 0))
        reopened = open_log(tmp_path, FakeClock(T0 + 10**6), segment_bytes=2 * len(batch([T0])))
        assert reopened.offsets_before(T0 + 60, 2) == expected


class TestRetention:
    def make(self, tmp_path: Path, clock: FakeClock, **config: object) -> Log:
        log = open_log(tmp_path, clock, segment_bytes=2 * len(batch([T0])), **config)
        for i in range(10):  # 5 segments of 2 records; segment k holds timestamps T0+2k, +2k+1
            log.append_as_leader(batch([T0 + i]), 0)
        return log

    def test_never_at_or_above_high_watermark(self, tmp_path: Path, clock: FakeClock) -> None:
        log = self.make(tmp_path, clock, retention_bytes=0)
        log.update_high_watermark(5)
        assert log.delete_old_segments() == 2  # [0,2) and [2,4); [4,6) reaches the HW
        assert (log.log_start_offset, log.segments[0].base_offset) == (4, 4)

    def test_everything_deletable_rolls_first(self, tmp_path: Path, clock: FakeClock) -> None:
        log = self.make(tmp_path, clock, retention_bytes=0)
        log.update_high_watermark(10)
        assert log.delete_old_segments() == 5
        assert [s.base_offset for s in log.segments] == [10]
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (10, 10, 10)
        assert log.delete_old_segments() == 0  # an empty active segment stays

    def test_retention_bytes(self, tmp_path: Path, clock: FakeClock) -> None:
        size = len(batch([T0]))
        log = self.make(tmp_path, clock, retention_bytes=5 * size)
        log.update_high_watermark(10)
        assert log.delete_old_segments() == 2  # 10 records -> 6: whole segments only
        assert log.size == 6 * size

    def test_retention_ms_prefix_only(self, tmp_path: Path, clock: FakeClock) -> None:
        log = self.make(tmp_path, clock, retention_ms=1000)
        log.update_high_watermark(10)
        clock.now = T0 + 1003  # segments with max timestamp < T0 + 3 are older than 1000 ms
        assert log.delete_old_segments() == 1
        clock.now = T0 + 1010
        log.append_as_leader(batch([T0 + 10**6]), 0)  # a future timestamp keeps its segment
        log.update_high_watermark(11)
        assert log.delete_old_segments() == 4
        assert [s.base_offset for s in log.segments] == [10]
        assert log.log_start_offset == 10

    def test_compact_only_deletes_below_log_start(self, tmp_path: Path, clock: FakeClock) -> None:
        log = self.make(tmp_path, clock, retention_bytes=0)
        # unkeyed records could not be appended to a compacted topic: the policy changes after
        log.config = dataclasses.replace(log.config, cleanup_policy=frozenset({"compact"}))
        log.update_high_watermark(10)
        assert log.delete_old_segments() == 0
        log.maybe_increment_log_start_offset(5)
        assert log.delete_old_segments() == 2
        assert log.log_start_offset == 5


def test_rolls_truncations_and_deletions_are_logged_for_operators(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 17's storage events: a segment roll, a truncation of a diverged suffix and the
    deletion of segments each make one INFO line naming the partition's directory."""
    caplog.set_level(logging.INFO, logger="tidelog.storage")
    log = open_log(tmp_path / "events-0", clock, segment_bytes=2 * len(batch([T0])),
                   retention_bytes=0)
    for i in range(5):  # segments [0,2) [2,4) [4,5)
        log.append_as_leader(batch([T0 + i]), 0)
    assert log.truncate_to(4)
    log.update_high_watermark(4)
    assert log.delete_old_segments() == 2
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    size = 2 * len(batch([T0]))
    assert (logging.INFO, f"events-0: rolled the segment at 0 ({size} bytes); the next starts "
            "at 2") in lines, lines
    assert (logging.INFO, "events-0: truncated to offset 4 (the log end was 5): it diverged "
            "from the leader's") in lines, lines
    assert any(level == logging.INFO and m.startswith(
        "events-0: deleted 2 segment(s) from 0 to 4 (") for level, m in lines), lines


class TestReopen:
    def test_checkpoints_restore_offsets(self, tmp_path: Path, clock: FakeClock) -> None:
        log = open_log(tmp_path, clock)
        log.append_as_leader(batch([T0] * 10), 2)
        log.update_high_watermark(8)
        log.maybe_increment_log_start_offset(3)
        log.close()
        log = open_log(tmp_path, clock)
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (3, 8, 10)
        assert (log.recovery_point, log.leader_epoch_cache.entries) == (10, [(2, 3)])

    def test_clean_reopen_does_not_recover(
        self, tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = random_log(tmp_path, clock, seed=1)
        end = log.log_end_offset
        log.close()
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        index_bytes = {p.name: p.read_bytes() for p in tmp_path.glob("*index")}

        def forbidden(*args: object) -> int:
            raise AssertionError("a clean shutdown must not trigger recovery")

        monkeypatch.setattr(LogSegment, "recover", forbidden)
        log = open_log(tmp_path, clock)
        assert log.log_end_offset == end
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is detected
        assert {p.name: p.read_bytes() for p in tmp_path.glob("*index")} == index_bytes

    def test_unclean_reopen_scans_from_the_recovery_point(
        self, tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        log = open_log(tmp_path, clock, segment_bytes=3 * len(batch([T0])))
        for _ in range(7):
            log.append_as_leader(batch([T0]), 0)
        log.flush()
        log.checkpoint()
        log.append_as_leader(batch([T0]), 0)
        crashed = tmp_path.parent / "crashed"
        shutil.copytree(tmp_path, crashed)  # what the disk holds if the process dies now
        scanned: list[int] = []
        original = LogSegment.recover

        def spy(segment: LogSegment, cache: object) -> int:
            scanned.append(segment.base_offset)
            return original(segment, cache)  # type: ignore[arg-type]

        monkeypatch.setattr(LogSegment, "recover", spy)
        reopened = open_log(crashed, clock, segment_bytes=3 * len(batch([T0])))
        assert scanned == [6]
        assert reopened.log_end_offset == 8
        assert reopened.recovery_point == 7


def test_replace_segments_and_swap_completion(tmp_path: Path, clock: FakeClock) -> None:
    size = len(batch([T0]))
    log = open_log(tmp_path, clock, segment_bytes=2 * size)
    for i in range(6):
        log.append_as_leader(batch([T0 + i]), 0)
    old = log.segments[:2]  # offsets 0-3
    cleaned = LogSegment.create(tmp_path, 0, log.config, clock(), temp_suffix=CLEANED_SUFFIX)
    for data in (batch([T0 + 1], base_offset=1), batch([T0 + 3], base_offset=3)):
        cleaned.append(data, read_header(data), clock())
    log.replace_segments([cleaned], old)
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert [r.offset for r in all_records(log)] == [1, 3, 4, 5]
    assert not list(tmp_path.glob(f"*{CLEANED_SUFFIX}")) and not list(tmp_path.glob("*.swap"))
    log.close()
    assert [r.offset for r in all_records(open_log(tmp_path, clock))] == [1, 3, 4, 5]


def test_crash_during_swap_completes_it(tmp_path: Path, clock: FakeClock) -> None:
    size = len(batch([T0]))
    log = open_log(tmp_path, clock, segment_bytes=2 * size)
    for i in range(6):
        log.append_as_leader(batch([T0 + i]), 0)
    log.close()
    leftover = LogSegment.create(tmp_path, 2, log.config, clock(), temp_suffix=CLEANED_SUFFIX)
    swap = LogSegment.create(tmp_path, 0, log.config, clock(), temp_suffix=CLEANED_SUFFIX)
    data = batch([T0 + 2], base_offset=2)
    swap.append(data, read_header(data), clock())
    swap.flush()
    swap.change_temp_suffix(".swap")  # the crash: renamed, old segments not yet deleted
    swap.close_handles()
    leftover.close_handles()
    log = open_log(tmp_path, clock)
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert [r.offset for r in all_records(log)] == [2, 4, 5]
    # (the producer-state snapshot taken when offset 2 rolled is not a segment file: it stays)
    left = sorted(p.suffix for p in tmp_path.glob("00000000000000000002.*"))
    assert left in ([], [".snapshot"])


class TestConfig:
    def test_from_kafka_props(self) -> None:
        config = LogConfig.from_kafka_props(
            {
                "segment.bytes": "1048576",
                "message.timestamp.type": "LogAppendTime",
                "cleanup.policy": "compact,delete",
                "retention.ms": "-1",
            }
        )
        assert config.segment_bytes == 1048576
        assert config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
        assert config.delete_enabled and config.compact_enabled
        assert LogConfig.from_kafka_props(config.to_kafka_props()) == config

    @pytest.mark.parametrize(
        "props",
        [
            {"retention.m": "1"},
            {"segment.bytes": "ten"},
            {"segment.bytes": "13"},
            {"segment.bytes": str(2**31)},
            {"message.timestamp.type": "BrokerTime"},
            {"cleanup.policy": "delete,forever"},
            {"retention.ms": "-2"},
        ],
    )
    def test_invalid(self, props: dict[str, str]) -> None:
        with pytest.raises(InvalidConfigError) as excinfo:
            LogConfig.from_kafka_props(props)
        assert next(iter(props)) in str(excinfo.value)
