"""Fuzzing the record-batch codec: on arbitrary or mutated bytes every reader raises only the
codec's own errors, and a batch the leader accepts is one every reader can read.

The second property is the class of bug behind "acknowledged, then every consumer fails": if
validation accepts a batch, decoding it (records, keys, control type, compaction subsets,
timestamps) must succeed and give back records that encode to the same records.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from fuzz_helpers import T, fuzz_settings, mutated_batch
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
    ATTR_COMPRESSION,
    Record,
    assemble_batch,
    check_crc,
    consumer_records,
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
    validate_records,
)
from tidelog.types import TopicPartition

#: What reading a batch may raise: the codec's errors, nothing else.
READ_ERRORS = (CorruptMessageError, UnsupportedCompressionTypeError)
#: What validating a produced batch may raise.
VALIDATE_ERRORS = (*READ_ERRORS, InvalidRecordError, InvalidTxnStateError, InvalidTimestampError)

def _read_everything(data: bytes) -> None:
    """Every reader of the codec over every batch of `data`."""
    for pos, header in iter_batches(data):
        check_crc(data, pos, header)
        list(record_timestamps(data, pos, header))
        first_record_reaching(data, pos, header, T, header.base_offset)
        records = decode_records(data, pos, header)
        keys = record_keys(data, pos, header)
        retain_records(data, pos, header, set(keys.offsets[::2]))
        if header.is_control:
            control_type_of(data, pos, header)
        assert [r.offset for r in records] == keys.offsets
        assert [r.key for r in records] == keys.keys
        assert {r.offset for r in records if r.value is None} == keys.tombstones


def _refused(reader: Callable[..., object], *args: object) -> bool:
    try:
        reader(*args)
    except READ_ERRORS:
        return True
    return False


def _decoding_refuses_what_validation_refuses(data: bytes) -> None:
    """The consumer's single walk (`consumer_records`) checks each record as it decodes it:
    it must refuse exactly the batches `validate_records` refuses."""
    tp = TopicPartition("t", 0)
    for pos, header in iter_batches(data):
        assert _refused(validate_records, data, pos, header) == _refused(
            consumer_records, data, pos, header, tp, 0
        )


def _reencoded(data: bytes) -> list[Record]:
    """The records of an accepted batch, decoded, encoded again and decoded from that: the
    same records (the bytes may differ, as a varint may be written longer than it needs,
    which Kafka's readers accept too)."""
    header = read_header(data)
    parts: list[bytes] = []
    for r in decode_records(data, 0, header):
        encode_record(parts, r.offset - header.base_offset, r.timestamp - header.first_timestamp,
                      r.key, r.value, r.headers)
    fields = header._replace(attributes=header.attributes & ~ATTR_COMPRESSION)._asdict()
    for name in ("batch_length", "magic", "crc"):
        del fields[name]
    again = assemble_batch(b"".join(parts), **fields)
    return decode_records(again, 0, read_header(again))


@fuzz_settings(200)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_codec_errors(data: bytes) -> None:
    with contextlib.suppress(READ_ERRORS):
        _read_everything(data)


@fuzz_settings(400)
@given(mutated_batch(), st.booleans())
def test_a_batch_the_leader_accepts_is_one_every_reader_reads(data: bytes, client: bool) -> None:
    with contextlib.suppress(READ_ERRORS):  # a batch header that cannot be read
        _decoding_refuses_what_validation_refuses(data)
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
    assert _reencoded(data) == decode_records(data, 0, header)
    assert header.records_count == len(decode_records(data, 0, header))
