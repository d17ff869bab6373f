"""The records of consumer groups (KIP-848) in `__consumer_offsets`, beside the offset records.

Kafka keeps a consumer group as six record types in the group's partition of the offsets topic
(kafka-mapping §10.8); Tidelog keeps the same six, with the same keys and the fields it uses.
A key starts with its int16 record type, which is also what tells a group record from an offset
commit (type 1, `offsets_records`) on replay; the value starts with an int16 version (0 here).
A null value is a tombstone: the key's record is gone.

====  ==========================================  =============================================
type  key (after the type)                        value (after the version)
====  ==========================================  =============================================
3     group                                       group epoch (int32)
4     group                                       subscription metadata: [topic, partitions]
5     group, member id                            instance id?, rack id?, client id, client
                                                  host, subscribed topics [string], rebalance
                                                  timeout ms (int32), server assignor?;
                                                  value version 1 (a classic member's): then
                                                  its session timeout ms (int32)
6     group                                       target assignment epoch (int32)
7     group, member id                            the member's target: [topic, [partition]]
8     group, member id                            member epoch, previous member epoch (int32),
                                                  state (int8), assigned: [topic, [partition]],
                                                  pending revocation: [topic, [partition]]
====  ==========================================  =============================================

Encoding, big-endian: a string is an int16 length then UTF-8, a nullable string (`?`) has
length -1 for null; a list is an int32 count then its items. Topics are named, not numbered
(Tidelog's client API speaks names, and a deleted and recreated topic changes the subscription
metadata through its partition count or its absence at the next heartbeat).

Every byte read back is checked: the type and version, each length against what is left, UTF-8,
counts, negative or repeated partitions, epochs a writer never produces, a state outside the
four, and bytes left over. Such a record raises `GroupRecordError`; the loader logs it and skips
it, never crashes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final, NamedTuple

#: Record types (the key's first field), as Kafka numbers them.
GROUP_METADATA: Final = 3
PARTITION_METADATA: Final = 4
MEMBER_METADATA: Final = 5
TARGET_METADATA: Final = 6
TARGET_MEMBER: Final = 7
CURRENT_ASSIGNMENT: Final = 8
RECORD_TYPES: Final = frozenset(range(GROUP_METADATA, CURRENT_ASSIGNMENT + 1))
_MEMBER_TYPES: Final = frozenset((MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT))
VALUE_VERSION: Final = 0
#: The member metadata of a classic-protocol member (JoinGroup/SyncGroup/Heartbeat inside a
#: consumer group) is value version 2: version 0's fields, then its own session timeout, then
#: the names of its protocols (its assignors), which later members' JoinGroups are checked
#: against. Version 1 (no names) is still read: a member whose names are not known.
CLASSIC_MEMBER_VERSION: Final = 2
_CLASSIC_MEMBER_VERSIONS: Final = frozenset((1, CLASSIC_MEMBER_VERSION))

#: Server-side member states (Kafka's MemberState).
STABLE: Final = 0
UNREVOKED_PARTITIONS: Final = 1
UNRELEASED_PARTITIONS: Final = 2
UNKNOWN_STATE: Final = 127
_STATES: Final = frozenset((STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS, UNKNOWN_STATE))

#: The member epoch of a static member that left for a while (kafka-mapping §10.6).
LEFT_STATIC_EPOCH: Final = -2

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_MAX_STRING: Final = 0x7FFF

#: topic -> its partitions, sorted; the shape of every assignment in a record.
Assignment = dict[str, tuple[int, ...]]


class GroupRecordError(ValueError):
    """A consumer-group key or value that does not decode (or cannot be encoded)."""


class GroupKey(NamedTuple):
    record_type: int
    group: str
    member_id: str = ""  # "" for the group-level types (3, 4, 6)


class MemberMetadata(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    rebalance_timeout_ms: int
    server_assignor: str | None
    #: A classic-protocol member's session timeout (its JoinGroup's); None for a member
    #: speaking ConsumerGroupHeartbeat, whose session is the coordinator's setting.
    classic_session_timeout_ms: int | None = None
    #: A classic member's protocol names, in its JoinGroup's order; () when not known.
    classic_protocols: tuple[str, ...] = ()


class CurrentAssignment(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


#: What a value decodes to, by record type.
GroupValue = int | dict[str, int] | MemberMetadata | Assignment | CurrentAssignment


# ---- encoding --------------------------------------------------------------------------------


def record_type_of(key: bytes | memoryview) -> int | None:
    """The int16 a key starts with; None when it is too short to have one."""
    if len(key) < _I16.size:
        return None
    return int(_I16.unpack_from(key)[0])


def encode_key(key: GroupKey) -> bytes:
    if key.record_type not in RECORD_TYPES:
        raise GroupRecordError(f"unknown record type {key.record_type}")
    out = _I16.pack(key.record_type) + _string(key.group)
    if key.record_type in _MEMBER_TYPES:
        out += _string(key.member_id)
    return out


def encode_value(record_type: int, value: GroupValue) -> bytes:
    classic = isinstance(value, MemberMetadata) and value.classic_session_timeout_ms is not None
    out = [_I16.pack(CLASSIC_MEMBER_VERSION if classic else VALUE_VERSION)]
    if record_type in (GROUP_METADATA, TARGET_METADATA):
        assert isinstance(value, int)
        out.append(_I32.pack(value))
    elif record_type == PARTITION_METADATA:
        assert isinstance(value, dict)
        out.append(_I32.pack(len(value)))
        for topic, count in sorted(value.items()):
            assert isinstance(count, int)
            out += (_string(topic), _I32.pack(count))
    elif record_type == MEMBER_METADATA:
        assert isinstance(value, MemberMetadata)
        out += (
            _nullable(value.instance_id),
            _nullable(value.rack_id),
            _string(value.client_id),
            _string(value.client_host),
            _I32.pack(len(value.subscribed_topics)),
            *(_string(topic) for topic in value.subscribed_topics),
            _I32.pack(value.rebalance_timeout_ms),
            _nullable(value.server_assignor),
        )
        if value.classic_session_timeout_ms is not None:
            out += (_I32.pack(value.classic_session_timeout_ms),
                    _I32.pack(len(value.classic_protocols)),
                    *(_string(name) for name in value.classic_protocols))
    elif record_type == TARGET_MEMBER:
        assert isinstance(value, dict)
        out.append(_assignment(value))  # type: ignore[arg-type]
    elif record_type == CURRENT_ASSIGNMENT:
        assert isinstance(value, CurrentAssignment)
        out += (
            _I32.pack(value.member_epoch),
            _I32.pack(value.previous_member_epoch),
            _I8.pack(value.state),
            _assignment(value.assigned),
            _assignment(value.pending_revocation),
        )
    else:
        raise GroupRecordError(f"unknown record type {record_type}")
    return b"".join(out)


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > _MAX_STRING:
        raise GroupRecordError(f"a string of {len(data)} bytes; the limit is {_MAX_STRING}")
    return _I16.pack(len(data)) + data


def _nullable(text: str | None) -> bytes:
    return _I16.pack(-1) if text is None else _string(text)


def _assignment(assignment: Mapping[str, tuple[int, ...]]) -> bytes:
    out = [_I32.pack(len(assignment))]
    for topic, partitions in sorted(assignment.items()):
        out += (_string(topic), _I32.pack(len(partitions)))
        out += (_I32.pack(p) for p in sorted(partitions))
    return b"".join(out)


# ---- decoding --------------------------------------------------------------------------------


class _Reader:
    """Reads fields off `data`, each checked against what is left."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def _take(self, size: int) -> int:
        start = self.pos
        if start + size > len(self.data):
            raise GroupRecordError(f"the {self.what} ends inside a field at byte {start}")
        self.pos += size
        return start

    def i8(self) -> int:
        return int(_I8.unpack_from(self.data, self._take(1))[0])

    def i16(self) -> int:
        return int(_I16.unpack_from(self.data, self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack_from(self.data, self._take(4))[0])

    def count(self) -> int:
        count = self.i32()
        # Every item takes at least two bytes: a count beyond that is a lie.
        if count < 0 or count * 2 > len(self.data) - self.pos:
            raise GroupRecordError(f"a count of {count} in the {self.what}")
        return count

    def nullable(self) -> str | None:
        length = self.i16()
        if length == -1:
            return None
        if length < 0:
            raise GroupRecordError(f"negative string length {length} in the {self.what}")
        start = self._take(length)
        try:
            return self.data[start:self.pos].decode()
        except UnicodeDecodeError as exc:
            raise GroupRecordError(f"a string in the {self.what} is not UTF-8: {exc}") from None

    def string(self) -> str:
        text = self.nullable()
        if text is None:
            raise GroupRecordError(f"a null string where the {self.what} needs one")
        return text

    def assignment(self) -> Assignment:
        out: Assignment = {}
        for _ in range(self.count()):
            topic = self.string()
            if topic in out:
                raise GroupRecordError(f"topic {topic!r} twice in the {self.what}")
            partitions = tuple(self.i32() for _ in range(self.count()))
            if any(p < 0 for p in partitions) or len(set(partitions)) != len(partitions):
                raise GroupRecordError(f"bad partitions {partitions} of {topic!r}")
            out[topic] = tuple(sorted(partitions))
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            raise GroupRecordError(f"{len(self.data) - self.pos} bytes left over in the "
                                   f"{self.what}")


def decode_key(data: bytes | memoryview) -> GroupKey:
    reader = _Reader(bytes(data), "key")
    record_type = reader.i16()
    if record_type not in RECORD_TYPES:
        raise GroupRecordError(f"record type {record_type} is not a consumer-group record")
    group = reader.string()
    member_id = reader.string() if record_type in _MEMBER_TYPES else ""
    reader.end()
    if not group or (record_type in _MEMBER_TYPES and not member_id):
        raise GroupRecordError("an empty group or member id in the key")
    return GroupKey(record_type, group, member_id)


def decode_value(record_type: int, data: bytes | memoryview) -> GroupValue:
    reader = _Reader(bytes(data), "value")
    version = reader.i16()
    if version != VALUE_VERSION and not (
        version in _CLASSIC_MEMBER_VERSIONS and record_type == MEMBER_METADATA
    ):
        raise GroupRecordError(f"unknown value version {version}")
    value: GroupValue
    if record_type in (GROUP_METADATA, TARGET_METADATA):
        value = reader.i32()
        if value < 0:
            raise GroupRecordError(f"negative epoch {value}")
    elif record_type == PARTITION_METADATA:
        topics: dict[str, int] = {}
        for _ in range(reader.count()):
            topic, count = reader.string(), reader.i32()
            if topic in topics or count < 0:
                raise GroupRecordError(f"bad subscription metadata entry {topic!r}: {count}")
            topics[topic] = count
        value = topics
    elif record_type == MEMBER_METADATA:
        instance_id, rack_id = reader.nullable(), reader.nullable()
        client_id, client_host = reader.string(), reader.string()
        subscribed = tuple(reader.string() for _ in range(reader.count()))
        rebalance_timeout_ms = reader.i32()
        assignor = reader.nullable()
        session_ms = reader.i32() if version in _CLASSIC_MEMBER_VERSIONS else None
        protocols = (tuple(reader.string() for _ in range(reader.count()))
                     if version == CLASSIC_MEMBER_VERSION else ())
        if rebalance_timeout_ms < 0 or (session_ms is not None and session_ms <= 0):
            raise GroupRecordError(
                f"rebalance timeout {rebalance_timeout_ms}, session timeout {session_ms}"
            )
        value = MemberMetadata(instance_id, rack_id, client_id, client_host, subscribed,
                               rebalance_timeout_ms, assignor, session_ms, protocols)
    elif record_type == TARGET_MEMBER:
        value = reader.assignment()
    elif record_type == CURRENT_ASSIGNMENT:
        epoch, previous, state = reader.i32(), reader.i32(), reader.i8()
        assigned, pending = reader.assignment(), reader.assignment()
        if epoch < LEFT_STATIC_EPOCH or previous < LEFT_STATIC_EPOCH - 1 or state not in _STATES:
            raise GroupRecordError(f"member epoch {epoch}, previous {previous}, state {state}")
        if any(set(assigned.get(t, ())) & set(ps) for t, ps in pending.items()):
            raise GroupRecordError("a partition both assigned and pending revocation")
        value = CurrentAssignment(epoch, previous, state, assigned, pending)
    else:
        raise GroupRecordError(f"unknown record type {record_type}")
    reader.end()
    return value
