"""The records of `__consumer_offsets`: the key and value of one committed offset.

Key, as Kafka's OffsetCommitKey (kafka-reference §7.4), so that a key names one
(group, topic, partition) the same way Kafka does and the cleaner keeps its newest value::

    int16   version     1 (Kafka's 0 has the same layout, but the cleaner compares raw key
                        bytes, so only the one version Tidelog writes is read; 2 is Kafka's
                        group-metadata key, which Tidelog never writes)
    string  group       int16 length, then UTF-8
    string  topic       int16 length, then UTF-8
    int32   partition

Value, under Tidelog's own version (Kafka's value versions are 0-4; Tidelog's sits far from
them so that a value is never read under the other's layout). It carries Kafka's v3 fields and
seed 004's commit id and commit size, which let a loader tell a whole commit set from part of
one (`GroupCoordinatorState`)::

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

import struct
from collections.abc import Sequence
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
)

#: The key version Kafka's writers use for an offset commit.
KEY_VERSION: Final = 1
#: Kafka's key version of a group-metadata record (a group's members; not an offset).
GROUP_METADATA_KEY_VERSION: Final = 2
VALUE_VERSION: Final = 1000

#: The longest string an int16 length prefix can announce.
MAX_KEY_STRING_BYTES: Final = MAX_INT16_STRING_BYTES

_VALUE_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch (then the metadata)
_VALUE_TAIL = struct.Struct(">qqi")  # commit timestamp, commit id, commit size
#: A whole value with empty metadata (the common case): one struct call.
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


def encode_commit_set(
    group: str,
    parts: Sequence[tuple[str, int, int, int, str]],
    commit_timestamp_ms: int,
    commit_id: int,
) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record of one commit set of `group`, from (topic, partition,
    offset, leader epoch, metadata) each: the bytes `encode_key` and `encode_value` give, made
    with a struct call or two a record and the group's part of the key made once (the commit
    path encodes every committed offset, so this is per-record cost). `OffsetRecordError` if
    a name is too long for its int16 length."""
    prefix = _I16.pack(KEY_VERSION) + encode_string(group, "group")
    topics: dict[str, bytes] = {}
    size = len(parts)
    pack_bare = _VALUE_BARE.pack
    pack_partition = _I32.pack
    out: list[tuple[bytes, bytes]] = []
    for topic, partition, offset, leader_epoch, metadata in parts:
        topic_key = topics.get(topic)
        if topic_key is None:
            topic_key = topics[topic] = prefix + encode_string(topic, "topic")
        if metadata:
            value = encode_value(OffsetValue(offset, leader_epoch, metadata, commit_timestamp_ms,
                                             commit_id, size))
        else:
            value = pack_bare(VALUE_VERSION, offset, leader_epoch, 0, commit_timestamp_ms,
                              commit_id, size)
        out.append((topic_key + pack_partition(partition), value))
    return out


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
    data = bytes(data)
    version = read_version(data, "value")
    if version != VALUE_VERSION:
        raise OffsetRecordError(f"unknown value version {version}")
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
