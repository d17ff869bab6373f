"""Every conversion between the client's Python values and tidelog.v1 protobuf messages.

Kept in one module so that the rest of the client reasons about TopicPartition, error objects
and leader hints, never about message shapes; a per-partition answer comes out either as a
plain value or as a `Failure` (the error, named after its partition, and the leader hint).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from tidelog.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewPartitions,
)
from tidelog.errors import CoordinatorNotAvailableError, TidelogError, for_code
from tidelog.metadata import LeaderHint, MetadataSnapshot, PartitionInfo, TopicInfo
from tidelog.types import (
    ConsumerGroupMetadata,
    GroupListing,
    IsolationLevel,
    ListOffsetsResult,
    OffsetAndMetadata,
    TopicPartition,
)
from tidelog.v1 import tidelog_pb2 as pb

V = TypeVar("V")
E = TypeVar("E", bound=IntEnum)


@dataclass(frozen=True, slots=True)
class Failure:
    error: TidelogError
    hint: LeaderHint | None = None


def error_for(code: int, message: str, subject: object) -> TidelogError:
    """The error object for a Kafka code, its message naming the partition (or topic). A
    node's message that starts with the code's own name (a node error's `str`) loses that
    prefix, which the error's `str` adds again; one that names the subject already is not
    given it twice."""
    cls = for_code(code)
    message = message.removeprefix(f"[{cls.name} ({cls.code})] ")
    if message and str(subject) in message:
        return cls(message)
    return cls(f"{subject}: {message or cls.description}")


def _hint(answer: Any) -> LeaderHint | None:
    """The answer's leader hint; None when it carries none (an absent message field reads as
    leader 0, epoch 0) or the node knew no leader."""
    if not answer.HasField("current_leader") or answer.current_leader.leader_id < 0:
        return None
    hint = answer.current_leader
    return LeaderHint(hint.leader_id, hint.leader_epoch, hint.leader_address)


def _by_topic(items: Mapping[TopicPartition, V]) -> dict[str, list[tuple[int, V]]]:
    grouped: dict[str, list[tuple[int, V]]] = defaultdict(list)
    for tp, value in items.items():
        grouped[tp.topic].append((tp.partition, value))
    return grouped


def _partition_errors(topics: Iterable[Any]) -> dict[TopicPartition, TidelogError | None]:
    """Each partition of an answer made of topics (`name`, `partitions`) of partitions
    (`partition`, `error_code`, `error_message`) that says only whether it worked: None when
    it did, else its error naming the partition."""
    return {
        tp: error_for(p.error_code, p.error_message, tp) if p.error_code else None
        for t in topics
        for p in t.partitions
        for tp in (TopicPartition(t.name, p.partition),)
    }


# ---- Metadata ---------------------------------------------------------------------------------


def metadata_request(topics: Iterable[str] = ()) -> pb.MetadataRequest:
    return pb.MetadataRequest(topics=list(topics))


def parse_metadata(response: pb.MetadataResponse) -> MetadataSnapshot:
    topics = {
        t.name: TopicInfo(
            name=t.name,
            partitions=tuple(
                PartitionInfo(
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replicas),
                    isr=tuple(p.isr),
                    error_code=p.error_code,
                )
                for p in sorted(t.partitions, key=lambda p: p.partition)
            ),
            configs=dict(t.configs),
            is_internal=t.is_internal,
            error_code=t.error_code,
        )
        for t in response.topics
    }
    return MetadataSnapshot(
        nodes={n.node_id: n.address for n in response.nodes},
        controller_id=response.controller_id,
        topics=topics,
    )


# ---- CreateTopics / DeleteTopics --------------------------------------------------------------


def create_topics_request(
    name: str, partitions: int, replication_factor: int, config: Mapping[str, str], timeout_ms: int
) -> pb.CreateTopicsRequest:
    topic = pb.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs={k: str(v) for k, v in config.items()},
    )
    return pb.CreateTopicsRequest(topics=[topic], timeout_ms=timeout_ms)


def delete_topics_request(names: Iterable[str], timeout_ms: int) -> pb.DeleteTopicsRequest:
    return pb.DeleteTopicsRequest(topic_names=list(names), timeout_ms=timeout_ms)


def parse_topic_results(
    response: pb.CreateTopicsResponse | pb.DeleteTopicsResponse,
) -> dict[str, TidelogError | None]:
    return {
        t.name: error_for(t.error_code, t.error_message, f"topic {t.name!r}")
        if t.error_code
        else None
        for t in response.topics
    }


# ---- ListOffsets ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetLookup:
    """One partition's ListOffsets question: a spec timestamp, or a legacy count >= 1."""

    timestamp: int
    current_leader_epoch: int = -1
    max_num_offsets: int = 0


def list_offsets_request(
    lookups: Mapping[TopicPartition, OffsetLookup], isolation: IsolationLevel, replica_id: int
) -> pb.ListOffsetsRequest:
    return pb.ListOffsetsRequest(
        replica_id=replica_id,
        isolation_level=int(isolation),
        topics=[
            pb.ListOffsetsTopic(
                name=topic,
                partitions=[
                    pb.ListOffsetsPartition(
                        partition=p,
                        current_leader_epoch=q.current_leader_epoch,
                        timestamp=q.timestamp,
                        max_num_offsets=q.max_num_offsets,
                    )
                    for p, q in parts
                ],
            )
            for topic, parts in _by_topic(lookups).items()
        ],
    )


def _per_partition(
    response: Any, answer: Callable[[Any], V]
) -> dict[TopicPartition, V | Failure]:
    """Each partition of a Produce, Fetch or ListOffsets response: its answer, or its error with
    the leader hint it came with."""
    out: dict[TopicPartition, V | Failure] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition)
            if p.error_code:
                out[tp] = Failure(error_for(p.error_code, p.error_message, tp), _hint(p))
            else:
                out[tp] = answer(p)
    return out


def parse_list_offsets(
    response: pb.ListOffsetsResponse,
) -> dict[TopicPartition, ListOffsetsResult | Failure]:
    return _per_partition(
        response,
        lambda p: ListOffsetsResult(p.offset, p.timestamp, p.leader_epoch,
                                    tuple(p.old_style_offsets)),
    )


# ---- Produce ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    base_offset: int
    log_append_time_ms: int


def serialized_produce_request(
    batches: Mapping[TopicPartition, Sequence[bytes]], acks: int, timeout_ms: int,
    transactional_id: str | None = None,
) -> bytes:
    """A ProduceRequest, serialized, for `batches` given as pieces (a batch's header and
    body). Through the generated code each batch would be copied three times (into the
    message, out of it, and by gRPC); here the pieces are joined into the request once. The
    small fields are still encoded by the generated code; only the length-delimited nesting of
    the records is written by hand (protobuf merges fields of one message that arrive in
    parts, so the concatenation parses as one message; tests compare it with the generated
    encoding)."""
    request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
    if transactional_id is not None:
        request.transactional_id = transactional_id
    pieces = [request.SerializeToString()]
    for topic, parts in _by_topic(batches).items():
        topic_head = pb.TopicProduceData(name=topic).SerializeToString()
        topic_pieces: list[bytes] = []
        for partition, data in parts:
            size = sum(len(piece) for piece in data)
            head = (pb.PartitionProduceData(partition=partition).SerializeToString()
                    + _RECORDS_TAG + varint(size))
            topic_pieces += (_PARTITIONS_TAG, varint(len(head) + size), head, *data)
        topic_size = len(topic_head) + sum(len(piece) for piece in topic_pieces)
        pieces += (_TOPICS_TAG, varint(topic_size), topic_head, *topic_pieces)
    return b"".join(pieces)


# Field keys (number << 3 | wire type 2, length-delimited) of the nested Produce fields.
_TOPICS_TAG = bytes([pb.ProduceRequest.TOPICS_FIELD_NUMBER << 3 | 2])
_PARTITIONS_TAG = bytes([pb.TopicProduceData.PARTITIONS_FIELD_NUMBER << 3 | 2])
_RECORDS_TAG = bytes([pb.PartitionProduceData.RECORDS_FIELD_NUMBER << 3 | 2])


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int (also the nodes' frame lengths)."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def parse_produce(response: pb.ProduceResponse) -> dict[TopicPartition, ProduceAnswer | Failure]:
    return _per_partition(
        response, lambda p: ProduceAnswer(p.base_offset, p.log_append_time_ms)
    )


# ---- Fetch ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchPosition:
    offset: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: (producer_id, first_offset) of aborted transactions overlapping the records.
    aborted: tuple[tuple[int, int], ...]


def fetch_request(
    positions: Mapping[TopicPartition, FetchPosition],
    *,
    isolation: IsolationLevel,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
) -> pb.FetchRequest:
    return pb.FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=int(isolation),
        topics=[
            pb.FetchTopic(
                name=topic,
                partitions=[
                    pb.FetchPartition(
                        partition=p,
                        current_leader_epoch=pos.current_leader_epoch,
                        fetch_offset=pos.offset,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for p, pos in parts
                ],
            )
            for topic, parts in _by_topic(positions).items()
        ],
    )


def parse_fetch(response: pb.FetchResponse) -> dict[TopicPartition, FetchAnswer | Failure]:
    return _per_partition(
        response,
        lambda p: FetchAnswer(
            p.records,
            p.high_watermark,
            p.last_stable_offset,
            p.log_start_offset,
            tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions),
        ),
    )


# ---- InitProducerId ---------------------------------------------------------------------------


def init_producer_id_request(
    producer_id: int, producer_epoch: int, transactional_id: str | None = None,
    transaction_timeout_ms: int = 0,
) -> pb.InitProducerIdRequest:
    request = pb.InitProducerIdRequest(producer_id=producer_id, producer_epoch=producer_epoch)
    if transactional_id is not None:
        request.transactional_id = transactional_id
        request.transaction_timeout_ms = transaction_timeout_ms
    return request


def parse_init_producer_id(response: pb.InitProducerIdResponse) -> tuple[int, int]:
    """(producer id, epoch); raises the error of a failed answer."""
    if response.error_code:
        raise error_for(response.error_code, response.error_message, "InitProducerId")
    return response.producer_id, response.producer_epoch


def add_partitions_to_txn_request(
    transactional_id: str, producer_id: int, producer_epoch: int,
    partitions: Iterable[TopicPartition],
) -> pb.AddPartitionsToTxnRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return pb.AddPartitionsToTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id,
        producer_epoch=producer_epoch,
        topics=[pb.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


def parse_add_partitions_to_txn(
    response: pb.AddPartitionsToTxnResponse,
) -> dict[TopicPartition, TidelogError | None]:
    """Each partition's outcome: None when added, else its error."""
    return _partition_errors(response.results)


def add_offsets_to_txn_request(
    transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
) -> pb.AddOffsetsToTxnRequest:
    return pb.AddOffsetsToTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id,
        producer_epoch=producer_epoch, group_id=group_id,
    )


def end_txn_request(
    transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
) -> pb.EndTxnRequest:
    return pb.EndTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id,
        producer_epoch=producer_epoch, committed=commit,
    )


def raise_txn_error(
    response: pb.AddOffsetsToTxnResponse | pb.EndTxnResponse, what: str
) -> None:
    """Raise the error of a failed AddOffsetsToTxn or EndTxn answer."""
    if response.error_code:
        raise error_for(response.error_code, response.error_message, what)


def txn_offset_commit_request(
    transactional_id: str, group: ConsumerGroupMetadata, producer_id: int,
    producer_epoch: int, offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> pb.TxnOffsetCommitRequest:
    """The group's offsets committed in the producer's transaction, with the member's id,
    epoch and instance id, which the coordinator checks (a simple consumer's: "", -1)."""
    plain = offset_commit_request(group.group_id, offsets)
    request = pb.TxnOffsetCommitRequest(
        transactional_id=transactional_id, group_id=group.group_id, producer_id=producer_id,
        producer_epoch=producer_epoch, generation_id=group.generation_id,
        member_id=group.member_id, topics=plain.topics,
    )
    if group.group_instance_id is not None:
        request.group_instance_id = group.group_instance_id
    return request


# ---- Coordinators and consumer offsets --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoordinatorAnswer:
    node_id: int
    address: str


def find_coordinator_request(key: str, key_type: int) -> pb.FindCoordinatorRequest:
    return pb.FindCoordinatorRequest(key=key, key_type=key_type)


def parse_find_coordinator(response: pb.FindCoordinatorResponse, key: str) -> CoordinatorAnswer:
    """The coordinator's id and address; raises the answer's error. An answer without an error
    but without a usable node id reads as COORDINATOR_NOT_AVAILABLE: there is nobody to ask."""
    if response.error_code:
        raise error_for(response.error_code, response.error_message, f"coordinator of {key!r}")
    if response.node_id < 0:
        raise CoordinatorNotAvailableError(f"coordinator of {key!r}: the answer names no node")
    return CoordinatorAnswer(response.node_id, response.address)


def offset_commit_request(
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    member: tuple[str, int] | None = None,
) -> pb.OffsetCommitRequest:
    """A simple (manually assigned) consumer's commit: generation -1, no member id; a group
    member's carries its member id and epoch (Kafka's OffsetCommit v9)."""
    return pb.OffsetCommitRequest(
        group_id=group_id,
        generation_id=-1 if member is None else member[1],
        member_id="" if member is None else member[0],
        topics=[
            pb.OffsetCommitTopic(
                name=topic,
                partitions=[
                    pb.OffsetCommitPartition(
                        partition=p,
                        committed_offset=o.offset,
                        committed_leader_epoch=-1 if o.leader_epoch is None else o.leader_epoch,
                        committed_metadata=o.metadata,
                    )
                    for p, o in parts
                ],
            )
            for topic, parts in _by_topic(offsets).items()
        ],
    )


def parse_offset_commit(
    response: pb.OffsetCommitResponse | pb.OffsetDeleteResponse | pb.TxnOffsetCommitResponse,
) -> dict[TopicPartition, TidelogError | None]:
    """Each partition's outcome: None when done, else its error (naming it)."""
    return _partition_errors(response.topics)


def offset_fetch_request(
    group_id: str, partitions: Iterable[TopicPartition] | None, require_stable: bool = False,
    member: tuple[str, int] | None = None,
) -> pb.OffsetFetchRequest:
    """No partitions (None) asks for every partition the group has committed. A group
    member's fetch carries its member id and epoch (Kafka's OffsetFetch v9); others none."""
    wanted = dict.fromkeys(partitions or (), None)
    return pb.OffsetFetchRequest(
        group_id=group_id,
        require_stable=require_stable,
        member_id="" if member is None else member[0],
        member_epoch=-1 if member is None else member[1],
        topics=[
            pb.OffsetFetchTopic(name=topic, partitions=[p for p, _ in parts])
            for topic, parts in _by_topic(wanted).items()
        ],
    )


def parse_offset_fetch(
    response: pb.OffsetFetchResponse, group_id: str
) -> dict[TopicPartition, OffsetAndMetadata | Failure | None]:
    """Each partition's committed offset (None when the group committed none: offset -1, which
    Kafka answers without an error), or its error; a group-level error is raised."""
    if response.error_code:
        raise error_for(response.error_code, response.error_message, f"group {group_id!r}")
    out: dict[TopicPartition, OffsetAndMetadata | Failure | None] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            if p.error_code:
                out[tp] = Failure(error_for(p.error_code, "", tp))
            elif p.committed_offset < 0:
                out[tp] = None
            else:
                epoch = p.committed_leader_epoch
                out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata,
                                            None if epoch < 0 else epoch)
    return out


def list_groups_request() -> pb.ListGroupsRequest:
    return pb.ListGroupsRequest()


def parse_list_groups(response: pb.ListGroupsResponse, node_id: int) -> list[GroupListing]:
    if response.error_code:
        raise error_for(response.error_code, "", f"ListGroups on node {node_id}")
    return [
        GroupListing(g.group_id, g.protocol_type, g.group_state, g.coordinator_id)
        for g in response.groups
    ]


def delete_groups_request(group_ids: Iterable[str]) -> pb.DeleteGroupsRequest:
    return pb.DeleteGroupsRequest(group_ids=list(group_ids))


def parse_delete_groups(response: pb.DeleteGroupsResponse) -> dict[str, TidelogError | None]:
    return {
        r.group_id: error_for(r.error_code, r.error_message, f"group {r.group_id!r}")
        if r.error_code else None
        for r in response.results
    }


# ---- ACLs -------------------------------------------------------------------------------------


def create_acls_request(bindings: Sequence[AclBinding]) -> pb.CreateAclsRequest:
    return pb.CreateAclsRequest(creations=[
        pb.AclCreation(
            resource_type=b.pattern.resource_type,
            resource_name=b.pattern.name,
            resource_pattern_type=b.pattern.pattern_type,
            principal=b.entry.principal,
            host=b.entry.host,
            operation=b.entry.operation,
            permission_type=b.entry.permission,
        )
        for b in bindings
    ])


def parse_create_acls(
    response: pb.CreateAclsResponse, bindings: Sequence[AclBinding]
) -> list[TidelogError | None]:
    """Each binding's outcome, in order: None when created (or there already), else its error
    naming the binding."""
    if len(response.results) != len(bindings):
        raise TidelogError(f"CreateAcls answered {len(response.results)} results for "
                           f"{len(bindings)} creations")
    return [
        error_for(r.error_code, r.error_message, f"ACL {b}") if r.error_code else None
        for r, b in zip(response.results, bindings, strict=True)
    ]


def acl_filter(acl_filter: AclBindingFilter) -> pb.AclFilter:
    pattern, entry = acl_filter.pattern, acl_filter.entry
    message = pb.AclFilter(
        resource_type_filter=pattern.resource_type,
        pattern_type_filter=pattern.pattern_type,
        operation=entry.operation,
        permission_type=entry.permission,
    )
    if pattern.name is not None:
        message.resource_name_filter = pattern.name
    if entry.principal is not None:
        message.principal_filter = entry.principal
    if entry.host is not None:
        message.host_filter = entry.host
    return message


def describe_acls_request(acl_filter_: AclBindingFilter) -> pb.DescribeAclsRequest:
    return pb.DescribeAclsRequest(filter=acl_filter(acl_filter_))


def parse_describe_acls(response: pb.DescribeAclsResponse) -> list[AclBinding]:
    """The bindings described; raises the answer's error."""
    if response.error_code:
        raise error_for(response.error_code, response.error_message, "DescribeAcls")
    return [
        _binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                 a.operation, a.permission_type)
        for r in response.resources
        for a in r.acls
    ]


def delete_acls_request(filters: Sequence[AclBindingFilter]) -> pb.DeleteAclsRequest:
    return pb.DeleteAclsRequest(filters=[acl_filter(f) for f in filters])


def parse_delete_acls(
    response: pb.DeleteAclsResponse, filters: Sequence[AclBindingFilter]
) -> list[list[AclBinding] | TidelogError]:
    """Per filter, in order: the bindings it deleted, or its error."""
    if len(response.filter_results) != len(filters):
        raise TidelogError(f"DeleteAcls answered {len(response.filter_results)} results for "
                           f"{len(filters)} filters")
    out: list[list[AclBinding] | TidelogError] = []
    for result, acl_filter_ in zip(response.filter_results, filters, strict=True):
        if result.error_code:
            out.append(error_for(result.error_code, result.error_message,
                                 f"ACL filter {acl_filter_}"))
            continue
        out.append([
            _binding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                     m.operation, m.permission_type)
            for m in result.matching_acls
        ])
    return out


def _binding(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
             operation: int, permission: int) -> AclBinding:
    return AclBinding(
        ResourcePattern(_code(ResourceType, resource_type), name,
                        _code(PatternType, pattern_type)),
        AccessControlEntry(principal, _code(Operation, operation),
                           _code(Permission, permission), host),
    )


def _code(kind: type[E], value: int) -> E:
    """A code this client does not know reads as UNKNOWN (0), as Kafka's clients read it."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


# ---- CreatePartitions, DescribeConfigs, IncrementalAlterConfigs -------------------------------


def create_partitions_request(
    topics: Mapping[str, NewPartitions], validate_only: bool, timeout_ms: int
) -> pb.CreatePartitionsRequest:
    return pb.CreatePartitionsRequest(
        topics=[
            pb.CreatePartitionsTopic(
                name=name,
                count=new.total_count,
                assignments=[pb.CreatePartitionsAssignment(broker_ids=list(replicas))
                             for replicas in new.new_assignments or ()],
            )
            for name, new in topics.items()
        ],
        validate_only=validate_only,
        timeout_ms=timeout_ms,
    )


def parse_create_partitions(response: pb.CreatePartitionsResponse) -> dict[str, TidelogError]:
    """The topics that failed, with their errors."""
    return {
        r.name: error_for(r.error_code, r.error_message, f"topic {r.name!r}")
        for r in response.results
        if r.error_code
    }


# ---- AlterPartitionReassignments, ListPartitionReassignments (KIP-455) -----------------------


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment under way (Kafka's `PartitionReassignment`): every node that may be a
    member while it runs (the target first), those it adds and those it removes."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)


def alter_partition_reassignments_request(
    targets: Mapping[TopicPartition, Sequence[int] | None], timeout_ms: int,
    release: bool = False,
) -> pb.AlterPartitionReassignmentsRequest:
    """Each partition to its replicas, None cancelling; with ``release``, each partition's
    hold released instead (the replica lists are not sent)."""
    return pb.AlterPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=[
        pb.ReassignableTopic(name=name, partitions=[
            pb.ReassignablePartition(partition_index=p, release=True)
            if release
            else pb.ReassignablePartition(partition_index=p, cancel=True)
            if replicas is None
            else pb.ReassignablePartition(partition_index=p, replicas=list(replicas))
            for p, replicas in parts
        ])
        for name, parts in _by_topic(targets).items()
    ])


def parse_alter_partition_reassignments(
    response: pb.AlterPartitionReassignmentsResponse,
) -> dict[TopicPartition, TidelogError]:
    """The partitions that failed, with their errors (a top-level error: every partition)."""
    return {
        TopicPartition(t.name, p.partition_index): error_for(
            p.error_code, p.error_message, f"partition {t.name}-{p.partition_index}")
        for t in response.responses for p in t.partitions if p.error_code
    }


def list_partition_reassignments_request(
    partitions: Iterable[TopicPartition] | None,
) -> pb.ListPartitionReassignmentsRequest:
    if partitions is None:
        return pb.ListPartitionReassignmentsRequest()
    return pb.ListPartitionReassignmentsRequest(topics=[
        pb.ListPartitionReassignmentsTopics(name=name, partition_indexes=[p for p, _ in parts])
        for name, parts in _by_topic(dict.fromkeys(partitions)).items()
    ])


def parse_list_partition_reassignments(
    response: pb.ListPartitionReassignmentsResponse,
) -> dict[TopicPartition, PartitionReassignment]:
    return {
        TopicPartition(t.name, p.partition_index): PartitionReassignment(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
        for t in response.topics for p in t.partitions
    }


# ---- DecommissionNode -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DecommissionStatus:
    """A node's decommission as the controller sees it: whether it is being decommissioned,
    how many partitions still list it as a replica (and how many of those are moving away
    now), the partitions that cannot move yet with why, and whether it votes in the
    controller's quorum (which a decommission does not move)."""

    node_id: int
    decommissioning: bool
    replicas_left: int
    moving: int
    stuck: tuple[tuple[TopicPartition, str], ...]
    controller_voter: bool


def decommission_request(
    node_id: int, action: int, timeout_ms: int
) -> pb.DecommissionNodeRequest:
    """``action`` 0 describes, 1 decommissions, 2 cancels, 3 unregisters."""
    return pb.DecommissionNodeRequest(node_id=node_id, action=action, timeout_ms=timeout_ms)


def parse_decommission(node_id: int, response: pb.DecommissionNodeResponse) -> DecommissionStatus:
    return DecommissionStatus(
        node_id, response.decommissioning, response.replicas_left, response.moving,
        tuple((TopicPartition(s.topic, s.partition), s.reason) for s in response.stuck),
        response.controller_voter,
    )


def describe_configs_request(
    resources: Sequence[ConfigResource], keys: Sequence[str] | None
) -> pb.DescribeConfigsRequest:
    return pb.DescribeConfigsRequest(resources=[
        pb.DescribeConfigsResource(resource_type=r.resource_type, resource_name=r.name,
                                   configuration_keys=list(keys or ()))
        for r in resources
    ])


def parse_describe_configs(
    response: pb.DescribeConfigsResponse,
) -> dict[ConfigResource, dict[str, ConfigEntry] | TidelogError]:
    out: dict[ConfigResource, dict[str, ConfigEntry] | TidelogError] = {}
    for result in response.results:
        resource = ConfigResource(
            _code(ConfigResourceType, result.resource_type), result.resource_name
        )
        if result.error_code:
            out[resource] = error_for(result.error_code, result.error_message, resource)
            continue
        out[resource] = {
            entry.name: ConfigEntry(
                entry.name,
                entry.value if entry.HasField("value") else None,
                _code(ConfigSource, entry.config_source),
                entry.read_only,
                entry.is_sensitive,
            )
            for entry in result.configs
        }
    return out


def incremental_alter_configs_request(
    changes: Mapping[ConfigResource, Sequence[AlterConfigOp]], validate_only: bool,
    timeout_ms: int,
) -> pb.IncrementalAlterConfigsRequest:
    return pb.IncrementalAlterConfigsRequest(
        resources=[
            pb.AlterConfigsResource(
                resource_type=resource.resource_type,
                resource_name=resource.name,
                configs=[pb.AlterableConfig(name=op.name, config_operation=op.op_type,
                                            value=op.value) for op in ops],
            )
            for resource, ops in changes.items()
        ],
        validate_only=validate_only,
        timeout_ms=timeout_ms,
    )


def parse_incremental_alter_configs(
    response: pb.IncrementalAlterConfigsResponse,
) -> dict[ConfigResource, TidelogError]:
    """The resources whose changes failed, with their errors."""
    out: dict[ConfigResource, TidelogError] = {}
    for result in response.responses:
        if result.error_code:
            resource = ConfigResource(
                _code(ConfigResourceType, result.resource_type), result.resource_name
            )
            out[resource] = error_for(result.error_code, result.error_message, resource)
    return out
