"""The records of the replicated metadata log: one typed record per kind, and their encoding.

Format 1 (written since the records became typed) is binary and explicit: a format byte, a kind
byte, then the kind's fields in a fixed order (big-endian integers; a string is a u32 length
and UTF-8 bytes). A kind added later (the ACL records) is a new kind byte in the same format: a
node that predates it refuses such a record by name rather than misreading it. Logs written
before format 1 hold format 0, a JSON object per record; both decode to the same records, so a
data dir of an older node still loads. Every byte is checked on the way in: a record that does
not decode is a `MetadataRecordError` naming what is wrong, never a KeyError or a half-applied
change, because every node must apply exactly the same records.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Final, TypeVar

from tidelog.acl import (
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.configs import ConfigResourceType
from tidelog.coordinator.acls import check_binding
from tidelog.errors import InvalidRequestError
from tidelog.scram import MAX_ITERATIONS, MECHANISM_NAMES, MIN_ITERATIONS

#: The first byte of a format-0 record (a JSON object).
_JSON_START: Final = ord("{")
FORMAT_VERSION: Final = 1

_TOPIC: Final = 1
_REMOVE_TOPIC: Final = 2
_PRODUCER_IDS: Final = 3
_ACCESS_CONTROL_ENTRY: Final = 4
_REMOVE_ACCESS_CONTROL_ENTRY: Final = 5
_PARTITION: Final = 6
_CONFIG: Final = 7
_REGISTER_NODE: Final = 8
_FENCE_NODE: Final = 9
_UNFENCE_NODE: Final = 10
_UNREGISTER_NODE: Final = 11
_PARTITION_CHANGE: Final = 12
_DECOMMISSION: Final = 13
_CONTROLLER_VOTERS: Final = 14
_PARTITION_HOLD: Final = 15
_USER_SCRAM_CREDENTIAL: Final = 16
_REMOVE_USER_SCRAM_CREDENTIAL: Final = 17

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_T = TypeVar("_T")
_E = TypeVar("_E", ResourceType, PatternType, Operation, Permission)


class MetadataRecordError(ValueError):
    """A record of the metadata log does not decode (a bug or a damaged log, never input a
    node may skip: the nodes' images would diverge)."""


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic was created: its id, replica lists per partition (preferred leader first) and
    configs, all decided by the controller leader, so applying it depends on no node."""

    name: str
    topic_id: int
    assignment: tuple[tuple[int, ...], ...]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    """A topic was deleted. The id makes a stale deletion miss a re-created topic."""

    name: str
    topic_id: int

    @property
    def subject(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """Producer ids ``[first, first + count)`` went to idempotent producers (Kafka's
    AllocateProducerIds): unique across the cluster and restarts because it is committed."""

    first: int
    count: int

    @property
    def subject(self) -> str:
        # Not a legal topic name, so it never collides with a topic's changes.
        return "producer ids"


#: The subject of every ACL change: one ACL change at a time (not a legal topic name).
ACL_SUBJECT: Final = "access control lists"


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """An ACL was created (Kafka's AccessControlEntryRecord). Its id, from the controller's
    counter rather than Kafka's random UUID so that the state machine stays deterministic,
    names it for removal."""

    acl_id: int
    binding: AclBinding

    @property
    def subject(self) -> str:
        return ACL_SUBJECT


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    """An ACL was deleted (Kafka's RemoveAccessControlEntryRecord)."""

    acl_id: int

    @property
    def subject(self) -> str:
        return ACL_SUBJECT


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition was added to a topic (Kafka's PartitionRecord, written for CreatePartitions):
    its index, the next after the topic's last, and its replicas, preferred leader first. The
    topic id makes a record planned for a topic since deleted miss its re-creation."""

    topic: str
    topic_id: int
    partition: int
    replicas: tuple[int, ...]

    @property
    def subject(self) -> str:
        return self.topic


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A dynamic config was set, or removed when `value` is None (Kafka's ConfigRecord): one key
    of a topic, or of the nodes (resource name "" for every node's default, else a node id)."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None

    @property
    def subject(self) -> str:
        # A topic's configs change with its other changes, one at a time; a node's have a
        # subject that is no legal topic name.
        if self.resource_type == ConfigResourceType.TOPIC:
            return self.resource_name
        return f"node configs {self.resource_name}"


#: An incarnation id: 16 random bytes as 32 lowercase hex digits (Kafka's Uuid; all zeros,
#: Kafka's Uuid.ZERO_UUID, is no incarnation).
_INCARNATION = re.compile(r"[0-9a-f]{32}")
#: The longest address a node record holds (a DNS name is at most 253 characters).
MAX_ADDRESS_LENGTH: Final = 300


def node_subject(node_id: int) -> str:
    """The subject of every change to one node's registration: one at a time per node (not a
    legal topic name)."""
    return f"node {node_id}"


@dataclass(frozen=True, slots=True)
class RegisterNodeRecord:
    """A node registered with the controller (Kafka's RegisterBrokerRecord): its id, the
    incarnation of its data dir (a wiped node that comes back with the same id is another
    incarnation), where the other nodes reach it (node-to-node listener) and where clients do,
    and whether it starts fenced. The record's offset becomes the registration's epoch (Kafka's
    broker epoch), which fence and unfence records name, so that one meant for an earlier
    registration misses the current one. ``kafka_address`` is where Kafka clients reach it
    (its Kafka listener; "" for none): written after the other fields only when set, so the
    records of nodes without one, and of logs written before it existed, read the same."""

    node_id: int
    incarnation: str
    internal_address: str
    client_address: str
    fenced: bool
    kafka_address: str = ""

    @property
    def subject(self) -> str:
        return node_subject(self.node_id)


@dataclass(frozen=True, slots=True)
class NodeEpochRecord:
    """What the records that change a registered node's state carry: the node and the epoch of
    the registration they are meant for. Each subclass is its own record kind (the class is
    the kind: records of two kinds are never equal)."""

    node_id: int
    epoch: int

    @property
    def subject(self) -> str:
        return node_subject(self.node_id)


@dataclass(frozen=True, slots=True)
class FenceNodeRecord(NodeEpochRecord):
    """The controller fenced a node whose heartbeats stopped for the session timeout (Kafka's
    FenceBrokerRecord): it takes no new replicas and Metadata leaves it out."""


@dataclass(frozen=True, slots=True)
class UnfenceNodeRecord(NodeEpochRecord):
    """A fenced node heartbeats again (Kafka's UnfenceBrokerRecord)."""


@dataclass(frozen=True, slots=True)
class UnregisterNodeRecord(NodeEpochRecord):
    """A node left the cluster for good (Kafka's UnregisterBrokerRecord)."""


NodeRecord = RegisterNodeRecord | FenceNodeRecord | UnfenceNodeRecord | UnregisterNodeRecord

@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A partition's replica set changes (Kafka KRaft's PartitionChangeRecord with KIP-455's
    fields). ``replicas`` is every node that may be a member of the partition's Raft group
    while the change runs: the target first (its first, the preferred leader), then the nodes
    leaving. ``adding`` are the nodes that were not replicas before the change (their replicas
    are created as learners), ``removing`` the nodes not in the target; the target is
    ``replicas`` without ``removing``, the set before the change ``replicas`` without
    ``adding``. A node added by a change that a later target dropped is in both: it may be a
    member of the Raft group by now, so it stays listed until the group has let it go.
    ``restoring`` (no KIP-455 field) are nodes of the target that were replicas before the
    change but that the group may have removed meanwhile (a cancelled removal): not new, so
    not ``adding`` (a replica created with its topic never bootstraps as a learner), yet the
    change is not done until the group has them back. A record with none of the three ends
    the change: ``replicas`` is the new set."""

    topic: str
    topic_id: int
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    restoring: tuple[int, ...] = ()

    @property
    def subject(self) -> str:
        return self.topic


@dataclass(frozen=True, slots=True)
class DecommissionRecord:
    """Node `node_id` is being decommissioned (`decommissioning`): it is given no new replicas
    and the controller moves those it holds away; or, with False, it is re-commissioned (a
    decommission cancelled), a node like the others again."""

    node_id: int
    decommissioning: bool

    @property
    def subject(self) -> str:
        return node_subject(self.node_id)


#: The subject of every change to the controller quorum's target (not a legal topic name).
CONTROLLER_VOTERS_SUBJECT: Final = "controller voters"


@dataclass(frozen=True, slots=True)
class ControllerVotersRecord:
    """The voters the controller's own Raft group (``__cluster_metadata-0``) is to have, its
    preferred leader first: KIP-853's target of a quorum reconfiguration, decided by the
    controller leader (a voter being decommissioned hands its seat to a live node). The
    group's leader carries it out one membership change at a time, as a partition's
    reassignment; the configurations it commits are the membership control batches of the
    metadata log, which every node applies too (`MetadataImage.quorum`)."""

    voters: tuple[int, ...]

    @property
    def subject(self) -> str:
        return CONTROLLER_VOTERS_SUBJECT


@dataclass(frozen=True, slots=True)
class PartitionHoldRecord:
    """An operator reassigned (or cancelled the reassignment of) the partition at
    ``since_ms`` (wall-clock ms, read by the controller leader that decided it): continuous
    balancing leaves it where the operator put it for balancer.operator.hold.ms from then.
    ``since_ms`` -1 releases the hold (the operator gave the partition back to the balancer).
    The time is in the record, not read when applying, so every node and every later
    controller leader sees the same hold (Cruise Control's excluded topics, per partition)."""

    topic: str
    topic_id: int
    partition: int
    since_ms: int

    @property
    def subject(self) -> str:
        return self.topic


#: The subject of every SCRAM credential change: one at a time (not a legal topic name).
SCRAM_SUBJECT: Final = "scram credentials"


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was set (Kafka's UserScramCredentialRecord):
    what tidelog/scram.py says a node keeps, never the password. ``mechanism`` is Kafka's code
    (1 SCRAM-SHA-256, 2 SCRAM-SHA-512)."""

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @property
    def subject(self) -> str:
        return SCRAM_SUBJECT


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was deleted (Kafka's
    RemoveUserScramCredentialRecord)."""

    name: str
    mechanism: int

    @property
    def subject(self) -> str:
        return SCRAM_SUBJECT


MetadataRecord = (
    TopicRecord
    | RemoveTopicRecord
    | ProducerIdsRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | PartitionRecord
    | ConfigRecord
    | RegisterNodeRecord
    | FenceNodeRecord
    | UnfenceNodeRecord
    | UnregisterNodeRecord
    | PartitionChangeRecord
    | DecommissionRecord
    | ControllerVotersRecord
    | PartitionHoldRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
)


# ---- encoding ------------------------------------------------------------------------------


def encode_record(record: MetadataRecord) -> bytes:
    out = bytearray((FORMAT_VERSION,))
    if isinstance(record, TopicRecord):
        out.append(_TOPIC)
        _put_str(out, record.name)
        out += _I64.pack(record.topic_id)
        out += _U32.pack(len(record.assignment))
        for replicas in record.assignment:
            out += _U16.pack(len(replicas))
            for node_id in replicas:
                out += _I32.pack(node_id)
        out += _U32.pack(len(record.configs))
        for key, value in sorted(record.configs.items()):
            _put_str(out, key)
            _put_str(out, value)
    elif isinstance(record, RemoveTopicRecord):
        out.append(_REMOVE_TOPIC)
        _put_str(out, record.name)
        out += _I64.pack(record.topic_id)
    elif isinstance(record, ProducerIdsRecord):
        out.append(_PRODUCER_IDS)
        out += _I64.pack(record.first)
        out += _I64.pack(record.count)
    elif isinstance(record, AccessControlEntryRecord):
        out.append(_ACCESS_CONTROL_ENTRY)
        out += _I64.pack(record.acl_id)
        pattern, entry = record.binding.pattern, record.binding.entry
        out += _U8.pack(pattern.resource_type)
        _put_str(out, pattern.name)
        out += _U8.pack(pattern.pattern_type)
        _put_str(out, entry.principal)
        _put_str(out, entry.host)
        out += _U8.pack(entry.operation)
        out += _U8.pack(entry.permission)
    elif isinstance(record, RemoveAccessControlEntryRecord):
        out.append(_REMOVE_ACCESS_CONTROL_ENTRY)
        out += _I64.pack(record.acl_id)
    elif isinstance(record, PartitionRecord):
        out.append(_PARTITION)
        _put_str(out, record.topic)
        out += _I64.pack(record.topic_id)
        out += _I32.pack(record.partition)
        out += _U16.pack(len(record.replicas))
        for node_id in record.replicas:
            out += _I32.pack(node_id)
    elif isinstance(record, RegisterNodeRecord):
        out.append(_REGISTER_NODE)
        out += _I32.pack(record.node_id)
        _put_str(out, record.incarnation)
        _put_str(out, record.internal_address)
        _put_str(out, record.client_address)
        out += _U8.pack(record.fenced)
        if record.kafka_address:
            _put_str(out, record.kafka_address)
    elif isinstance(record, FenceNodeRecord | UnfenceNodeRecord | UnregisterNodeRecord):
        out.append(_NODE_KINDS[type(record)])
        out += _I32.pack(record.node_id)
        out += _I64.pack(record.epoch)
    elif isinstance(record, PartitionChangeRecord):
        out.append(_PARTITION_CHANGE)
        _put_str(out, record.topic)
        out += _I64.pack(record.topic_id)
        out += _I32.pack(record.partition)
        for nodes in (record.replicas, record.adding, record.removing, record.restoring):
            out += _U16.pack(len(nodes))
            for node_id in nodes:
                out += _I32.pack(node_id)
    elif isinstance(record, DecommissionRecord):
        out.append(_DECOMMISSION)
        out += _I32.pack(record.node_id)
        out += _U8.pack(record.decommissioning)
    elif isinstance(record, ControllerVotersRecord):
        out.append(_CONTROLLER_VOTERS)
        out += _U16.pack(len(record.voters))
        for node_id in record.voters:
            out += _I32.pack(node_id)
    elif isinstance(record, PartitionHoldRecord):
        out.append(_PARTITION_HOLD)
        _put_str(out, record.topic)
        out += _I64.pack(record.topic_id)
        out += _I32.pack(record.partition)
        out += _I64.pack(record.since_ms)
    elif isinstance(record, UserScramCredentialRecord):
        out.append(_USER_SCRAM_CREDENTIAL)
        _put_str(out, record.name)
        out += _U8.pack(record.mechanism)
        for data in (record.salt, record.stored_key, record.server_key):
            _put_bytes(out, data)
        out += _I32.pack(record.iterations)
    elif isinstance(record, RemoveUserScramCredentialRecord):
        out.append(_REMOVE_USER_SCRAM_CREDENTIAL)
        _put_str(out, record.name)
        out += _U8.pack(record.mechanism)
    else:
        out.append(_CONFIG)
        out += _U8.pack(record.resource_type)
        _put_str(out, record.resource_name)
        _put_str(out, record.name)
        out += _U8.pack(record.value is not None)
        if record.value is not None:
            _put_str(out, record.value)
    return bytes(out)


_EpochRecord = type[FenceNodeRecord | UnfenceNodeRecord | UnregisterNodeRecord]
_NODE_KINDS: Final[dict[_EpochRecord, int]] = {
    FenceNodeRecord: _FENCE_NODE, UnfenceNodeRecord: _UNFENCE_NODE,
    UnregisterNodeRecord: _UNREGISTER_NODE,
}
_NODE_RECORDS: Final = {kind: cls for cls, kind in _NODE_KINDS.items()}


def _put_str(out: bytearray, text: str) -> None:
    _put_bytes(out, text.encode())


def _put_bytes(out: bytearray, data: bytes) -> None:
    out += _U32.pack(len(data))
    out += data


# ---- decoding ------------------------------------------------------------------------------


def decode_record(value: bytes | memoryview) -> MetadataRecord:
    """The record in `value`, checked field by field; `MetadataRecordError` otherwise."""
    data = bytes(value)
    if not data:
        raise MetadataRecordError("empty metadata record")
    if data[0] == _JSON_START:
        record = _decode_json(data)
    elif data[0] == FORMAT_VERSION:
        record = _Reader(data).record()
    else:
        raise MetadataRecordError(f"unknown metadata record format {data[0]}")
    _check(record)
    return record


class _Reader:
    """Reads format 1, refusing short fields, bad UTF-8 and trailing bytes."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 2

    def record(self) -> MetadataRecord:
        kind = self._data[1] if len(self._data) > 1 else None
        record: MetadataRecord
        if kind == _TOPIC:
            name = self._str()
            topic_id = self._int(_I64)
            assignment = tuple(
                tuple(self._int(_I32) for _ in range(self._int(_U16)))
                for _ in range(self._count(_U32, 2))
            )
            configs = {}
            for _ in range(self._count(_U32, 8)):
                key = self._str()
                configs[key] = self._str()
            record = TopicRecord(name, topic_id, assignment, configs)
        elif kind == _REMOVE_TOPIC:
            record = RemoveTopicRecord(self._str(), self._int(_I64))
        elif kind == _PRODUCER_IDS:
            record = ProducerIdsRecord(self._int(_I64), self._int(_I64))
        elif kind == _ACCESS_CONTROL_ENTRY:
            acl_id = self._int(_I64)
            resource_type = self._enum(ResourceType)
            name = self._str()
            pattern_type = self._enum(PatternType)
            principal = self._str()
            host = self._str()
            operation = self._enum(Operation)
            permission = self._enum(Permission)
            record = AccessControlEntryRecord(
                acl_id,
                AclBinding(
                    ResourcePattern(resource_type, name, pattern_type),
                    AccessControlEntry(principal, operation, permission, host),
                ),
            )
        elif kind == _REMOVE_ACCESS_CONTROL_ENTRY:
            record = RemoveAccessControlEntryRecord(self._int(_I64))
        elif kind == _PARTITION:
            topic = self._str()
            topic_id = self._int(_I64)
            partition = self._int(_I32)
            replicas = tuple(self._int(_I32) for _ in range(self._count(_U16, 4)))
            record = PartitionRecord(topic, topic_id, partition, replicas)
        elif kind == _PARTITION_CHANGE:
            topic = self._str()
            topic_id = self._int(_I64)
            partition = self._int(_I32)
            replicas = self._ids()
            adding = self._ids()
            removing = self._ids()
            record = PartitionChangeRecord(
                topic, topic_id, partition, replicas, adding, removing, self._ids()
            )
        elif kind == _CONFIG:
            config_type = self._int(_U8)
            resource_name = self._str()
            name = self._str()
            has_value = self._flag()
            record = ConfigRecord(
                config_type, resource_name, name, self._str() if has_value else None
            )
        elif kind == _REGISTER_NODE:
            node_id = self._int(_I32)
            incarnation = self._str()
            internal_address = self._str()
            client_address = self._str()
            fenced = self._flag()
            record = RegisterNodeRecord(
                node_id, incarnation, internal_address, client_address, fenced,
                self._str() if self._pos < len(self._data) else "",
            )
        elif kind in _NODE_RECORDS:
            record = _NODE_RECORDS[kind](self._int(_I32), self._int(_I64))
        elif kind == _DECOMMISSION:
            record = DecommissionRecord(self._int(_I32), self._flag())
        elif kind == _CONTROLLER_VOTERS:
            record = ControllerVotersRecord(self._ids())
        elif kind == _PARTITION_HOLD:
            topic = self._str()
            topic_id = self._int(_I64)
            record = PartitionHoldRecord(topic, topic_id, self._int(_I32), self._int(_I64))
        elif kind == _USER_SCRAM_CREDENTIAL:
            name = self._str()
            mechanism = self._int(_U8)
            salt, stored_key, server_key = self._bytes(), self._bytes(), self._bytes()
            record = UserScramCredentialRecord(
                name, mechanism, salt, stored_key, server_key, self._int(_I32)
            )
        elif kind == _REMOVE_USER_SCRAM_CREDENTIAL:
            record = RemoveUserScramCredentialRecord(self._str(), self._int(_U8))
        else:
            raise MetadataRecordError(f"unknown metadata record kind {kind}")
        if self._pos != len(self._data):
            raise MetadataRecordError(
                f"{len(self._data) - self._pos} bytes left over after a {type(record).__name__}"
            )
        return record

    def _int(self, field_: struct.Struct) -> int:
        end = self._pos + field_.size
        if end > len(self._data):
            raise MetadataRecordError("metadata record ends inside a field")
        (value,) = field_.unpack_from(self._data, self._pos)
        self._pos = end
        return int(value)

    def _flag(self) -> bool:
        value = self._int(_U8)
        if value > 1:
            raise MetadataRecordError(f"flag {value} is not 0 or 1")
        return value == 1

    def _ids(self) -> tuple[int, ...]:
        """A u16 count of node ids (i32 each)."""
        return tuple(self._int(_I32) for _ in range(self._count(_U16, 4)))

    def _enum(self, kind: type[_E]) -> _E:
        value = self._int(_U8)
        try:
            return kind(value)
        except ValueError:
            raise MetadataRecordError(f"unknown {kind.__name__} code {value}") from None

    def _count(self, field_: struct.Struct, min_item_size: int) -> int:
        """A count of items that must fit in what is left (so a damaged count fails fast
        instead of building a huge tuple)."""
        count = self._int(field_)
        if count * min_item_size > len(self._data) - self._pos:
            raise MetadataRecordError(f"count {count} does not fit in the metadata record")
        return count

    def _str(self) -> str:
        try:
            return self._bytes().decode()
        except UnicodeDecodeError as exc:
            raise MetadataRecordError(f"string is not UTF-8: {exc}") from None

    def _bytes(self) -> bytes:
        length = self._int(_U32)
        end = self._pos + length
        if end > len(self._data):
            raise MetadataRecordError("metadata record ends inside a string")
        data = self._data[self._pos : end]
        self._pos = end
        return data


def _decode_json(data: bytes) -> MetadataRecord:
    """Format 0: ``{"type": "create_topic" | "delete_topic" | "allocate_producer_ids", ...}``
    with sorted keys, as nodes wrote it before format 1."""
    try:
        obj = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise MetadataRecordError(f"undecodable format-0 metadata record: {exc}") from None
    if not isinstance(obj, dict):
        raise MetadataRecordError("format-0 metadata record is not an object")
    kind = obj.get("type")
    if kind == "create_topic":
        assignment = _json_field(obj, "assignment", list)
        configs = _json_field(obj, "configs", dict)
        if not all(isinstance(r, list) and all(_is_int(n) for n in r) for r in assignment):
            raise MetadataRecordError("format-0 assignment is not lists of node ids")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
            raise MetadataRecordError("format-0 configs are not strings")
        return TopicRecord(
            _json_field(obj, "name", str),
            _json_int(obj, "topic_id"),
            tuple(tuple(replicas) for replicas in assignment),
            dict(configs),
        )
    if kind == "delete_topic":
        return RemoveTopicRecord(_json_field(obj, "name", str), _json_int(obj, "topic_id"))
    if kind == "allocate_producer_ids":
        return ProducerIdsRecord(_json_int(obj, "first"), _json_int(obj, "count"))
    raise MetadataRecordError(f"unknown format-0 metadata record type {kind!r}")


def _json_field(obj: dict[str, object], key: str, kind: type[_T]) -> _T:
    value = obj.get(key)
    if not isinstance(value, kind):
        raise MetadataRecordError(f"format-0 field {key!r} is missing or not a {kind.__name__}")
    return value


def _json_int(obj: dict[str, object], key: str) -> int:
    value = obj.get(key)
    if not _is_int(value):
        raise MetadataRecordError(f"format-0 field {key!r} is missing or not an integer")
    assert isinstance(value, int)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def valid_incarnation(incarnation: str) -> bool:
    return bool(_INCARNATION.fullmatch(incarnation)) and incarnation != "0" * 32


def split_address(address: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` for IPv6) split, or None when it is not one."""
    host, sep, port_text = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        return None
    return host, int(port_text)


def address_problem(address: str) -> str | None:
    """What is wrong with an address a node registers (None: nothing): it must be a
    HOST:PORT others can dial, so no port 0 and no wildcard host."""
    if len(address) > MAX_ADDRESS_LENGTH:
        return f"is {len(address)} characters long, the limit is {MAX_ADDRESS_LENGTH}"
    parts = split_address(address)
    if parts is None or not address.isprintable() or any(c.isspace() for c in address):
        return f"{address!r} is not HOST:PORT"
    host, port = parts
    if port == 0:
        return f"{address!r} has port 0: others need the port the node bound"
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_unspecified:
            return f"{address!r} is a wildcard: others need an address to dial"
    return None


def _check(record: MetadataRecord) -> None:
    """What every record of a kind must satisfy whatever its format."""
    if isinstance(record, TopicRecord):
        if not record.name or record.topic_id < 1 or not record.assignment:
            raise MetadataRecordError(f"topic record {record.name!r} lacks a name, id or partition")
        for replicas in record.assignment:
            if not replicas or min(replicas) < 0 or len(set(replicas)) != len(replicas):
                raise MetadataRecordError(
                    f"topic record {record.name!r} has a bad replica list {list(replicas)}"
                )
    elif isinstance(record, RemoveTopicRecord):
        if not record.name or record.topic_id < 1:
            raise MetadataRecordError("remove-topic record lacks a name or id")
    elif isinstance(record, ProducerIdsRecord):
        if record.first < 0 or record.count < 1:
            raise MetadataRecordError(
                f"producer-id block [{record.first}, +{record.count}) is empty"
            )
    elif isinstance(record, PartitionRecord):
        replicas = record.replicas
        if (not record.topic or record.topic_id < 1 or record.partition < 1 or not replicas
                or min(replicas) < 0 or len(set(replicas)) != len(replicas)):
            raise MetadataRecordError(
                f"partition record {record.topic!r}-{record.partition} lacks a topic, an id, "
                f"an index past 0 or a good replica list {list(replicas)}"
            )
    elif isinstance(record, PartitionChangeRecord):
        replicas, listed = record.replicas, set(record.replicas)
        if (not record.topic or record.topic_id < 1 or record.partition < 0 or not replicas
                or min(replicas) < 0 or len(listed) != len(replicas)
                or len(set(record.adding)) != len(record.adding)
                or len(set(record.removing)) != len(record.removing)
                or not set(record.adding) <= listed or not set(record.removing) <= listed
                or not listed - set(record.removing) or not listed - set(record.adding)
                or len(set(record.restoring)) != len(record.restoring)
                or not set(record.restoring) <= listed - set(record.adding)
                - set(record.removing)):
            raise MetadataRecordError(
                f"partition change record {record.topic!r}-{record.partition} lacks a topic, an "
                f"id or a good replica set: replicas {list(replicas)}, adding "
                f"{list(record.adding)}, removing {list(record.removing)}, restoring "
                f"{list(record.restoring)}"
            )
    elif isinstance(record, ConfigRecord):
        if record.resource_type not in (ConfigResourceType.TOPIC, ConfigResourceType.BROKER):
            raise MetadataRecordError(f"config record of resource type {record.resource_type}")
        if not record.name or (record.resource_type == ConfigResourceType.TOPIC
                               and not record.resource_name):
            raise MetadataRecordError("config record lacks a config or topic name")
        if record.resource_type == ConfigResourceType.BROKER and not (
                record.resource_name == ""
                or (record.resource_name.isascii() and record.resource_name.isdigit())):
            raise MetadataRecordError(
                f"config record names node {record.resource_name!r}, not an id or \"\""
            )
    elif isinstance(record, RegisterNodeRecord):
        if record.node_id < 0 or not valid_incarnation(record.incarnation):
            raise MetadataRecordError(
                f"node record of node {record.node_id} has a bad id or incarnation "
                f"{record.incarnation!r}"
            )
        for what, address in (("node-to-node", record.internal_address),
                               ("client", record.client_address),
                               ("Kafka", record.kafka_address or record.client_address)):
            problem = address_problem(address)
            if problem is not None:
                raise MetadataRecordError(
                    f"node record of node {record.node_id}: {what} address {problem}"
                )
    elif isinstance(record, FenceNodeRecord | UnfenceNodeRecord | UnregisterNodeRecord):
        if record.node_id < 0 or record.epoch < 0:
            raise MetadataRecordError(
                f"{type(record).__name__} names node {record.node_id} at epoch {record.epoch}"
            )
    elif isinstance(record, DecommissionRecord):
        if record.node_id < 0:
            raise MetadataRecordError(f"decommission record of node {record.node_id}")
    elif isinstance(record, ControllerVotersRecord):
        voters = record.voters
        if not voters or min(voters) < 0 or len(set(voters)) != len(voters):
            raise MetadataRecordError(f"controller voters record names {list(voters)}: not a "
                                      "non-empty list of distinct node ids")
    elif isinstance(record, PartitionHoldRecord):
        if (not record.topic or record.topic_id < 1 or record.partition < 0
                or record.since_ms < -1):
            raise MetadataRecordError(
                f"partition hold record {record.topic!r}-{record.partition} lacks a topic, an "
                f"id, an index or a time (since {record.since_ms} ms)"
            )
    elif isinstance(record, UserScramCredentialRecord | RemoveUserScramCredentialRecord):
        _check_scram(record)
    elif record.acl_id < 1:
        raise MetadataRecordError(f"ACL record id {record.acl_id} is not >= 1")
    elif isinstance(record, AccessControlEntryRecord):
        try:
            check_binding(record.binding)
        except InvalidRequestError as exc:
            raise MetadataRecordError(f"ACL record {record.acl_id}: {exc.args[0]}") from None


def _check_scram(record: UserScramCredentialRecord | RemoveUserScramCredentialRecord) -> None:
    if not record.name or record.mechanism not in MECHANISM_NAMES:
        raise MetadataRecordError(
            f"SCRAM credential record of user {record.name!r}, mechanism {record.mechanism}: "
            "no user or an unknown mechanism"
        )
    if isinstance(record, UserScramCredentialRecord) and (
            not record.salt or not record.stored_key or not record.server_key
            or not MIN_ITERATIONS <= record.iterations <= MAX_ITERATIONS):
        raise MetadataRecordError(
            f"SCRAM credential record of user {record.name!r} lacks a salt or a key, or has "
            f"{record.iterations} iterations"
        )
