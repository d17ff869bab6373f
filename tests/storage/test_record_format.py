"""A data dir written before Tidelog's records became Kafka's v2 records (fixed-width record
fields) is converted once when a node starts on it: every batch keeps its header fields and
its records, re-encoded; the indexes are rebuilt; an interrupted conversion finishes on the
next start; a data dir of a format this version does not know is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from legacy_records import to_fixed_width
from storage_helpers import T0, FakeClock, open_log

from tidelog.compression import Codec
from tidelog.errors import InvalidConfigError
from tidelog.records import (
    ControlType,
    RecordInput,
    assign_offsets,
    build_batch,
    build_control_batch,
    build_txn_marker,
    decode_records,
    iter_batches,
    read_header,
    retain_records,
    validate_records,
)
from tidelog.storage.record_format import (
    RECORD_FORMAT_FILE,
    convert_segment,
    prepare_record_format,
)


def _batches() -> list[bytes]:
    """Batches of every kind a log holds, at consecutive offsets, in Kafka's v2 records."""
    made: list[bytes] = []
    raw = [
        build_batch([RecordInput(b"v%d" % i, None, T0 + i) for i in range(100)]),
        build_batch([RecordInput(b"x" * 300, b"key", T0 - 5, [("h", b"1"), ("n", None)]),
                     RecordInput(None, b"key", T0 + 70_000)], producer_id=3, producer_epoch=1,
                    base_sequence=0),
        build_batch([RecordInput(b"zipped %d" % i, b"k", T0 + i) for i in range(50)],
                    compression=Codec.GZIP),
        build_batch([RecordInput(b"z" * 9000, None, T0)], compression=Codec.ZSTD),
        build_control_batch(ControlType.LEADER_CHANGE),
        build_batch([RecordInput(b"t", None, T0)], producer_id=4, producer_epoch=0,
                    base_sequence=0, transactional=True),
        build_txn_marker(True, producer_id=4, producer_epoch=0, coordinator_epoch=2),
    ]
    compacted = build_batch([RecordInput(b"c%d" % i, b"k%d" % (i % 3), T0 + 3 * i)
                             for i in range(9)])
    raw.append(retain_records(compacted, 0, read_header(compacted), {2, 5, 7, 8}))
    raw.append(retain_records(compacted, 0, read_header(compacted), set()))
    offset = 0
    for epoch, batch in enumerate(raw, 1):
        made.append(assign_offsets(batch, offset, epoch))
        offset = read_header(made[-1]).next_offset
    return made


def _old_data_dir(data_dir: Path, batches: list[bytes]) -> None:
    """A data dir as an earlier version left it: two partitions whose segments (several
    each) hold `batches` in the fixed-width record format, with their indexes."""
    for name in ("events-0", "__consumer_offsets-3"):
        log = open_log(data_dir / name, FakeClock(), segment_bytes=4096)
        for batch in batches:
            log.append_as_follower(to_fixed_width(batch))
        log.close()


def _segments(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob("*/*.log"))


def _records(data: bytes) -> list[tuple[object, ...]]:
    return [
        (h.base_offset, h.partition_leader_epoch, h.attributes, h.producer_id, h.is_control,
         *((r.offset, r.timestamp, r.key, r.value, r.headers)
           for r in decode_records(data, pos, h)))
        for pos, h in iter_batches(data)
    ]


def test_a_fixed_width_data_dir_is_converted_and_reads_back_equal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batches = _batches()
    _old_data_dir(tmp_path, batches)
    assert len(_segments(tmp_path)) >= 4  # several segments a partition
    with pytest.raises(Exception):  # noqa: B017 - before: the old records do not read
        validate_records(_segments(tmp_path)[0].read_bytes(), 0,
                         read_header(_segments(tmp_path)[0].read_bytes()))
    caplog.set_level("INFO", "tidelog.storage.record_format")
    prepare_record_format(tmp_path)
    assert (tmp_path / RECORD_FORMAT_FILE).read_text() == "2\n"
    converted = [r for r in caplog.records if "to Kafka's v2 records" in r.getMessage()]
    assert sorted(r.getMessage().split()[4] for r in converted) == [
        "__consumer_offsets-3", "events-0"
    ]
    for name in ("events-0", "__consumer_offsets-3"):
        # The segments hold exactly the batches the v2 encoder writes.
        stored = b"".join(p.read_bytes() for p in sorted((tmp_path / name).glob("*.log")))
        assert stored == b"".join(batches)
        log = open_log(tmp_path / name, FakeClock(), segment_bytes=4096)
        try:
            read = log.read(0, 1 << 30)
            assert _records(bytes(read)) == _records(b"".join(batches))
            # The rebuilt offset index finds a batch in the middle by its offset.
            for batch in batches[3:]:
                header = read_header(batch)
                assert read_header(bytes(log.read(header.base_offset, 1))) == header
        finally:
            log.close()


def test_a_converted_or_new_data_dir_is_left_alone(tmp_path: Path) -> None:
    prepare_record_format(tmp_path)  # a new node: nothing to convert
    assert (tmp_path / RECORD_FORMAT_FILE).read_text() == "2\n"
    _old_data_dir(tmp_path, _batches())
    before = [p.read_bytes() for p in _segments(tmp_path)]
    prepare_record_format(tmp_path)  # the file says format 2: nothing is read
    assert [p.read_bytes() for p in _segments(tmp_path)] == before


def test_an_interrupted_conversion_finishes_on_the_next_start(tmp_path: Path) -> None:
    batches = _batches()
    _old_data_dir(tmp_path, batches)
    first = _segments(tmp_path)[0]
    assert convert_segment(first) > 0  # converted before a crash; no marker written
    assert convert_segment(first) == 0  # never twice
    prepare_record_format(tmp_path)
    stored = b"".join(p.read_bytes() for p in sorted((tmp_path / "events-0").glob("*.log")))
    assert stored == b"".join(batches)


def test_a_data_dir_of_an_unknown_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / RECORD_FORMAT_FILE).write_text("3\n")
    with pytest.raises(InvalidConfigError, match="format '3'"):
        prepare_record_format(tmp_path)
