"""The admin client (kafka-python's ``KafkaAdminClient``, confluent-kafka's ``AdminClient``):
topics, partitions and their reassignment, configs, ACLs, node decommissioning, consumer
groups, offsets lookups and transactions (KIP-664).

Build one on its own, ``AdminClient("host:9092")``, or take a client's, ``client.admin``,
which shares the client's connections. A call that changes the cluster goes to the controller
(any node forwards it while the controller is unknown); a group's goes to its coordinator; a
partition's lookup to its leader. Every call has an overall deadline (the client's
``request_timeout_ms`` or the call's ``timeout_ms``) that bounds its retries.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from tidelog import wire
from tidelog.acl import ANY_ACL, AclBinding, AclBindingFilter
from tidelog.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
)
from tidelog.connections import Attempts, ClientConfig, Connections
from tidelog.coordinated import check_group_id, checked_offsets
from tidelog.errors import (
    ConfigurationError,
    InvalidPartitionsError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeUnavailableError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    RetriableError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedSaslMechanismError,
    for_code,
)
from tidelog.lookups import fresh_topics, list_offsets, lookup_offsets, topic_names
from tidelog.membership import ConsumerGroupDescription, describe_request, parse_describe
from tidelog.metadata import TopicInfo
from tidelog.retry import Deadline, call_with_retry
from tidelog.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    mechanism_code,
    new_salt,
    salted_password,
)
from tidelog.types import (
    CONSUMER_OFFSETS_TOPIC,
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    GroupListing,
    IsolationLevel,
    ListOffsetsResult,
    OffsetAndMetadata,
    OffsetSpec,
    TopicPartition,
    checked_topics,
)
from tidelog.v1 import tidelog_pb2 as pb

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterDescription:
    nodes: dict[int, str]
    controller_id: int


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    #: When the open transaction began (ms since the epoch), -1 without one.
    start_time_ms: int
    partitions: tuple[TopicPartition, ...]


class ElectionType(IntEnum):
    """Kafka's ElectionType: which replica `AdminClient.elect_leaders` makes leader."""

    #: The first of the partition's replicas, if it is in sync.
    PREFERRED = 0
    #: Kafka's election of a replica outside the in-sync set; Raft elects none (see
    #: `AdminClient.elect_leaders`).
    UNCLEAN = 1


#: The ElectLeaders answers that mean "ask the partition's leader again, with fresh metadata".
_ELECTION_RETRIED = (NotLeaderOrFollowerError, LeaderNotAvailableError)


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica in a log directory (Kafka's ReplicaInfo)."""

    #: The bytes of its segment files.
    size: int
    #: How far its log end is below its high watermark (0: it holds every committed record).
    offset_lag: int


@dataclass(frozen=True)
class LogDirDescription:
    """One log directory of a node (Kafka's LogDirDescription)."""

    #: None, or why the directory cannot be described (KAFKA_STORAGE_ERROR).
    error: TidelogError | None
    #: The replicas in it.
    replica_infos: dict[TopicPartition, ReplicaInfo]
    #: The size of the file system that holds it, in bytes; -1 when unknown.
    total_bytes: int
    #: The bytes of that file system the node may still use; -1 when unknown.
    usable_bytes: int


@dataclass(frozen=True)
class ProducerInfo:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    coordinator_epoch: int
    #: The first offset of the producer's open transaction on the partition, -1 without one.
    txn_start_offset: int
    #: The timestamp of that transaction's first batch, -1 without one.
    txn_start_time_ms: int


class AdminClient:
    """Admin operations on a cluster; safe to share between threads."""

    def __init__(
        self, bootstrap: str | Sequence[str] | None = None, request_timeout_ms: int = 30_000,
        **options: Any,
    ) -> None:
        """`bootstrap` and `options` as `Client` takes them (``ClientConfig.of``)."""
        self._bind(Connections(ClientConfig.of(bootstrap, request_timeout_ms, **options)), True)

    @classmethod
    def sharing(cls, connections: Connections) -> AdminClient:
        """An admin client on a client's connections, which its close() leaves open."""
        admin = cls.__new__(cls)
        admin._bind(connections, False)
        return admin

    def _bind(self, connections: Connections, owned: bool) -> None:
        self._conn = connections
        self._metadata = connections.metadata
        self._owned = owned

    def close(self) -> None:
        """Close the connections, unless they are a client's (`sharing`)."""
        if self._owned:
            self._conn.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- topics ----------------------------------------------------------------------------

    def _topic_change(
        self, method: str, name: str, request_for: Callable[[], Any], already: type[TidelogError],
        deadline: Deadline,
    ) -> None:
        """Create or delete one topic. An attempt whose outcome is unknown (no answer came, or
        the controller answered REQUEST_TIMED_OUT: the change may commit after all) makes
        `already` (exists / unknown) on a later attempt mean that our change went through.
        Otherwise `already` is the answer, raised without a retry as Kafka's AdminClient does:
        deleting a topic that never existed fails with UNKNOWN_TOPIC_OR_PARTITION, although
        that error is retriable elsewhere (a NOT_CONTROLLER before it changed nothing)."""
        state = Attempts(self._metadata.cluster.version)
        maybe_done = False

        def attempt() -> TidelogError | None:
            nonlocal maybe_done
            try:
                response = self._conn.controller_call(method, request_for, deadline, state)
            except NodeUnavailableError:
                maybe_done = True  # the request may have reached the controller
                raise
            error = wire.parse_topic_results(response).get(name)
            if error is None or (maybe_done and isinstance(error, already)):
                return None
            if isinstance(error, already):
                return error
            maybe_done = maybe_done or isinstance(error, RequestTimedOutError)
            state.refresh = isinstance(error, RetriableError)
            raise error

        error = call_with_retry(attempt, what=f"{method} {name!r}", deadline=deadline,
                                backoff=self._conn.backoff)
        if error is not None:
            raise error

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str | int] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Create a topic and return once every partition has a leader and in-sync replicas
        known to every node, so the next produce or lookup needs no election-wait of its own
        and a describe shows the ISR. `partitions` -1 means the nodes' num.partitions (as
        Kafka's CreateTopics); `replication_factor` None (or -1) means min(3, number of
        nodes). Every argument is checked here: a wrong one is a ConfigurationError."""
        name = _checked_topic(name)
        if not _is_int(partitions) or not (partitions >= 1 or partitions == -1):
            raise ConfigurationError(
                f"topic {name!r}: partitions must be an int >= 1 (or -1: the nodes' default), "
                f"got {partitions!r:.80}"
            )
        if replication_factor == -1:
            replication_factor = None
        if replication_factor is not None and (
            not _is_int(replication_factor) or replication_factor < 1
        ):
            raise ConfigurationError(
                f"topic {name!r}: replication_factor must be an int >= 1 (or None / -1: the "
                f"default), got {replication_factor!r:.80}"
            )
        configs = _checked_configs(name, config)
        deadline = self._conn.deadline(timeout_ms)
        self._metadata.ensure(deadline)
        factor = replication_factor or min(3, len(self._metadata.cluster.nodes()))
        self._topic_change(
            "CreateTopics",
            name,
            lambda: wire.create_topics_request(
                name, partitions, factor, configs, int(deadline.attempt_s() * 1000)
            ),
            TopicAlreadyExistsError,
            deadline,
        )

        self._await_leaders({name: partitions}, deadline)

    def _await_leaders(self, counts: Mapping[str, int], deadline: Deadline) -> None:
        """Return once every node that answers Metadata knows each topic with its count of
        partitions (any count for -1: the node's default), each with a leader and its in-sync
        replicas: a node that has not heard of the change yet (the group coordinator of a
        commit, say) would refuse it, and one that knows the leader before the leader's first
        announcement reaches it would show an empty ISR."""

        def led(info: TopicInfo | None, count: int) -> bool:
            return (info is not None and not info.error_code and bool(info.partitions)
                    and count in (-1, len(info.partitions))
                    and all(p.leader >= 0 and p.isr for p in info.partitions))

        def served() -> None:
            self._metadata.refresh(deadline)
            for name, count in counts.items():
                answers = self._metadata.answers
                if not all(led(answer.topics.get(name), count) for answer in answers):
                    raise LeaderNotAvailableError(
                        f"topic {name!r} has partitions without a leader")

        call_with_retry(served, what=f"leaders of {', '.join(map(repr, counts))}",
                        deadline=deadline, backoff=self._conn.backoff)

    def create_topics(
        self, new_topics: Sequence[NewTopic], *, timeout_ms: int | None = None
    ) -> None:
        """kafka-python's ``create_topics([NewTopic(name, num_partitions, replication_factor,
        topic_configs=...)])``: each topic as `create_topic` creates it, every one tried (one
        that exists does not keep the others from being created); then the first error is
        raised, naming its topic. `timeout_ms` bounds each topic's creation."""
        if isinstance(new_topics, NewTopic) or not isinstance(new_topics, list | tuple):
            raise ConfigurationError(
                f"create_topics() takes a list of NewTopic, got {new_topics!r:.80}"
            )
        for topic in new_topics:
            if not isinstance(topic, NewTopic):
                raise ConfigurationError(f"create_topics(): expected a NewTopic, got {topic!r:.80}")
            if topic.replica_assignments is not None:
                raise ConfigurationError(
                    f"topic {topic.name!r}: replica_assignments are not taken; Tidelog places "
                    "the replicas (alter_partition_reassignments moves them afterwards)"
                )
        self._each([
            functools.partial(self.create_topic, t.name, t.num_partitions, t.replication_factor,
                              t.topic_configs, timeout_ms=timeout_ms)
            for t in new_topics
        ])

    def delete_topics(self, topics: Sequence[str], *, timeout_ms: int | None = None) -> None:
        """kafka-python's ``delete_topics([name, ...])``: each as `delete_topic` deletes it,
        every one tried; then the first error is raised, naming its topic."""
        names = checked_topics(topics, "delete_topics")
        self._each([functools.partial(self.delete_topic, name, timeout_ms=timeout_ms)
                    for name in names])

    @staticmethod
    def _each(calls: Sequence[Callable[[], None]]) -> None:
        """Make every call, then raise the first error (a Tidelog error: the others would
        have been raised before any call)."""
        first: TidelogError | None = None
        for call in calls:
            try:
                call()
            except TidelogError as exc:
                first = first or exc
        if first is not None:
            raise first

    def delete_topic(self, name: str, *, timeout_ms: int | None = None) -> None:
        name = _checked_topic(name)
        deadline = self._conn.deadline(timeout_ms)
        self._topic_change(
            "DeleteTopics",
            name,
            lambda: wire.delete_topics_request([name], int(deadline.attempt_s() * 1000)),
            UnknownTopicOrPartitionError,
            deadline,
        )
        self._metadata.refresh(deadline)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, TopicInfo]:
        """Fresh metadata of the named topics (all when None); an unknown name raises
        UNKNOWN_TOPIC_OR_PARTITION, and one this client may not DESCRIBE the authorization
        error (TOPIC_AUTHORIZATION_FAILED), as Kafka's admin client says."""
        if names is not None:
            names = checked_topics(names, "describe_topics")
        deadline = self._conn.deadline(timeout_ms)
        topics = fresh_topics(self._conn, deadline)
        if names is None:
            return topics
        self._metadata.check_described(names, deadline)
        out: dict[str, TopicInfo] = {}
        for name in names:
            info = topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            out[name] = info
        return out

    def list_topics(self, *, timeout_ms: int | None = None) -> list[str]:
        """The names of the topics, but the internal ones."""
        return topic_names(self._conn, self._conn.deadline(timeout_ms))

    def topics(self, *, timeout_ms: int | None = None) -> set[str]:
        """The names of the topics, but the internal ones, as a set (kafka-python's
        ``topics()``)."""
        return set(self.list_topics(timeout_ms=timeout_ms))

    def partitions_for_topic(self, topic: str, *, timeout_ms: int | None = None) -> set[int] | None:
        """The topic's partition ids, from metadata fetched now; None for a topic that does
        not exist (kafka-python's ``partitions_for_topic``)."""
        topic = _checked_topic(topic)
        info = fresh_topics(self._conn, self._conn.deadline(timeout_ms)).get(topic)
        return None if info is None else set(range(len(info.partitions)))

    def metrics(self) -> dict[str, dict[str, float | int | str]]:
        """The client-side figures of the connections this admin client uses, grouped as
        kafka-python's ``metrics()`` gives them ({group: {name: value}})."""
        return {"client-metrics": self._conn.metrics()}

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        fresh_topics(self._conn, self._conn.deadline(timeout_ms))
        cluster = self._metadata.cluster
        return ClusterDescription(cluster.nodes(), cluster.controller_id)

    # ---- partitions and configs ------------------------------------------------------------

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions | int],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Grow each topic to its new total partition count through the controller
        (CreatePartitions, needs ALTER on the topic) and return once every new partition has
        a leader. Raises the first failed topic's error: INVALID_PARTITIONS (not an increase),
        INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED...
        A retry after a lost answer finds the topic grown already, which counts as done."""
        remaining = {
            name: new if isinstance(new, NewPartitions) else NewPartitions(int(new))
            for name, new in topic_partitions.items()
        }
        counts = {name: new.total_count for name, new in remaining.items()}
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)
        attempts = 0

        def attempt() -> TidelogError | None:
            nonlocal attempts
            attempts += 1
            response = self._conn.controller_call(
                "CreatePartitions",
                lambda: wire.create_partitions_request(
                    remaining, validate_only, int(deadline.attempt_s() * 1000)),
                deadline, state,
            )
            failed = wire.parse_create_partitions(response)
            if attempts > 1 and any(isinstance(e, InvalidPartitionsError)
                                    for e in failed.values()):
                self._metadata.refresh(deadline)
                topics = self._metadata.cluster.topics()
                failed = {
                    name: error for name, error in failed.items()
                    if not (isinstance(error, InvalidPartitionsError) and name in topics
                            and len(topics[name].partitions) == remaining[name].total_count)
                }
            return _raise_retriable(remaining, failed, state)

        if remaining:
            error = call_with_retry(attempt, what="CreatePartitions", deadline=deadline,
                                    backoff=self._conn.backoff)
            if error is not None:
                raise error
            if not validate_only:
                self._await_leaders(counts, deadline)

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
        release: bool = False,
    ) -> dict[TopicPartition, TidelogError]:
        """Move each partition's replicas to its list (preferred leader first), or cancel its
        reassignment under way with None (AlterPartitionReassignments, KIP-455; needs ALTER on
        the cluster). Returns once the controller has recorded them: the partitions' leaders
        then move their Raft groups (`list_partition_reassignments` shows what is under way).
        Each partition is then held out of continuous balancing for the cluster's
        balancer.operator.hold.ms; ``release`` (the lists are then ignored: pass None) only
        releases the partitions' holds, so that balancing may move them again.
        The partitions that failed are returned with their errors (INVALID_REPLICA_ASSIGNMENT,
        UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS); a top-level error is raised."""
        remaining = dict(reassignments)
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)
        failed: dict[TopicPartition, TidelogError] = {}

        def attempt() -> None:
            response = self._conn.controller_call(
                "AlterPartitionReassignments",
                lambda: wire.alter_partition_reassignments_request(
                    remaining, int(deadline.attempt_s() * 1000), release),
                deadline, state,
            )
            if response.error_code:
                error = wire.error_for(response.error_code, response.error_message,
                                       "AlterPartitionReassignments")
                state.refresh = isinstance(error, RetriableError)
                raise error
            answers = wire.parse_alter_partition_reassignments(response)
            for tp in [tp for tp in remaining if tp not in answers]:
                del remaining[tp]
            retry = [tp for tp, error in answers.items() if isinstance(error, RetriableError)]
            for tp, error in answers.items():
                if tp not in retry:
                    failed[tp] = error
                    del remaining[tp]
            if retry:
                state.refresh = True
                raise answers[retry[0]]

        if remaining:
            call_with_retry(attempt, what="AlterPartitionReassignments", deadline=deadline,
                            backoff=self._conn.backoff)
        return failed

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, wire.PartitionReassignment]:
        """The reassignments under way, of every partition or of those given
        (ListPartitionReassignments; needs DESCRIBE on the cluster), as the controller knows
        them: a partition is left out once its reassignment is done."""
        asked = None if partitions is None else list(partitions)
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> dict[TopicPartition, wire.PartitionReassignment]:
            response = self._conn.controller_call(
                "ListPartitionReassignments",
                lambda: wire.list_partition_reassignments_request(asked), deadline, state,
            )
            if response.error_code:
                error = wire.error_for(response.error_code, response.error_message,
                                       "ListPartitionReassignments")
                state.refresh = isinstance(error, RetriableError)
                raise error
            return wire.parse_list_partition_reassignments(response)

        return call_with_retry(attempt, what="ListPartitionReassignments", deadline=deadline,
                               backoff=self._conn.backoff)

    def decommission_node(
        self, node_id: int, *, cancel: bool = False, timeout_ms: int | None = None
    ) -> wire.DecommissionStatus:
        """Decommission node `node_id` (needs ALTER on the cluster): the controller records it,
        gives the node no new replica and moves those it holds away, a bounded number at a
        time; `cancel` re-commissions it. Returns once recorded, with the drain's progress
        (`describe_decommission` follows it). BROKER_ID_NOT_REGISTERED for an unknown node,
        INVALID_REQUEST when too few nodes would remain to hold the partitions' replicas."""
        return self._decommission(node_id, 2 if cancel else 1, timeout_ms)

    def describe_decommission(
        self, node_id: int, *, timeout_ms: int | None = None
    ) -> wire.DecommissionStatus:
        """How far node `node_id`'s decommission got (needs DESCRIBE on the cluster)."""
        return self._decommission(node_id, 0, timeout_ms)

    def unregister_node(self, node_id: int, *, timeout_ms: int | None = None) -> None:
        """Remove node `node_id`'s registration for good (Kafka's UnregisterBroker; needs
        ALTER on the cluster), once it holds no replica and is stopped: Metadata and cluster
        status leave it out from then on; started again, it registers afresh.
        INVALID_REQUEST while it is alive, holds a replica or votes in the controller's
        quorum; BROKER_ID_NOT_REGISTERED for a node not registered."""
        self._decommission(node_id, 3, timeout_ms)

    def _decommission(
        self, node_id: int, action: int, timeout_ms: int | None
    ) -> wire.DecommissionStatus:
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> wire.DecommissionStatus:
            response = self._conn.controller_call(
                "DecommissionNode",
                lambda: wire.decommission_request(
                    node_id, action, int(deadline.attempt_s() * 1000)),
                deadline, state,
            )
            if response.error_code:
                error = wire.error_for(response.error_code, response.error_message,
                                       "DecommissionNode")
                state.refresh = isinstance(error, RetriableError)
                raise error
            return wire.parse_decommission(node_id, response)

        return call_with_retry(attempt, what="DecommissionNode", deadline=deadline,
                               backoff=self._conn.backoff)

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        keys: Sequence[str] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """The configs of topics and nodes (DescribeConfigs, needs DESCRIBE_CONFIGS on the
        topic or the cluster), each with its value, source, read-only and sensitive flags;
        `keys` picks some. A node's own resource is asked of that node, the rest of the
        controller, which has applied every change it acknowledged (other nodes apply them
        shortly after, as in Kafka). Raises the first failed resource's error."""
        wanted = [ConfigResource(ConfigResourceType(r[0]), str(r[1])) for r in resources]
        deadline = self._conn.deadline(timeout_ms)
        self._metadata.ensure(deadline)
        by_node: dict[int, list[ConfigResource]] = {}
        for resource in wanted:
            node = (int(resource.name) if resource.resource_type == ConfigResourceType.BROKER
                    and resource.name.isdigit() else -1)
            by_node.setdefault(node, []).append(resource)
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for node, asked in by_node.items():

            def attempt(
                node: int = node, asked: list[ConfigResource] = asked
            ) -> TidelogError | None:
                nodes = self._metadata.cluster.nodes()
                if node >= 0 and node not in nodes:
                    raise InvalidRequestError(f"no node {node} in the cluster's metadata")
                controller = self._metadata.cluster.controller_id
                target = (node if node >= 0 else controller if controller in nodes
                          else random.choice(list(nodes)))
                response = self._conn.call(target, "DescribeConfigs",
                                     wire.describe_configs_request(asked, keys),
                                     deadline.attempt_s())
                results = wire.parse_describe_configs(response)
                for resource, result in results.items():
                    if not isinstance(result, TidelogError):
                        out[ConfigResource(ConfigResourceType(resource[0]), resource[1])] = result
                return _first_final(
                    [r for r in results.values() if isinstance(r, TidelogError)])

            error = call_with_retry(attempt, what="DescribeConfigs", deadline=deadline,
                                    backoff=self._conn.backoff)
            if error is not None:
                raise error
        return {resource: out[resource] for resource in wanted if resource in out}

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Change dynamic configs of topics and nodes through the controller
        (IncrementalAlterConfigs, needs ALTER_CONFIGS on the topic or the cluster); each
        resource's changes commit together, and take effect on the running logs. Raises the
        first failed resource's error (INVALID_CONFIG, INVALID_REQUEST,
        UNKNOWN_TOPIC_OR_PARTITION, ...). Every operation is idempotent, so retries are safe."""
        remaining = {
            ConfigResource(ConfigResourceType(r[0]), str(r[1])): list(ops)
            for r, ops in changes.items()
        }
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> TidelogError | None:
            response = self._conn.controller_call(
                "IncrementalAlterConfigs",
                lambda: wire.incremental_alter_configs_request(
                    remaining, validate_only, int(deadline.attempt_s() * 1000)),
                deadline, state,
            )
            return _raise_retriable(remaining, wire.parse_incremental_alter_configs(response),
                                    state)

        if remaining:
            error = call_with_retry(attempt, what="IncrementalAlterConfigs", deadline=deadline,
                                    backoff=self._conn.backoff)
            if error is not None:
                raise error

    # ---- ACLs ------------------------------------------------------------------------------

    def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None
    ) -> None:
        """Create ACLs through the controller (needs ALTER on the cluster). One that exists
        already succeeds, so a retry after a lost answer is safe. Raises the first binding's
        error, naming the binding (CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, ...).
        Other nodes apply the ACLs shortly after the controller does, as in Kafka."""
        wanted = list(bindings)
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> None:
            response = self._conn.controller_call(
                "CreateAcls", lambda: wire.create_acls_request(wanted), deadline, state
            )
            for error in wire.parse_create_acls(response, wanted):
                if error is not None:
                    state.refresh = isinstance(error, RetriableError)
                    raise error

        if wanted:
            call_with_retry(attempt, what="CreateAcls", deadline=deadline,
                            backoff=self._conn.backoff)

    def describe_acls(
        self, acl_filter: AclBindingFilter = ANY_ACL, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """The ACLs `acl_filter` selects (all by default), as the controller has them;
        needs DESCRIBE on the cluster."""
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> list[AclBinding]:
            response = self._conn.controller_call(
                "DescribeAcls", lambda: wire.describe_acls_request(acl_filter), deadline, state
            )
            return wire.parse_describe_acls(response)

        return call_with_retry(
            attempt, what="DescribeAcls", deadline=deadline, backoff=self._conn.backoff
        )

    def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """Delete every ACL some filter selects, through the controller (needs ALTER on the
        cluster); returns the ACLs deleted. Raises the first filter's error."""
        wanted = list(filters)
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> list[AclBinding]:
            response = self._conn.controller_call(
                "DeleteAcls", lambda: wire.delete_acls_request(wanted), deadline, state
            )
            deleted: dict[AclBinding, None] = {}
            for outcome in wire.parse_delete_acls(response, wanted):
                if isinstance(outcome, TidelogError):
                    state.refresh = isinstance(outcome, RetriableError)
                    raise outcome
                deleted.update(dict.fromkeys(outcome))
            return list(deleted)

        if not wanted:
            return []
        return call_with_retry(attempt, what="DeleteAcls", deadline=deadline,
                               backoff=self._conn.backoff)

    # ---- SCRAM credentials -------------------------------------------------------------------

    def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set or delete users' SCRAM credentials through the controller (Kafka's
        AlterUserScramCredentials; needs ALTER on the cluster): the credentials SASL checks
        on the Kafka listener. Each password is salted here (a fresh random salt) and only
        the salt and the salted password are sent. Raises the first refused user's error
        (UNACCEPTABLE_CREDENTIAL for too few or too many iterations, RESOURCE_NOT_FOUND for
        a deletion of a credential that does not exist, ...); a user with an error has none
        of its changes made."""
        request = pb.AlterUserScramCredentialsRequest()
        for change in alterations:
            try:
                code = mechanism_code(change.mechanism)
            except ValueError as exc:
                raise UnsupportedSaslMechanismError(str(exc)) from None
            if isinstance(change, UserScramCredentialDeletion):
                request.deletions.add(name=change.user, mechanism=code)
                continue
            salt = new_salt()
            request.upsertions.add(
                name=change.user, mechanism=code, iterations=change.iterations, salt=salt,
                salted_password=salted_password(code, change.password, salt, change.iterations)
                if MIN_ITERATIONS <= change.iterations <= MAX_ITERATIONS else b"",
            )
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> None:
            response = self._conn.controller_call(
                "AlterUserScramCredentials", lambda: request, deadline, state
            )
            for result in response.results:
                if result.error_code:
                    error = wire.error_for(result.error_code, result.error_message,
                                           f"user {result.user}")
                    state.refresh = isinstance(error, RetriableError)
                    raise error

        if request.deletions or request.upsertions:
            call_with_retry(attempt, what="AlterUserScramCredentials", deadline=deadline,
                            backoff=self._conn.backoff)

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM mechanisms and iterations (every user with a credential when
        `users` is None); needs DESCRIBE on the cluster. Raises RESOURCE_NOT_FOUND for a
        named user without a credential."""
        request = pb.DescribeUserScramCredentialsRequest(users=list(users or ()))
        deadline = self._conn.deadline(timeout_ms)
        state = Attempts(self._metadata.cluster.version)

        def attempt() -> dict[str, list[ScramCredentialInfo]]:
            response = self._conn.controller_call(
                "DescribeUserScramCredentials", lambda: request, deadline, state
            )
            if response.error_code:
                raise wire.error_for(response.error_code, response.error_message,
                                     "DescribeUserScramCredentials")
            described: dict[str, list[ScramCredentialInfo]] = {}
            for result in response.results:
                if result.error_code:
                    raise wire.error_for(result.error_code, result.error_message,
                                         f"user {result.user}")
                described[result.user] = [
                    ScramCredentialInfo(MECHANISM_NAMES.get(i.mechanism, str(i.mechanism)),
                                        i.iterations)
                    for i in result.credential_infos
                ]
            return described

        return call_with_retry(attempt, what="DescribeUserScramCredentials",
                               deadline=deadline, backoff=self._conn.backoff)

    # ---- records ---------------------------------------------------------------------------

    def delete_records(
        self, records_to_delete: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete each partition's records below its offset (-1: below the high watermark,
        every record a consumer can read), at the partition's leader (Kafka's DeleteRecords;
        needs DELETE on the topic). Returns each partition's low watermark, its new log start
        offset. Raises the first partition's error that a retry cannot cure:
        OFFSET_OUT_OF_RANGE (an offset above the high watermark), POLICY_VIOLATION (a
        compacted topic), UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED, ...; the
        partitions done before it stay done (deleting again is harmless)."""
        wanted: dict[TopicPartition, int] = {}
        for tp, offset in records_to_delete.items():
            if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str)
                    and isinstance(tp[1], int) and tp[1] >= 0):
                raise ConfigurationError(f"expected a TopicPartition(topic, partition), got "
                                         f"{tp!r}")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -1:
                raise ConfigurationError(f"{tp}: the offset must be an int >= 0, or -1 for the "
                                         f"high watermark, got {offset!r}")
            wanted[TopicPartition(*tp)] = offset
        deadline = self._conn.deadline(timeout_ms)
        remaining = dict(wanted)
        done: dict[TopicPartition, int] = {}

        def attempt() -> TidelogError | None:
            self._metadata.refresh(deadline)
            try:
                by_leader = self._leaders(remaining)
            except UnknownTopicOrPartitionError as exc:
                return exc  # in fresh metadata: the answer, as Kafka's admin client says
            if -1 in by_leader:
                raise LeaderNotAvailableError(f"no leader of {by_leader[-1][0]}")
            leaders = list(by_leader)
            answers = self._conn.run(_gather(
                self._conn.transport.call(leader, "DeleteRecords", _delete_records_request(
                    {tp: remaining[tp] for tp in by_leader[leader]}), deadline.attempt_s())
                for leader in leaders))
            retry: TidelogError | None = None
            for answer in answers:
                if isinstance(answer, TidelogError):
                    retry = retry or answer
                    continue
                for t in answer.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition)
                        if not p.error_code:
                            done[tp] = p.low_watermark
                            remaining.pop(tp, None)
                            continue
                        final = _first_final([wire.error_for(p.error_code, p.error_message, tp)])
                        if final is not None:
                            return final
            if remaining:
                raise retry or NotLeaderOrFollowerError(
                    f"{next(iter(remaining))}: its leader did not answer for it")
            return None

        if remaining:
            error = call_with_retry(attempt, what="DeleteRecords", deadline=deadline,
                                    backoff=self._conn.backoff)
            if error is not None:
                raise error
        return {tp: done[tp] for tp in wanted}

    def elect_leaders(
        self, election_type: ElectionType | int | str = ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None, *, timeout_ms: int | None = None,
    ) -> dict[TopicPartition, TidelogError | None]:
        """Make the preferred replica (the first of its replicas) leader of each partition
        (Kafka's ElectLeaders; needs ALTER on the cluster), every partition of the cluster when
        `partitions` is None; returns once each preferred replica leads, with each
        partition's outcome: None when it was elected, else its error, as Kafka's admin client
        gives them: ELECTION_NOT_NEEDED (it led already), PREFERRED_LEADER_NOT_AVAILABLE (it
        is not in sync), UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT. Raft elects leaders
        here, so the request goes to each partition's leader.

        ``UNCLEAN`` is Kafka's election of a replica outside the in-sync set. Raft never elects
        one (a leader is a replica a majority voted for): a partition that has a leader gets
        ELECTION_NOT_NEEDED, as in Kafka, and one without ELIGIBLE_LEADERS_NOT_AVAILABLE."""
        if isinstance(election_type, str):
            try:
                election_type = ElectionType[election_type.strip().upper()]
            except KeyError:
                raise ConfigurationError(f"election type {election_type!r}: PREFERRED or "
                                         "UNCLEAN") from None
        try:
            kind = ElectionType(election_type)
        except ValueError:
            raise ConfigurationError(f"election type {election_type!r}: PREFERRED (0) or "
                                     "UNCLEAN (1)") from None
        deadline = self._conn.deadline(timeout_ms)
        self._metadata.refresh(deadline)
        if partitions is None:
            wanted = [TopicPartition(name, p) for name, info in
                      sorted(self._metadata.cluster.topics().items())
                      for p in range(len(info.partitions))]
        else:
            wanted = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        remaining = set(wanted)
        outcomes: dict[TopicPartition, TidelogError | None] = {}
        again = False

        def attempt() -> None:
            nonlocal again
            if again:  # a leader moved or a node did not answer: where are they now?
                self._metadata.refresh(deadline)
            again = True
            by_node: dict[int, list[TopicPartition]] = {}
            nodes = sorted(self._metadata.cluster.nodes())
            for tp in sorted(remaining):
                topic = self._metadata.cluster.topic(tp.topic)
                if topic is None or not 0 <= tp.partition < len(topic.partitions):
                    outcomes[tp] = UnknownTopicOrPartitionError(f"{tp} does not exist")
                    remaining.discard(tp)
                    continue
                # A partition without a leader goes to any node, which answers for it.
                leader = topic.partitions[tp.partition].leader
                by_node.setdefault(leader if leader >= 0 else nodes[0], []).append(tp)
            asked = list(by_node)
            # The node waits up to the request's timeout; the call leaves it room to answer.
            wait_ms = max(1, int(deadline.attempt_s() * 800))
            answers = self._conn.run(_gather(
                self._conn.transport.call(node, "ElectLeaders", pb.ElectLeadersRequest(
                    election_type=kind, timeout_ms=wait_ms, topic_partitions=[
                        pb.TopicPartitions(topic=t, partitions=[
                            tp.partition for tp in by_node[node] if tp.topic == t])
                        for t in dict.fromkeys(tp.topic for tp in by_node[node])]),
                    deadline.attempt_s())
                for node in asked))
            retry: TidelogError | None = None
            for answer in answers:
                if isinstance(answer, TidelogError):
                    retry = retry or answer
                    continue
                if answer.error_code:
                    raise wire.error_for(answer.error_code, answer.error_message,
                                         "ElectLeaders")
                for t in answer.replica_election_results:
                    for p in t.partition_result:
                        tp = TopicPartition(t.topic, p.partition_id)
                        error = (wire.error_for(p.error_code, p.error_message, tp)
                                 if p.error_code else None)
                        if isinstance(error, _ELECTION_RETRIED):
                            retry = retry or error
                            continue
                        outcomes[tp] = error
                        remaining.discard(tp)
            if remaining:
                raise retry or NotLeaderOrFollowerError(
                    f"{min(remaining)}: no node answered for it")

        if remaining:
            call_with_retry(attempt, what="ElectLeaders", deadline=deadline,
                            backoff=self._conn.backoff)
        return {tp: outcomes[tp] for tp in wanted}

    def describe_log_dirs(
        self, node_ids: Iterable[int] | None = None, topics: Iterable[str] | None = None, *,
        timeout_ms: int | None = None,
    ) -> dict[int, dict[str, LogDirDescription]]:
        """Each node's log directories by path, with the size of each replica there (Kafka's
        DescribeLogDirs, asked of every node given, all those in metadata by default; needs
        DESCRIBE on the cluster); `topics` keeps only those topics' replicas. A node that does
        not answer is waited for until the deadline, as Kafka's admin client does."""
        if isinstance(topics, str):
            raise ConfigurationError("describe_log_dirs takes a list of topics")
        deadline = self._conn.deadline(timeout_ms)
        request = pb.DescribeLogDirsRequest(
            topics=[pb.TopicPartitions(topic=t) for t in dict.fromkeys(topics or ())])
        self._metadata.ensure(deadline)
        wanted = sorted(self._metadata.cluster.nodes() if node_ids is None
                        else dict.fromkeys(node_ids))
        found: dict[int, dict[str, LogDirDescription]] = {}

        def attempt() -> None:
            asked = [n for n in wanted if n not in found]
            for node_id in asked:
                if self._metadata.cluster.address_of(node_id) is None:
                    raise InvalidRequestError(f"no node {node_id} in the cluster's metadata")
            answers = self._conn.run(_gather(
                self._conn.transport.call(node_id, "DescribeLogDirs", request,
                                          deadline.attempt_s()) for node_id in asked))
            for node_id, answer in zip(asked, answers, strict=True):
                if isinstance(answer, TidelogError):
                    raise answer
                if answer.error_code:
                    raise wire.error_for(answer.error_code, answer.error_message,
                                         f"DescribeLogDirs on node {node_id}")
                found[node_id] = {
                    d.log_dir: LogDirDescription(
                        for_code(d.error_code)(f"log directory {d.log_dir} of node {node_id}")
                        if d.error_code else None,
                        {TopicPartition(t.name, p.partition): ReplicaInfo(p.size, p.offset_lag)
                         for t in d.topics for p in t.partitions},
                        d.total_bytes, d.usable_bytes)
                    for d in answer.results}

        call_with_retry(attempt, what="DescribeLogDirs", deadline=deadline,
                        backoff=self._conn.backoff)
        return {node_id: found[node_id] for node_id in wanted}

    # ---- offsets ---------------------------------------------------------------------------

    def legacy_offsets_before(
        self,
        tp: TopicPartition,
        time_ms: int,
        max_num_offsets: int,
        *,
        timeout_ms: int | None = None,
    ) -> list[int]:
        """The v0 lookup (contract §6): segment base offsets and the LEO, descending, of segments
        last modified before `time_ms` (-1 latest, -2 earliest)."""
        if max_num_offsets < 1:
            raise ConfigurationError(f"max_num_offsets must be >= 1, got {max_num_offsets}")
        if time_ms < EARLIEST_TIMESTAMP:
            raise ConfigurationError(f"time_ms must be -2, -1 or >= 0, got {time_ms}")
        tp = TopicPartition(*tp)
        answers = lookup_offsets(
            self._conn, "legacy ListOffsets", {tp: time_ms}, max_num_offsets,
            IsolationLevel.READ_UNCOMMITTED, CONSUMER_REPLICA_ID, self._conn.deadline(timeout_ms),
        )
        return list(answers[tp].old_style_offsets)

    # ---- consumer groups ---------------------------------------------------------------------

    def find_coordinator(self, group_id: str, *, timeout_ms: int | None = None) -> int:
        """The node id of the group's coordinator (the leader of the group's partition of
        __consumer_offsets), asked afresh; later offset calls for the group go straight to it."""
        deadline = self._conn.deadline(timeout_ms)
        return self._conn.run(self._conn.coordinators.find(check_group_id(group_id), deadline))

    def list_consumer_groups(self, *, timeout_ms: int | None = None) -> list[GroupListing]:
        """Every group with committed offsets (or members), sorted by id: ListGroups on every
        node, merged, as Kafka's admin does. A node that does not answer is only waited for
        while it may be a coordinator: while it leads a partition of __consumer_offsets in
        fresh metadata, or some partition has no leader yet."""
        deadline = self._conn.deadline(timeout_ms)

        def attempt() -> list[GroupListing]:
            self._metadata.refresh(deadline)
            nodes = sorted(self._metadata.cluster.nodes())
            answers = self._conn.run(_gather(
                self._list_groups_on(node_id, deadline.attempt_s()) for node_id in nodes
            ))
            found: dict[str, GroupListing] = {}
            failed: dict[int, TidelogError] = {}
            for node_id, answer in zip(nodes, answers, strict=True):
                if isinstance(answer, TidelogError):
                    failed[node_id] = answer
                else:
                    found.update((g.group_id, g) for g in answer)
            offsets = self._metadata.cluster.topic(CONSUMER_OFFSETS_TOPIC)
            leaders = {p.leader for p in offsets.partitions} if offsets is not None else set()
            final = [e for e in failed.values() if not isinstance(e, RetriableError)]
            if final:
                raise final[0]
            if -1 in leaders:
                raise LeaderNotAvailableError(
                    f"a partition of {CONSUMER_OFFSETS_TOPIC} has no leader"
                )
            waited = {n: e for n, e in failed.items() if n in leaders}
            if waited:
                raise NodeUnavailableError("; ".join(str(e) for e in waited.values()))
            return [found[g] for g in sorted(found)]

        return call_with_retry(attempt, what="ListGroups", deadline=deadline,
                               backoff=self._conn.backoff)

    async def _list_groups_on(self, node_id: int, timeout_s: float) -> list[GroupListing]:
        response = await self._conn.transport.call(
            node_id, "ListGroups", wire.list_groups_request(), timeout_s
        )
        return wire.parse_list_groups(response, node_id)

    def describe_consumer_group(
        self, group_id: str, *, timeout_ms: int | None = None
    ) -> ConsumerGroupDescription:
        """A consumer group's state, epochs, assignor and members with their assignments
        (ConsumerGroupDescribe at its coordinator); GROUP_ID_NOT_FOUND when the group has no
        members' records (a group that only commits offsets)."""
        group_id = check_group_id(group_id)
        return self._conn.run(self._conn.coordinators.call(
            group_id, "ConsumerGroupDescribe", describe_request(group_id),
            lambda response: parse_describe(response, group_id), self._conn.deadline(timeout_ms),
        ))

    def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets: of every partition it committed (None), or of the
        given partitions that have one."""
        deadline = self._conn.deadline(timeout_ms)
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        found = self._conn.run(
            self._conn.coordinators.fetch(check_group_id(group_id), wanted, deadline))
        return {tp: value for tp, value in sorted(found.items()) if value is not None}

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit `offsets` for the group, all or none (contract §8); raises the first
        partition's error (OFFSET_METADATA_TOO_LARGE for that partition while the others
        commit, as Kafka)."""
        deadline = self._conn.deadline(timeout_ms)
        self._conn.run(self._conn.coordinators.commit(
            check_group_id(group_id), checked_offsets(offsets), deadline))

    def delete_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete the groups and their committed offsets, each at its coordinator, all in
        flight together. Every group is tried; the first failure (in the given order) is
        raised, e.g. GROUP_ID_NOT_FOUND, and names its group."""
        if isinstance(group_ids, str):
            raise ConfigurationError("delete_consumer_groups takes a list of group ids")
        groups = list(dict.fromkeys(check_group_id(g) for g in group_ids))
        deadline = self._conn.deadline(timeout_ms)
        outcomes = self._conn.run(_gather(
            self._conn.coordinators.delete_group(g, deadline) for g in groups
        ))
        for outcome in outcomes:
            if isinstance(outcome, TidelogError):
                raise outcome

    def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, TidelogError]:
        """Delete the group's committed offsets of `partitions` (Kafka's OffsetDelete, at the
        group's coordinator; needs DELETE on the group and READ on each topic). Returns the
        partitions that failed with their errors (UNKNOWN_TOPIC_OR_PARTITION,
        TOPIC_AUTHORIZATION_FAILED, ...); an error of the group as a whole is raised
        (GROUP_ID_NOT_FOUND for a group with no committed offsets)."""
        group_id = check_group_id(group_id)
        wanted = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        if not wanted:
            return {}
        request = pb.OffsetDeleteRequest(group_id=group_id)
        for topic in dict.fromkeys(tp.topic for tp in wanted):
            request.topics.add(name=topic,
                               partitions=[tp.partition for tp in wanted if tp.topic == topic])

        def parse(response: pb.OffsetDeleteResponse) -> dict[TopicPartition, TidelogError]:
            if response.error_code:
                raise wire.error_for(response.error_code, response.error_message,
                                     f"group {group_id!r}")
            return {tp: error for tp, error in wire.parse_offset_commit(response).items()
                    if error is not None}

        return self._conn.run(self._conn.coordinators.call(
            group_id, "OffsetDelete", request, parse, self._conn.deadline(timeout_ms)))

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec | int],
        isolation_level: IsolationLevel | str | int = IsolationLevel.READ_UNCOMMITTED,
        replica_id: int = CONSUMER_REPLICA_ID,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """ListOffsets per contract §6; "nothing found" is ListOffsetsResult(-1, -1, -1)."""
        return list_offsets(self._conn, specs, isolation_level, self._conn.deadline(timeout_ms),
                            replica_id)

    # ---- transactions (KIP-664) ------------------------------------------------------------

    def list_transactions(
        self, *, states: Sequence[str] = (), producer_ids: Sequence[int] = (),
        timeout_ms: int | None = None,
    ) -> list[TransactionListing]:
        """Every transactional id the coordinators hold (ListTransactions on every node, each
        answering the ids it coordinates, merged)."""
        deadline = self._conn.deadline(timeout_ms)
        request = pb.ListTransactionsRequest(state_filters=list(states),
                                             producer_id_filters=list(producer_ids))

        def attempt() -> list[TransactionListing]:
            self._metadata.refresh(deadline)
            found: dict[str, TransactionListing] = {}
            for node_id in sorted(self._metadata.cluster.nodes()):
                response = self._conn.call(node_id, "ListTransactions", request,
                                           deadline.attempt_s())
                if response.error_code:
                    raise _error(response.error_code, response.error_message)
                for t in response.transactions:
                    found[t.transactional_id] = TransactionListing(
                        t.transactional_id, t.producer_id, t.transaction_state
                    )
            return [found[t] for t in sorted(found)]

        return call_with_retry(attempt, what="ListTransactions", deadline=deadline,
                               backoff=self._conn.backoff)

    def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TransactionDescription]:
        """Each id's state at its coordinator (every node is asked; the one that coordinates
        the id answers); raises TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows, or
        the first other error."""
        deadline = self._conn.deadline(timeout_ms)
        ids = list(dict.fromkeys(transactional_ids))
        request = pb.DescribeTransactionsRequest(transactional_ids=ids)

        def attempt() -> dict[str, TransactionDescription]:
            self._metadata.refresh(deadline)
            found: dict[str, TransactionDescription] = {}
            errors: dict[str, TidelogError] = {}
            for node_id in sorted(self._metadata.cluster.nodes()):
                response = self._conn.call(node_id, "DescribeTransactions", request,
                                           deadline.attempt_s())
                for s in response.transaction_states:
                    if s.error_code == 0:
                        found[s.transactional_id] = TransactionDescription(
                            s.transactional_id, s.transaction_state, s.producer_id,
                            s.producer_epoch, s.transaction_timeout_ms,
                            s.transaction_start_time_ms,
                            tuple(TopicPartition(t.topic, p)
                                  for t in s.topics for p in t.partitions),
                        )
                    elif s.error_code != NotCoordinatorError.code:
                        errors[s.transactional_id] = _error(s.error_code, s.error_message)
            for txn_id in [i for i in ids if i not in found]:
                error = errors.get(txn_id)
                if error is None:  # no node coordinates it: its coordinator is moving
                    raise NotCoordinatorError(
                        f"no node answered for transactional id {txn_id!r}")
                raise error
            return found

        return call_with_retry(attempt, what="DescribeTransactions", deadline=deadline,
                               backoff=self._conn.backoff)

    def _leaders(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            topic = self._metadata.cluster.topic(tp.topic)
            if topic is None or not 0 <= tp.partition < len(topic.partitions):
                raise UnknownTopicOrPartitionError(f"{tp} does not exist")
            by_leader.setdefault(topic.partitions[tp.partition].leader, []).append(tp)
        return by_leader

    def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, list[ProducerInfo]]:
        """The producers, and their open transactions, each partition's leader knows of."""
        deadline = self._conn.deadline(timeout_ms)
        wanted = list(dict.fromkeys(partitions))

        def attempt() -> dict[TopicPartition, list[ProducerInfo]]:
            self._metadata.refresh(deadline)
            found: dict[TopicPartition, list[ProducerInfo]] = {}
            for leader, tps in self._leaders(wanted).items():
                if leader < 0:
                    raise LeaderNotAvailableError(f"no leader of {tps[0]}")
                request = pb.DescribeProducersRequest()
                for tp in tps:
                    request.topics.add(topic=tp.topic, partitions=[tp.partition])
                response = self._conn.call(leader, "DescribeProducers", request,
                                           deadline.attempt_s())
                for part in response.partitions:
                    if part.error_code:
                        raise _error(part.error_code, part.error_message)
                    found[TopicPartition(part.topic, part.partition)] = [
                        ProducerInfo(p.producer_id, p.producer_epoch, p.last_sequence,
                                     p.coordinator_epoch, p.current_txn_start_offset,
                                     p.current_txn_start_time_ms)
                        for p in part.producers
                    ]
            return found

        return call_with_retry(attempt, what="DescribeProducers", deadline=deadline,
                               backoff=self._conn.backoff)

    def abort_transaction(
        self, partition: TopicPartition, producer_id: int, producer_epoch: int,
        coordinator_epoch: int, *, timeout_ms: int | None = None,
    ) -> None:
        """An ABORT marker for a producer's open (hanging) transaction on the partition,
        written by its leader (raises its error: INVALID_PRODUCER_EPOCH for an epoch older
        than the producer's, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older
        than the last marker's)."""
        deadline = self._conn.deadline(timeout_ms)
        request = pb.AbortTransactionRequest(
            topic=partition.topic, partition=partition.partition, producer_id=producer_id,
            producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
        )

        def attempt() -> None:
            self._metadata.refresh(deadline)
            [(leader, _)] = self._leaders([partition]).items()
            if leader < 0:
                raise LeaderNotAvailableError(f"no leader of {partition}")
            response = self._conn.call(leader, "AbortTransaction", request, deadline.attempt_s())
            if response.error_code:
                raise _error(response.error_code, response.error_message)

        call_with_retry(attempt, what="AbortTransaction", deadline=deadline,
                        backoff=self._conn.backoff)


def _delete_records_request(offsets: Mapping[TopicPartition, int]) -> pb.DeleteRecordsRequest:
    request = pb.DeleteRecordsRequest()
    for topic in dict.fromkeys(tp.topic for tp in offsets):
        request.topics.add(name=topic, partitions=[
            pb.DeleteRecordsPartition(partition=tp.partition, offset=offset)
            for tp, offset in offsets.items() if tp.topic == topic])
    return request


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _checked_topic(name: object) -> str:
    if type(name) is not str or not name:
        raise ConfigurationError(f"a topic name is a non-empty str, got {name!r:.80}")
    return name


def _checked_configs(topic: str, config: object) -> dict[str, str]:
    """A topic's configs as the wire carries them, strings; a bool is written as Kafka
    spells it ("true")."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            f"topic {topic!r}: configs are a mapping of name to value, got {config!r:.80}"
        )
    out: dict[str, str] = {}
    for key, value in config.items():
        if type(key) is not str or not key:
            raise ConfigurationError(f"topic {topic!r}: a config name is a str, got {key!r:.80}")
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[key] = str(value)
        else:
            raise ConfigurationError(
                f"topic {topic!r}: config {key} must be a str or a number, got {value!r:.80}"
            )
    return out


def _error(code: int, message: str) -> TidelogError:
    return for_code(code)(message)


async def _gather(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T | TidelogError]:
    """Run the coroutines together; each one's result or Tidelog error, in order."""
    outcomes = await asyncio.gather(*coros, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, TidelogError):
            raise outcome
    return outcomes  # type: ignore[return-value]  # checked above


def _first_final(errors: Sequence[TidelogError]) -> TidelogError | None:
    """The first error of an admin answer's resources: raised when retriable (to try again),
    returned when it is the answer. UNKNOWN_TOPIC_OR_PARTITION of a topic an admin request
    names is the answer, not stale metadata (Kafka's admin client fails the topic at once)."""
    if not errors:
        return None
    error = errors[0]
    if isinstance(error, RetriableError) and not isinstance(error, UnknownTopicOrPartitionError):
        raise error
    return error


def _raise_retriable(
    remaining: dict[Any, Any], failed: Mapping[Any, TidelogError], state: Attempts
) -> TidelogError | None:
    """Per-resource answers of an admin change: forget the resources done, raise the first
    retriable error (to try the failed ones again), return the first final one."""
    for key in [k for k in remaining if k not in failed]:
        del remaining[key]
    state.refresh = True  # only read when _first_final raises: the next attempt refreshes
    return _first_final(list(failed.values()))
