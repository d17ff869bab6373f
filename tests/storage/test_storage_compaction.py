"""Key compaction: the codec's record subset, the cleaner's choices (newest value per key, the
HW bound, tombstones, control and transactional batches, merging) and its crash safety."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from record_helpers import forge_batch, forge_record
from storage_helpers import (
    T0,
    FakeClock,
    all_records,
    assert_lookups_match_brute_force,
    marker,
    open_log,
)

from tidelog.errors import CorruptMessageError, InvalidRecordError
from tidelog.records import (
    ControlType,
    Record,
    RecordInput,
    TimestampType,
    assign_offsets,
    build_batch,
    build_control_batch,
    crc_matches,
    decode_records,
    iter_batches,
    read_header,
    retain_records,
    validate_batch,
)
from tidelog.storage import CLEANED_SUFFIX, AbortedTxn, Log
from tidelog.storage.cleaner import CleanerStats, LogCleaner

COMPACT = frozenset({"compact"})
DAY = 24 * 3600 * 1000

KV = tuple[str, str | None]  # key, value (None: a tombstone)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def keyed(*records: KV, ts: int = T0) -> bytes:
    return build_batch(
        [
            RecordInput(key=k.encode(), value=None if v is None else v.encode(), timestamp=ts)
            for k, v in records
        ]
    )


def compacted_log(directory: Path, clock: FakeClock, **config: object) -> Log:
    """One record per segment unless told otherwise, so every append but the last is closed."""
    settings: dict[str, object] = {
        "cleanup_policy": COMPACT,
        "segment_bytes": len(keyed(("k", "v"))) + 20,
    }
    settings.update(config)
    return open_log(directory, clock, **settings)


def append_all(log: Log, batches: Sequence[bytes], *, commit: bool = True) -> None:
    for data in batches:
        log.append_as_leader(data, 0)
    if commit:
        log.update_high_watermark(log.log_end_offset)


def contents(log: Log) -> list[tuple[int, str | None, str | None]]:
    """(offset, key, value) of every record from the log start, control records included."""
    data = log.read(log.log_start_offset, 1 << 30)
    return [
        (r.offset, _text(r.key), _text(r.value))
        for pos, header in iter_batches(data)
        for r in decode_records(data, pos, header)
    ]


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def clean(log: Log, now_ms: int, upper_bound: int | None = None) -> CleanerStats:
    return LogCleaner(log).clean(now_ms, upper_bound)


class TestRetainRecords:
    def batch(self) -> tuple[bytes, list[Record]]:
        data = assign_offsets(
            build_batch(
                [
                    RecordInput(b"a", b"k1", T0 + 5, [("h", b"x")]),
                    RecordInput(b"b", b"k2", T0 + 9),
                    RecordInput(None, b"k3", T0 - 3),
                    RecordInput(b"d", b"k4", T0 + 1),
                ],
                producer_id=7,
                producer_epoch=2,
                base_sequence=40,
            ),
            100,
            6,
        )
        return data, decode_records(data, 0, read_header(data))

    def test_kept_records_keep_offsets_and_fields(self) -> None:
        data, records = self.batch()
        kept = retain_records(data, 0, read_header(data), {100, 102})
        header, original = read_header(kept), read_header(data)
        assert crc_matches(kept, 0, header)
        assert decode_records(kept, 0, header) == [records[0], records[2]]
        assert (header.base_offset, header.last_offset, header.records_count) == (100, 103, 2)
        assert (header.first_timestamp, header.max_timestamp) == (T0 + 5, T0 + 5)
        same = ("partition_leader_epoch", "attributes", "producer_id", "producer_epoch")
        assert all(getattr(header, f) == getattr(original, f) for f in same)
        assert header.base_sequence == original.base_sequence

    def test_timestamps_are_recomputed_from_the_kept_records(self) -> None:
        data, _ = self.batch()
        kept = retain_records(data, 0, read_header(data), {102, 103})
        header = read_header(kept)
        assert (header.first_timestamp, header.max_timestamp) == (T0 - 3, T0 + 1)
        assert [r.timestamp for r in decode_records(kept, 0, header)] == [T0 - 3, T0 + 1]

    def test_log_append_time_batch_keeps_its_time(self) -> None:
        data = assign_offsets(keyed(("a", "1"), ("b", "2"), ts=5), 0, 0, log_append_time_ms=T0)
        kept = retain_records(data, 0, read_header(data), {1})
        header = read_header(kept)
        assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert [(r.offset, r.timestamp) for r in decode_records(kept, 0, header)] == [(1, T0)]

    def test_nothing_kept_leaves_an_empty_batch_over_the_same_offsets(self) -> None:
        data, _ = self.batch()
        header = read_header(retain_records(data, 0, read_header(data), set()))
        assert (header.base_offset, header.last_offset, header.records_count) == (100, 103, 0)
        assert header.max_timestamp == -1

    def test_a_produced_batch_must_still_be_dense(self) -> None:
        data, _ = self.batch()
        gapped = retain_records(data, 0, read_header(data), {100, 102})
        with pytest.raises(CorruptMessageError, match="one record per offset"):
            validate_batch(
                gapped,
                now_ms=T0,
                timestamp_before_max_ms=DAY,
                timestamp_after_max_ms=DAY,
                from_client=True,
            )


class TestKeys:
    def test_newest_value_per_key_wins(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock, segment_bytes=3 * len(keyed(("k", "v"))))
        values = [("a", "1"), ("b", "1"), ("a", "2"), ("c", "1"), ("b", "2"), ("a", "3")]
        append_all(log, [keyed(kv) for kv in values] + [keyed(("d", "1"))])
        before = {r.offset: r for r in all_records(log)}
        stats = clean(log, clock.now)
        assert contents(log) == [(3, "c", "1"), (4, "b", "2"), (5, "a", "3"), (6, "d", "1")]
        assert stats.records_removed == 3 and stats.tombstones_removed == 0
        assert all(before[r.offset] == r for r in all_records(log))  # timestamps, epochs
        assert (log.log_start_offset, log.log_end_offset) == (0, 7)
        assert_lookups_match_brute_force(log)

    def test_a_newer_value_in_the_active_segment_counts(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = compacted_log(tmp_path, clock, segment_bytes=10**6)
        append_all(log, [keyed(("a", "1")), keyed(("b", "1"))])
        log.roll()
        append_all(log, [keyed(("a", "2"))])
        clean(log, clock.now)
        assert contents(log) == [(1, "b", "1"), (2, "a", "2")]

    def test_values_above_the_high_watermark_do_not_count(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = compacted_log(tmp_path, clock)
        append_all(log, [keyed(("a", "1")), keyed(("b", "1"))])
        append_all(log, [keyed(("a", "2")), keyed(("c", "1"))], commit=False)
        assert clean(log, clock.now).records_removed == 0
        log.truncate_to(2)  # a new leader never had them
        assert contents(log) == [(0, "a", "1"), (1, "b", "1")]

    def test_upper_bound_below_the_high_watermark(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock)
        append_all(
            log, [keyed(("a", "1")), keyed(("a", "2")), keyed(("a", "3")), keyed(("b", "1"))]
        )
        clean(log, clock.now, upper_bound=2)  # e.g. the last stable offset
        assert contents(log) == [(1, "a", "2"), (2, "a", "3"), (3, "b", "1")]

    def test_segments_merge_within_segment_bytes(self, tmp_path: Path, clock: FakeClock) -> None:
        one = len(keyed(("k", "v")))
        log = compacted_log(tmp_path, clock, segment_bytes=2 * one + 20)
        append_all(log, [keyed((k, "v")) for k in "abcdefgh"])
        assert len(log.segments) == 4
        first = clean(log, clock.now)
        assert first.records_removed == 0 and first.segments_written == 0  # 2 per segment: full
        append_all(log, [keyed((k, "w")) for k in "aceg"])
        clean(log, clock.now)  # groups are sized by what they held: halved, not yet merged
        expected = contents(log)
        assert expected[:4] == [(1, "b", "v"), (3, "d", "v"), (5, "f", "v"), (7, "h", "v")]
        assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8, 10]
        merged = clean(log, clock.now)
        assert (merged.segments_read, merged.segments_written) == (5, 2)
        assert [s.base_offset for s in log.segments] == [0, 4, 8, 10]
        assert all(s.size <= log.config.segment_bytes for s in log.segments)
        assert contents(log) == expected
        assert_lookups_match_brute_force(log)

    def test_a_second_pass_finds_nothing(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock)
        append_all(log, [keyed(("a", str(i))) for i in range(6)])
        assert clean(log, clock.now).segments_written > 0
        sizes = [(s.base_offset, s.size) for s in log.segments]
        again = clean(log, clock.now)
        assert again.segments_written == 0 and again.segments_read > 0
        assert [(s.base_offset, s.size) for s in log.segments] == sizes

    def test_delete_policy_is_left_alone(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock, cleanup_policy=frozenset({"delete"}))
        append_all(log, [keyed(("a", "1")), keyed(("a", "2")), keyed(("a", "3"))])
        assert clean(log, clock.now) == CleanerStats()
        assert len(contents(log)) == 3

    def test_compact_delete_compacts_and_retains(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(
            tmp_path, clock, cleanup_policy=frozenset({"compact", "delete"}), retention_ms=1000
        )
        append_all(log, [keyed(("a", "1"), ts=T0), keyed(("a", "2"), ts=T0 + 5000)])
        append_all(log, [keyed(("b", "1"), ts=T0 + 5000)])
        clean(log, clock.now)
        assert contents(log) == [(1, "a", "2"), (2, "b", "1")]
        clock.now = T0 + 2000
        assert log.delete_old_segments() == 1  # the cleaned first segment, now only old data
        assert log.log_start_offset == 1 and contents(log)[0] == (1, "a", "2")


class TestNullKeys:
    def test_refused_at_append_in_compacted_topics(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock, segment_bytes=10**6)
        data = build_batch([RecordInput(b"x", b"k", T0), RecordInput(b"y", None, T0)])
        with pytest.raises(InvalidRecordError, match="without key: record 1 of the batch"):
            log.append_as_leader(data, 0)
        assert log.log_end_offset == 0
        log.append_as_leader(marker(), 0)  # a control record's key is not the user's

    def test_a_lying_key_length_is_refused_not_a_crash(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        """The compacted produce path read keys before their lengths were checked: a key
        length past the record raised struct.error (gRPC UNKNOWN at the node)."""
        log = compacted_log(tmp_path, clock, segment_bytes=10**6)
        data = forge_batch(forge_record(key=b"k", value=b"x", ts_delta=0),
                           forge_record(key=b"k", key_len=1 << 20, offset_delta=1),
                           first_timestamp=T0, max_timestamp=T0)
        with pytest.raises(CorruptMessageError, match=r"malformed record 1 .*key length 1048576"):
            log.validate_produced_batch(bytes(data), from_client=True)
        assert log.log_end_offset == 0

    def test_accepted_without_compaction_and_dropped_by_a_later_cleaner(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = compacted_log(tmp_path, clock, cleanup_policy=frozenset({"delete"}))
        append_all(log, [build_batch([RecordInput(b"x", None, T0)]), keyed(("a", "1"))])
        log.config = dataclasses.replace(log.config, cleanup_policy=COMPACT)
        append_all(log, [keyed(("b", "1"))])
        clean(log, clock.now)
        assert contents(log) == [(1, "a", "1"), (2, "b", "1")]


class TestTombstones:
    def test_kept_for_delete_retention_ms_after_the_segment_was_written(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = compacted_log(tmp_path, clock, delete_retention_ms=1000)
        append_all(log, [keyed(("a", "1")), keyed(("b", "1"))])
        clock.advance(500)
        append_all(log, [keyed(("a", None)), keyed(("c", "1"))])
        clock.advance(1000)  # the first segments are 1500 ms old, the tombstone's 1000 ms
        stats = clean(log, clock.now)
        assert contents(log) == [(1, "b", "1"), (2, "a", None), (3, "c", "1")]
        assert stats.tombstones_removed == 0
        clock.advance(1)
        stats = clean(log, clock.now)
        assert contents(log) == [(1, "b", "1"), (3, "c", "1")]
        assert stats.tombstones_removed == 1

    def test_rewriting_does_not_restart_the_delay(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock, delete_retention_ms=1000)
        append_all(log, [keyed(("a", None)), keyed(("b", "1")), keyed(("b", "2"))])
        clock.advance(600)
        clean(log, clock.now)  # rewrites the segments, tombstone kept
        clock.advance(600)
        assert clean(log, clock.now).tombstones_removed == 1
        assert contents(log) == [(2, "b", "2")]

    def test_last_modified_survives_reopen(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock, delete_retention_ms=1000)
        append_all(log, [keyed(("a", None)), keyed(("b", "1")), keyed(("b", "2"))])
        clean(log, clock.now)
        log.close()
        clock.advance(1001)
        log = compacted_log(tmp_path, clock, delete_retention_ms=1000)
        assert clean(log, clock.now).tombstones_removed == 1

    def test_an_emptied_last_batch_keeps_the_log_end(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = compacted_log(tmp_path, clock, delete_retention_ms=0, segment_bytes=10**6)
        append_all(log, [keyed(("a", "1")), keyed(("a", None))])
        log.roll()
        clock.advance(1)
        assert clean(log, clock.now).records_removed == 2
        assert contents(log) == []
        assert [(h.base_offset, h.records_count) for _, h in iter_batches(log.read(0, 999))] == [
            (1, 0)
        ]
        log.close()  # an empty active segment after a segment ending early would be a hole
        log = compacted_log(tmp_path, clock, segment_bytes=10**6)
        assert log.log_end_offset == 2
        assert log.append_as_leader(keyed(("b", "1")), 0).first_offset == 2


class TestUntouchedBatches:
    def test_control_batches_stay(self, tmp_path: Path, clock: FakeClock) -> None:
        log = compacted_log(tmp_path, clock)
        append_all(log, [keyed(("a", "1")), marker(), keyed(("a", "2")), keyed(("b", "1"))])
        clean(log, clock.now)
        assert [o for o, _, _ in contents(log)] == [1, 2, 3]
        assert read_header(log.read(1, 1)).is_control

    def test_transactional_records_neither_count_nor_go(
        self, tmp_path: Path, clock: FakeClock
    ) -> None:
        log = compacted_log(tmp_path, clock, segment_bytes=10**6)
        txn = build_batch(
            [RecordInput(b"t", b"a", T0)], producer_id=1, producer_epoch=0, transactional=True
        )
        abort = build_control_batch(
            ControlType.ABORT, producer_id=1, producer_epoch=0, transactional=True
        )
        append_all(log, [keyed(("a", "1")), txn, abort, keyed(("b", "1")), txn])
        log.roll()
        append_all(log, [keyed(("c", "1"))])
        clean(log, clock.now)
        # the aborted "a"=t must not make "a"=1 go; no transactional record is removed
        assert [(o, k, v) for o, k, v in contents(log) if k != "\x00\x00\x00\x00"] == [
            (0, "a", "1"),
            (1, "a", "t"),
            (3, "b", "1"),
            (4, "a", "t"),
            (5, "c", "1"),
        ]


class TestReopenAndCrash:
    #: Two records per segment; with delete.retention.ms=100 and 10 ms between appends, the
    #: tombstone at 3 has expired when the pass runs, the one at 9 has not.
    RECORDS: tuple[KV, ...] = (
        ("a", "0"), ("e", "1"), ("b", "2"), ("e", None), ("a", "4"), ("c", "5"), ("b", "6"),
        ("d", "7"), ("a", "8"), ("d", None), ("c", "10"), ("b", "11"), ("a", "12"), ("c", "13"),
    )  # fmt: skip

    def open(self, directory: Path, clock: FakeClock) -> Log:
        two = 2 * len(keyed(("a", "0")))
        return compacted_log(directory, clock, delete_retention_ms=100, segment_bytes=two)

    def workload(self, log: Log, clock: FakeClock) -> None:
        for i, record in enumerate(self.RECORDS):
            log.append_as_leader(keyed(record, ts=T0 + (i * 37) % 500), 0)
            clock.advance(10)
        log.update_high_watermark(log.log_end_offset)
        for segment in log.segments[:-1:2]:  # what the transactions work will write
            segment.txn_index.append(
                AbortedTxn(1, segment.base_offset, segment.base_offset, segment.base_offset + 1)
            )

    @staticmethod
    def aborted(log: Log) -> list[AbortedTxn]:
        return [txn for segment in log.segments for txn in segment.txn_index.entries]

    def test_reopen_reads_the_same(self, tmp_path: Path, clock: FakeClock) -> None:
        log = self.open(tmp_path, clock)
        self.workload(log, clock)
        clean(log, clock.now)
        assert contents(log) == [(9, "d", None), (11, "b", "11"), (12, "a", "12"), (13, "c", "13")]
        expected = (contents(log), log.offsets_before(-1, 100), log.offsets_before(T0 + 150, 3))
        assert_lookups_match_brute_force(log)
        log.close()
        log = self.open(tmp_path, clock)
        assert (contents(log), log.offsets_before(-1, 100), log.offsets_before(T0 + 150, 3)) == (
            expected
        )
        assert_lookups_match_brute_force(log)

    #: A pass makes 82 renames and unlinks: each of the first group's swap (.swap renames,
    #: old segments' deletion, final renames), the next group's, and the final checkpoint.
    @pytest.mark.parametrize("crash_at", [*range(13), 15, 18, 22, 80, 81])
    def test_a_crash_at_any_file_operation_leaves_old_or_new(
        self,
        tmp_path: Path,
        tmp_path_factory: pytest.TempPathFactory,
        clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch,
        crash_at: int,
    ) -> None:
        """Whatever rename or unlink the process dies at, the reopened log holds, group by group,
        either the old or the cleaned records, and a new pass completes the work."""
        log = self.open(tmp_path, clock)
        self.workload(log, clock)
        log.flush()
        log.checkpoint()
        before, aborted = contents(log), self.aborted(log)
        assert aborted
        crashes = _crash_on_call(monkeypatch, crash_at)
        with contextlib.suppress(_Crash):
            clean(log, clock.now)
        monkeypatch.undo()
        assert crashes()
        reopened = self.open(tmp_path, clock)
        after = contents(reopened)
        assert set(after) <= set(before)
        assert _newest(after) == {k: ov for k, ov in _newest(before).items() if k in _newest(after)}
        lost = _newest(before).keys() - _newest(after).keys()
        assert all(_newest(before)[k][1] is None for k in lost)  # only expired tombstones go
        assert (reopened.log_start_offset, reopened.log_end_offset) == (0, log.log_end_offset)
        assert not [p for p in tmp_path.iterdir() if p.name.endswith((CLEANED_SUFFIX, ".swap"))]
        assert_lookups_match_brute_force(reopened)
        assert self.aborted(reopened) == aborted
        # finishing the pass gives the values an uninterrupted pass gives
        clean(reopened, clock.now)
        reference_clock = FakeClock()
        reference = self.open(tmp_path_factory.mktemp("reference"), reference_clock)
        self.workload(reference, reference_clock)
        clean(reference, clock.now)
        assert _values(contents(reopened)) == _values(contents(reference))


def _newest(
    rows: Sequence[tuple[int, str | None, str | None]],
) -> dict[str | None, tuple[int, str | None]]:
    """The last (offset, value) of each key: what a consumer that read everything holds."""
    return {key: (offset, value) for offset, key, value in rows}


def _values(
    rows: Sequence[tuple[int, str | None, str | None]],
) -> list[tuple[int, str | None, str | None]]:
    return [row for row in rows if row[2] is not None]


class _Crash(Exception):
    pass


def _crash_on_call(monkeypatch: pytest.MonkeyPatch, n: int) -> Callable[[], bool]:
    """Make the n-th rename or unlink raise (the process dies there); tells if it happened."""
    calls = [0]

    def wrap(real: Callable[..., None]) -> Callable[..., None]:
        def op(*args: object, **kwargs: object) -> None:
            calls[0] += 1
            if calls[0] == n + 1:
                raise _Crash
            real(*args, **kwargs)

        return op

    monkeypatch.setattr(os, "replace", wrap(os.replace))
    monkeypatch.setattr(os, "unlink", wrap(os.unlink))
    return lambda: calls[0] > n


def test_cleanable_end_moves_only_when_a_segment_closes(tmp_path: Path, clock: FakeClock) -> None:
    """The node cleans a compacted partition again only when this moved (a pass reads the
    whole log on the disk thread): it is where the closed segments below the bound end, and a
    pass, which merges them, leaves it where it was."""
    log = compacted_log(tmp_path, clock)
    cleaner = LogCleaner(log)
    assert cleaner.cleanable_end() == 0  # nothing closed yet
    append_all(log, [keyed(("a", "1")), keyed(("a", "2")), keyed(("b", "1"))])
    assert cleaner.cleanable_end() == 2  # segments 0 and 1 closed; 2 is the active one
    assert cleaner.cleanable_end(upper_bound=1) == 1
    clean(log, T0)
    assert cleaner.cleanable_end() == 2
    append_all(log, [keyed(("b", "2"))])
    assert cleaner.cleanable_end() == 3
