"""Transactions through the Kafka listener with real clients: confluent-kafka's,
kafka-python's and aiokafka's transactional producers commit and abort, and read_committed
consumers see the committed records only; consume-transform-produce with
send_offsets_to_transaction, from an assigned consumer and from a group member, commits each
input's offset exactly once with its output; a zombie (the same transactional id at an older
epoch) is fenced; the partition leader verifies a transactional batch with the coordinator;
older clients see fencing as Kafka shows it them."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import ProducerFencedError
from kafka.structs import OffsetAndMetadata as KOffsetAndMetadata
from kafka_wire import ask
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest as AddPartitionsV3
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnTopic as AddPartitionsTopicV3,
)
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnV1
from kio.schema.end_txn.v3.request import EndTxnRequest as EndTxnV3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorV3
from kio.schema.init_producer_id.v3.request import InitProducerIdRequest as InitProducerIdV3
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitProducerIdV4
from kio.schema.produce.v9.request import PartitionProduceData as ProducePartitionV9
from kio.schema.produce.v9.request import ProduceRequest as ProduceV9
from kio.schema.produce.v9.request import TopicProduceData as ProduceTopicV9
from kio.static.primitive import Records

from tidelog.client import Client
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster, wait_for
from tidelog.types import TopicPartition

pytestmark = pytest.mark.timeout(120)

CLIENT_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as client:
        yield client


def _topic(client: Client, name: str, partitions: int = 1) -> str:
    client.create_topic(name, partitions=partitions, replication_factor=1)

    def led() -> bool:
        info = client.describe_topics([name])[name]
        return len(info.partitions) == partitions and all(p.leader >= 0 for p in info.partitions)

    wait_for(led, CLIENT_TIMEOUT_S, f"{name}'s leaders")
    return name


def _confluent_producer(cluster: LocalCluster, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap,
                         "transactional.id": txn_id, "log_level": 0})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


def _confluent_read(cluster: LocalCluster, topic: str, isolation: str,
                    expected: int, partitions: int = 1) -> list[bytes]:
    """The values of `topic` a consumer of `isolation` reads, once it has read `expected` of
    them (then up to the end it sees)."""
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "reader",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "log_level": 0})
    try:
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []

        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            return len(values) >= expected and message is not None and message.error() is not None

        wait_for(read, CLIENT_TIMEOUT_S, f"{expected} records of {topic} at {isolation}")
        return values
    finally:
        consumer.close()


def test_confluent_kafka_read_committed_hides_aborted_records(
    cluster: LocalCluster, client: Client
) -> None:
    topic = _topic(client, "ck-txn")
    producer = _confluent_producer(cluster, "ck-txn-producer")
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"aborted-{i}".encode())
    # Sent before the abort (an abort drops what is still queued): the log holds them.
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    producer.abort_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, f"committed-{i}".encode())
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    assert _confluent_read(cluster, topic, "read_committed", 2) == [b"committed-0",
                                                                    b"committed-1"]
    assert len(_confluent_read(cluster, topic, "read_uncommitted", 5)) == 5


def test_kafka_python_read_committed_hides_aborted_records(
    cluster: LocalCluster, client: Client
) -> None:
    topic = _topic(client, "kp-txn")
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap,
                             transactional_id="kp-txn-producer",
                             request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"aborted-{i}".encode())
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(2):
            producer.send(topic, f"committed-{i}".encode())
        # The offsets of what the transaction consumed go with it (a group id alone: a
        # consumer that is assigned its partitions).
        producer.send_offsets_to_transaction(
            {KTopicPartition(topic, 0): KOffsetAndMetadata(3, "kp-txn", -1)}, "kp-txn-group")
        producer.commit_transaction()
    finally:
        producer.close()
    committed = wait_for(
        lambda: client.admin.list_consumer_group_offsets("kp-txn-group").get(
            TopicPartition(topic, 0)),
        CLIENT_TIMEOUT_S, "the transaction's offsets")
    assert (committed.offset, committed.metadata) == (3, "kp-txn")
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap,
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000,
                             request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        values: list[bytes] = []

        def read() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
            return len(values) >= 2

        wait_for(read, CLIENT_TIMEOUT_S, "the committed records")
        assert values == [b"committed-0", b"committed-1"]
    finally:
        consumer.close()
    assert len(_confluent_read(cluster, topic, "read_uncommitted", 5)) == 5


def test_aiokafka_transactions_at_the_oldest_versions(
    cluster: LocalCluster, client: Client
) -> None:
    """aiokafka speaks version 0 of every transaction API and InitProducerId: an aborted
    transaction's records stay hidden, a committed one's offsets commit with it."""
    topic, group = _topic(client, "aio-txn"), "aio-txn-group"

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap,
                                    transactional_id="aio-txn-producer",
                                    request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aborted")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed")
                await producer.send_offsets_to_transaction(
                    {AioTopicPartition(topic, 0): 5}, group)
        finally:
            await producer.stop()

    asyncio.run(produce())
    assert _confluent_read(cluster, topic, "read_committed", 1) == [b"committed"]
    committed = wait_for(
        lambda: client.admin.list_consumer_group_offsets(group).get(TopicPartition(topic, 0)),
        CLIENT_TIMEOUT_S, "the transaction's offsets")
    assert committed.offset == 5


@pytest.mark.parametrize("membership", ["assigned", "subscribed"])
def test_send_offsets_to_transaction_commits_exactly_once(
    cluster: LocalCluster, client: Client, membership: str
) -> None:
    """Consume-transform-produce with a consumer that is assigned its partition, or a member
    of a (classic) group that subscribes to the topic, whose member id and generation go with
    the transaction's offsets: an aborted round leaves neither its output nor its offsets;
    the committed one leaves both, once. A subscribed member is described with its
    assignment by DescribeGroups meanwhile."""
    source = _topic(client, f"ctp-in-{membership}")
    sink, group = _topic(client, f"ctp-out-{membership}"), f"ctp-{membership}"
    feeder = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "log_level": 0})
    for i in range(4):
        feeder.produce(source, f"in-{i}".encode())
    assert feeder.flush(CLIENT_TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "log_level": 0})
    producer = _confluent_producer(cluster, f"ctp-producer-{membership}")
    try:
        if membership == "assigned":
            consumer.assign([CTopicPartition(source, 0, 0)])
        else:
            consumer.subscribe([source])
        inputs: list[Any] = []
        wait_for(lambda: _polled(consumer, inputs) >= 4, CLIENT_TIMEOUT_S, "the inputs")
        if membership == "subscribed":
            _assert_described_member(cluster, group, source)
        offsets = [CTopicPartition(source, 0, inputs[-1].offset() + 1)]
        for outcome in ("abort", "commit"):
            producer.begin_transaction()
            for message in inputs:
                producer.produce(sink, message.value().upper())
            assert producer.flush(CLIENT_TIMEOUT_S) == 0
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(),
                                                 CLIENT_TIMEOUT_S)
            if outcome == "abort":
                producer.abort_transaction(CLIENT_TIMEOUT_S)
                assert TopicPartition(source, 0) not in (
                    client.admin.list_consumer_group_offsets(group))
            else:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    committed = wait_for(
        lambda: client.admin.list_consumer_group_offsets(group).get(TopicPartition(source, 0)),
        CLIENT_TIMEOUT_S, "the transaction's offsets")
    assert committed.offset == 4
    assert _confluent_read(cluster, sink, "read_committed", 4) == [
        f"IN-{i}".encode() for i in range(4)]


def _assert_described_member(cluster: LocalCluster, group: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap, "log_level": 0})
    [described] = admin.describe_consumer_groups([group]).values()
    description = described.result(timeout=CLIENT_TIMEOUT_S)
    [member] = description.members
    assert [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions] == [
        (topic, 0)]
    assert str(description.state).endswith("STABLE")


def _polled(consumer: Consumer, into: list[Any]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        into.append(message)
    return len(into)


def test_a_zombie_producer_is_fenced(cluster: LocalCluster, client: Client) -> None:
    """A second producer of the same transactional id bumps the epoch: the first one's
    transaction can no longer commit, and only the second one's records are read."""
    topic = _topic(client, "zombie-txn")
    zombie = _confluent_producer(cluster, "zombie-id")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    assert zombie.flush(CLIENT_TIMEOUT_S) == 0
    successor = _confluent_producer(cluster, "zombie-id")
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as fenced:
        zombie.produce(topic, b"zombie-again")
        zombie.commit_transaction(CLIENT_TIMEOUT_S)
    assert fenced.value.args[0].fatal()
    assert _confluent_read(cluster, topic, "read_committed", 1) == [b"successor"]


def test_a_kafka_python_zombie_producer_is_fenced(cluster: LocalCluster, client: Client) -> None:
    """The same with kafka-python: the zombie's commit fails as fenced, its records are never
    read."""
    topic = _topic(client, "kp-zombie-txn")

    def producer() -> KafkaProducer:
        made = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap,
                             transactional_id="kp-zombie-id",
                             request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
        made.init_transactions()
        return made

    zombie = producer()
    try:
        zombie.begin_transaction()
        zombie.send(topic, b"zombie")
        zombie.flush()
        successor = producer()
        try:
            successor.begin_transaction()
            successor.send(topic, b"successor")
            successor.commit_transaction()
        finally:
            successor.close()
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction()
    finally:
        zombie.close(timeout=0)
    assert _confluent_read(cluster, topic, "read_committed", 1) == [b"successor"]


def test_older_clients_get_fencing_and_timeouts_as_kafka_answers_them(
    cluster: LocalCluster, client: Client
) -> None:
    """An EndTxn of a fenced epoch is PRODUCER_FENCED from v2 on and INVALID_PRODUCER_EPOCH
    before (clients older than the error), and so is InitProducerId's below v4; a producer
    naming its id and epoch gets the next epoch (KIP-360); a transactional InitProducerId with
    a timeout of 0 is INVALID_TRANSACTION_TIMEOUT."""
    address, txn_id = cluster.kafka_address_of(1), "raw-fenced"

    def init() -> Any:
        ask(address, FindCoordinatorV3(key=txn_id, key_type=1))
        return _ok(ask(address, InitProducerIdV4(
            transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1)))

    first = wait_for(init, CLIENT_TIMEOUT_S, "a transactional producer id")
    second = wait_for(init, CLIENT_TIMEOUT_S, "the epoch bumped")
    assert (second.producer_id, second.producer_epoch) == (
        first.producer_id, first.producer_epoch + 1)
    for request, fenced in (
        (EndTxnV1(transactional_id=txn_id, producer_id=first.producer_id,
                  producer_epoch=first.producer_epoch, committed=True),
         ErrorCode.invalid_producer_epoch),
        (EndTxnV3(transactional_id=txn_id, producer_id=first.producer_id,
                  producer_epoch=first.producer_epoch, committed=True),
         ErrorCode.producer_fenced),
    ):
        assert ask(address, request).error_code == fenced
    # KIP-360: a producer that names its id and current epoch gets the next epoch of the same
    # id; one that names an epoch it no longer holds is fenced (INVALID_PRODUCER_EPOCH before
    # InitProducerId v4).
    bumped = ask(address, InitProducerIdV4(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=second.producer_id, producer_epoch=second.producer_epoch))
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (
        ErrorCode.none, second.producer_id, second.producer_epoch + 1)
    for version, fenced in ((InitProducerIdV3, ErrorCode.invalid_producer_epoch),
                            (InitProducerIdV4, ErrorCode.producer_fenced)):
        stale = ask(address, version(
            transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=first.producer_id, producer_epoch=first.producer_epoch))
        assert stale.error_code == fenced
    no_timeout = ask(address, InitProducerIdV4(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(0),
        producer_id=-1, producer_epoch=-1))
    assert no_timeout.error_code == ErrorCode.invalid_transaction_timeout


def test_a_transactional_produce_outside_its_transaction_is_refused(
    cluster: LocalCluster, client: Client
) -> None:
    """The leader verifies a transactional batch with the coordinator (KIP-890's first part):
    a batch for a partition the transaction never added is INVALID_TXN_STATE (Produce v9 and
    below), and the same batch once the partition is added is appended."""
    topic, txn_id = _topic(client, "verified-txn"), "verified-producer"
    address = cluster.kafka_address_of(1)
    ask(address, FindCoordinatorV3(key=txn_id, key_type=1))
    producer = wait_for(lambda: _ok(ask(address, InitProducerIdV4(
        transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1, producer_epoch=-1))), CLIENT_TIMEOUT_S, "a transactional producer id")
    pid, epoch = producer.producer_id, producer.producer_epoch
    batch = build_batch([RecordInput(b"verified", None, 0)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=0, transactional=True)
    produce = ProduceV9(transactional_id=txn_id, acks=-1, timeout=datetime.timedelta(seconds=20),
                        topic_data=(ProduceTopicV9(name=topic, partition_data=(
                            ProducePartitionV9(index=0, records=Records(batch)),)),))

    def produced() -> ErrorCode:
        [answer] = ask(address, produce).responses[0].partition_responses
        return ErrorCode(answer.error_code)

    assert produced() == ErrorCode.invalid_txn_state
    added = ask(address, AddPartitionsV3(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(AddPartitionsTopicV3(name=topic, partitions=(0,)),)))
    [result] = added.results_by_topic_v3_and_below[0].results_by_partition
    assert result.partition_error_code == ErrorCode.none
    assert produced() == ErrorCode.none
    ended = ask(address, EndTxnV3(transactional_id=txn_id, producer_id=pid,
                                  producer_epoch=epoch, committed=True))
    assert ended.error_code == ErrorCode.none
    assert _confluent_read(cluster, topic, "read_committed", 1) == [b"verified"]


def _ok(answer: Any) -> Any:
    """`answer`, or None (not yet) while it has an error."""
    return answer if answer.error_code == ErrorCode.none else None
