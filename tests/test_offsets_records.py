"""The key and value codec of `__consumer_offsets` records: round trips, Kafka's key layout
byte for byte, and every way a stored key or value can be damaged, each refused by name."""

from __future__ import annotations

import contextlib
import struct

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tidelog.coordinator.offsets_records import (
    VALUE_VERSION,
    OffsetKey,
    OffsetRecordError,
    OffsetValue,
    decode_key,
    decode_value,
    encode_commit_set,
    encode_key,
    encode_value,
)

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
    """The commit path's encoder gives the bytes of encode_key and encode_value, for bare
    values (one struct call) and ones with metadata, over two topics."""
    parts = [("events", 7, 42, 3, ""), ("ü-topic", 0, -1, -1, "ü checkpoint 🚀"),
             ("events", 2**31 - 1, 2**63 - 1, 0, "")]
    encoded = encode_commit_set("my-group", parts, 1_700_000_000_000, 9)
    assert encoded == [
        (encode_key(OffsetKey("my-group", topic, partition)),
         encode_value(OffsetValue(offset, epoch, metadata, 1_700_000_000_000, 9, len(parts))))
        for topic, partition, offset, epoch, metadata in parts
    ]
    with pytest.raises(OffsetRecordError, match="topic is 32768 bytes"):
        encode_commit_set("g", [("t" * 32768, 0, 0, -1, "")], 0, 0)
