"""A partition's leader is killed under a Kafka client's idempotent producer and a Kafka
consumer reading it, on a 3-node cluster (replication factor 3): the producer's records land
once each, in order, with no gap (its retries of batches the old leader had replicated are
recognised by the new leader's producer state), and the consumer follows the new leader and
reads every record, as kafka-python's and aiokafka's consumers do. A leader moved on purpose
(a reassignment that puts another replica first, then a preferred-leader election) is
followed the same way while production goes on; the consumer's longest wait is printed."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import confluent_kafka
import pytest
from kafka_clients import CLIENT_TIMEOUT_S, CONFLUENT_QUIET, READERS, Rec, read_tidelog
from kafka_wire import ask
from kio.schema.errors import ErrorCode
from kio.schema.produce.v10.request import PartitionProduceData, ProduceRequest, TopicProduceData

from tidelog.client import Client
from tidelog.testing import LocalCluster, wait_for
from tidelog.types import TopicPartition

pytestmark = pytest.mark.timeout(90)

TOPIC = "idempotent"
#: Records written before the leader dies, and after.
BEFORE, AFTER = 150, 150


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 3}


class Follower(threading.Thread):
    """A confluent-kafka consumer reading the partition from offset 0 until it has `count`
    records (or is stopped), noting when each came."""

    def __init__(self, bootstrap: str, count: int, topic: str = TOPIC) -> None:
        super().__init__(daemon=True)
        self.count = count
        self.values: list[bytes] = []
        self.arrivals: list[float] = []
        self.errors: list[Any] = []
        self.stop = threading.Event()
        self._consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": "tidelog-follower",
            "enable.auto.commit": False, "fetch.wait.max.ms": 100, **CONFLUENT_QUIET,
        })
        self._consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])

    def run(self) -> None:
        try:
            while len(self.values) < self.count and not self.stop.is_set():
                message = self._consumer.poll(0.1)
                if message is None:
                    continue
                if message.error() is not None:
                    self.errors.append(message.error())
                    continue
                self.values.append(message.value())
                self.arrivals.append(time.monotonic())
        finally:
            self._consumer.close()


def _a_follower_names_the_leader(cluster: LocalCluster) -> None:
    """A Produce sent to a follower is NOT_LEADER_OR_FOLLOWER with the leader, its epoch and
    its Kafka address (KIP-951), and nothing is written."""
    leader = cluster.leader_of((TOPIC, 0))
    assert leader is not None
    follower = next(n for n in cluster.node_ids if n != leader)
    answer = ask(cluster.kafka_address_of(follower), ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name=TOPIC, partition_data=(
            PartitionProduceData(index=0, records=b""),)),),
    ))
    [part] = answer.responses[0].partition_responses
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.current_leader.leader_id == leader and part.current_leader.leader_epoch >= 0
    assert [(e.node_id, f"{e.host}:{e.port}") for e in answer.node_endpoints] == [
        (leader, cluster.kafka_address_of(leader))]


def _in_sync_topic(cluster: LocalCluster, topic: str) -> None:
    """`topic`, one partition on the three nodes, every replica in sync (a node a test of
    this module killed is started again first)."""
    for node in cluster.node_ids:
        if not cluster.is_running(node):
            cluster.restart(node)
    with Client(cluster.bootstrap) as client:
        client.create_topic(topic, partitions=1, replication_factor=3)
        wait_for(lambda: all(len(p.isr) == 3 and p.leader >= 0 for p in
                             client.describe_topics([topic])[topic].partitions),
                 CLIENT_TIMEOUT_S, f"{topic}'s three replicas in sync")


def test_idempotent_producer_and_consumer_across_a_leader_kill(cluster: LocalCluster) -> None:
    _in_sync_topic(cluster, TOPIC)
    _a_follower_names_the_leader(cluster)
    values = [f"{i}".encode() for i in range(BEFORE + AFTER)]
    follower = Follower(cluster.kafka_bootstrap, len(values))
    follower.start()
    # kafka-python and aiokafka consumers follow the partition too, each in its own thread.
    others: dict[str, list[Rec]] = {}
    threads = [
        threading.Thread(target=lambda name=name: others.__setitem__(
            name, READERS[name](cluster.kafka_bootstrap, TOPIC, 0, len(values))), daemon=True)
        for name in ("kafka-python", "aiokafka")
    ]
    for thread in threads:
        thread.start()
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True,
        "linger.ms": 5, "message.timeout.ms": 60_000, **CONFLUENT_QUIET,
    })
    failures: list[Any] = []

    def produce(part: list[bytes]) -> None:
        for value in part:
            producer.produce(TOPIC, value=value, key=b"k", partition=0, on_delivery=lambda err,
                             _m: failures.append(err) if err is not None else None)
            producer.poll(0)

    try:
        produce(values[:BEFORE])
        leader = cluster.leader_of((TOPIC, 0))
        assert leader is not None
        # The leader dies with batches in flight; the rest is written while it is gone.
        cluster.kill(leader)
        killed_at = time.monotonic()
        produce(values[BEFORE:])
        assert producer.flush(60) == 0, "the idempotent producer did not deliver every record"
        assert failures == []
        follower.join(CLIENT_TIMEOUT_S * 2)
    finally:
        follower.stop.set()
        follower.join(CLIENT_TIMEOUT_S)
        for thread in threads:
            thread.join(CLIENT_TIMEOUT_S * 2)
    survivor = next(n for n in cluster.node_ids if n != leader)
    stored = read_tidelog(cluster.address_of(survivor), TOPIC, 0, len(values))
    # No duplicate, no gap: each record once, at consecutive offsets, in the order sent.
    assert [r.value for r in stored] == values
    assert [r.offset for r in stored] == list(range(len(values)))
    assert follower.values == values
    assert {name: [r.value for r in got] for name, got in others.items()} == {
        "kafka-python": values, "aiokafka": values}
    after = [t for t in follower.arrivals if t >= killed_at]
    stall = max((b - a for a, b in zip([killed_at, *after], after, strict=False)), default=0.0)
    print(f"consumer's longest wait for a record after the leader's kill: {stall:.2f} s")


class Paced(threading.Thread):
    """An idempotent confluent-kafka producer writing "0", "1", ... to partition 0 of `topic`,
    one record every PACE_S, until stopped; `sent` counts what it handed to the client."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.sent = 0
        #: What flush left undelivered once stopped (-1 before).
        self.unsent = -1
        self.failures: list[Any] = []
        self.stop = threading.Event()
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
            "message.timeout.ms": 60_000, **CONFLUENT_QUIET,
        })

    def run(self) -> None:
        while not self.stop.wait(PACE_S):
            self._producer.produce(self.topic, value=f"{self.sent}".encode(), partition=0,
                                   on_delivery=self._delivered)
            self.sent += 1
            self._producer.poll(0)
        self.unsent = self._producer.flush(CLIENT_TIMEOUT_S * 2)

    def _delivered(self, err: Any, _message: Any) -> None:
        if err is not None:
            self.failures.append(err)


#: The producer's pace while the leader moves: a record every 10 ms.
PACE_S = 0.01


def test_a_leader_move_mid_consume_is_followed(cluster: LocalCluster) -> None:
    """The leader moves to another in-sync replica while a producer writes and a consumer
    reads: every record is read once, in order; the consumer's longest wait for a record from
    the move's start is printed (the figure the compatibility page gives)."""
    topic = "moved"
    _in_sync_topic(cluster, topic)
    tp = TopicPartition(topic, 0)
    follower = Follower(cluster.kafka_bootstrap, 10**9, topic)
    producer = Paced(cluster.kafka_bootstrap, topic)
    follower.start()
    producer.start()
    try:
        wait_for(lambda: len(follower.values) >= 50, CLIENT_TIMEOUT_S, "records before the move")
        leader = cluster.leader_of((topic, 0))
        assert leader is not None
        target = next(n for n in cluster.node_ids if n != leader)
        moved_at = time.monotonic()
        with Client(cluster.bootstrap) as client:
            # The target first among the same replicas (nothing to copy), then elected.
            others = [n for n in cluster.node_ids if n != target]
            assert client.admin.alter_partition_reassignments({tp: [target, *others]}) == {}
            wait_for(lambda: client.describe_topics([topic])[topic].partitions[0].replicas[0]
                     == target, CLIENT_TIMEOUT_S, "the target named preferred")
            wait_for(lambda: (client.admin.elect_leaders("preferred", [tp]).get(tp) is None
                              or cluster.leader_of((topic, 0)) == target),
                     CLIENT_TIMEOUT_S, f"node {target} elected")
        assert cluster.leader_of((topic, 0)) == target
        # Production goes on past the move; the consumer must keep up with it.
        after = producer.sent + 50
        wait_for(lambda: len(follower.values) >= after, CLIENT_TIMEOUT_S,
                 "records written after the move")
    finally:
        producer.stop.set()
        producer.join(CLIENT_TIMEOUT_S * 3)
    try:
        assert producer.unsent == 0 and producer.failures == []
        wait_for(lambda: len(follower.values) >= producer.sent, CLIENT_TIMEOUT_S,
                 "every record read")
    finally:
        follower.stop.set()
        follower.join(CLIENT_TIMEOUT_S)
    # No gap, no duplicate, in order.
    assert follower.values == [f"{i}".encode() for i in range(producer.sent)]
    after_move = [t for t in follower.arrivals if t >= moved_at]
    stall = max((b - a for a, b in zip([moved_at, *after_move], after_move, strict=False)),
                default=0.0)
    print(f"consumer's longest wait for a record from the leader move's start: {stall:.2f} s")
