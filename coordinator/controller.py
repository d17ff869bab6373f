"""The controller's state machine: the cluster metadata image and the decisions made on it.

Topic creation and deletion, blocks of producer ids, and ACLs are records in a Raft-replicated log
(`metadata_records`); every node applies the committed records in order to the same image, so
after any crash all nodes agree on topics, configs and replica assignments (SPEC §7).

Deterministic, like the Raft core: no I/O, no clock, no threads, no event loop. Decisions
(validation, replica assignment) are made once, by the controller leader, before it proposes a
record, and the record carries the outcome, so applying it never depends on the applying node.
The node's `ControllerDriver` feeds committed bytes in and proposes the records decided here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidelog.acl import AclBinding, AclBindingFilter
from tidelog.coordinator.acls import AclIndex, check_binding, check_filter
from tidelog.coordinator.metadata_records import (
    AccessControlEntryRecord,
    MetadataRecord,
    MetadataRecordError,
    ProducerIdsRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record,
)
from tidelog.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidelog.records import decode_records, iter_batches
from tidelog.types import TopicPartition

METADATA_TOPIC = "__cluster_metadata"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({METADATA_TOPIC, CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
#: The controller's Raft group: the one partition of the metadata topic.
METADATA_TP = TopicPartition(METADATA_TOPIC, 0)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class TopicImage:
    """One topic as every node knows it: replica lists per partition, preferred leader first."""

    name: str
    assignment: tuple[tuple[int, ...], ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    topic_id: int = 0

    @property
    def partition_count(self) -> int:
        return len(self.assignment)


def validate_topic_name(name: str) -> None:
    """Kafka's rules (`Topic.validate`): legal characters, length, and not "." or ".."."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in {".", ".."}:
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long, the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-'"
        )


def _collision_key(name: str) -> str:
    # Kafka metric names replace '.' with '_', so it refuses topics that differ only there.
    return name.replace(".", "_")


@dataclass
class MetadataImage:
    """The applied state of the metadata log."""

    topics: dict[str, TopicImage] = field(default_factory=dict)
    next_topic_id: int = 1
    #: Producer ids below this were handed out in blocks to idempotent producers.
    next_producer_id: int = 0
    acls: AclIndex = field(default_factory=AclIndex)
    next_acl_id: int = 1
    applied_offset: int = -1

    # -- decisions (controller leader only) ---------------------------------------------------

    def plan_create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        node_ids: Sequence[int],
        *,
        allow_internal: bool = False,
    ) -> TopicRecord:
        """Validate a creation and return the record to propose; raises the Kafka error."""
        validate_topic_name(name)
        if name in INTERNAL_TOPICS and not allow_internal:
            raise InvalidTopicError(f"{name} is an internal topic")
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        clash = [t for t in self.topics if _collision_key(t) == _collision_key(name)]
        if clash:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {clash[0]!r} ('.' and '_' clash)"
            )
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"number of partitions must be between 1 and {MAX_PARTITIONS}, got {num_partitions}"
            )
        if not 1 <= replication_factor <= len(node_ids):
            raise InvalidReplicationFactorError(
                f"replication factor must be between 1 and the number of nodes "
                f"({len(node_ids)}), got {replication_factor}"
            )
        assignment = assign_replicas(
            num_partitions, replication_factor, sorted(node_ids), self.leader_counts()
        )
        return TopicRecord(name, self.next_topic_id, tuple(assignment), dict(configs))

    def plan_delete(self, name: str) -> RemoveTopicRecord:
        if name not in self.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"{name} is an internal topic and cannot be deleted")
        return RemoveTopicRecord(name, self.topics[name].topic_id)

    def plan_allocate_producer_ids(self, count: int) -> ProducerIdsRecord:
        """A block of producer ids, unique across the cluster and across restarts because the
        allocation itself is a committed record (Kafka's AllocateProducerIds)."""
        return ProducerIdsRecord(self.next_producer_id, count)

    def plan_create_acls(
        self, bindings: Sequence[AclBinding]
    ) -> tuple[list[AccessControlEntryRecord], list[InvalidRequestError | None]]:
        """The records that create `bindings`, and each binding's outcome: its
        INVALID_REQUEST, or None. A binding that exists already (or twice in the request)
        succeeds and writes nothing, as in Kafka."""
        records: list[AccessControlEntryRecord] = []
        outcomes: list[InvalidRequestError | None] = []
        planned: set[AclBinding] = set()
        for binding in bindings:
            try:
                check_binding(binding)
            except InvalidRequestError as exc:
                outcomes.append(exc)
                continue
            outcomes.append(None)
            if self.acls.id_of(binding) is None and binding not in planned:
                planned.add(binding)
                records.append(
                    AccessControlEntryRecord(self.next_acl_id + len(records), binding)
                )
        return records, outcomes

    def plan_delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> tuple[list[RemoveAccessControlEntryRecord], list[list[AclBinding] | InvalidRequestError]]:
        """The records that delete every ACL some filter matches (one each, however many
        filters match it), and per filter the bindings it matched or its INVALID_REQUEST."""
        records: list[RemoveAccessControlEntryRecord] = []
        outcomes: list[list[AclBinding] | InvalidRequestError] = []
        removed: set[int] = set()
        for acl_filter in filters:
            try:
                check_filter(acl_filter)
            except InvalidRequestError as exc:
                outcomes.append(exc)
                continue
            matched = self.acls.matching(acl_filter)
            outcomes.append([binding for _, binding in matched])
            for acl_id, _ in matched:
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(RemoveAccessControlEntryRecord(acl_id))
        return records, outcomes

    def leader_counts(self) -> dict[int, int]:
        """How many partitions prefer each node as leader: new topics fill the least loaded."""
        counts: dict[int, int] = {}
        for topic in self.topics.values():
            for replicas in topic.assignment:
                counts[replicas[0]] = counts.get(replicas[0], 0) + 1
        return counts

    # -- application (every node) -------------------------------------------------------------

    def apply(self, offset: int, record: MetadataRecord) -> None:
        """Apply one committed record. Records are idempotent by offset (replays are skipped)."""
        if offset <= self.applied_offset:
            return
        self.applied_offset = offset
        if isinstance(record, TopicRecord):
            if record.name not in self.topics:
                self.topics[record.name] = TopicImage(
                    record.name, record.assignment, dict(record.configs), record.topic_id
                )
            self.next_topic_id = max(self.next_topic_id, record.topic_id + 1)
        elif isinstance(record, ProducerIdsRecord):
            self.next_producer_id = max(self.next_producer_id, record.first + record.count)
        elif isinstance(record, AccessControlEntryRecord):
            self.acls.add(record.acl_id, record.binding)
            self.next_acl_id = max(self.next_acl_id, record.acl_id + 1)
        elif isinstance(record, RemoveAccessControlEntryRecord):
            self.acls.remove(record.acl_id)
        else:
            topic = self.topics.get(record.name)
            if topic is not None and topic.topic_id == record.topic_id:
                del self.topics[topic.name]

    def apply_batches(self, data: bytes | memoryview) -> None:
        """Apply committed batches of the metadata log, as read from it. Control batches (the
        leader-change markers) hold no record but move the applied offset past them."""
        for pos, header in iter_batches(data):
            if header.is_control:
                self.applied_offset = max(self.applied_offset, header.last_offset)
                continue
            for record in decode_records(data, pos, header):
                if record.value is None:
                    raise MetadataRecordError(f"metadata record at offset {record.offset} is null")
                try:
                    decoded = decode_record(record.value)
                except MetadataRecordError as exc:
                    raise MetadataRecordError(
                        f"metadata record at offset {record.offset}: {exc}"
                    ) from None
                self.apply(record.offset, decoded)


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    node_ids: Sequence[int],
    leader_counts: Mapping[int, int],
) -> list[tuple[int, ...]]:
    """Spread replicas and preferred leaders over nodes, as Kafka's rack-unaware assignment.

    The first replica (the preferred leader) walks the nodes round-robin starting at the node
    that leads the fewest partitions so far; followers follow at a shift that grows every full
    round, so replica sets vary and no node pairs up with the same neighbour everywhere.
    """
    n = len(node_ids)
    start = min(range(n), key=lambda i: (leader_counts.get(node_ids[i], 0), i))
    shift = start
    out: list[tuple[int, ...]] = []
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [node_ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(node_ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out.append(tuple(replicas))
    return out
