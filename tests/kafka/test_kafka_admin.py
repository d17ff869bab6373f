"""Kafka's admin APIs over the Kafka listeners of a 2-node cluster (two, so that a partition can
be reassigned), driven by the real admin
clients: confluent-kafka's AdminClient and kafka-python's KafkaAdminClient create topics (with
configs, validate_only), grow them, describe every config with its source, alter configs
incrementally and whole, delete records, list and alter reassignments, describe the cluster
and delete topics; bad input gets Kafka's error codes from Tidelog's handlers."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import TopicPartition as KafkaPythonPartition
from kafka import errors as kafka_errors
from kafka.admin import ConfigResource as KafkaPythonResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KafkaPythonPartitions
from kafka.admin import NewTopic as KafkaPythonTopic
from kafka_wire import ask, connect, frame_of, read_answer
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from tidelog.client import Client
from tidelog.storage import LogConfig
from tidelog.testing import wait_for
from tidelog.types import OffsetSpec, TopicPartition

pytestmark = pytest.mark.timeout(180)

CLIENT_TIMEOUT_S = 20.0
TOPIC_KEYS = LogConfig.property_names()


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 2}


@pytest.fixture(scope="module")
def admin(cluster: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap, "log_level": 0,
                        "socket.timeout.ms": int(CLIENT_TIMEOUT_S * 1000)})


@pytest.fixture(scope="module")
def kp_admin(cluster: Any) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap,
                              request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        yield client
    finally:
        client.close()


def _error(future: Future[Any]) -> int:
    """The Kafka error code `future` failed with (0: it succeeded)."""
    try:
        future.result(timeout=CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def _outcomes(futures: dict[Any, Future[Any]]) -> dict[Any, int]:
    return {key: _error(future) for key, future in futures.items()}


def _partitions(admin: AdminClient, topic: str) -> int | None:
    listed = admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics.get(topic)
    return None if listed is None or listed.error is not None else len(listed.partitions)


def _topic_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs([ConfigResource("TOPIC", topic)]).values()
    described: dict[str, ConfigEntry] = future.result(timeout=CLIENT_TIMEOUT_S)
    return described


def test_confluent_creates_grows_and_deletes_topics(admin: AdminClient) -> None:
    created = admin.create_topics([
        NewTopic("kt-orders", 3, 1, config={"retention.ms": "3600000"}),
        NewTopic("kt-checked", 2, 1),
    ], validate_only=False)
    assert _outcomes(created) == {"kt-orders": 0, "kt-checked": 0}
    checked = admin.create_topics([NewTopic("kt-dry", 2, 1)], validate_only=True)
    assert _outcomes(checked) == {"kt-dry": 0}
    assert _partitions(admin, "kt-orders") == 3
    assert _partitions(admin, "kt-dry") is None  # validate_only created nothing
    refused = admin.create_topics([
        NewTopic("kt-orders", 1, 1),
        NewTopic("kt-factor", 1, 3),
        NewTopic("kt-value", 1, 1, config={"retention.ms": "soon"}),
        NewTopic("kt-name", 1, 1, config={"no.such.config": "1"}),
        NewTopic("bad/name", 1, 1),
    ])
    assert _outcomes(refused) == {
        "kt-orders": KafkaError.TOPIC_ALREADY_EXISTS,
        "kt-factor": KafkaError.INVALID_REPLICATION_FACTOR,
        "kt-value": KafkaError.INVALID_CONFIG,
        "kt-name": KafkaError.INVALID_CONFIG,
        "bad/name": KafkaError.TOPIC_EXCEPTION,
    }

    grown = admin.create_partitions([NewPartitions("kt-orders", 5)])
    assert _outcomes(grown) == {"kt-orders": 0}
    dry = admin.create_partitions([NewPartitions("kt-orders", 8)], validate_only=True)
    assert _outcomes(dry) == {"kt-orders": 0}
    assert _partitions(admin, "kt-orders") == 5
    wrong = admin.create_partitions([NewPartitions("kt-checked", 1),
                                     NewPartitions("kt-nowhere", 4)])
    assert _outcomes(wrong) == {"kt-checked": KafkaError.INVALID_PARTITIONS,
                                "kt-nowhere": KafkaError.UNKNOWN_TOPIC_OR_PART}

    deleted = admin.delete_topics(["kt-checked", "kt-nowhere"])
    assert _outcomes(deleted) == {"kt-checked": 0,
                                  "kt-nowhere": KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert _partitions(admin, "kt-checked") is None


def test_confluent_describes_every_config_with_its_source(
    cluster: Any, admin: AdminClient
) -> None:
    assert _outcomes(admin.create_topics(
        [NewTopic("kt-described", 1, 1, config={"retention.ms": "7200000"})]
    )) == {"kt-described": 0}
    configs = _topic_configs(admin, "kt-described")
    assert set(configs) == TOPIC_KEYS  # every config, the defaults included
    own = configs["retention.ms"]
    assert (own.value, own.source) == ("7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    built_in = LogConfig().to_kafka_props()
    for name, entry in configs.items():
        if name != "retention.ms":
            assert entry.source == ConfigSource.DEFAULT_CONFIG.value, name
            assert entry.value == built_in.get(name), name
    [node] = admin.describe_configs([ConfigResource("BROKER", "1")]).values()
    node_configs = node.result(timeout=CLIENT_TIMEOUT_S)
    assert set(node_configs) >= TOPIC_KEYS
    assert node_configs["listen"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert node_configs["listen"].is_read_only
    [missing] = admin.describe_configs([ConfigResource("TOPIC", "kt-nowhere")]).values()
    assert _error(missing) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_alters_configs_incrementally_and_whole(admin: AdminClient) -> None:
    assert _outcomes(admin.create_topics([NewTopic("kt-altered", 1, 1)])) == {"kt-altered": 0}

    def incremental(*entries: ConfigEntry, validate_only: bool = False) -> int:
        [future] = admin.incremental_alter_configs(
            [ConfigResource("TOPIC", "kt-altered", incremental_configs=list(entries))],
            validate_only=validate_only,
        ).values()
        return _error(future)

    assert incremental(
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ) == 0
    configs = _topic_configs(admin, "kt-altered")
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert set(configs["cleanup.policy"].value.split(",")) == {"delete", "compact"}
    assert incremental(
        ConfigEntry("segment.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        validate_only=True,
    ) == 0
    assert _topic_configs(admin, "kt-altered")["segment.ms"].source == (
        ConfigSource.DEFAULT_CONFIG.value)
    assert incremental(ConfigEntry(
        "retention.ms", "soon", incremental_operation=AlterConfigOpType.SET
    )) == KafkaError.INVALID_CONFIG
    assert incremental(ConfigEntry(
        "no.such.config", "1", incremental_operation=AlterConfigOpType.SET
    )) == KafkaError.INVALID_CONFIG

    # AlterConfigs replaces the whole set: what it does not name goes back to its default.
    [whole] = admin.alter_configs(
        [ConfigResource("TOPIC", "kt-altered", set_config={"segment.ms": "120000"})]
    ).values()
    assert _error(whole) == 0
    configs = _topic_configs(admin, "kt-altered")
    assert (configs["segment.ms"].value, configs["segment.ms"].source) == (
        "120000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    [unknown] = admin.alter_configs(
        [ConfigResource("TOPIC", "kt-nowhere", set_config={"segment.ms": "120000"})]
    ).values()
    assert _error(unknown) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_deletes_records_and_describes_the_cluster(
    cluster: Any, admin: AdminClient
) -> None:
    assert _outcomes(admin.create_topics([NewTopic("kt-records", 1, 1)])) == {"kt-records": 0}
    with Client(cluster.bootstrap) as client:
        producer = client.producer()
        try:
            for i in range(10):
                producer.send("kt-records", value=b"%d" % i, partition=0)
            producer.flush(timeout=CLIENT_TIMEOUT_S)
        finally:
            producer.close(timeout=CLIENT_TIMEOUT_S)

        def delete_records() -> Any:
            """DeleteRecords' answer, or None (after asking for the topic's metadata again)
            while librdkafka fails it at once with "No leaders found": it does so while its
            cached metadata names no leader, as with Kafka while a broker that has not yet
            learned a new topic answers it unknown, so a Kafka user refreshes and retries."""
            [future] = admin.delete_records([ConfluentPartition("kt-records", 0, 4)]).values()
            try:
                return future.result(timeout=CLIENT_TIMEOUT_S)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NOENT:
                    raise
            admin.list_topics("kt-records", timeout=CLIENT_TIMEOUT_S)
            return None

        deleted = wait_for(delete_records, CLIENT_TIMEOUT_S, "DeleteRecords to find the leader")
        assert deleted.low_watermark == 4
        tp = TopicPartition("kt-records", 0)
        assert client.list_offsets({tp: OffsetSpec.earliest()})[tp].offset == 4
    [beyond] = admin.delete_records([ConfluentPartition("kt-records", 0, 99)]).values()
    assert _error(beyond) == KafkaError.OFFSET_OUT_OF_RANGE

    described = admin.describe_cluster().result(timeout=CLIENT_TIMEOUT_S)
    assert sorted((n.id, f"{n.host}:{n.port}") for n in described.nodes) == [
        (n, cluster.kafka_address_of(n)) for n in cluster.node_ids]
    assert described.controller.id in cluster.node_ids
    assert described.cluster_id is not None and len(described.cluster_id) == 22
    controllers = ask(cluster.kafka_address_of(1), DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=2))
    assert controllers.error_code == ErrorCode.unsupported_endpoint_type


def _partition_states(address: str, topic: str, until: threading.Event) -> list[tuple[int, int]]:
    """Every (leader, leader epoch) the node at `address` answers for `topic`'s partitions, asked
    again and again on one connection until `until` is set or the node names every leader."""
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    with connect(address) as sock:
        while not until.is_set() and time.monotonic() < deadline:
            sock.sendall(frame_of(request, 1))
            [answer] = read_answer(sock, request.__api_key__, request.__version__)[1].topics
            states = [(p.leader_id, p.leader_epoch) for p in answer.partitions]
            seen.extend(states)
            if states and all(leader >= 0 for leader, _ in states):
                break
    return seen


def test_a_new_partition_is_never_answered_at_leader_epoch_minus_one(
    cluster: Any, admin: AdminClient
) -> None:
    """A node that knows a new topic but not yet its partitions' first leaders (the node without
    the replica learns it a moment later) answers them leaderless at epoch 0, never -1: Kafka
    never answers -1 for a partition it knows, and librdkafka takes -1 as "no epoch", which
    replaces any leader it cached, so such an answer arriving after another node named the
    leader made confluent-kafka's DeleteRecords fail at once with "No leaders found"."""
    stop = threading.Event()
    seen: dict[int, list[tuple[int, int]]] = {}

    def ask_node(node_id: int) -> None:
        seen[node_id] = _partition_states(cluster.kafka_address_of(node_id), "kt-epochs", stop)

    askers = [threading.Thread(target=ask_node, args=(n,)) for n in cluster.node_ids]
    for asker in askers:
        asker.start()
    created: dict[Any, int] = {}
    try:  # two partitions: each node is, for one of them, the node that learns its leader late
        created = _outcomes(admin.create_topics([NewTopic("kt-epochs", 2, 1)]))
    finally:
        if created != {"kt-epochs": 0}:
            stop.set()
        for asker in askers:
            asker.join(timeout=CLIENT_TIMEOUT_S + 5)
    assert created == {"kt-epochs": 0}
    assert sorted(seen) == cluster.node_ids
    for node_id, states in seen.items():
        assert states and states[-1][0] >= 0, f"node {node_id} never named a leader: {states}"
        assert min(epoch for _, epoch in states) >= 0, f"node {node_id} answered {set(states)}"


def test_acl_requests_without_an_authorizer_are_security_disabled(admin: AdminClient) -> None:
    binding = AclBinding(ResourceType.TOPIC, "kt-any", ResourcePatternType.LITERAL,
                         "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    [created] = admin.create_acls([binding]).values()
    assert _error(created) == KafkaError.SECURITY_DISABLED


def _replicas(admin: KafkaAdminClient, topic: str, partition: int) -> list[tuple[int, list[int]]]:
    """[(leader, replicas)] of the partition, as kafka-python's admin sees them."""
    [described] = admin.describe_topics([topic])
    return [(p["leader_id"], p["replica_nodes"]) for p in described["partitions"]
            if p["partition_index"] == partition]


def test_kafka_python_admin(kp_admin: KafkaAdminClient) -> None:
    """kafka-python's admin adds the reassignment APIs, manual replica assignments (which
    confluent-kafka refuses itself), deleting a topic by its id (DeleteTopics v6) and its
    own request versions."""
    created = kp_admin.create_topics(
        [KafkaPythonTopic("kt-kp", 2, 1, topic_configs={"retention.ms": "5000000"})]
    )
    [result] = created["topics"]
    assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (
        0, 2, 1)
    topic_id = uuid.UUID(result["topic_id"])
    placed = kp_admin.create_topics(
        [KafkaPythonTopic("kt-placed", -1, -1, replica_assignments={0: [1]})],
        raise_errors=False,
    )
    assert placed["topics"][0]["error_code"] == ErrorCode.invalid_replica_assignment
    dry = kp_admin.create_topics([KafkaPythonTopic("kt-kp-dry", 2, 1)], validate_only=True)
    assert dry["topics"][0]["error_code"] == 0

    def configs() -> dict[str, Any]:
        described = kp_admin.describe_configs(
            [KafkaPythonResource(ConfigResourceType.TOPIC, "kt-kp")], config_filter="all",
            include_synonyms=True,
        )
        entries: dict[str, Any] = described["topic"]["kt-kp"]
        return entries

    entries = configs()
    assert set(entries) == TOPIC_KEYS
    assert entries["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert entries["segment.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert len(entries["retention.ms"]["synonyms"]) == 1  # itself
    # Kafka's types of the topic configs: every topic config has one.
    assert entries["retention.ms"]["config_type"] == "LONG"
    assert entries["cleanup.policy"]["config_type"] == "LIST"
    assert not [name for name, e in entries.items() if e["config_type"] == "UNKNOWN"]
    assert kp_admin.alter_configs([KafkaPythonResource(
        ConfigResourceType.TOPIC, "kt-kp", configs={"segment.ms": "90000"})],
        incremental=False) == {
        "topic": {"kt-kp": "OK"}}
    entries = configs()
    assert entries["segment.ms"]["value"] == "90000"
    # kafka-python sends the resource's other dynamic configs along with AlterConfigs.
    assert entries["retention.ms"]["value"] == "5000000"
    grown = kp_admin.create_partitions({"kt-kp": KafkaPythonPartitions(3)})
    assert [(r.name, r.error_code) for r in grown.results] == [("kt-kp", 0)]

    tp = KafkaPythonPartition("kt-kp", 0)
    # kafka-python sends DeleteRecords to the leader its cached metadata names, -1 if none
    # yet, and a describe does not refresh that cache: the leader is named to it.
    def led_by() -> int | None:
        leader = _replicas(kp_admin, "kt-kp", 0)[0][0]
        return leader if leader >= 0 else None

    leader = wait_for(led_by, CLIENT_TIMEOUT_S, "the partition's leader")
    assert kp_admin.delete_records({tp: 0}, partition_leader_id=leader)[tp]["error_code"] == 0
    assert kp_admin.alter_partition_reassignments({tp: [9]}) == {
        tp: kafka_errors.InvalidReplicationAssignmentError}
    assert kp_admin.alter_partition_reassignments({tp: None}) == {
        tp: kafka_errors.NoReassignmentInProgressError}
    [(_, replicas)] = _replicas(kp_admin, "kt-kp", 0)
    target = [next(n for n in (1, 2) if n not in replicas)]
    assert kp_admin.alter_partition_reassignments({tp: target}) == {tp: None}
    wait_for(lambda: kp_admin.list_partition_reassignments() == {}
             and _replicas(kp_admin, "kt-kp", 0) == [(target[0], target)],
             CLIENT_TIMEOUT_S, "the partition to move, with its leader, and its reassignment "
             "to end")

    def deleted_by_id() -> bool:
        """Whether the topic was deleted by its id; False while the controller still commits
        the reassignment's last change to it (CONCURRENT_TRANSACTIONS, retriable)."""
        [gone] = kp_admin.delete_topics([topic_id], raise_errors=False)["topics"]
        if gone["error_code"] == ErrorCode.concurrent_transactions:
            return False
        assert (gone["name"], gone["error_code"]) == ("kt-kp", 0)
        return True

    wait_for(deleted_by_id, CLIENT_TIMEOUT_S, "the topic's deletion by its id")
    [unknown] = kp_admin.delete_topics([uuid.uuid4()], raise_errors=False)["topics"]
    assert (unknown["name"], unknown["error_code"]) == (None, ErrorCode.unknown_topic_id)
