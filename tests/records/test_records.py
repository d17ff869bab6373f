"""The record-batch codec: what producers build is what consumers decode, and the leader's
validation refuses every malformed or out-of-range batch before anything is written."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from record_helpers import T, forge_batch, forge_header, forge_record, kafka_varint, read_varint

from tidelog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
)
from tidelog.records import (
    HEADER_SIZE,
    NO_TIMESTAMP,
    ControlType,
    RecordInput,
    TimestampType,
    assign_offsets,
    build_batch,
    build_control_batch,
    build_txn_marker,
    check_crc,
    consumer_records,
    control_record_of,
    control_type_of,
    crc_matches,
    decode_records,
    first_record_reaching,
    iter_batches,
    read_header,
    record_keys,
    record_timestamps,
    retain_records,
    validate_batch,
)
from tidelog.types import ConsumerRecord, TopicPartition

UNBOUNDED = 2**62


def _validate(
    buf: bytes,
    now_ms: int = 10_000,
    before: int = UNBOUNDED,
    after: int = UNBOUNDED,
    *,
    from_client: bool = False,
    require_keys: bool = False,
):
    return validate_batch(
        buf,
        now_ms=now_ms,
        timestamp_before_max_ms=before,
        timestamp_after_max_ms=after,
        from_client=from_client,
        require_keys=require_keys,
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
    length, at = read_varint(body, 0)
    first_len = at + length
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


# ----------------------------------------------------------------------------------------------
# Record framing: a batch whose CRC is right but whose records lie is refused before it is
# written, and never decodes to garbage or a raw exception.

LYING_RECORDS: dict[str, tuple[dict[str, object], str]] = {
    "key length past the record": ({"key": b"k", "key_len": 1000}, "key length 1000"),
    "key length below -1": ({"key": b"", "key_len": -7}, "key length -7"),
    "value length past the record": ({"value_len": 4096}, "value length 4096"),
    "value length below -1": ({"value": b"", "value_len": -3}, "value length -3"),
    "absurd header count": ({"headers": kafka_varint(2**31 - 1)}, "header count"),
    "negative header count": ({"headers": kafka_varint(-1)}, "header count -1"),
    "header key length past the record": (
        {"headers": kafka_varint(1) + forge_header(b"h", b"x", key_len=77)},
        "header 0 key length 77",
    ),
    "null header key": (
        {"headers": kafka_varint(1) + forge_header(b"", b"x", key_len=-1)},
        "header 0 key length -1",
    ),
    "header key not UTF-8": (
        {"headers": kafka_varint(1) + forge_header(b"\xff\xfe", b"x")},
        "header 0 key is not UTF-8",
    ),
    "header value length past the record": (
        {"headers": kafka_varint(1) + kafka_varint(1) + b"h" + kafka_varint(9)},
        "header 0 value length 9",
    ),
    "length longer than the fields": ({"extra": 3}, "end 3 bytes before"),
    "length shorter than the fields": ({"extra": -2}, "length"),
    "record attributes set": ({"attributes": 1}, "attributes 1"),
    "varint longer than 5 bytes": ({"headers": b"\x80" * 5 + b"\x00"}, "longer than 5 bytes"),
    "varint past 32 bits": ({"headers": b"\xfe\xff\xff\xff\x7f"}, "does not fit 32 bits"),
}


@pytest.mark.parametrize("case", sorted(LYING_RECORDS))
def test_a_record_lying_about_its_framing_is_refused_and_never_decodes(case: str) -> None:
    """The good record before the liar makes the point of the bug: today's leader acknowledges
    the batch, then every consumer of the partition fails on it."""
    fields, what = LYING_RECORDS[case]
    liar = forge_record(offset_delta=1, **fields)  # type: ignore[arg-type]
    buf = forge_batch(forge_record(value=b"good"), liar)
    header = read_header(buf)
    check_crc(buf, 0, header)
    with pytest.raises(CorruptMessageError, match=f"malformed record 1 of the batch: .*{what}"):
        _validate(buf)
    for reader in (decode_records, record_keys, lambda b, p, h: retain_records(b, p, h, {1})):
        with pytest.raises(CorruptMessageError, match="malformed record 1"):
            list(reader(buf, 0, header))


def test_absurd_record_counts_are_refused_before_any_record_is_read() -> None:
    buf = forge_batch(forge_record(), count=2**31 - 1)
    with pytest.raises(CorruptMessageError, match="claims 2147483647 records"):
        _validate(buf)
    with pytest.raises(CorruptMessageError, match="claims"):
        decode_records(buf, 0, read_header(buf))


def test_the_first_record_carries_first_timestamp() -> None:
    """Otherwise first_timestamp and max_timestamp could name a time no record has."""
    buf = forge_batch(forge_record(ts_delta=-5), max_timestamp=T)
    with pytest.raises(CorruptMessageError, match=r"malformed record 0 .*timestamp delta is not 0"):
        _validate(buf)


def test_records_that_do_not_fill_the_batch_are_refused() -> None:
    buf = forge_batch(forge_record(), forge_record(offset_delta=1), count=1)
    with pytest.raises(CorruptMessageError, match="follow the last of the batch's 1 records"):
        _validate(buf)


def test_a_batch_without_records_is_refused() -> None:
    with pytest.raises(CorruptMessageError, match="at least one"):
        _validate(forge_batch(count=0))


def test_a_compacted_topic_refuses_a_keyless_record_in_the_same_pass() -> None:
    buf = build_batch([RecordInput(b"x", b"k", T), RecordInput(b"y", None, T)])
    _validate(buf)
    with pytest.raises(InvalidRecordError, match="cannot accept message without key: record 1"):
        _validate(buf, require_keys=True)
    _validate(build_control_batch(ControlType.LEADER_CHANGE), require_keys=True)


def test_lookups_by_timestamp_stop_at_a_record_length_that_leaves_the_batch() -> None:
    buf = forge_batch(forge_record(), forge_record(offset_delta=1, extra=500)[:-500])
    header = read_header(buf)
    with pytest.raises(CorruptMessageError, match="malformed record 1"):
        list(record_timestamps(buf + bytes(1000), 0, header))
    with pytest.raises(CorruptMessageError, match="malformed record 1"):
        first_record_reaching(buf + bytes(1000), 0, header, T + 1, 0)


# ---- what only a producer may not write ------------------------------------------------------


def test_clients_may_not_write_control_batches() -> None:
    buf = build_control_batch(ControlType.COMMIT, producer_id=5, producer_epoch=0)
    _validate(buf)  # the node's own markers
    with pytest.raises(InvalidRecordError, match="control batches") as err:
        _validate(buf, from_client=True)
    assert err.value.code == 87


def test_a_transactional_batch_needs_a_producer_id() -> None:
    buf = build_batch([RecordInput(b"v", None, T)], transactional=True)
    with pytest.raises(InvalidRecordError, match="without a producer id") as err:
        _validate(buf, from_client=True)
    assert err.value.code == 87
    _validate(build_batch([RecordInput(b"v", None, T)], producer_id=5, producer_epoch=0,
                          base_sequence=0, transactional=True), from_client=True)


def test_a_txn_marker_carries_its_type_and_coordinator_epoch() -> None:
    """kafka-mapping §8.6: key (version 0, type), value (version 0, coordinator epoch)."""
    for commit, kind in ((True, ControlType.COMMIT), (False, ControlType.ABORT)):
        buf = build_txn_marker(commit, producer_id=7, producer_epoch=3, coordinator_epoch=11)
        header = read_header(buf)
        assert header.is_control and header.is_transactional
        assert (header.producer_id, header.producer_epoch) == (7, 3)
        assert control_record_of(buf, 0, header) == (kind, 11)
        assert decode_records(buf, 0, header)[0].value == b"\x00\x00\x00\x00\x00\x0b"


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_records_that_are_not_a_stream_of_their_codec_are_corrupt(codec: int) -> None:
    """Uncompressed records under a codec's bits (test_compression.py has the codecs)."""
    buf = forge_batch(forge_record(), attributes=codec)
    with pytest.raises(CorruptMessageError, match="do not decompress") as err:
        _validate(buf)
    assert err.value.code == 2
    with pytest.raises(CorruptMessageError):
        decode_records(buf, 0, read_header(buf))


def test_attribute_bits_without_a_meaning_are_refused_from_clients() -> None:
    with pytest.raises(InvalidRecordError, match="0x0040"):
        _validate(forge_batch(forge_record(), attributes=0x40), from_client=True)


def test_a_producer_id_needs_a_base_sequence() -> None:
    buf = build_batch([RecordInput(b"v", None, T)], producer_id=5, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="without a base sequence"):
        _validate(buf, from_client=True)


@pytest.mark.parametrize("log_append", [False, True])
def test_consumer_records_from_any_position_are_the_decoded_records_from_there(
    log_append: bool
) -> None:
    """What the consumer's walk returns from `min_offset` on is what `decode_records` reads,
    with timestamps that go back and forth, offset gaps the cleaner leaves, deltas and lengths
    of one, two and three varint bytes, and the batch's leader epoch on every record."""
    records = [
        RecordInput(b"v" * (i * 97 % 9000), None if i % 3 else b"k%d" % i,
                    T + (7 * i) % 5 - (i == 3) + (i == 80) * 70_000,
                    [("h", b"x")] if i % 7 == 0 else ())
        for i in range(100)
    ]
    built = build_batch(records, base_offset=100, partition_leader_epoch=4)
    kept = {100 + i for i in range(100) if i % 4 != 1}
    batches = [built, retain_records(built, 0, read_header(built), kept)]
    if log_append:
        batches = [assign_offsets(b, 100, 4, log_append_time_ms=T + 99) for b in batches]
    tp = TopicPartition("t", 0)
    for buf in batches:
        header = read_header(buf)
        expected = decode_records(buf, 0, header)
        for start in (0, 101, 103, 164, 199, 200):
            decoded = consumer_records(buf, 0, header, tp, start)
            assert all(type(r) is ConsumerRecord and r.leader_epoch == 4 for r in decoded)
            assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
                (r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected
                if r.offset >= start
            ]
