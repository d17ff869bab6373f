"""The key and value codec of `__consumer_offsets` records: round trips, Kafka's key layout
byte for byte, and every way a stored key or value can be damaged, each refused by name."""

from __future__ import annotations

import contextlib
import struct

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from tidelog.coordinator.group_coordinator import CommitSet
from tidelog.coordinator.offsets_records import (
    VALUE_VERSION,
    OffsetKey,
    OffsetRecordError,
    OffsetValue,
    decode_key,
    decode_value,
    encode_commit_records,
    encode_key,
    encode_value,
)
from tidelog.records import RecordInput, build_batch, build_batch_of, encode_record

KEY = OffsetKey("my-group", "events", 7)
VALUE = OffsetValue(42, 3, "ü checkpoint 🚀", 1_700_000_000_000, 9, 100)


def test_key_is_kafkas_offset_commit_key_v1() -> None:
    # int16 version 1, int16-length-prefixed UTF-8 group and topic, int32 partition.
    assert encode_key(KEY) == (
        b"\x00\x01" + b"\x00\x08my-group" + b"\x00\x06events" + b"\x00\x00\x00\x07"
    )


def test_value_layout() -> None:
    metadata = VALUE.metadata.encode()
    assert encode_value(VALUE) == (
        struct.pack(">hqi", VALUE_VERSION, 42, 3)
        + struct.pack(">i", len(metadata))
        + metadata
        + struct.pack(">qqi", 1_700_000_000_000, 9, 100)
    )


_names = st.text(max_size=40)


@given(
    st.builds(OffsetKey, _names, _names, st.integers(0, 2**31 - 1)),
    st.builds(
        OffsetValue,
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-1, 2**31 - 1),
        st.text(max_size=200),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 2**63 - 1),
        st.integers(1, 2**31 - 1),
    ),
)
def test_round_trip(key: OffsetKey, value: OffsetValue) -> None:
    assert decode_key(encode_key(key)) == key
    assert decode_value(encode_value(value)) == value


def test_empty_names_and_metadata_round_trip() -> None:
    key = OffsetKey("", "t", 0)
    value = OffsetValue(0, -1, "", 0, 0, 1)
    assert decode_key(encode_key(key)) == key
    assert decode_value(encode_value(value)) == value


def test_a_group_too_long_for_an_int16_length_is_refused_on_encode() -> None:
    with pytest.raises(OffsetRecordError, match="group is 32768 bytes"):
        encode_key(OffsetKey("g" * 0x8000, "t", 0))
    assert decode_key(encode_key(OffsetKey("g" * 0x7FFF, "t", 0))).group == "g" * 0x7FFF


def _key(version: int = 1, group: bytes = b"g", topic: bytes = b"t", partition: int = 0,
         group_len: int | None = None) -> bytes:
    return (
        struct.pack(">hh", version, len(group) if group_len is None else group_len)
        + group
        + struct.pack(">h", len(topic))
        + topic
        + struct.pack(">i", partition)
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "ends inside a field"),
        (b"\x00", "ends inside a field"),
        (_key(version=2), "group-metadata key"),
        (_key(version=0), "unknown key version 0"),  # Kafka's; Tidelog writes only 1
        (_key(version=3), "unknown key version 3"),
        (_key(version=-1), "unknown key version -1"),
        (_key(group_len=-1), "negative string length -1"),
        (_key(group_len=200), "runs past the end"),
        (_key(group=b"\xff\xfe"), "not UTF-8"),
        (_key(topic=b"\xc3"), "not UTF-8"),
        (_key(partition=-1), "negative partition -1"),
        (_key()[:-1], "ends inside a field"),
        (_key() + b"\x00", "1 bytes left over"),
    ],
)
def test_bad_keys_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(OffsetRecordError, match=reason):
        decode_key(data)


def _value(version: int = VALUE_VERSION, leader_epoch: int = 0, metadata: bytes = b"m",
           metadata_len: int | None = None, commit_id: int = 0, commit_size: int = 1) -> bytes:
    return (
        struct.pack(">hqi", version, 5, leader_epoch)
        + struct.pack(">i", len(metadata) if metadata_len is None else metadata_len)
        + metadata
        + struct.pack(">qqi", 1, commit_id, commit_size)
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "ends inside a field"),
        (_value(version=3), "unknown value version 3"),  # Kafka's v3: not Tidelog's layout
        (_value(version=1001), "unknown value version 1001"),
        (_value(metadata_len=-1), "negative string length -1"),
        (_value(metadata_len=2**31 - 1), "runs past the end"),
        (_value(metadata_len=30), "runs past the end"),
        (_value(metadata=b"\xed\xa0\x80"), "not UTF-8"),  # an encoded lone surrogate
        (_value(leader_epoch=-2), "leader epoch -2"),
        (_value(commit_id=-1), "negative commit id -1"),
        (_value(commit_size=0), "commit size 0"),
        (_value(commit_size=-5), "commit size -5"),
        (_value()[:-1], "ends inside a field"),
        (_value()[:20], "ends inside a field"),
        (_value() + b"\x00\x00", "2 bytes left over"),
    ],
)
def test_bad_values_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(OffsetRecordError, match=reason):
        decode_value(data)


@given(st.binary(max_size=80))
def test_random_bytes_decode_or_raise_offset_record_error(data: bytes) -> None:
    for decode in (decode_key, decode_value):
        with contextlib.suppress(OffsetRecordError):
            decode(data)


@given(st.data())
def test_every_truncation_of_a_good_record_is_refused(data: st.DataObject) -> None:
    key, value = encode_key(KEY), encode_value(VALUE)
    cut = data.draw(st.integers(0, len(value) - 1))
    with pytest.raises(OffsetRecordError):
        decode_value(value[:cut])
    with pytest.raises(OffsetRecordError):
        decode_key(key[: min(cut, len(key) - 1)])


def test_a_commit_set_encodes_as_its_records_one_by_one() -> None:
    """The commit path's encoder gives the records of encode_key and encode_value, for bare
    values (one struct call a record) and ones with metadata, over two topics."""
    parts = [("events", 7, 42, 3, ""), ("ü-topic", 0, -1, -1, "ü checkpoint 🚀"),
             ("events", 2**31 - 1, 2**63 - 1, 0, "")]
    pieces: list[bytes] = []
    encode_commit_records(pieces, "my-group", parts, 1_700_000_000_000, 9, 5, -2)
    expected: list[bytes] = []
    for delta, (topic, partition, offset, epoch, metadata) in enumerate(parts, 5):
        encode_record(expected, delta, -2, encode_key(OffsetKey("my-group", topic, partition)),
                      encode_value(OffsetValue(offset, epoch, metadata, 1_700_000_000_000, 9,
                                               len(parts))))
    assert b"".join(pieces) == b"".join(expected)
    with pytest.raises(OffsetRecordError, match="topic is 32768 bytes"):
        encode_commit_records([], "g", [("t" * 32768, 0, 0, -1, "")], 0, 0, 0, 0)


_NAMES = st.text(max_size=12)
_ENTRIES = st.lists(st.tuples(
    _NAMES, st.integers(0, 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
    st.integers(-1, 2**31 - 1), st.one_of(st.just(""), st.text(max_size=16)),
), min_size=1, max_size=6)
_COMMIT_SETS = st.builds(CommitSet, _NAMES, st.integers(0, 2**42), _ENTRIES,
                         st.integers(0, 2**62))
_INPUTS = st.lists(st.builds(
    RecordInput,
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=12)),
    st.integers(-1, 2**42),
    st.lists(st.tuples(_NAMES, st.one_of(st.none(), st.binary(max_size=6))), max_size=2),
), min_size=1, max_size=4)


def _inputs_of(source: CommitSet | list[RecordInput]) -> list[RecordInput]:
    """The records of `source` one by one, through the reference encoders."""
    if isinstance(source, list):
        return source
    return [
        RecordInput(encode_value(OffsetValue(offset, epoch, metadata, source.commit_timestamp_ms,
                                             source.commit_id, len(source.entries))),
                    encode_key(OffsetKey(source.group, topic, partition)),
                    source.commit_timestamp_ms)
        for topic, partition, offset, epoch, metadata in source.entries
    ]


@settings(deadline=None)
@given(st.lists(st.one_of(_COMMIT_SETS, _INPUTS), min_size=1, max_size=5),
       st.integers(-1, 2**40), st.integers(-1, 0x7FFF), st.booleans())
def test_a_batch_of_sets_is_byte_for_byte_build_batch_of_their_records(
    sources: list[CommitSet | list[RecordInput]], producer_id: int, producer_epoch: int,
    transactional: bool,
) -> None:
    """The group commit's batch (`build_batch_of`: commit sets encoded straight into it, beside
    lists of RecordInputs) is the batch `build_batch` makes of all their records in a row,
    through the one-record-at-a-time encoders: the bytes every reader already checks."""
    records = [record for source in sources for record in _inputs_of(source)]
    expected = build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                           transactional=transactional)
    assert build_batch_of(sources, producer_id=producer_id, producer_epoch=producer_epoch,
                          transactional=transactional) == (expected, len(records))
