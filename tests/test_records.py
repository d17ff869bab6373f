"""The record-batch codec: what producers build is what consumers decode, and the leader's
validation refuses every malformed or out-of-range batch before anything is written."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.errors import CorruptMessageError, InvalidTimestampError
from tidelog.records import (
    HEADER_SIZE,
    NO_TIMESTAMP,
    ControlType,
    RecordInput,
    TimestampType,
    assign_offsets,
    build_batch,
    build_control_batch,
    check_crc,
    control_type_of,
    crc_matches,
    decode_records,
    iter_batches,
    read_header,
    record_timestamps,
    validate_batch,
)

UNBOUNDED = 2**62


def _validate(buf: bytes, now_ms: int = 10_000, before: int = UNBOUNDED, after: int = UNBOUNDED):
    return validate_batch(
        buf, now_ms=now_ms, timestamp_before_max_ms=before, timestamp_after_max_ms=after
    )


headers_st = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
)
record_st = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=64)),
    key=st.one_of(st.none(), st.binary(max_size=16)),
    timestamp=st.integers(min_value=0, max_value=2**40),
    headers=headers_st,
)


@given(st.lists(record_st, min_size=1, max_size=20), st.integers(0, 2**40), st.integers(0, 1000))
def test_round_trip_preserves_every_field(
    records: list[RecordInput], base_offset: int, epoch: int
) -> None:
    buf = assign_offsets(build_batch(records, producer_id=7, base_sequence=3), base_offset, epoch)
    header = _validate(buf)
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == epoch
    assert header.last_offset == base_offset + len(records) - 1
    assert header.max_timestamp == max(r.timestamp for r in records)
    decoded = decode_records(buf, 0, header)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    for got, want in zip(decoded, records, strict=True):
        assert (got.timestamp, got.key, got.value) == (want.timestamp, want.key, want.value)
        assert got.headers == tuple(want.headers)
    assert list(record_timestamps(buf, 0, header)) == [(r.offset, r.timestamp) for r in decoded]


def test_assigning_offsets_and_epoch_keeps_the_crc_valid() -> None:
    buf = build_batch([RecordInput(b"a", timestamp=5), RecordInput(b"b", timestamp=3)])
    patched = assign_offsets(buf, 1000, 9)
    header = read_header(patched)
    check_crc(patched, 0, header)
    assert header.crc == read_header(buf).crc


def test_log_append_time_rewrites_max_timestamp_and_every_record_reads_it() -> None:
    buf = build_batch([RecordInput(b"a", timestamp=5), RecordInput(b"b", timestamp=3)])
    patched = assign_offsets(buf, 0, 1, log_append_time_ms=777)
    header = read_header(patched)
    assert crc_matches(patched, 0, header)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in decode_records(patched, 0, header)] == [777, 777]


def test_control_batch_carries_no_timestamp_and_its_type() -> None:
    buf = build_control_batch(ControlType.LEADER_CHANGE, partition_leader_epoch=4)
    header = _validate(buf)
    assert header.is_control and header.max_timestamp == NO_TIMESTAMP
    assert control_type_of(buf, 0, header) == ControlType.LEADER_CHANGE


def _flip(buf: bytes, index: int) -> bytes:
    out = bytearray(buf)
    out[index] ^= 0xFF
    return bytes(out)


def test_a_flipped_payload_byte_fails_the_crc() -> None:
    buf = build_batch([RecordInput(b"payload", timestamp=1)])
    with pytest.raises(CorruptMessageError, match="CRC"):
        _validate(_flip(buf, len(buf) - 3))


def test_truncated_and_padded_batches_are_refused() -> None:
    buf = build_batch([RecordInput(b"payload", timestamp=1)])
    with pytest.raises(CorruptMessageError):
        _validate(buf[:-1])
    with pytest.raises(CorruptMessageError):
        _validate(buf[: HEADER_SIZE - 1])
    with pytest.raises(CorruptMessageError, match="exactly one batch"):
        _validate(buf + buf)


def _rebuild_with_body(buf: bytes, body: bytes, **fields: int) -> bytes:
    """A batch whose header claims `fields` over `body`, with a CRC that matches: what a buggy
    producer could send. Validation must catch it by structure, not by checksum."""
    import crc32c

    header = bytearray(buf[:HEADER_SIZE])
    struct.pack_into(">i", header, 8, HEADER_SIZE - 12 + len(body))
    layout = {"last_offset_delta": (23, ">i"), "max_timestamp": (35, ">q"), "count": (57, ">i")}
    for name, value in fields.items():
        at, fmt = layout[name]
        struct.pack_into(fmt, header, at, value)
    struct.pack_into(">I", header, 17, crc32c.crc32c(bytes(header[21:]) + body))
    return bytes(header) + body


def test_a_lying_header_with_a_valid_crc_is_still_refused() -> None:
    buf = build_batch([RecordInput(b"a", timestamp=10), RecordInput(b"b", timestamp=20)])
    body = buf[HEADER_SIZE:]
    with pytest.raises(CorruptMessageError, match="max_timestamp"):
        _validate(_rebuild_with_body(buf, body, max_timestamp=99))
    with pytest.raises(CorruptMessageError):
        _validate(_rebuild_with_body(buf, body, last_offset_delta=2, count=3))
    # Records whose offset deltas are not 0, 1, ...: swap the two records.
    first_len = struct.unpack_from(">i", body, 0)[0] + 4
    swapped = body[first_len:] + body[:first_len]
    with pytest.raises(CorruptMessageError, match="malformed record"):
        _validate(_rebuild_with_body(buf, swapped))


def test_timestamps_outside_the_allowed_window_are_invalid() -> None:
    buf = build_batch([RecordInput(b"a", timestamp=10_000), RecordInput(b"b", timestamp=4_000)])
    _validate(buf, now_ms=10_000, before=6_000, after=0)
    with pytest.raises(InvalidTimestampError):
        _validate(buf, now_ms=10_000, before=5_999)
    with pytest.raises(InvalidTimestampError):
        _validate(buf, now_ms=9_999, after=0)


def test_iter_batches_walks_concatenated_batches() -> None:
    a = assign_offsets(build_batch([RecordInput(b"x", timestamp=1)] * 3), 0, 1)
    b = assign_offsets(build_batch([RecordInput(b"y", timestamp=2)] * 2), 3, 1)
    positions = [(pos, h.base_offset, h.last_offset) for pos, h in iter_batches(a + b)]
    assert positions == [(0, 0, 2), (len(a), 3, 4)]
    with pytest.raises(CorruptMessageError):
        list(iter_batches(a + b[:-1]))
