"""Offsets and groups through the Kafka listener with real clients: kafka-python,
confluent-kafka and aiokafka consumers that are assigned partitions (not subscribed) commit
offsets with metadata and read them back, and Tidelog's own client and `tidelog groups
describe` read the same commits; confluent-kafka's AdminClient lists, describes and deletes
groups, kafka-python's deletes offsets; FindCoordinator's batched keys and unknown key types;
OffsetFetch with require_stable during an open transaction answers UNSTABLE_OFFSET_COMMIT as
Kafka does, and v9 checks a consumer group member's epoch; a connection's requests are
handled in order, each seeing what those before it did."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.structs import OffsetAndMetadata as AioOffsetAndMetadata
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata as KOffsetAndMetadata
from kafka_wire import ask, connect, frame_of, read_answer
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.consumer_group_heartbeat.v0.request import (
    ConsumerGroupHeartbeatRequest as HeartbeatV0,
)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindV4
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition as ListPartitionV7
from kio.schema.list_offsets.v7.request import ListOffsetsRequest as ListV7
from kio.schema.list_offsets.v7.request import ListOffsetsTopic as ListTopicV7
from kio.schema.offset_commit.v8.request import OffsetCommitRequest as CommitV8
from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition as CommitPartitionV8
from kio.schema.offset_commit.v8.request import OffsetCommitRequestTopic as CommitTopicV8
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest as FetchV7
from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic as FetchTopicV7
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest as FetchV9
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup as FetchGroupV9
from kio.schema.offset_fetch.v9.request import OffsetFetchRequestTopics as FetchTopicsV9
from kio.schema.produce.v9.request import PartitionProduceData as ProducePartitionV9
from kio.schema.produce.v9.request import ProduceRequest as ProduceV9
from kio.schema.produce.v9.request import TopicProduceData as ProduceTopicV9
from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequest
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequestPartition as TxnPartition,
)
from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestTopic as TxnTopic
from kio.static.primitive import Records

from tidelog.cli import main
from tidelog.client import Client
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster, wait_for
from tidelog.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.timeout(120)

TOPIC = "ledger"
PARTITIONS = 2
CLIENT_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def topic(cluster: LocalCluster) -> Iterator[str]:
    with Client(cluster.bootstrap) as client:
        client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)

        def led() -> bool:
            info = client.describe_topics([TOPIC])[TOPIC]
            return len(info.partitions) == PARTITIONS and all(
                p.leader >= 0 for p in info.partitions)

        wait_for(led, CLIENT_TIMEOUT_S, "the topic's leaders")
        yield TOPIC


def _tidelog_offsets(cluster: LocalCluster, group: str) -> dict[TopicPartition, Any]:
    with Client(cluster.bootstrap) as client:
        return client.admin.list_consumer_group_offsets(group)


def test_kafka_python_assigned_consumer_commits_metadata(
    cluster: LocalCluster, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    group = "kp-assigned"
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, group_id=group,
                             enable_auto_commit=False,
                             request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.commit({tps[0]: KOffsetAndMetadata(17, "kp-meta-0", -1),
                         tps[1]: KOffsetAndMetadata(4, "", -1)})
        assert consumer.committed(tps[0], metadata=True).offset == 17
        assert consumer.committed(tps[0], metadata=True).metadata == "kp-meta-0"
        assert consumer.committed(tps[1]) == 4
    finally:
        consumer.close()
    assert _tidelog_offsets(cluster, group) == {
        TopicPartition(topic, 0): OffsetAndMetadata(17, "kp-meta-0"),
        TopicPartition(topic, 1): OffsetAndMetadata(4, ""),
    }
    assert main(["groups", "describe", group, "--bootstrap", cluster.bootstrap]) == 0
    described = capsys.readouterr().out
    assert group in described and " 17 " in described


def test_confluent_kafka_assigned_consumer_commits_metadata(
    cluster: LocalCluster, topic: str
) -> None:
    from confluent_kafka import Consumer

    group = "ck-assigned"
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": 0})
    try:
        consumer.assign([CTopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.commit(offsets=[CTopicPartition(topic, 0, 9, metadata="ck-meta"),
                                 CTopicPartition(topic, 1, 3)], asynchronous=False)
        committed = consumer.committed([CTopicPartition(topic, p) for p in range(PARTITIONS)],
                                       timeout=CLIENT_TIMEOUT_S)
        assert [(c.partition, c.offset, c.metadata, c.error) for c in committed] == [
            (0, 9, "ck-meta", None), (1, 3, None, None)]
    finally:
        consumer.close()
    # confluent-kafka sends a metadata string with its C terminator; Kafka stores the bytes
    # as they came, and so does Tidelog.
    assert _tidelog_offsets(cluster, group)[TopicPartition(topic, 0)] == (
        OffsetAndMetadata(9, "ck-meta\x00"))


def test_aiokafka_assigned_consumer_commits_metadata(cluster: LocalCluster, topic: str) -> None:
    """aiokafka speaks the oldest versions Kafka 4 keeps (FindCoordinator v1, OffsetCommit v2
    or v3)."""
    group, tp = "aio-assigned", AioTopicPartition(topic, 1)

    async def commit_and_read() -> Any:
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, group_id=group,
                                    enable_auto_commit=False,
                                    request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.commit({tp: AioOffsetAndMetadata(11, "aio-meta")})
            return await consumer.committed(tp)
        finally:
            await consumer.stop()

    assert asyncio.run(commit_and_read()) == 11
    assert _tidelog_offsets(cluster, group) == {
        TopicPartition(topic, 1): OffsetAndMetadata(11, "aio-meta")}


def test_the_admin_client_lists_describes_and_deletes_groups(
    cluster: LocalCluster, topic: str
) -> None:
    group = "admin-made"
    with Client(cluster.bootstrap) as client:
        client.admin.alter_consumer_group_offsets(group, {
            TopicPartition(topic, 0): OffsetAndMetadata(5, "m"),
            TopicPartition(topic, 1): OffsetAndMetadata(6),
        })
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap, "log_level": 0})
    listed = admin.list_consumer_groups(request_timeout=CLIENT_TIMEOUT_S).result()
    assert group in {g.group_id for g in listed.valid}
    [described] = admin.describe_consumer_groups([group]).values()
    description = described.result()
    assert description.group_id == group and description.members == []
    assert str(description.state).endswith("EMPTY")
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result()
    # (confluent-kafka reads a metadata string up to a C terminator, which only its own
    # commits carry: the metadata round trip is the consumer tests'.)
    assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 5), (1, 6)}
    # confluent-kafka's AdminClient has no OffsetDelete; kafka-python's has.
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap,
                                   request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        deleted = kafka_admin.delete_group_offsets(group, [KTopicPartition(topic, 1)])
        assert {tp.partition: error.errno for tp, error in deleted.items()} == {1: 0}
    finally:
        kafka_admin.close()
    assert set(_tidelog_offsets(cluster, group)) == {TopicPartition(topic, 0)}
    admin.delete_consumer_groups([group])[group].result()
    assert _tidelog_offsets(cluster, group) == {}
    [gone] = admin.describe_consumer_groups(["never-was"]).values()
    assert str(gone.result().state).endswith("DEAD")


def test_find_coordinator_batches_keys_and_refuses_unknown_key_types(
    cluster: LocalCluster, topic: str
) -> None:
    address = cluster.kafka_address_of(1)
    # The first FindCoordinator of a cluster creates the offsets topic and answers
    # COORDINATOR_NOT_AVAILABLE until its partitions are led, as Kafka does.

    def found() -> Any:
        answer = ask(address, FindV4(key_type=0, coordinator_keys=("g1", "g2")))
        return answer if all(c.error_code == ErrorCode.none for c in answer.coordinators) else None

    answer = wait_for(found, CLIENT_TIMEOUT_S, "the groups' coordinators")
    assert [c.key for c in answer.coordinators] == ["g1", "g2"]
    for found in answer.coordinators:
        assert found.error_code == ErrorCode.none
        assert f"{found.host}:{found.port}" == cluster.kafka_address_of(found.node_id)
    refused = ask(address, FindV3(key="g1", key_type=7))
    assert (refused.error_code, refused.node_id) == (ErrorCode.invalid_request, -1)


def test_a_connections_requests_see_what_the_requests_before_them_did(
    cluster: LocalCluster, topic: str
) -> None:
    """Kafka handles a connection's requests in the order they were sent, one after another:
    an OffsetFetch sent right behind an OffsetCommit, without waiting for its answer, reads the
    offset committed, and a ListOffsets right behind an acks=all Produce the log end after the
    records. (Handled side by side, the OffsetFetch read the offset before the commit 39 times
    in 40.)"""
    group, rounds = "pipelined", 20
    address = cluster.kafka_address_of(1)

    def commit(offset: int) -> CommitV8:
        return CommitV8(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        group_instance_id=None, topics=(CommitTopicV8(name=TOPIC, partitions=(
                            CommitPartitionV8(partition_index=0, committed_offset=offset,
                                              committed_metadata=None),)),))

    wait_for(lambda: ask(address, FindV3(key=group, key_type=0)).error_code == ErrorCode.none
             and ask(address, commit(0)).topics[0].partitions[0].error_code == ErrorCode.none,
             CLIENT_TIMEOUT_S, "the group's coordinator")
    fetch = FetchV7(group_id=group, topics=(FetchTopicV7(name=TOPIC, partition_indexes=(0,)),))
    produce = ProduceV9(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=CLIENT_TIMEOUT_S),
        topic_data=(ProduceTopicV9(name=TOPIC, partition_data=(ProducePartitionV9(
            index=1, records=Records(build_batch([RecordInput(b"in order", None, 0)]))),)),))
    latest = ListV7(replica_id=-1, isolation_level=0, topics=(ListTopicV7(
        name=TOPIC, partitions=(ListPartitionV7(partition_index=1, timestamp=-1),)),))
    with connect(address) as sock:
        for n in range(1, rounds + 1):
            sock.sendall(frame_of(commit(n), 1) + frame_of(fetch, 2)
                         + frame_of(produce, 3) + frame_of(latest, 4))
            assert read_answer(sock, 8, 8)[1].topics[0].partitions[0].error_code == 0
            [fetched] = read_answer(sock, 9, 7)[1].topics[0].partitions
            assert fetched.committed_offset == n
            [written] = read_answer(sock, 0, 9)[1].responses[0].partition_responses
            assert written.error_code == ErrorCode.none
            [end] = read_answer(sock, 2, 7)[1].topics[0].partitions
            assert end.offset == written.base_offset + 1


def test_require_stable_during_an_open_transaction_is_unstable(
    cluster: LocalCluster, topic: str
) -> None:
    """A transaction's offsets are pending until it ends: OffsetFetch with require_stable
    answers that partition UNSTABLE_OFFSET_COMMIT (offset -1), without it the last committed
    offset, as Kafka answers both."""
    address, group, txn_id = cluster.kafka_address_of(1), "stable-check", "stable-txn"
    with Client(cluster.bootstrap) as client:
        client.admin.alter_consumer_group_offsets(group, {
            TopicPartition(topic, 0): OffsetAndMetadata(2)})

    def init() -> Any:
        # A client finds the transaction coordinator first (its topic is made then).
        ask(address, FindV3(key=txn_id, key_type=1))
        answer = ask(address, InitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1))
        return answer if answer.error_code == ErrorCode.none else None

    producer = wait_for(init, CLIENT_TIMEOUT_S, "a transactional producer id")
    pid, epoch = producer.producer_id, producer.producer_epoch
    added = ask(address, AddOffsetsToTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id=group))
    assert added.error_code == ErrorCode.none
    committed = ask(address, TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=(TxnTopic(name=topic, partitions=(TxnPartition(
            partition_index=0, committed_offset=8, committed_leader_epoch=-1,
            committed_metadata="txn"),)),)))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    asked = (FetchTopicV7(name=topic, partition_indexes=(0,)),)
    [stable] = ask(address, FetchV7(group_id=group, topics=asked, require_stable=True)).topics
    assert (stable.partitions[0].error_code, stable.partitions[0].committed_offset) == (
        ErrorCode.unstable_offset_commit, -1)
    [last] = ask(address, FetchV7(group_id=group, topics=asked, require_stable=False)).topics
    assert (last.partitions[0].error_code, last.partitions[0].committed_offset) == (
        ErrorCode.none, 2)
    batched = ask(address, FetchV9(groups=(FetchGroupV9(
        group_id=group, member_id=None, member_epoch=-1,
        topics=(FetchTopicsV9(name=topic, partition_indexes=(0,)),)),), require_stable=True))
    assert batched.groups[0].topics[0].partitions[0].error_code == (
        ErrorCode.unstable_offset_commit)
    # Aborted: the transaction's offsets are dropped, the stable answer is the old offset.
    ended = ask(address, EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                       producer_epoch=epoch, committed=False))
    assert ended.error_code == ErrorCode.none

    def settled() -> int | None:
        [entry] = ask(address, FetchV7(group_id=group, topics=asked, require_stable=True)).topics
        partition = entry.partitions[0]
        return None if partition.error_code else int(partition.committed_offset)

    assert wait_for(settled, CLIENT_TIMEOUT_S, "the aborted offsets dropped") == 2


def test_offset_fetch_v9_checks_a_consumer_group_members_epoch(
    cluster: LocalCluster, topic: str
) -> None:
    """OffsetFetch v9 names the member asking (KIP-848): its current epoch reads, an epoch it
    has not reached is STALE_MEMBER_EPOCH, a member the group lacks UNKNOWN_MEMBER_ID; no
    member id (an admin client) is not checked."""
    address, group = cluster.kafka_address_of(1), "epoch-checked"

    def joined() -> Any:
        answer = ask(address, HeartbeatV0(
            group_id=group, member_id="", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,),
            server_assignor=None, topic_partitions=()))
        return answer if answer.error_code == ErrorCode.none else None

    member = wait_for(joined, CLIENT_TIMEOUT_S, "a member of the group")

    def fetched(member_id: str | None, epoch: int) -> ErrorCode:
        answer = ask(address, FetchV9(groups=(FetchGroupV9(
            group_id=group, member_id=member_id, member_epoch=epoch,
            topics=(FetchTopicsV9(name=topic, partition_indexes=(0,)),)),), require_stable=True))
        return ErrorCode(answer.groups[0].error_code)

    assert fetched(member.member_id, member.member_epoch) == ErrorCode.none
    assert fetched(member.member_id, member.member_epoch + 1) == ErrorCode.stale_member_epoch
    assert fetched("nobody", 1) == ErrorCode.unknown_member_id
    assert fetched(None, -1) == ErrorCode.none
