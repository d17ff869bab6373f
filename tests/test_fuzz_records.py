"""Fuzzing the record-batch codec: on arbitrary or mutated bytes every reader raises only the
codec's own errors, and a batch the leader accepts is one every reader can read.

The second property is the class of bug behind "acknowledged, then every consumer fails": if
validation accepts a batch, decoding it (records, keys, control type, compaction subsets,
timestamps) must succeed and give back exactly the records' bytes.
"""

from __future__ import annotations

import contextlib
import struct

import crc32c
from fuzz_helpers import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from tidelog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTxnStateError,
    UnsupportedCompressionTypeError,
)
from tidelog.records import (
    HEADER_SIZE,
    ControlType,
    RecordInput,
    build_batch,
    build_control_batch,
    check_crc,
    control_type_of,
    decode_records,
    encode_record,
    first_record_reaching,
    iter_batches,
    read_header,
    record_keys,
    record_timestamps,
    retain_records,
    validate_batch,
)

#: What reading a batch may raise: the codec's errors, nothing else.
READ_ERRORS = (CorruptMessageError, UnsupportedCompressionTypeError)
#: What validating a produced batch may raise.
VALIDATE_ERRORS = (*READ_ERRORS, InvalidRecordError, InvalidTxnStateError, InvalidTimestampError)

T = 1_700_000_000_000

headers_st = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=2
)
record_st = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=24)),
    key=st.one_of(st.none(), st.binary(max_size=8)),
    timestamp=st.integers(T - 1000, T + 1000),
    headers=headers_st,
)
valid_batch_st = st.one_of(
    st.builds(
        build_batch,
        st.lists(record_st, min_size=1, max_size=6),
        producer_id=st.sampled_from([-1, 7]),
        base_sequence=st.sampled_from([-1, 0]),
    ),
    st.builds(build_control_batch, st.sampled_from(ControlType)),
)


@st.composite
def mutated_batch(draw: st.DrawFn) -> bytes:
    """A valid batch with a few bytes overwritten, inserted or removed, its CRC recomputed
    most of the time (so that structure, not the checksum, has to catch the damage)."""
    data = bytearray(draw(valid_batch_st))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["set", "set", "insert", "delete", "int32"]))
        if kind == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "int32" and at + 4 <= len(data):
            value = draw(st.sampled_from([-2, -1, 0, 1, 2**31 - 1, -(2**31), 1 << 20]))
            struct.pack_into(">i", data, at, value)
    if len(data) >= HEADER_SIZE and draw(st.booleans()):
        struct.pack_into(">i", data, 8, len(data) - 12)  # a length that matches the bytes
    if len(data) >= HEADER_SIZE and draw(st.integers(0, 9)):
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _read_everything(data: bytes) -> None:
    """Every reader of the codec over every batch of `data`."""
    for pos, header in iter_batches(data):
        check_crc(data, pos, header)
        list(record_timestamps(data, pos, header))
        first_record_reaching(data, pos, header, T, header.base_offset)
        records = decode_records(data, pos, header)
        keys = list(record_keys(data, pos, header))
        retain_records(data, pos, header, {k.offset for k in keys[::2]})
        if header.is_control:
            control_type_of(data, pos, header)
        assert [r.offset for r in records] == [k.offset for k in keys]


def _reencoded(data: bytes) -> bytes:
    """The records of an accepted batch, decoded and encoded again."""
    header = read_header(data)
    parts: list[bytes] = []
    for r in decode_records(data, 0, header):
        encode_record(parts, r.offset - header.base_offset, r.timestamp - header.first_timestamp,
                      r.key, r.value, r.headers)
    return b"".join(parts)


@fuzz_settings(300)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_codec_errors(data: bytes) -> None:
    with contextlib.suppress(READ_ERRORS):
        _read_everything(data)


@fuzz_settings(600)
@given(mutated_batch(), st.booleans())
def test_a_batch_the_leader_accepts_is_one_every_reader_reads(data: bytes, client: bool) -> None:
    try:
        header = validate_batch(
            data, now_ms=T, timestamp_before_max_ms=2**62, timestamp_after_max_ms=2**62,
            from_client=client,
        )
    except VALIDATE_ERRORS:
        with contextlib.suppress(READ_ERRORS):
            _read_everything(data)  # a refused batch still never crashes a reader
        return
    _read_everything(data)
    assert _reencoded(data) == data[HEADER_SIZE:]
    assert header.records_count == len(decode_records(data, 0, header))
