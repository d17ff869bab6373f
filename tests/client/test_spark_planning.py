"""Offset-range planning of the tidelog Spark source, against a dict standing in for the cluster:
bound resolution, minPartitions splitting, maxOffsetsPerTrigger by backlog, data loss. No JVM."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping

import pytest

from tidelog.errors import ConfigurationError
from tidelog.spark.options import (
    EarliestBound,
    GlobalTimestamp,
    LatestBound,
    SpecificOffsets,
    SpecificTimestamps,
)
from tidelog.spark.planning import (
    DataLossError,
    OffsetRange,
    batch_ranges,
    rate_limit,
    resolve_bound,
    split_ranges,
    stream_ranges,
)
from tidelog.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class FakeLookup:
    """Each partition holds offsets [earliest, latest) with record i stamped 1000 * i."""

    def __init__(self, logs: Mapping[TopicPartition, tuple[int, int]]) -> None:
        self.logs = dict(logs)
        self.asked: list[dict[TopicPartition, int]] = []

    def partitions(self) -> list[TopicPartition]:
        return sorted(self.logs)

    def offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        self.asked.append(dict(specs))
        out = {}
        for tp, spec in specs.items():
            earliest, latest = self.logs[tp]
            if spec == -2:
                out[tp] = earliest
            elif spec == -1:
                out[tp] = latest
            else:
                first = max(earliest, -(-spec // 1000))
                out[tp] = first if first < latest else -1
        return out

    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.logs[tp][0] for tp in tps if tp in self.logs}


LOOKUP = FakeLookup({A0: (0, 100), A1: (10, 40), B0: (0, 0)})
ALL = [A0, A1, B0]


def test_earliest_and_latest_bounds() -> None:
    assert resolve_bound(EarliestBound(), LOOKUP, ALL, starting=True) == {A0: 0, A1: 10, B0: 0}
    assert resolve_bound(LatestBound(), LOOKUP, ALL, starting=False) == {A0: 100, A1: 40, B0: 0}


def test_specific_offsets_resolve_only_the_sentinels() -> None:
    lookup = FakeLookup(LOOKUP.logs)
    bound = SpecificOffsets({A0: 23, A1: -2, B0: -1})
    assert resolve_bound(bound, lookup, ALL, starting=True) == {A0: 23, A1: 10, B0: 0}
    assert lookup.asked == [{A1: -2, B0: -1}]


def test_specific_offsets_must_name_every_partition() -> None:
    with pytest.raises(ConfigurationError, match=r"must specify all TopicPartitions.*a-1"):
        resolve_bound(SpecificOffsets({A0: 1}), LOOKUP, [A0, A1], starting=True)
    with pytest.raises(ConfigurationError, match="endingOffsetsByTimestamp"):
        resolve_bound(SpecificTimestamps({A0: 1}), LOOKUP, [A0, A1], starting=False)


def test_timestamps_resolve_by_lookup() -> None:
    assert resolve_bound(GlobalTimestamp(20_500), LOOKUP, [A0, A1], starting=True) == {
        A0: 21, A1: 21
    }
    bound = SpecificTimestamps({A0: 5_000, A1: 0})
    assert resolve_bound(bound, LOOKUP, [A0, A1], starting=True) == {A0: 5, A1: 10}


def test_unmatched_starting_timestamp_fails_or_starts_at_latest() -> None:
    late = GlobalTimestamp(50_000)  # past a-1's last record
    with pytest.raises(ConfigurationError, match="No offset matched from request of "
                       "topic-partition a-1 and timestamp 50000"):
        resolve_bound(late, LOOKUP, [A0, A1], starting=True)
    assert resolve_bound(late, LOOKUP, [A0, A1], starting=True, timestamp_latest=True) == {
        A0: 50, A1: 40
    }


def test_unmatched_ending_timestamp_ends_at_latest() -> None:
    assert resolve_bound(GlobalTimestamp(10**9), LOOKUP, [A0, A1], starting=False) == {
        A0: 100, A1: 40
    }


def test_batch_ranges_drop_empty_ones_and_refuse_backwards() -> None:
    ranges = batch_ranges({A0: 5, A1: 10, B0: 0}, {A0: 100, A1: 10, B0: 0}, None)
    assert ranges == [OffsetRange(A0, 5, 100)]
    with pytest.raises(ConfigurationError, match="Beginning offset 50 is after the ending"):
        batch_ranges({A0: 50}, {A0: 40}, None)


def test_split_keeps_ranges_when_there_are_enough() -> None:
    ranges = [OffsetRange(A0, 0, 1000), OffsetRange(A1, 0, 10)]
    assert split_ranges(ranges, 2) == ranges
    assert split_ranges(ranges, None) == ranges


def test_split_is_proportional_to_size_like_sparks_calculator() -> None:
    # Spark's KafkaOffsetRangeCalculatorSuite, "N skewed TopicPartitions to M partitions":
    # sizes 4 and 20 with minPartitions 4 give 1 + 3 ranges, the rounding going to the last.
    ranges = [OffsetRange(A0, 1, 5), OffsetRange(A1, 1, 21)]
    assert split_ranges(ranges, 4) == [
        OffsetRange(A0, 1, 5),
        OffsetRange(A1, 1, 7),
        OffsetRange(A1, 7, 14),
        OffsetRange(A1, 14, 21),
    ]
    # One big range: cut into minPartitions pieces covering it exactly.
    pieces = split_ranges([OffsetRange(A0, 0, 1_000_001)], 8)
    assert len(pieces) == 8
    assert pieces[0].start == 0 and pieces[-1].end == 1_000_001
    assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
    assert max(p.size for p in pieces) - min(p.size for p in pieces) <= 1


def test_split_rounds_half_up_as_scala_does() -> None:
    # ideal = 12 / 8 = 1.5; size 3 -> 2 pieces, size 9 -> round(6.0) = 6 pieces.
    pieces = split_ranges([OffsetRange(A0, 0, 3), OffsetRange(A1, 0, 9)], 8)
    assert [p.tp for p in pieces].count(A0) == 2
    assert [p.tp for p in pieces].count(A1) == 6
    # size 0.75 of ideal rounds to 1 piece, never 0.
    assert split_ranges([OffsetRange(A0, 0, 3), OffsetRange(A1, 0, 1)], 3)[-1] == OffsetRange(
        A1, 0, 1
    )


def test_rate_limit_shares_by_backlog() -> None:
    start = {A0: 0, A1: 0}
    latest = {A0: 900, A1: 100}
    assert rate_limit(100, start, latest, LOOKUP.earliest) == {A0: 90, A1: 10}


def test_rate_limit_never_starves_a_small_partition() -> None:
    start = {A0: 0, A1: 0}
    latest = {A0: 10_000, A1: 1}
    # A1's share is 10 * 1/10001 < 1: ceil gives it one offset.
    assert rate_limit(10, start, latest, LOOKUP.earliest) == {A0: 9, A1: 1}


def test_rate_limit_caps_at_latest_and_passes_through_without_backlog() -> None:
    assert rate_limit(1000, {A0: 0}, {A0: 5}, LOOKUP.earliest) == {A0: 5}
    assert rate_limit(10, {A0: 7}, {A0: 7}, LOOKUP.earliest) == {A0: 7}


def test_rate_limit_counts_new_partitions_from_earliest() -> None:
    # A1 is new: its backlog is 40 - 10 (its earliest) = 30, A0's is 10.
    assert rate_limit(20, {A0: 90}, {A0: 100, A1: 40}, LOOKUP.earliest) == {A0: 95, A1: 25}


def test_stream_ranges_between_logged_offsets() -> None:
    ranges = stream_ranges({A0: 10, A1: 10}, {A0: 20, A1: 10}, LOOKUP.earliest,
                           fail_on_data_loss=True, min_partitions=None)
    assert ranges == [OffsetRange(A0, 10, 20)]


def test_stream_ranges_start_new_partitions_at_earliest() -> None:
    lookup = FakeLookup({A0: (0, 100), B0: (0, 5)})
    ranges = stream_ranges({A0: 100}, {A0: 100, B0: 5}, lookup.earliest,
                           fail_on_data_loss=True, min_partitions=None)
    assert ranges == [OffsetRange(B0, 0, 5)]


def test_new_partition_not_starting_at_zero_is_data_loss() -> None:
    with pytest.raises(DataLossError, match="Added partition a-1 starts from 10 instead of 0"):
        stream_ranges({A0: 0}, {A0: 1, A1: 40}, LOOKUP.earliest,
                      fail_on_data_loss=True, min_partitions=None)


def test_deleted_partitions_are_data_loss() -> None:
    with pytest.raises(DataLossError, match=r"\[a-1\] are gone.*failOnDataLoss' to 'false'"):
        stream_ranges({A0: 0, A1: 5}, {A0: 1}, LOOKUP.earliest,
                      fail_on_data_loss=True, min_partitions=None)


def test_offsets_going_backwards_fail_or_warn(caplog: pytest.LogCaptureFixture) -> None:
    """A topic deleted and re-created behind a running query."""
    with pytest.raises(DataLossError, match="a-0's offset was changed from 50 to 3"):
        stream_ranges({A0: 50}, {A0: 3}, LOOKUP.earliest,
                      fail_on_data_loss=True, min_partitions=None)
    with caplog.at_level(logging.WARNING, logger="tidelog.spark.planning"):
        ranges = stream_ranges({A0: 50, A1: 0}, {A0: 3, A1: 4}, LOOKUP.earliest,
                               fail_on_data_loss=False, min_partitions=None)
    assert ranges == [OffsetRange(A1, 0, 4)]
    assert "failOnDataLoss' to 'true'" in caplog.text


def test_stream_ranges_apply_min_partitions() -> None:
    ranges = stream_ranges({A0: 0}, {A0: 100}, LOOKUP.earliest,
                           fail_on_data_loss=True, min_partitions=4)
    assert [r.size for r in ranges] == [25, 25, 25, 25]
