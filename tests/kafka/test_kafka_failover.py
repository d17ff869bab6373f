"""A partition's leader is killed under a Kafka client's idempotent producer and a Kafka
consumer reading it, on a 3-node cluster (replication factor 3): the producer's records land
once each, in order, with no gap (its retries of batches the old leader had replicated are
recognised by the new leader's producer state), and the consumer follows the new leader and
reads every record, as kafka-python's and aiokafka's consumers do."""

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

    def __init__(self, bootstrap: str, count: int) -> None:
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
        self._consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])

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


def test_idempotent_producer_and_consumer_across_a_leader_kill(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap) as client:
        client.create_topic(TOPIC, partitions=1, replication_factor=3)
        wait_for(lambda: all(len(p.isr) == 3 and p.leader >= 0 for p in
                             client.describe_topics([TOPIC])[TOPIC].partitions),
                 CLIENT_TIMEOUT_S, "the partition's three replicas in sync")
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
