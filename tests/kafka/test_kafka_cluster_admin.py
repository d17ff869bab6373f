"""Kafka's admin APIs about replicas, logs and the controller's quorum (node/kafka/
cluster_admin.py): DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders, DescribeQuorum and
DescribeTopicPartitions, asked by kafka-python's KafkaAdminClient and confluent-kafka's
AdminClient over the Kafka listener of one 1-node TLS cluster (the authorizer on:
``User:CN=client`` a super user, ``User:CN=reader`` a principal without rights but those
granted here), and ElectLeaders' move of a leader on a 3-node cluster of its own, asked of a
node that does not lead the partition."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ElectionType
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import DescribeLogDirsRequest, DescribeQuorumRequest, ElectLeadersRequest
from kafka.protocol.admin import ElectionType as KpElectionType
from kafka.structs import TopicPartitionReplica
from kafka_clients import CLIENT_TIMEOUT_S, CONFLUENT_QUIET, kafka_python_admin, tls_config

from tidelog.client import Client
from tidelog.testing import LocalCluster, wait_for
from tidelog.types import TopicPartition

pytestmark = pytest.mark.timeout(120)

TOPIC, OTHER, SECRET = "ca-logs", "ca-other", "ca-secret"
READER = "User:CN=reader"
#: Kafka's error codes the answers carry.
NONE, REPLICA_NOT_AVAILABLE, TOPIC_AUTHORIZATION_FAILED = 0, 9, 29
CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, LOG_DIR_NOT_FOUND = 31, 42, 57
ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION = 84, 3
PREFERRED_LEADER_NOT_AVAILABLE = 80


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1, "tls": True}


def _send(admin: KafkaAdminClient, request: Any, node_id: int | None = None) -> Any:
    """`request` sent as it is by kafka-python's connection to `node_id` (any node when
    None), at the highest version both sides speak: the answer, errors and all."""

    async def send() -> Any:
        return await admin._manager.send(request, node_id=node_id)

    return admin._manager.run(send)


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[KafkaAdminClient]:
    """The super user's kafka-python admin client, once the module's topics exist and hold a
    record (TOPIC: 3 partitions, one record in partition 0; OTHER: 2 partitions; SECRET)."""
    confluent = AdminClient(tls_config(cluster, "client"))
    for future in confluent.create_topics(
            [NewTopic(TOPIC, 3, 1), NewTopic(OTHER, 2, 1), NewTopic(SECRET, 1, 1)]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    producer = confluent_kafka.Producer({**tls_config(cluster, "client"), **CONFLUENT_QUIET})
    producer.produce(TOPIC, b"x" * 100, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    client = kafka_python_admin(cluster, "client")
    yield client
    client.close()


@pytest.fixture(scope="module")
def reader(cluster: LocalCluster, admin: KafkaAdminClient) -> Iterator[KafkaAdminClient]:
    """The reader's kafka-python admin client; the reader may describe TOPIC and OTHER (not
    SECRET) and nothing of the cluster."""
    confluent = AdminClient(tls_config(cluster, "client"))
    for future in confluent.create_acls([
        AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, READER, "*",
                   AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        for name in (TOPIC, OTHER)
    ]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    client = kafka_python_admin(cluster, "reader")
    yield client
    client.close()


def test_the_log_directory_is_described_with_each_replica(
    cluster: LocalCluster, admin: KafkaAdminClient,
) -> None:
    """One log directory per node, its data dir: every replica of the topic with its bytes,
    no lag, none a future replica, and the file system's sizes; a topic asked with no
    partitions names none."""
    [described] = admin.describe_log_dirs({TOPIC: [0, 1, 2]})
    assert described["broker"] == cluster.node_ids[0]
    [log_dir] = described["log_dirs"]
    assert log_dir["error_code"] == NONE
    assert log_dir["log_dir"] == os.path.realpath(cluster.node_dir(cluster.node_ids[0]))
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    [topic] = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    assert topic["name"] == TOPIC and sorted(sizes) == [0, 1, 2]
    assert sizes[0] > 100  # the record's batch
    assert all(not p["is_future_key"] and p["offset_lag"] == 0 for p in topic["partitions"])
    answer = _send(admin, DescribeLogDirsRequest(topics=[(TOPIC, [])]))
    assert answer.error_code == NONE and answer.results[0].topics == []


def test_a_replica_asked_into_its_own_directory_stays_and_another_path_is_not_found(
    cluster: LocalCluster, admin: KafkaAdminClient,
) -> None:
    node = cluster.node_ids[0]
    [described] = admin.describe_log_dirs()
    directory = described["log_dirs"][0]["log_dir"]
    here, elsewhere, absent = (TopicPartitionReplica(TOPIC, 0, node),
                               TopicPartitionReplica(TOPIC, 1, node),
                               TopicPartitionReplica(TOPIC, 7, node))
    result = admin.alter_replica_log_dirs(
        {here: directory, elsewhere: directory + "-moved", absent: directory})
    assert result == {here: kafka_errors.NoError,
                      elsewhere: kafka_errors.LogDirNotFoundError,
                      absent: kafka_errors.ReplicaNotAvailableError}
    assert admin.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, 2, node): "relative"}) \
        == {TopicPartitionReplica(TOPIC, 2, node): kafka_errors.LogDirNotFoundError}


def test_the_controller_quorum_is_described(
    cluster: LocalCluster, admin: KafkaAdminClient,
) -> None:
    """The one node leads the quorum: its epoch, the high watermark of the metadata records
    (topics made, ACLs...), itself the one voter holding them all, its Kafka listener; another
    partition than the metadata log's is INVALID_REQUEST, as Kafka answers it."""
    node = cluster.node_ids[0]
    quorum = admin.describe_metadata_quorum()
    [topic] = quorum["topics"]
    [partition] = topic["partitions"]
    assert (topic["topic_name"], partition["partition_index"], partition["error"]) == (
        "__cluster_metadata", 0, None)
    assert partition["leader_id"] == node and partition["leader_epoch"] >= 1
    assert partition["high_watermark"] > 0 and partition["observers"] == []
    [voter] = partition["current_voters"]
    assert voter["replica_id"] == node
    assert voter["log_end_offset"] >= partition["high_watermark"]
    assert voter["last_caught_up_timestamp"] > 0
    [listed] = quorum["nodes"]
    [listener] = listed["listeners"]
    assert (listed["node_id"], f"{listener['host']}:{listener['port']}") == (
        node, cluster.kafka_bootstrap)
    answer = _send(admin, DescribeQuorumRequest(topics=[
        DescribeQuorumRequest.TopicData(topic_name=TOPIC, partitions=[
            DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])]))
    assert answer.error_code == INVALID_REQUEST and answer.topics == []


def test_topic_partitions_are_paged_by_cursor(admin: KafkaAdminClient) -> None:
    """Two partitions a page over TOPIC (3) and OTHER (2): each partition once, in order,
    each page's cursor where the next starts; an unknown topic is said and counts no
    partition; a cursor on a topic not asked for is INVALID_REQUEST."""
    seen: list[tuple[str, int]] = []
    cursors: list[Any] = []
    cursor = None
    for _ in range(5):
        page = admin.describe_topic_partitions(
            [OTHER, TOPIC, "ca-missing"], response_partition_limit=2, cursor=cursor)
        for topic in page["topics"]:
            if topic["name"] == "ca-missing":
                assert topic["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
                continue
            assert topic["error_code"] == NONE and not topic["is_internal"]
            for p in topic["partitions"]:
                assert p["leader_id"] >= 0 and p["replica_nodes"] == [p["leader_id"]]
                assert p["eligible_leader_replicas"] is None
                seen.append((topic["name"], p["partition_index"]))
        cursor = page["next_cursor"]
        cursors.append(cursor)
        if cursor is None:
            break
    # Topics by name (ca-logs, ca-missing, ca-other), partitions by index.
    assert seen == [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2), (OTHER, 0), (OTHER, 1)]
    assert cursors == [{"topic_name": TOPIC, "partition_index": 2},
                       {"topic_name": OTHER, "partition_index": 1}, None]
    refused = admin.describe_topic_partitions(
        [OTHER], cursor={"topic_name": TOPIC, "partition_index": 0})
    assert [(t["name"], t["error_code"]) for t in refused["topics"]] == [
        (OTHER, INVALID_REQUEST)]


def test_an_election_of_the_leading_preferred_replica_is_not_needed(
    cluster: LocalCluster, admin: KafkaAdminClient,
) -> None:
    """On one node the preferred replica always leads: ELECTION_NOT_NEEDED for each
    partition named, for an unclean election too (the partition has a leader); an unknown
    partition is UNKNOWN_TOPIC_OR_PARTITION; every partition (null) lists none of them, as
    Kafka leaves out those that need no election; confluent-kafka's election agrees."""
    answer = admin.elect_leaders(0, {TOPIC: [0, 1], OTHER: [5]}, raise_errors=False)
    codes = {(t[0], p[0]): p[1] for t in answer.replica_election_results for p in t[1]}
    assert codes == {(TOPIC, 0): ELECTION_NOT_NEEDED, (TOPIC, 1): ELECTION_NOT_NEEDED,
                     (OTHER, 5): UNKNOWN_TOPIC_OR_PARTITION}
    unclean = admin.elect_leaders(1, {TOPIC: [2]}, raise_errors=False)
    assert unclean.replica_election_results[0][1][0][1] == ELECTION_NOT_NEEDED
    every = _send(admin, ElectLeadersRequest(
        election_type=KpElectionType(0), topic_partitions=None, timeout_ms=10_000))
    assert (every.error_code, every.replica_election_results) == (NONE, [])
    confluent = AdminClient(tls_config(cluster, "client"))
    tp = confluent_kafka.TopicPartition(OTHER, 0)
    result = confluent.elect_leaders(ElectionType.PREFERRED, [tp]).result(
        timeout=CLIENT_TIMEOUT_S)
    assert result[tp].code() == ELECTION_NOT_NEEDED


def test_a_principal_without_rights_is_refused_as_kafka_refuses_it(
    cluster: LocalCluster, reader: KafkaAdminClient,
) -> None:
    """CLUSTER_AUTHORIZATION_FAILED for the cluster's APIs (at the top where the answer has
    a top, and for each partition named); DescribeTopicPartitions answers a topic the reader
    may not describe TOPIC_AUTHORIZATION_FAILED when named and leaves it out of every
    topic."""
    node = cluster.node_ids[0]
    refused = _send(reader, DescribeLogDirsRequest(topics=None))
    assert (refused.error_code, refused.results) == (CLUSTER_AUTHORIZATION_FAILED, [])
    replica = TopicPartitionReplica(TOPIC, 0, node)
    assert reader.alter_replica_log_dirs({replica: "/anywhere"}) == {
        replica: kafka_errors.ClusterAuthorizationFailedError}
    with pytest.raises(kafka_errors.ClusterAuthorizationFailedError):
        reader.describe_metadata_quorum()
    election = reader.elect_leaders(0, {TOPIC: [0]}, raise_errors=False)
    assert election.error_code == CLUSTER_AUTHORIZATION_FAILED
    assert [(t[0], [p[1] for p in t[1]]) for t in election.replica_election_results] == [
        (TOPIC, [CLUSTER_AUTHORIZATION_FAILED])]
    named = reader.describe_topic_partitions([TOPIC, SECRET])
    assert [(t["name"], t["error_code"], len(t["partitions"])) for t in named["topics"]] == [
        (TOPIC, NONE, 3), (SECRET, TOPIC_AUTHORIZATION_FAILED, 0)]
    every = reader.describe_topic_partitions([])
    assert sorted(t["name"] for t in every["topics"]) == [TOPIC, OTHER]


def test_a_node_that_does_not_lead_the_partition_has_its_leader_hand_over(
    tmp_path: Any,
) -> None:
    """ElectLeaders asked of the one node of three that neither leads the partition nor is
    its preferred replica: the election is carried out by the leader, which hands over to the
    preferred replica named by a reassignment; asked again, it is not needed. The same
    cluster's quorum, described by a node that does not lead it (`_quorum_asked_of_a_follower`):
    the 3-node boot is this module's dearest step."""
    # Leaders stay where they are unless elected (no automatic preferred-leader rebalance).
    with LocalCluster(nodes=3, data_dir=tmp_path / "elect",
                      auto_leader_rebalance_enable=False) as three, \
            Client(three.bootstrap) as client:
        client.create_topic("ca-elect", partitions=1, replication_factor=3)
        tp = TopicPartition("ca-elect", 0)
        leader = wait_for(lambda: three.leader_of(("ca-elect", 0)), CLIENT_TIMEOUT_S,
                          "a leader")
        target, bystander = (n for n in three.node_ids if n != leader)
        assert client.admin.alter_partition_reassignments(
            {tp: [target, leader, bystander]}) == {}
        wait_for(lambda: client.describe_topics(["ca-elect"])["ca-elect"].partitions[0]
                 .replicas[0] == target, CLIENT_TIMEOUT_S, "the target named preferred")
        admin = KafkaAdminClient(bootstrap_servers=three.kafka_address_of(bystander),
                                 request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
        try:
            request = ElectLeadersRequest(election_type=KpElectionType(0),
                                          topic_partitions=[("ca-elect", [0])],
                                          timeout_ms=int(CLIENT_TIMEOUT_S * 1000))

            def elect() -> int:
                answer = _send(admin, request, node_id=bystander)
                [(topic, [(partition, code, _)])] = answer.replica_election_results
                assert (topic, partition) == ("ca-elect", 0)
                return int(code)

            def elected() -> bool:
                # Until the leader's replica knows the new order (the image has it first) it
                # may answer that its preferred replica, itself, leads; until the target holds
                # the whole log, PREFERRED_LEADER_NOT_AVAILABLE.
                return elect() == NONE

            wait_for(elected, CLIENT_TIMEOUT_S, "the preferred replica elected")
            assert three.leader_of(("ca-elect", 0)) == target
            assert elect() == ELECTION_NOT_NEEDED
            _quorum_asked_of_a_follower(three, admin)
            # The preferred replica's node dies. The bystander still routes the election to it
            # for a while, and sends it again to the leader elected next, which answers as
            # Kafka's controller does for a preferred replica that is down. Before, the answer
            # was NOT_LEADER_OR_FOLLOWER, which no Kafka client retries for a partition.
            three.kill(target)
            assert elect() == PREFERRED_LEADER_NOT_AVAILABLE
        finally:
            admin.close()


def _quorum_asked_of_a_follower(three: LocalCluster, admin: KafkaAdminClient) -> None:
    """DescribeQuorum asked of a node that does not lead the controller's quorum: the answer
    is the leader's (forwarded there), with the three voters, the leader's log end and
    caught-up time its own, the followers' log ends what the leader knows they hold."""
    controller = wait_for(
        lambda: next((n for n in [admin.describe_cluster()["controller_id"]]
                      if n in three.node_ids), None),
        CLIENT_TIMEOUT_S, "a controller")
    follower = next(n for n in three.node_ids if n != controller)
    answer = _send(admin, DescribeQuorumRequest(topics=[
        DescribeQuorumRequest.TopicData(topic_name="__cluster_metadata", partitions=[
            DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])]),
        node_id=follower)
    assert answer.error_code == NONE
    [partition] = answer.topics[0].partitions
    assert (partition.error_code, partition.leader_id) == (NONE, controller)
    voters = {v.replica_id: v for v in partition.current_voters}
    assert sorted(voters) == three.node_ids and partition.observers == []
    assert voters[controller].log_end_offset >= partition.high_watermark > 0
    assert voters[controller].last_caught_up_timestamp > 0
    now_ms = time.time() * 1000
    assert all(0 <= voters[n].log_end_offset <= voters[controller].log_end_offset
               for n in voters if n != controller)
    # When the leader last heard each follower and last saw it hold the whole log: it has
    # heard them all (they voted it in and took its records), within the last minute.
    assert all(now_ms - 60_000 < t <= now_ms + 1_000 for n in voters if n != controller
               for t in (voters[n].last_fetch_timestamp, voters[n].last_caught_up_timestamp))
