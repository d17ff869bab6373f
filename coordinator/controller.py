"""The controller's state machine: the cluster metadata image and the decisions made on it.

Topic creation and deletion, blocks of producer ids, ACLs and the nodes' registrations and
fencing are records in a Raft-replicated log (`metadata_records`); every node applies the
committed records in order to the same image, so after any crash all nodes agree on topics,
configs, replica assignments and the members of the cluster (contract §7).

Deterministic, like the Raft core: no I/O, no clock, no threads, no event loop. Decisions
(validation, replica assignment) are made once, by the controller leader, before it proposes a
record, and the record carries the outcome, so applying it never depends on the applying node.
The node's `ControllerDriver` feeds committed bytes in and proposes the records decided here.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from tidelog.acl import AclBinding, AclBindingFilter
from tidelog.configs import AlterConfigOpType, ConfigResourceType
from tidelog.coordinator import scram_credentials
from tidelog.coordinator.acls import AclIndex, check_binding, check_filter
from tidelog.coordinator.metadata_records import (
    AccessControlEntryRecord,
    ConfigRecord,
    ControllerVotersRecord,
    DecommissionRecord,
    FenceNodeRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionChangeRecord,
    PartitionHoldRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterNodeRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceNodeRecord,
    UnregisterNodeRecord,
    UserScramCredentialRecord,
    address_problem,
    decode_record,
    valid_incarnation,
)
from tidelog.errors import (
    BrokerIdNotRegisteredError,
    BrokerNotAvailableError,
    CorruptMessageError,
    DuplicateBrokerRegistrationError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    NoReassignmentInProgressError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidelog.records import decode_records, iter_batches
from tidelog.replication.membership import Membership, membership_of
from tidelog.scram import ScramCredential
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
#: Configs whose value is a comma-separated list, the only ones APPEND and SUBTRACT apply to.
LIST_CONFIGS = frozenset({"cleanup.policy"})


@dataclass(frozen=True)
class Reassignment:
    """A partition's replica set change under way (KIP-455, `PartitionChangeRecord`):
    ``replicas`` lists every node that may be a member of the partition's Raft group while it
    runs (the target first, then the nodes leaving), ``adding`` the nodes that were not
    replicas before it (their replicas are created as learners), ``removing`` those the target
    leaves out, ``restoring`` those of the target that the group may have removed meanwhile
    (a cancelled removal: replicas from before, so never learners when created).

    The record is what the controller decided; the partition's leader carries it out one Raft
    membership change at a time (`tidelog.node.cluster.reassignment`) and reports when its group's
    committed configuration is the target, and only then does a completion record make the
    target the replica set (and the nodes left out delete their replicas). A node stays listed
    until then because the group may still count it, whatever the controller decided since."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    restoring: tuple[int, ...] = ()

    @property
    def target(self) -> tuple[int, ...]:
        """The replica set the change leads to, its preferred leader first."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replica set before the change: where a cancellation leads back to (in the order
        `replicas` lists them, as Kafka's revert)."""
        return tuple(r for r in self.replicas if r not in self.adding)


@dataclass(frozen=True)
class TopicImage:
    """One topic as every node knows it: replica lists per partition, preferred leader first
    (during a reassignment, every node that may be a member: `Reassignment.replicas`)."""

    name: str
    assignment: tuple[tuple[int, ...], ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    topic_id: int = 0
    #: Partition -> its reassignment under way, for the partitions that have one.
    reassignments: Mapping[int, Reassignment] = field(default_factory=dict)
    #: Partition -> when an operator last placed it (`PartitionHoldRecord`, wall-clock ms),
    #: for the partitions whose hold was not released: balancing leaves them alone for
    #: balancer.operator.hold.ms from then (`MetadataImage.held`).
    holds: Mapping[int, int] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.assignment)


@dataclass(frozen=True)
class NodeImage:
    """One registered node as every node knows it (Kafka's BrokerRegistration)."""

    node_id: int
    #: The incarnation of the node's data dir (32 hex digits): a wiped node is another one.
    incarnation: str
    #: The offset of the node's registration record (Kafka's broker epoch): fence and unfence
    #: records, and heartbeats, name it.
    epoch: int
    #: Where the other nodes reach it (its node-to-node listener) and where clients do.
    internal_address: str
    client_address: str
    #: Fenced: its heartbeats stopped for the session timeout (or it registered and has not
    #: heartbeated yet). A fenced node takes no new replicas and Metadata leaves it out.
    fenced: bool
    #: Where Kafka clients reach it (its Kafka listener); "" when it has none.
    kafka_address: str = ""

    @property
    def alive(self) -> bool:
        return not self.fenced


def kafka_uuid_string(hex_digits: str) -> str:
    """16 bytes given as 32 hex digits, written as Kafka writes a Uuid (URL-safe base64, no
    padding)."""
    return base64.urlsafe_b64encode(bytes.fromhex(hex_digits)).rstrip(b"=").decode()


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
    #: Users' SCRAM credentials (UserScramCredentialRecord): user -> mechanism code ->
    #: credential, what SASL on the Kafka listener checks.
    scram_credentials: dict[str, dict[int, ScramCredential]] = field(default_factory=dict)
    #: Dynamic node configs (Kafka's broker ConfigRecords): "" -> every node's default,
    #: "<node id>" -> that node's own, which wins over the default.
    node_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Registered nodes by id (RegisterNodeRecord and the fencing records after it).
    nodes: dict[int, NodeImage] = field(default_factory=dict)
    #: The nodes being decommissioned: given no new replica, drained by the controller.
    decommissioning: set[int] = field(default_factory=set)
    #: The ids whose registration was removed (UnregisterNodeRecord) and that have not
    #: registered again: a static peers list naming one does not count it a node any more,
    #: and no joining node is assigned one.
    unregistered: set[int] = field(default_factory=set)
    #: Where the controller's own group is to go (ControllerVotersRecord), its preferred
    #: leader first; () while no target was decided (the bootstrap voters stay).
    controller_target: tuple[int, ...] = ()
    #: The newest committed configuration of the controller's own group: the membership
    #: control batches of the metadata log (KIP-853's VotersRecord), which every node applies
    #: with the records; None while the group has committed none (its voters are then the
    #: bootstrap ones, the static peers' first).
    quorum: Membership | None = None
    #: The cluster's id as Kafka writes one (its Uuid in 22 characters of URL-safe base64):
    #: the incarnation of the first node that registered. The metadata log keeps that record
    #: for the cluster's life (it has no retention), so every node derives the same id, and
    #: it never changes; "" until a node registered.
    cluster_id: str = ""
    applied_offset: int = -1

    # -- nodes (read by every node) ------------------------------------------------------------

    def node(self, node_id: int) -> NodeImage | None:
        """The registration of `node_id`; None for a node that never registered (or left)."""
        return self.nodes.get(node_id)

    def live_node_ids(self) -> list[int]:
        """The registered nodes that are not fenced, by id: where new replicas may go."""
        return sorted(n for n, node in self.nodes.items() if not node.fenced)

    def registered_node_ids(self) -> list[int]:
        return sorted(self.nodes)

    def node_id_of(self, incarnation: str) -> int:
        """The id registered by `incarnation`, -1 when none: a node that was assigned an id
        and lost the answer (it stopped before keeping it) gets the same one again."""
        return next((n for n, node in self.nodes.items() if node.incarnation == incarnation), -1)

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
        """Validate a creation and return the record to propose; raises the Kafka error.
        Nodes being decommissioned take no replica of it."""
        validate_topic_name(name)
        node_ids = self._eligible(node_ids)
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

    def plan_create_partitions(
        self,
        name: str,
        count: int,
        assignment: Sequence[Sequence[int]] | None,
        node_ids: Sequence[int],
    ) -> list[PartitionRecord]:
        """CreatePartitions: the records that grow `name` to `count` partitions, placed as
        `assignment` says (one replica list per new partition) or as a new topic's would be
        at the topic's replication factor. Kafka's checks and codes; an internal topic is
        refused, since its partition count places groups and transactional ids."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if name in INTERNAL_TOPICS:
            raise InvalidRequestError(
                f"{name} is an internal topic: its partition count places its keys"
            )
        current = topic.partition_count
        if count == current:
            raise InvalidPartitionsError(f"topic {name!r} already has {current} partition(s)")
        if count < current:
            raise InvalidPartitionsError(
                f"topic {name!r} currently has {current} partition(s); {count} would not be an "
                "increase"
            )
        if count > MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"number of partitions must be at most {MAX_PARTITIONS}, got {count}"
            )
        factor = len(topic.assignment[0])
        named = {node for replicas in assignment or () for node in replicas}
        leaving = sorted(self.decommissioning & named)
        if leaving:
            raise InvalidReplicaAssignmentError(
                f"node(s) {leaving} are being decommissioned and take no new replica"
            )
        node_ids = self._eligible(node_ids)
        if assignment is None:
            if factor > len(node_ids):
                raise InvalidReplicationFactorError(
                    f"topic {name!r} has {factor} replicas per partition but only "
                    f"{len(node_ids)} nodes exist"
                )
            placed = assign_replicas(
                count - current, factor, sorted(node_ids), self.leader_counts()
            )
        else:
            placed = [tuple(replicas) for replicas in assignment]
            _check_assignment(placed, count - current, factor, node_ids)
        return [
            PartitionRecord(name, topic.topic_id, current + i, replicas)
            for i, replicas in enumerate(placed)
        ]

    def plan_alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        ops: Sequence[tuple[str, int, str | None]],
        node_ids: Sequence[int],
        defaults: Mapping[str, str],
        validate: Callable[[dict[str, str]], None],
    ) -> list[ConfigRecord]:
        """IncrementalAlterConfigs of one resource: the ConfigRecords that turn its dynamic
        configs into what `ops` ((key, AlterConfigOpType, value) each) make of them. APPEND and
        SUBTRACT start from the key's current value, else `defaults`' (Kafka's rule).
        `validate` (the node's rules for keys and values) sees the whole result and raises
        INVALID_CONFIG or INVALID_REQUEST; so does an op this function refuses itself."""
        current = self.configs_of(resource_type, resource_name, node_ids)
        keys = [key for key, _, _ in ops]
        if len(set(keys)) != len(keys):
            raise InvalidRequestError("a config key appears more than once for the resource")
        updated = dict(current)
        for key, op, value in ops:
            if op not in AlterConfigOpType.__members__.values():
                raise InvalidRequestError(f"unknown config operation {op} for {key!r}")
            if op != AlterConfigOpType.DELETE and value is None:
                raise InvalidRequestError(f"null value not supported for {key!r}")
            if op == AlterConfigOpType.SET:
                assert value is not None
                updated[key] = value
            elif op == AlterConfigOpType.DELETE:
                updated.pop(key, None)
            else:
                assert value is not None
                if key not in LIST_CONFIGS:
                    raise InvalidConfigError(
                        f"{AlterConfigOpType(op).name} applies to list configs only, not {key!r}"
                    )
                base = updated.get(key, defaults.get(key, ""))
                items = [item for item in base.split(",") if item]
                given = [item.strip() for item in value.split(",") if item.strip()]
                if op == AlterConfigOpType.APPEND:
                    items += [item for item in given if item not in items]
                else:
                    items = [item for item in items if item not in given]
                updated[key] = ",".join(items)
        validate(updated)
        return [
            ConfigRecord(resource_type, resource_name, key, updated.get(key))
            for key in sorted(set(current) | set(updated))
            if current.get(key) != updated.get(key)
        ]

    def configs_of(
        self, resource_type: int, resource_name: str, node_ids: Sequence[int]
    ) -> dict[str, str]:
        """The dynamic configs of a resource: a topic's overrides, or a node's (or, for "",
        every node's default); UNKNOWN_TOPIC_OR_PARTITION or INVALID_REQUEST for a resource
        that does not exist."""
        if resource_type == ConfigResourceType.TOPIC:
            topic = self.topics.get(resource_name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {resource_name!r} does not exist")
            return dict(topic.configs)
        if resource_type == ConfigResourceType.BROKER:
            if resource_name != "" and resource_name not in {str(n) for n in node_ids}:
                raise InvalidRequestError(
                    f"no node {resource_name!r}: a node resource is a node id, or empty for "
                    "every node's default"
                )
            return dict(self.node_configs.get(resource_name, {}))
        raise InvalidRequestError(f"resource type {resource_type} has no configs here")

    def plan_alter_reassignment(
        self, name: str, partition: int, target: Sequence[int] | None, node_ids: Sequence[int]
    ) -> PartitionChangeRecord | None:
        """AlterPartitionReassignments of one partition (KIP-455): the record that starts a
        reassignment to ``target`` (its first replica the preferred leader), replaces the
        target of one under way, or, for a None target, cancels it (back to the replica set
        before it). None when there is nothing to change (the partition is placed so already,
        or its reassignment under way has that target). Kafka's codes:
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (39) for an empty list, a node
        named twice or an unknown node, NO_REASSIGNMENT_IN_PROGRESS (85) to cancel none.

        A new target keeps the set before the first change as the one to go back to (Kafka's
        rule), and keeps every node the group may count listed: one added by the change
        under way that the new target leaves out is adding and removing at once, and one the
        change under way was removing that the new target keeps is restoring (the group may
        have let it go already, and must take it back before the change is done)."""
        topic = self.topics.get(name)
        if topic is None or not 0 <= partition < topic.partition_count:
            raise UnknownTopicOrPartitionError(f"partition {name}-{partition} does not exist")
        replicas = topic.assignment[partition]
        current = topic.reassignments.get(partition)
        if target is None:
            if current is None:
                raise NoReassignmentInProgressError(
                    f"no reassignment of {name}-{partition} is in progress"
                )
            wanted = current.original
        else:
            wanted = tuple(target)
            if not wanted:
                raise InvalidReplicaAssignmentError("the replica list cannot be empty")
            if len(set(wanted)) != len(wanted):
                raise InvalidReplicaAssignmentError(
                    f"the replica list {list(wanted)} names a node twice"
                )
            unknown = sorted(set(wanted) - set(node_ids))
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"the replica list {list(wanted)} names unknown node(s) {unknown}"
                )
        if wanted == (replicas if current is None else current.target):
            return None
        original = replicas if current is None else current.original
        may_be_gone = () if current is None else (*current.removing, *current.restoring)
        now = (*wanted, *(r for r in replicas if r not in wanted))
        adding = tuple(r for r in now if r not in original)
        removing = tuple(r for r in now if r not in wanted)
        restoring = tuple(r for r in wanted if r in may_be_gone and r not in adding)
        return PartitionChangeRecord(
            name, topic.topic_id, partition, now, adding, removing, restoring
        )

    def plan_complete_reassignment(
        self, name: str, topic_id: int, partition: int, voters: Sequence[int]
    ) -> PartitionChangeRecord:
        """The record that ends a reassignment, once the partition's leader reports that its
        group's committed configuration is ``voters`` (and no learner, no change pending):
        it must be the target. NO_REASSIGNMENT_IN_PROGRESS when none is under way (done
        already: a repeated report), INVALID_REPLICA_ASSIGNMENT when the group is elsewhere
        (the target changed since the leader looked)."""
        topic = self.topics.get(name)
        if (topic is None or topic.topic_id != topic_id
                or not 0 <= partition < topic.partition_count):
            raise UnknownTopicOrPartitionError(f"partition {name}-{partition} does not exist")
        current = topic.reassignments.get(partition)
        if current is None:
            raise NoReassignmentInProgressError(
                f"no reassignment of {name}-{partition} is in progress"
            )
        if set(voters) != set(current.target) or len(voters) != len(current.target):
            raise InvalidReplicaAssignmentError(
                f"the group of {name}-{partition} has voters {sorted(voters)}, the target is "
                f"{list(current.target)}"
            )
        return PartitionChangeRecord(name, topic_id, partition, current.target)

    def reassignments(
        self, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, Reassignment]:
        """ListPartitionReassignments: the reassignments under way, of every partition or of
        those asked for (a partition with none, or that does not exist, is left out, as Kafka
        answers)."""
        if partitions is None:
            return {
                TopicPartition(topic.name, p): reassignment
                for topic in self.topics.values()
                for p, reassignment in sorted(topic.reassignments.items())
            }
        found = {}
        for tp in partitions:
            topic = self.topics.get(tp.topic)
            reassignment = None if topic is None else topic.reassignments.get(tp.partition)
            if reassignment is not None:
                found[tp] = reassignment
        return found

    def plan_hold(self, name: str, partition: int, since_ms: int | None) -> PartitionHoldRecord:
        """The record that holds a partition an operator just reassigned (or whose
        reassignment the operator cancelled) out of continuous balancing from ``since_ms``
        (the controller leader's wall clock, passed in), or, for None, releases the hold.
        UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist."""
        topic = self.topics.get(name)
        if topic is None or not 0 <= partition < topic.partition_count:
            raise UnknownTopicOrPartitionError(f"partition {name}-{partition} does not exist")
        if since_ms is not None and since_ms < 0:
            raise InvalidRequestError(f"a hold cannot start at {since_ms} ms")
        return PartitionHoldRecord(
            name, topic.topic_id, partition, -1 if since_ms is None else since_ms
        )

    def held(self, now_ms: int, hold_ms: int) -> tuple[frozenset[TopicPartition], int | None]:
        """The partitions an operator placed less than ``hold_ms`` before ``now_ms``, which
        balancing must not move, and when the first of those holds ends (None: no hold is in
        force), after which a plan may differ although no record landed. A hold that started
        after ``now_ms`` (the clocks of two controller leaders disagree) is in force; with a
        ``hold_ms`` of 0 none is."""
        held: set[TopicPartition] = set()
        ends: list[int] = []
        if hold_ms <= 0:
            return frozenset(), None
        for topic in self.topics.values():
            for partition, since_ms in topic.holds.items():
                if now_ms - since_ms < hold_ms:
                    held.add(TopicPartition(topic.name, partition))
                    ends.append(since_ms + hold_ms)
        return frozenset(held), min(ends, default=None)

    def plan_decommission(
        self, node_id: int, decommission: bool, node_ids: Sequence[int]
    ) -> list[DecommissionRecord]:
        """Start (or, `decommission` False, cancel) decommissioning `node_id`: the record, or
        none when the node is in that state already. BROKER_ID_NOT_REGISTERED for a node the
        cluster does not know; INVALID_REQUEST when the nodes that would remain could not hold
        some partition's replicas (nothing could drain, and no new topic of that replication
        factor could be placed)."""
        if node_id not in node_ids:
            raise BrokerIdNotRegisteredError(f"node {node_id} is not a node of this cluster")
        if decommission == (node_id in self.decommissioning):
            return []
        if decommission:
            remaining = len(set(node_ids) - self.decommissioning - {node_id})
            widest = max((len(replicas) for topic in self.topics.values()
                          for replicas in topic.assignment), default=0)
            if widest > remaining:
                raise InvalidRequestError(
                    f"decommissioning node {node_id} would leave {remaining} node(s) to hold "
                    f"partitions of {widest} replicas: add a node first"
                )
        return [DecommissionRecord(node_id, decommission)]

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

    def plan_register(
        self,
        node_id: int,
        incarnation: str,
        internal_address: str,
        client_address: str,
        *,
        fenced: bool,
        reserved_ids: Collection[int] = (),
        kafka_address: str = "",
    ) -> RegisterNodeRecord | None:
        """A node's registration (Kafka's BrokerRegistration): the record to propose, or None
        when the node is registered exactly so already (a restart that changed nothing writes
        nothing). `node_id` -1 asks for an id: the one this incarnation registered, else one
        above every id registered, in `reserved_ids` (the configured peers) or named by a
        replica list. An id registered by
        another incarnation that is not fenced is DUPLICATE_BROKER_REGISTRATION (101): a wiped
        node that comes back under the same id waits until the old one is fenced. Bad fields
        are INVALID_REQUEST. `kafka_address` is its Kafka listener's ("" for none)."""
        if node_id < -1:
            raise InvalidRequestError(
                f"node id {node_id} is negative: give an id >= 0, or none to be assigned one"
            )
        if not valid_incarnation(incarnation):
            raise InvalidRequestError(
                f"incarnation id {incarnation!r} is not 32 hex digits (16 random bytes)"
            )
        for what, address in (("node-to-node", internal_address), ("client", client_address),
                              ("Kafka", kafka_address or client_address)):
            problem = address_problem(address)
            if problem is not None:
                raise InvalidRequestError(f"{what} address {problem}")
        if node_id == -1:
            node_id = self.node_id_of(incarnation)
        if node_id == -1:
            used = {*self.nodes, *reserved_ids, *self.unregistered}
            used.update(n for topic in self.topics.values() for r in topic.assignment for n in r)
            node_id = max(used, default=0) + 1
        existing = self.nodes.get(node_id)
        if existing is not None and existing.incarnation != incarnation and not existing.fenced:
            raise DuplicateBrokerRegistrationError(
                f"node {node_id} is registered by another incarnation "
                f"({existing.incarnation}, at {existing.internal_address}) that is not fenced: "
                "stop it, or wait until its session times out"
            )
        for other in self.nodes.values():
            if (other.node_id != node_id and not other.fenced
                    and internal_address in (other.internal_address, other.client_address)):
                raise InvalidRequestError(
                    f"address {internal_address} is registered by live node {other.node_id}"
                )
        if (existing is not None and existing.incarnation == incarnation
                and existing.internal_address == internal_address
                and existing.client_address == client_address and existing.fenced == fenced
                and existing.kafka_address == kafka_address):
            return None
        return RegisterNodeRecord(
            node_id, incarnation, internal_address, client_address, fenced, kafka_address
        )

    def check_heartbeat(self, node_id: int, epoch: int) -> NodeImage:
        """The registration a heartbeat of `node_id` at `epoch` belongs to;
        BROKER_ID_NOT_REGISTERED (102) or STALE_BROKER_EPOCH (77), after which the node
        registers again."""
        node = self.nodes.get(node_id)
        if node is None:
            raise BrokerIdNotRegisteredError(f"node {node_id} is not registered")
        if node.epoch != epoch:
            raise StaleBrokerEpochError(
                f"node {node_id} heartbeats at epoch {epoch}; its registration's is {node.epoch}"
            )
        return node

    # -- the controller's own quorum -----------------------------------------------------------

    def plan_controller_voters(self, voters: Sequence[int]) -> ControllerVotersRecord | None:
        """The target that moves the controller's seats off the nodes being decommissioned
        (KIP-853 leaves this to the operator; here a decommission carries it, so that it can
        finish): starting from the target under way, else from the quorum's `voters` now,
        each voter being decommissioned is replaced in place by a live node that holds no seat
        and is not being decommissioned (the lowest id), so the quorum keeps its size; so is a
        node of the target that went down before it became a voter (the move would wait for it
        for ever; the group's leader removes it as a learner). None when
        no seat has to move, or no node can take one now (`controller_seat_stuck` says why;
        the balancer asks again at each pass, so a node that joins later takes it)."""
        current = self.controller_target or tuple(voters)
        leaving = [n for n in current if n in self.decommissioning or (
            n not in voters and n in self.nodes and self.nodes[n].fenced)]
        room = [n for n in self.live_node_ids()
                if n not in current and n not in self.decommissioning]
        if not leaving or not room:
            return None
        target = list(current)
        for node in leaving[: len(room)]:
            target[target.index(node)] = room.pop(0)
        return self.check_controller_target(target)

    def controller_seat_stuck(self, node_id: int, voters: Sequence[int]) -> str | None:
        """Why the controller seat of `node_id`, being decommissioned, cannot move now (None
        when it holds none, or it can)."""
        current = self.controller_target or tuple(voters)
        if node_id not in current or node_id not in self.decommissioning:
            return None
        if self.plan_controller_voters(voters) is not None:
            return None
        return ("it votes in the controller's quorum and no live node without a seat can take "
                "its seat: start or join another node")

    def check_controller_target(self, voters: Sequence[int]) -> ControllerVotersRecord:
        """A target of the controller quorum, checked as Kafka checks a reassignment: a
        non-empty list of distinct registered nodes (INVALID_REPLICA_ASSIGNMENT, 39), none
        being decommissioned (39 too), none fenced (BROKER_NOT_AVAILABLE, 8: a seat on a
        stopped node would wait for it, one voter short meanwhile)."""
        if not voters or len(set(voters)) != len(voters):
            raise InvalidReplicaAssignmentError(
                f"controller voters {list(voters)}: a non-empty list of distinct nodes expected"
            )
        unknown = sorted(n for n in voters if n not in self.nodes)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"controller voters {list(voters)} name unregistered node(s) {unknown}"
            )
        leaving = sorted(n for n in voters if n in self.decommissioning)
        if leaving:
            raise InvalidReplicaAssignmentError(
                f"node(s) {leaving} are being decommissioned and take no controller seat"
            )
        fenced = sorted(n for n in voters if self.nodes[n].fenced)
        if fenced:
            raise BrokerNotAvailableError(
                f"controller voters {list(voters)} name fenced node(s) {fenced}"
            )
        return ControllerVotersRecord(tuple(voters))

    def plan_unregister(self, node_id: int, voters: Collection[int]) -> UnregisterNodeRecord:
        """Remove a stopped node's registration for good (Kafka's UnregisterBroker, as
        `kafka-cluster unregister` sends it once a broker is decommissioned): Metadata, cluster
        status and every count of the nodes leave it out from then on.

        Kafka unregisters whatever it is asked to; here only what cannot hurt: a registered
        node (else BROKER_ID_NOT_REGISTERED, 102) that is fenced (stopped: a live node would
        register again at its next heartbeat, which makes the request pointless), that no
        partition lists as a replica, a reassignment under way included (its data would be
        lost with it: decommission it first), and that holds no seat of the controller's
        quorum, as a member of its group or of the target (`voters`: a decommission moves
        the seat first); each refusal INVALID_REQUEST naming the cause.

        A node unregistered so that starts again registers afresh under the id and
        incarnation its data dir keeps, as a Kafka broker does: `plan_register` refuses an id
        only while another live incarnation holds it, and this one is held by none. It comes
        back a node like the others, not being decommissioned: its decommission ended with
        its registration (an operator who starts it again means it to serve). Its id is not
        assigned to another joining node meanwhile (`unregistered`), so its data dir cannot
        come to name someone else's id."""
        node = self.nodes.get(node_id)
        if node is None:
            raise BrokerIdNotRegisteredError(f"node {node_id} is not registered")
        if node_id in voters or node_id in self.controller_target:
            raise InvalidRequestError(
                f"node {node_id} holds a seat of the controller's quorum "
                "(__cluster_metadata-0): decommission it first, which moves the seat"
            )
        if not node.fenced:
            raise InvalidRequestError(
                f"node {node_id} is alive (heartbeating): stop it before unregistering it"
            )
        held = sum(node_id in replicas for topic in self.topics.values()
                   for replicas in topic.assignment)
        if held:
            raise InvalidRequestError(
                f"node {node_id} still holds {held} partition replica(s): decommission it "
                "and wait until it holds none"
            )
        return UnregisterNodeRecord(node_id, node.epoch)

    def plan_fence(self, node_id: int) -> FenceNodeRecord | None:
        """Fence a registered node (its session timed out); None when it is not registered or
        is fenced already."""
        node = self.nodes.get(node_id)
        if node is None or node.fenced:
            return None
        return FenceNodeRecord(node_id, node.epoch)

    def plan_unfence(self, node_id: int) -> UnfenceNodeRecord | None:
        node = self.nodes.get(node_id)
        if node is None or not node.fenced:
            return None
        return UnfenceNodeRecord(node_id, node.epoch)

    def _eligible(self, node_ids: Sequence[int]) -> list[int]:
        """The nodes that may take new replicas: those not being decommissioned."""
        return [n for n in node_ids if n not in self.decommissioning]

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
        elif isinstance(record, UserScramCredentialRecord | RemoveUserScramCredentialRecord):
            scram_credentials.apply(self.scram_credentials, record)
        elif isinstance(record, PartitionRecord):
            topic = self.topics.get(record.topic)
            if (topic is not None and topic.topic_id == record.topic_id
                    and record.partition == topic.partition_count):
                self.topics[topic.name] = dataclasses.replace(
                    topic, assignment=(*topic.assignment, record.replicas)
                )
        elif isinstance(record, PartitionChangeRecord):
            self._apply_partition_change(record)
        elif isinstance(record, PartitionHoldRecord):
            self._apply_hold(record)
        elif isinstance(record, ConfigRecord):
            self._apply_config(record)
        elif isinstance(record, DecommissionRecord):
            if record.decommissioning:
                self.decommissioning.add(record.node_id)
            else:
                self.decommissioning.discard(record.node_id)
        elif isinstance(record, ControllerVotersRecord):
            self.controller_target = record.voters
        elif isinstance(record, RegisterNodeRecord):
            if not self.cluster_id:
                self.cluster_id = kafka_uuid_string(record.incarnation)
            self.unregistered.discard(record.node_id)
            self.nodes[record.node_id] = NodeImage(
                record.node_id, record.incarnation, offset, record.internal_address,
                record.client_address, record.fenced, record.kafka_address,
            )
        elif isinstance(record, FenceNodeRecord | UnfenceNodeRecord | UnregisterNodeRecord):
            node = self.nodes.get(record.node_id)
            if node is None or node.epoch != record.epoch:
                return  # meant for an earlier registration
            if isinstance(record, UnregisterNodeRecord):
                del self.nodes[record.node_id]
                self.decommissioning.discard(record.node_id)
                self.unregistered.add(record.node_id)
            else:
                self.nodes[record.node_id] = dataclasses.replace(
                    node, fenced=isinstance(record, FenceNodeRecord)
                )
        else:
            topic = self.topics.get(record.name)
            if topic is not None and topic.topic_id == record.topic_id:
                del self.topics[topic.name]

    def _apply_partition_change(self, record: PartitionChangeRecord) -> None:
        topic = self.topics.get(record.topic)
        if (topic is None or topic.topic_id != record.topic_id
                or record.partition >= topic.partition_count):
            return
        assignment = list(topic.assignment)
        assignment[record.partition] = record.replicas
        reassignments = dict(topic.reassignments)
        if record.adding or record.removing or record.restoring:
            reassignments[record.partition] = Reassignment(
                record.replicas, record.adding, record.removing, record.restoring
            )
        else:
            reassignments.pop(record.partition, None)
        self.topics[topic.name] = dataclasses.replace(
            topic, assignment=tuple(assignment), reassignments=reassignments
        )

    def _apply_hold(self, record: PartitionHoldRecord) -> None:
        topic = self.topics.get(record.topic)
        if (topic is None or topic.topic_id != record.topic_id
                or record.partition >= topic.partition_count):
            return
        holds = dict(topic.holds)
        if record.since_ms < 0:
            holds.pop(record.partition, None)
        else:
            holds[record.partition] = record.since_ms
        self.topics[topic.name] = dataclasses.replace(topic, holds=holds)

    def _apply_config(self, record: ConfigRecord) -> None:
        if record.resource_type == ConfigResourceType.TOPIC:
            topic = self.topics.get(record.resource_name)
            if topic is None:
                return
            configs = dict(topic.configs)
            _set_or_remove(configs, record.name, record.value)
            self.topics[topic.name] = dataclasses.replace(topic, configs=configs)
        elif record.resource_type == ConfigResourceType.BROKER:
            configs = self.node_configs.setdefault(record.resource_name, {})
            _set_or_remove(configs, record.name, record.value)
            if not configs:
                del self.node_configs[record.resource_name]

    def apply_batches(self, data: bytes | memoryview) -> None:
        """Apply committed batches of the metadata log, as read from it. Control batches (the
        leader-change markers) hold no record but move the applied offset past them."""
        for pos, header in iter_batches(data):
            if header.is_control:
                if header.base_offset > self.applied_offset:
                    self._apply_control(memoryview(data)[pos : pos + header.size])
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


    def _apply_control(self, batch: memoryview) -> None:
        """A control batch: a configuration of the controller's group is its newest committed
        one (the others, leader-change markers, hold nothing the image keeps)."""
        try:
            membership = membership_of(batch)
        except CorruptMessageError as exc:
            raise MetadataRecordError(f"metadata log configuration batch: {exc}") from None
        if membership is not None:
            self.quorum = membership


def _set_or_remove(configs: dict[str, str], key: str, value: str | None) -> None:
    if value is None:
        configs.pop(key, None)
    else:
        configs[key] = value


def _check_assignment(
    placed: Sequence[tuple[int, ...]], wanted: int, factor: int, node_ids: Sequence[int]
) -> None:
    """A manual assignment of new partitions, as Kafka checks it."""
    if len(placed) != wanted:
        raise InvalidReplicaAssignmentError(
            f"attempted to add {wanted} partition(s), but {len(placed)} assignment(s) were given"
        )
    known = set(node_ids)
    for replicas in placed:
        if len(replicas) != factor:
            raise InvalidReplicaAssignmentError(
                f"an assignment of {len(replicas)} replica(s) is not consistent with the "
                f"topic's partitions, which have {factor}"
            )
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"assignment {list(replicas)} names a node twice")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"assignment {list(replicas)} names unknown node(s) {unknown}"
            )


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
