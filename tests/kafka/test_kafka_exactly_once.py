"""Exactly-once through the Kafka listener across a transaction coordinator's death: a
consume-transform-produce loop written as Kafka's exactly-once examples write it (a subscribed
read_committed consumer that never commits itself, a transactional producer that sends the
consumer's positions with its group metadata into each transaction) copies an input topic to an
output topic on a 3-node cluster while the node coordinating its transactional id is killed
(SIGKILL) and started again. On an error that requires it, the loop aborts and rewinds its
consumer to the group's committed offsets. At the end a read_committed reader finds every input
record in the output exactly once, in order per partition, and the group's committed offsets
are the input's end."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_clients import CLIENT_TIMEOUT_S, CONFLUENT_QUIET
from kafka_wire import ask
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

from tidelog.client import Client
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(120)

SOURCE, SINK, GROUP, TXN_ID = "eos-in", "eos-out", "eos-app", "eos-copier"
PARTITIONS = 2
#: Input records per partition, and how many records the loop copies per transaction at most.
PER_PARTITION, PER_TRANSACTION = 100, 8
#: The transaction (counted from 0) left open, its records written, while the coordinator dies.
OPEN_AT = 4
#: FindCoordinator's key type of a transactional id.
TRANSACTION_KEY = 1


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    # Few partitions of the internal topics: the test is about one transactional id and one
    # group, and every partition of three replicas costs the nodes' CPU.
    return {"nodes": 3, "transaction_state_log_num_partitions": 3,
            "offsets_topic_num_partitions": 3}


class Copier(threading.Thread):
    """The application: copies each input record to the same partition of the output, in
    transactions of at most PER_TRANSACTION records, until it has copied `total` records in
    committed transactions (or is stopped). `committed_transactions` counts its commits;
    `aborts` the errors it aborted on; `failure` ends it (fatal or unexpected). Transaction
    OPEN_AT, once its records are written, sets `open` and waits for `go`: the test kills the
    coordinator with the transaction open."""

    def __init__(self, bootstrap: str, total: int) -> None:
        super().__init__(daemon=True)
        self.total = total
        self.copied = 0
        self.committed_transactions = 0
        self.aborts: list[str] = []
        self.failure: BaseException | None = None
        self.stop = threading.Event()
        self.open, self.go = threading.Event(), threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            **CONFLUENT_QUIET,
        })
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
            "transaction.timeout.ms": 60_000, "linger.ms": 5, **CONFLUENT_QUIET,
        })

    def run(self) -> None:
        try:
            self._producer.init_transactions(CLIENT_TIMEOUT_S)
            self._consumer.subscribe([SOURCE])
            while self.copied < self.total and not self.stop.is_set():
                messages = [m for m in self._consumer.consume(PER_TRANSACTION, 0.5)
                            if m.error() is None]
                if messages:
                    self._transaction(messages)
        except BaseException as failure:  # the test reports it
            self.failure = failure
        finally:
            self._consumer.close()

    def _transaction(self, messages: list[Any]) -> None:
        """Copies `messages` with the consumer's positions in one transaction; on an error
        that requires it, aborts and rewinds the consumer to the committed offsets."""
        try:
            self._producer.begin_transaction()
            for message in messages:
                self._producer.produce(SINK, message.value(), message.key(),
                                       partition=message.partition())
            if self.committed_transactions == OPEN_AT and not self.open.is_set():
                assert self._producer.flush(CLIENT_TIMEOUT_S) == 0
                self.open.set()
                self.go.wait(CLIENT_TIMEOUT_S * 2)
            positions = self._consumer.position(self._consumer.assignment())
            metadata = self._consumer.consumer_group_metadata()
            _retried(lambda: self._producer.send_offsets_to_transaction(
                positions, metadata, CLIENT_TIMEOUT_S))
            _retried(lambda: self._producer.commit_transaction(CLIENT_TIMEOUT_S))
            self.copied += len(messages)
            self.committed_transactions += 1
        except KafkaException as raised:
            error: KafkaError = raised.args[0]
            if not error.txn_requires_abort():
                raise
            self.aborts.append(str(error))
            _retried(lambda: self._producer.abort_transaction(CLIENT_TIMEOUT_S))
            self._rewind()

    def _rewind(self) -> None:
        """Seeks each assigned partition back to the group's committed offset (its start
        without one), as the aborted transaction's records will be copied again."""
        assignment = self._consumer.assignment()
        for committed in self._consumer.committed(assignment, CLIENT_TIMEOUT_S):
            offset = committed.offset if committed.offset >= 0 else 0
            self._consumer.seek(TopicPartition(committed.topic, committed.partition, offset))


def _retried(call: Callable[[], None]) -> None:
    """`call` again while it fails with a retriable error (a timeout), as Kafka's exactly-once
    examples retry send_offsets_to_transaction, commit and abort."""
    while True:
        try:
            call()
            return
        except KafkaException as raised:
            if not raised.args[0].retriable():
                raise


def _transaction_coordinator(cluster: LocalCluster, alive: list[int]) -> int | None:
    """The node coordinating TXN_ID as a live node's Kafka listener names it (None while none
    does)."""
    for node in alive:
        try:
            answer = ask(cluster.kafka_address_of(node),
                         FindCoordinatorRequest(key=TXN_ID, key_type=TRANSACTION_KEY))
        except OSError:
            continue
        if answer.error_code == ErrorCode.none:
            return int(answer.node_id)
    return None


def _read_committed(cluster: LocalCluster, partition: int, count: int) -> list[bytes]:
    """The output partition's values a read_committed consumer reads up to its end (at least
    `count` of them)."""
    consumer = Consumer({
        "bootstrap.servers": cluster.kafka_bootstrap, "group.id": "eos-checker",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True, **CONFLUENT_QUIET,
    })
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(SINK, partition, 0)])

        def at_end() -> bool:
            message = consumer.poll(0.5)
            if message is None:
                return False
            if message.error() is None:
                values.append(message.value())
                return False
            return message.error().code() == KafkaError._PARTITION_EOF and len(values) >= count

        wait_for(at_end, CLIENT_TIMEOUT_S * 2, f"the output of partition {partition}")
        return values
    finally:
        consumer.close()


def test_consume_transform_produce_is_exactly_once_across_a_coordinator_kill(
    cluster: LocalCluster,
) -> None:
    with Client(cluster.bootstrap) as client:
        for topic in (SOURCE, SINK):
            client.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        wait_for(lambda: all(len(p.isr) == 3 and p.leader >= 0
                             for info in client.describe_topics([SOURCE, SINK]).values()
                             for p in info.partitions),
                 CLIENT_TIMEOUT_S, "both topics' replicas in sync")
    inputs = {p: [f"p{p}-{i}".encode() for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    feeder = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 5,
                       "enable.idempotence": True, **CONFLUENT_QUIET})
    for partition, values in inputs.items():
        for value in values:
            feeder.produce(SOURCE, value, partition=partition)
    assert feeder.flush(CLIENT_TIMEOUT_S) == 0

    copier = Copier(cluster.kafka_bootstrap, PARTITIONS * PER_PARTITION)
    copier.start()
    try:
        # Mid-run: a few transactions committed, one open with its records written, most of
        # the input still to copy.
        wait_for(lambda: copier.open.is_set() or not copier.is_alive(),
                 CLIENT_TIMEOUT_S * 2, "the copier's open transaction")
        assert copier.failure is None, copier.failure
        victim = wait_for(lambda: _transaction_coordinator(cluster, cluster.node_ids),
                          CLIENT_TIMEOUT_S, "the transaction coordinator")
        copied_at_kill = copier.copied
        cluster.kill(victim)
        survivors = [n for n in cluster.node_ids if n != victim]
        # The survivors name the dead node until the transaction log's partition elects
        # another leader (as Kafka names a dead broker until its session runs out).
        wait_for(lambda: _transaction_coordinator(cluster, survivors) not in (None, victim),
                 CLIENT_TIMEOUT_S * 2, "a new transaction coordinator")
        copier.go.set()
        cluster.restart(victim)
        copier.join(CLIENT_TIMEOUT_S * 4)
        assert not copier.is_alive(), (
            f"the copier stalled at {copier.copied} records after {copier.aborts}")
    finally:
        copier.go.set()
        copier.stop.set()
        copier.join(CLIENT_TIMEOUT_S)
    assert copier.failure is None, copier.failure
    assert copied_at_kill < copier.total, "the kill came after the copy ended"
    print(f"coordinator {victim} killed at {copied_at_kill} records copied, then "
          f"{copier.committed_transactions} transactions committed, aborts: {copier.aborts}")

    # Exactly once, in order: each output partition is its input partition.
    for partition, values in inputs.items():
        assert _read_committed(cluster, partition, len(values)) == values
    # The group's offsets are the input's end (once the last transaction's markers landed:
    # a committed transaction's offsets show when its marker is written, as in Kafka).
    end = {(SOURCE, p): PER_PARTITION for p in range(PARTITIONS)}
    with Client(cluster.bootstrap) as client:

        def committed() -> dict[tuple[str, int], int]:
            found = client.admin.list_consumer_group_offsets(GROUP)
            return {(tp.topic, tp.partition): o.offset for tp, o in found.items()}

        wait_for(lambda: committed() == end, CLIENT_TIMEOUT_S, "the group's final offsets")
