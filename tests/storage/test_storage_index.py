"""Offset, time and transaction indexes at the boundaries of kafka-mapping §5.3, §5.5, §5.7."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.storage import (
    AbortedTxn,
    CorruptIndexError,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
)

BASE = 100


@pytest.fixture
def offset_index(tmp_path: Path) -> OffsetIndex:
    index = OffsetIndex.create(tmp_path / f"{BASE:020d}.index", BASE, 10 * 8)
    for offset, position in [(110, 1000), (120, 2000), (130, 3000)]:
        index.append(offset, position)
    return index


@pytest.fixture
def time_index(tmp_path: Path) -> TimeIndex:
    index = TimeIndex.create(tmp_path / f"{BASE:020d}.timeindex", BASE, 10 * 12)
    for ts, offset in [(1000, 110), (2000, 120), (3000, 130)]:
        index.maybe_append(ts, offset)
    return index


class TestOffsetIndex:
    @pytest.mark.parametrize(
        ("target", "expected"),
        [
            (BASE, (BASE, 0)),  # below the first entry: the segment start
            (109, (BASE, 0)),
            (110, (110, 1000)),  # exact hit
            (115, (110, 1000)),  # between entries: the one below
            (120, (120, 2000)),
            (129, (120, 2000)),
            (130, (130, 3000)),
            (10**9, (130, 3000)),  # beyond the end: the last entry
        ],
    )
    def test_lookup(
        self, offset_index: OffsetIndex, target: int, expected: tuple[int, int]
    ) -> None:
        assert offset_index.lookup(target) == OffsetPosition(*expected)

    def test_empty_index_lookup_is_segment_start(self, tmp_path: Path) -> None:
        index = OffsetIndex.create(tmp_path / "x.index", BASE, 80)
        assert index.lookup(BASE + 5) == OffsetPosition(BASE, 0)

    def test_file_is_big_endian_relative_entries_not_preallocated(
        self, offset_index: OffsetIndex
    ) -> None:
        data = offset_index.file.path.read_bytes()
        assert len(data) == 3 * 8
        assert data[:8] == (10).to_bytes(4, "big") + (1000).to_bytes(4, "big")

    def test_append_must_increase(self, offset_index: OffsetIndex) -> None:
        with pytest.raises(ValueError):
            offset_index.append(130, 4000)
        with pytest.raises(ValueError):
            offset_index.append(99, 4000)  # below the base offset
        assert offset_index.entries == 3

    def test_full(self, tmp_path: Path) -> None:
        index = OffsetIndex.create(tmp_path / "x.index", 0, 2 * 8 + 7)  # rounds down: 2 entries
        index.append(1, 10)
        assert not index.is_full
        index.append(2, 20)
        assert index.is_full
        with pytest.raises(ValueError):
            index.append(3, 30)

    def test_truncate_removes_entries_at_or_above(self, offset_index: OffsetIndex) -> None:
        offset_index.truncate_to(120)
        assert offset_index.entries == 1
        assert offset_index.lookup(125) == OffsetPosition(110, 1000)
        assert offset_index.file.path.stat().st_size == 8
        offset_index.append(115, 1500)  # appending resumes after the cut

    def test_load_round_trip_and_read_entries(self, offset_index: OffsetIndex) -> None:
        path = offset_index.file.path
        loaded = OffsetIndex.load(path, BASE, 80, offset_limit=131, position_limit=3001)
        assert [loaded.entry(i) for i in range(3)] == OffsetIndex.read_entries(path)
        assert OffsetIndex.read_entries(path) == [(110, 1000), (120, 2000), (130, 3000)]

    @pytest.mark.parametrize(
        ("damage", "limits"),
        [
            (lambda d: d + b"\x00\x00\x00", {}),  # trailing partial entry
            (lambda d: d[:8] + d[:8], {}),  # repeated entry: not increasing
            (lambda d: d[8:16] + d[:8], {}),  # decreasing
            (lambda d: d, {"offset_limit": 130}),  # entry for an offset the segment cannot hold
            (lambda d: d, {"position_limit": 3000}),  # points past the end of the .log
        ],
    )
    def test_load_detects_corruption(
        self, offset_index: OffsetIndex, damage: object, limits: dict[str, int]
    ) -> None:
        path = offset_index.file.path
        path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
        with pytest.raises(CorruptIndexError):
            OffsetIndex.load(path, BASE, 80, **limits)


class TestTimeIndex:
    @pytest.mark.parametrize(
        ("target", "expected"),
        [
            (0, (-1, BASE)),  # below the first entry
            (999, (-1, BASE)),
            (1000, (1000, 110)),  # exact
            (1500, (1000, 110)),  # between
            (3000, (3000, 130)),
            (10**15, (3000, 130)),  # beyond
        ],
    )
    def test_lookup(self, time_index: TimeIndex, target: int, expected: tuple[int, int]) -> None:
        assert time_index.lookup(target) == TimestampOffset(*expected)

    def test_never_records_a_smaller_or_equal_timestamp(self, time_index: TimeIndex) -> None:
        time_index.maybe_append(3000, 140)  # equal timestamp: silently ignored
        assert time_index.entries == 3
        with pytest.raises(ValueError):
            time_index.maybe_append(2500, 150)  # smaller timestamp is a caller bug
        with pytest.raises(ValueError):
            time_index.maybe_append(4000, 125)  # smaller offset too
        assert time_index.last_entry() == TimestampOffset(3000, 130)

    def test_no_timestamp_never_enters(self, tmp_path: Path) -> None:
        index = TimeIndex.create(tmp_path / "x.timeindex", BASE, 120)
        index.maybe_append(-1, BASE + 3)
        assert index.entries == 0
        assert index.last_entry() == TimestampOffset(-1, BASE)

    def test_one_slot_reserved_for_the_roll_entry(self, tmp_path: Path) -> None:
        index = TimeIndex.create(tmp_path / "x.timeindex", 0, 3 * 12)
        index.maybe_append(1, 1)
        assert not index.is_full
        index.maybe_append(2, 2)
        assert index.is_full  # entries >= max_entries - 1
        with pytest.raises(ValueError):
            index.maybe_append(3, 3)
        index.maybe_append(3, 3, skip_full_check=True)
        assert index.entries == 3

    def test_truncate(self, time_index: TimeIndex) -> None:
        time_index.truncate_to(121)
        assert time_index.last_entry() == TimestampOffset(2000, 120)
        time_index.truncate_to(BASE)
        assert time_index.entries == 0

    def test_load_and_corruption(self, time_index: TimeIndex) -> None:
        path = time_index.file.path
        assert TimeIndex.read_entries(path) == [(1000, 110), (2000, 120), (3000, 130)]
        assert TimeIndex.load(path, BASE, 120).last_entry() == (3000, 130)
        data = path.read_bytes()
        path.write_bytes(data[12:24] + data[:12])
        with pytest.raises(CorruptIndexError):
            TimeIndex.load(path, BASE, 120)
        path.write_bytes(data[:-1])
        with pytest.raises(CorruptIndexError):
            TimeIndex.load(path, BASE, 120)


class TestTransactionIndex:
    def test_append_load_truncate_collect(self, tmp_path: Path) -> None:
        path = tmp_path / f"{BASE:020d}.txnindex"
        index = TransactionIndex.create(path)
        txns = [
            AbortedTxn(1, 100, 110, 105),
            AbortedTxn(2, 105, 120, 121),
            AbortedTxn(3, 130, 140, 141),
        ]
        for txn in txns:
            index.append(txn)
        assert path.stat().st_size == 3 * 34
        with pytest.raises(ValueError):
            index.append(AbortedTxn(4, 130, 140, 141))
        assert TransactionIndex.load(path).entries == txns
        assert TransactionIndex.read_entries(path) == txns
        # lastOffset >= fetch offset and firstOffset < upper bound; complete at the first
        # entry whose last stable offset reaches the upper bound.
        assert index.collect_aborted_txns(111, 125) == ([txns[1]], True)
        assert index.collect_aborted_txns(0, 200) == (txns, False)
        index.truncate_to(120)
        assert index.entries == txns[:1]
        assert path.stat().st_size == 34
        path.write_bytes(path.read_bytes() + b"\x00")
        with pytest.raises(CorruptIndexError):
            TransactionIndex.load(path)
