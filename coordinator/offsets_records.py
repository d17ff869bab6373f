"""The records of `__consumer_offsets`: the key and value of one committed offset.

Key, as Kafka's OffsetCommitKey (kafka-reference §7.4), so that a key names one
(group, topic, partition) the same way Kafka does and the cleaner keeps its newest value::

    int16   version     1 (0 has the same layout and is read too; 2 is Kafka's group-metadata
                        key, which Tidelog never writes)
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
from typing import Final, NamedTuple

#: The key version Kafka's writers use for an offset commit.
KEY_VERSION: Final = 1
_KEY_VERSIONS: Final = frozenset({0, 1})
#: Kafka's key version of a group-metadata record (a group's members; not an offset).
GROUP_METADATA_KEY_VERSION: Final = 2
VALUE_VERSION: Final = 1000

#: The longest string an int16 length prefix can announce.
MAX_KEY_STRING_BYTES: Final = 0x7FFF

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch
_VALUE_TAIL = struct.Struct(">qqi")  # commit timestamp, commit id, commit size


class OffsetRecordError(ValueError):
    """A key or value of `__consumer_offsets` that does not decode (or cannot be encoded)."""


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
            _key_string(key.group, "group"),
            _key_string(key.topic, "topic"),
            _I32.pack(key.partition),
        )
    )


def _key_string(text: str, what: str) -> bytes:
    data = text.encode()
    if len(data) > MAX_KEY_STRING_BYTES:
        raise OffsetRecordError(
            f"{what} is {len(data)} bytes of UTF-8, the limit is {MAX_KEY_STRING_BYTES}"
        )
    return _I16.pack(len(data)) + data


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


# ---- decoding ------------------------------------------------------------------------------


def decode_key(data: bytes | memoryview) -> OffsetKey:
    """The offset key in `data`, checked field by field; `OffsetRecordError` otherwise."""
    reader = _Reader(bytes(data), "key")
    version = reader.int(_I16)
    if version == GROUP_METADATA_KEY_VERSION:
        raise OffsetRecordError("a group-metadata key (version 2), not an offset commit")
    if version not in _KEY_VERSIONS:
        raise OffsetRecordError(f"unknown key version {version}")
    group = reader.string(_I16)
    topic = reader.string(_I16)
    partition = reader.int(_I32)
    reader.end()
    if partition < 0:
        raise OffsetRecordError(f"negative partition {partition} in the key")
    return OffsetKey(group, topic, partition)


def decode_value(data: bytes | memoryview) -> OffsetValue:
    """The offset value in `data` (not a tombstone), checked; `OffsetRecordError` otherwise."""
    reader = _Reader(bytes(data), "value")
    version = reader.int(_I16)
    if version != VALUE_VERSION:
        raise OffsetRecordError(f"unknown value version {version}")
    offset = reader.int(_I64)
    leader_epoch = reader.int(_I32)
    metadata = reader.string(_I32)
    commit_timestamp_ms = reader.int(_I64)
    commit_id = reader.int(_I64)
    commit_size = reader.int(_I32)
    reader.end()
    if leader_epoch < -1:
        raise OffsetRecordError(f"leader epoch {leader_epoch} (only -1 means unknown)")
    if commit_id < 0:
        raise OffsetRecordError(f"negative commit id {commit_id}")
    if commit_size < 1:
        raise OffsetRecordError(f"commit size {commit_size} (a commit set holds a record)")
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp_ms, commit_id, commit_size)



class _Reader:
    """Reads fields in order, refusing short fields, lying lengths and bad UTF-8."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def int(self, field: struct.Struct) -> int:
        end = self._pos + field.size
        if end > len(self._data):
            raise OffsetRecordError(f"the {self._what} ends inside a field at byte {self._pos}")
        (value,) = field.unpack_from(self._data, self._pos)
        self._pos = end
        return int(value)

    def string(self, length_field: struct.Struct) -> str:
        length = self.int(length_field)
        if length < 0:
            raise OffsetRecordError(f"negative string length {length} in the {self._what}")
        end = self._pos + length
        if end > len(self._data):
            raise OffsetRecordError(
                f"string length {length} runs past the end of the {self._what}"
            )
        try:
            text = self._data[self._pos : end].decode()
        except UnicodeDecodeError as exc:
            raise OffsetRecordError(f"string in the {self._what} is not UTF-8: {exc}") from None
        self._pos = end
        return text

    def end(self) -> None:
        if self._pos != len(self._data):
            raise OffsetRecordError(
                f"{len(self._data) - self._pos} bytes left over after the {self._what}"
            )
