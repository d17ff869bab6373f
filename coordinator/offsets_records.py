"""The records of `__consumer_offsets`: the key and value of one committed offset.

Key, as Kafka's OffsetCommitKey (kafka-mapping §7.4), so that a key names one
(group, topic, partition) the same way Kafka does and the cleaner keeps its newest value::

    int16   version     1 (Kafka's 0 has the same layout, but the cleaner compares raw key
                        bytes, so only the one version Tidelog writes is read; 2 is Kafka's
                        group-metadata key, which Tidelog never writes)
    string  group       int16 length, then UTF-8
    string  topic       int16 length, then UTF-8
    int32   partition

Value, under Tidelog's own version (Kafka's value versions are 0-4; Tidelog's sits far from
them so that a value is never read under the other's layout). It carries Kafka's v3 fields and
the commit id and commit size of contract §8.5, which let a loader tell a whole commit set
from part of one (`GroupCoordinatorState`)::

    int16   version           VALUE_VERSION
    int64   offset
    int32   leader_epoch      -1 when unknown
    string  metadata          int32 length (not int16 as Kafka: offset.metadata.max.bytes is a
                              node option and 4096 Java chars are already up to 12 KiB of UTF-8),
                              then UTF-8
    int64   commit_timestamp  ms, the coordinator's time of the commit
    int64   commit_id         the commit set this record belongs to
    int32   commit_size       records in that set, >= 1

A null value is a tombstone: it deletes the key's offset. Every integer is big-endian. Every
byte read back is checked (lengths that lie, truncation, trailing bytes, unknown versions,
values no writer produces): such a record is an `OffsetRecordError`, which the loader logs and
skips, never a crash.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from tidelog.coordinator.record_codec import I16 as _I16
from tidelog.coordinator.record_codec import I32 as _I32
from tidelog.coordinator.record_codec import (
    MAX_INT16_STRING_BYTES,
    CoordinatorRecordError,
    check_size,
    encode_string,
    read_string,
    read_version,
    truncated,
    versioned,
)
from tidelog.records import encode_record, varint

#: The key version Kafka's writers use for an offset commit.
KEY_VERSION: Final = 1
#: Kafka's key version of a group-metadata record (a group's members; not an offset).
GROUP_METADATA_KEY_VERSION: Final = 2
VALUE_VERSION: Final = 1000

#: The longest string an int16 length prefix can announce.
MAX_KEY_STRING_BYTES: Final = MAX_INT16_STRING_BYTES

_VALUE_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch (then the metadata)
_VALUE_TAIL = struct.Struct(">qqi")  # commit timestamp, commit id, commit size
#: A whole value with empty metadata (the common case).
_VALUE_BARE = struct.Struct(">hqiiqqi")


#: A key or value of `__consumer_offsets` that does not decode (or cannot be encoded).
OffsetRecordError = CoordinatorRecordError


class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class OffsetValue(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    commit_id: int
    commit_size: int


# ---- encoding ------------------------------------------------------------------------------


def encode_key(key: OffsetKey) -> bytes:
    """The key bytes; `OffsetRecordError` if a name is too long for its int16 length."""
    return b"".join(
        (
            _I16.pack(KEY_VERSION),
            encode_string(key.group, "group"),
            encode_string(key.topic, "topic"),
            _I32.pack(key.partition),
        )
    )


def encode_value(value: OffsetValue) -> bytes:
    metadata = value.metadata.encode()
    return b"".join(
        (
            _VALUE_HEAD.pack(VALUE_VERSION, value.offset, value.leader_epoch),
            _I32.pack(len(metadata)),
            metadata,
            _VALUE_TAIL.pack(value.commit_timestamp_ms, value.commit_id, value.commit_size),
        )
    )


def encode_commit_records(
    out: list[bytes],
    group: str,
    parts: Sequence[tuple[str, int, int, int, str]],
    commit_timestamp_ms: int,
    commit_id: int,
    first_delta: int,
    timestamp_delta: int,
) -> None:
    """Append to `out` the records of one commit set of `group` as a batch holds them
    (`tidelog.records.encode_record`'s encoding), from (topic, partition, offset, leader epoch,
    metadata) each: the key of `encode_key` and the value of `encode_value`, the records' offset
    deltas counted from `first_delta` and each at `timestamp_delta` from the batch's first
    timestamp. The commit path encodes every committed offset, so this is per-record cost: a
    record with empty metadata (the common one) is its varint length and offset delta, the
    set's attributes and timestamp delta, and ONE struct call for the rest (the key's length,
    the group's and topic's part of the key, the partition, the whole bare value and a header
    count of 0), whose format is made once per key length; one with metadata is encoded field
    by field. `OffsetRecordError` if a name is too long for its int16 length."""
    prefix = _I16.pack(KEY_VERSION) + encode_string(group, "group")
    topics: dict[str, tuple[bytes, bytes, Callable[..., bytes], int]] = {}
    size = len(parts)
    head = b"\x00" + varint(timestamp_delta)  # attributes 0, the set's timestamp delta
    for delta, (topic, partition, offset, leader_epoch, metadata) in enumerate(parts, first_delta):
        known = topics.get(topic)
        if known is None:
            topic_key = prefix + encode_string(topic, "topic")
            keyed = varint(len(topic_key) + _I32.size) + topic_key
            bare = _bare_record(len(keyed))
            known = topics[topic] = (topic_key, keyed, bare.pack, len(head) + bare.size)
        topic_key, keyed, pack_bare_record, bare_length = known
        if metadata:
            value = encode_value(OffsetValue(offset, leader_epoch, metadata, commit_timestamp_ms,
                                             commit_id, size))
            encode_record(out, delta, timestamp_delta, topic_key + _I32.pack(partition), value)
        else:
            offset_delta = varint(delta)
            out += (
                varint(bare_length + len(offset_delta)), head, offset_delta,
                pack_bare_record(keyed, partition, _BARE_VALUE_LENGTH, VALUE_VERSION, offset,
                                 leader_epoch, 0, commit_timestamp_ms, commit_id, size, 0),
            )


#: The varint of a bare value's length (it fits one byte).
_BARE_VALUE_LENGTH = varint(_VALUE_BARE.size)[0]


@functools.lru_cache(maxsize=64)
def _bare_record(keyed_length: int) -> struct.Struct:
    """The tail of a record with a bare value (empty metadata), after its offset delta: the
    key's varint length with the key's group and topic part (`keyed_length` bytes), the
    partition, the value's one-byte varint length, the value's fields, header count 0."""
    return struct.Struct(f">{keyed_length}siB{_VALUE_BARE.format[1:]}B")


# ---- decoding ------------------------------------------------------------------------------
# Straight-line reads with one struct call per fixed run of fields: a new coordinator decodes
# every record of its partition before it answers, so this is the inner loop of a failover.


def decode_key(data: bytes | memoryview) -> OffsetKey:
    """The offset key in `data`, checked field by field; `OffsetRecordError` otherwise."""
    data = bytes(data)
    version = read_version(data, "key")
    if version == GROUP_METADATA_KEY_VERSION:
        raise OffsetRecordError("a group-metadata key (version 2), not an offset commit")
    if version != KEY_VERSION:
        raise OffsetRecordError(f"unknown key version {version}")
    group, pos = read_string(data, 2, _I16, "key")
    topic, pos = read_string(data, pos, _I16, "key")
    check_size(data, pos + _I32.size, "key")
    (partition,) = _I32.unpack_from(data, pos)
    if partition < 0:
        raise OffsetRecordError(f"negative partition {partition} in the key")
    return OffsetKey(group, topic, partition)


def decode_value(data: bytes | memoryview) -> OffsetValue:
    """The offset value in `data` (not a tombstone), checked; `OffsetRecordError` otherwise."""
    data = versioned(data, VALUE_VERSION, "value")
    if len(data) < _VALUE_HEAD.size:
        raise truncated("value", len(data))
    _, offset, leader_epoch = _VALUE_HEAD.unpack_from(data)
    metadata, pos = read_string(data, _VALUE_HEAD.size, _I32, "value")
    check_size(data, pos + _VALUE_TAIL.size, "value")
    commit_timestamp_ms, commit_id, commit_size = _VALUE_TAIL.unpack_from(data, pos)
    if leader_epoch < -1:
        raise OffsetRecordError(f"leader epoch {leader_epoch} (only -1 means unknown)")
    if commit_id < 0:
        raise OffsetRecordError(f"negative commit id {commit_id}")
    if commit_size < 1:
        raise OffsetRecordError(f"commit size {commit_size} (a commit set holds a record)")
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp_ms, commit_id, commit_size)
