"""Real Kafka clients (kafka-python, confluent-kafka) against the Kafka listeners of a 3-node
cluster: each sees every node at its Kafka address, and a topic created through Tidelog's own
client with its partitions, leaders, replicas and in-sync replicas; Metadata's versions,
topic ids and unknown topics, from every node."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ClusterMetadata
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient
from kafka_wire import ask
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v0.request import MetadataRequest as MetadataV0
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as TopicV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.metadata.v12.request import MetadataRequestTopic as TopicV12

from tidelog.client import Client
from tidelog.node.kafka.metadata import topic_uuid
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(180)

TOPIC = "orders"
PARTITIONS = 3
CLIENT_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 3}


@pytest.fixture(scope="module")
def topic(cluster: LocalCluster) -> Iterator[dict[int, tuple[int, tuple[int, ...]]]]:
    """The topic, created through Tidelog's client, once every partition has a leader and all
    three replicas in sync: partition -> (leader, replicas) as Tidelog's client sees them."""
    with Client(cluster.bootstrap) as client:
        client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)

        def settled() -> dict[int, tuple[int, tuple[int, ...]]] | None:
            info = client.describe_topics([TOPIC])[TOPIC]
            if len(info.partitions) != PARTITIONS or any(
                p.leader < 0 or len(p.isr) != 3 for p in info.partitions
            ):
                return None
            return {i: (p.leader, tuple(p.replicas)) for i, p in enumerate(info.partitions)}

        yield wait_for(settled, CLIENT_TIMEOUT_S, "the topic's leaders and in-sync replicas")


def _brokers(cluster: LocalCluster) -> dict[int, str]:
    return {n: cluster.kafka_address_of(n) for n in cluster.node_ids}


def test_confluent_kafka_lists_the_nodes_and_the_topic(
    cluster: LocalCluster, topic: dict[int, tuple[int, tuple[int, ...]]]
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap, "log_level": 0})

    def in_sync() -> ClusterMetadata | None:
        # In-sync replicas follow the followers' progress and their nodes' liveness, and each
        # node learns the leaders' view a moment late: under the whole suite's load the node
        # that answered once named two for a partition just after the fixture saw three.
        listed = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
        listing = listed.topics.get(TOPIC)
        every = listing is not None and all(
            len(p.isrs) == 3 for p in listing.partitions.values())
        return listed if every else None

    listed = wait_for(in_sync, CLIENT_TIMEOUT_S, "a listing with every replica in sync")
    assert {n: f"{b.host}:{b.port}" for n, b in listed.brokers.items()} == _brokers(cluster)
    assert listed.controller_id in cluster.node_ids
    assert listed.cluster_id is not None and len(listed.cluster_id) == 22
    partitions = listed.topics[TOPIC].partitions
    assert sorted(partitions) == list(range(PARTITIONS))
    for index, (leader, replicas) in topic.items():
        assert partitions[index].leader == leader
        assert tuple(partitions[index].replicas) == replicas
        assert sorted(partitions[index].isrs) == sorted(replicas)
        assert listed.topics[TOPIC].error is None


def test_kafka_python_sees_the_nodes_and_the_topic(
    cluster: LocalCluster, topic: dict[int, tuple[int, tuple[int, ...]]]
) -> None:
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap,
                             request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        assert TOPIC in consumer.topics()
        assert consumer.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap,
                             request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        described = admin.describe_cluster()
        assert {b["broker_id"]: f"{b['host']}:{b['port']}" for b in described["brokers"]} == (
            _brokers(cluster))
        assert described["cluster_id"] is not None and len(described["cluster_id"]) == 22
        [info] = admin.describe_topics([TOPIC])
        assert info["error_code"] == 0
        leaders = {p["partition_index"]: p["leader_id"] for p in info["partitions"]}
        assert leaders == {index: leader for index, (leader, _) in topic.items()}
    finally:
        admin.close()


def test_every_node_answers_metadata_with_every_nodes_kafka_address(
    cluster: LocalCluster, topic: dict[int, tuple[int, tuple[int, ...]]]
) -> None:
    request = MetadataV12(topics=None, allow_auto_topic_creation=True,
                          include_topic_authorized_operations=False)
    ids, cluster_ids = set(), set()
    for node_id in cluster.node_ids:
        answer = ask(cluster.kafka_address_of(node_id), request)
        assert {b.node_id: f"{b.host}:{b.port}" for b in answer.brokers} == _brokers(cluster)
        cluster_ids.add(answer.cluster_id)
        [entry] = [t for t in answer.topics if t.name == TOPIC]
        assert entry.error_code == ErrorCode.none and not entry.is_internal
        ids.add(entry.topic_id)
        for partition in entry.partitions:
            assert partition.leader_epoch >= 0 and partition.offline_replicas == ()
            assert partition.replica_nodes == topic[partition.partition_index][1]
    assert len(ids) == 1 and ids.pop() != uuid.UUID(int=0)
    assert len(cluster_ids) == 1 and len(cluster_ids.pop() or "") == 22


def test_metadata_versions_name_topics_as_kafka_does(
    cluster: LocalCluster, topic: dict[int, tuple[int, tuple[int, ...]]]
) -> None:
    address = cluster.kafka_address_of(1)
    # v0: an empty list is every topic; from v1 on, an empty list is none.
    assert TOPIC in {t.name for t in ask(address, MetadataV0(topics=())).topics}
    assert ask(address, MetadataV1(topics=())).topics == ()
    [unknown] = ask(address, MetadataV1(topics=(TopicV1(name="nope"),))).topics
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
    # Never created by Metadata, whatever the request allows: Tidelog has no auto-create.
    asked = MetadataV12(topics=(TopicV12(topic_id=None, name="nope"),),
                        allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    [still_unknown] = ask(address, asked).topics
    assert still_unknown.error_code == ErrorCode.unknown_topic_or_partition


def test_metadata_finds_a_topic_by_its_id(
    cluster: LocalCluster, topic: dict[int, tuple[int, tuple[int, ...]]]
) -> None:
    address = cluster.kafka_address_of(2)
    everything = ask(address, MetadataV12(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
    topic_id = next(t.topic_id for t in everything.topics if t.name == TOPIC)
    by_id = MetadataV12(topics=(TopicV12(topic_id=topic_id, name=None),
                                TopicV12(topic_id=topic_uuid(10**6), name=None)),
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    found, missing = ask(address, by_id).topics
    assert (found.name, found.topic_id, len(found.partitions)) == (TOPIC, topic_id, PARTITIONS)
    assert missing.error_code == ErrorCode.unknown_topic_id and missing.name is None
