"""Idempotent producing end to end: nodes drop a share of Produce answers after the write
(``test.drop.produce.response.rate``) and leaders are killed mid-run, so the producer retries
batches the log already holds, also against new leaders. The log must still hold every record
exactly once, in send order per partition."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from waiting_helpers import poll_to

from tidelog import Client, OffsetSpec, TopicPartition
from tidelog.testing import LocalCluster
from tidelog.types import ConsumerRecord

pytestmark = pytest.mark.timeout(240)

RECORDS = 12_000
CHUNK = 500
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"test.drop.produce.response.rate": 0.1}


def test_lost_acknowledgements_and_leader_kills_write_each_record_once_in_order(
    cluster: LocalCluster,
) -> None:
    topic = "exactly-once"
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Client(cluster.bootstrap) as client:
        client.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        sent: dict[int, list[bytes]] = defaultdict(list)
        offsets: dict[bytes, int] = {}
        killed: list[int] = []
        with client.producer(linger_ms=2, batch_size=4096) as producer:
            for chunk in range(RECORDS // CHUNK):
                futures = [
                    (b"%d" % i, producer.send(topic, b"%d" % i, key=b"key-%d" % (i % 97)))
                    for i in range(chunk * CHUNK, (chunk + 1) * CHUNK)
                ]
                if chunk in (6, 14):  # while this chunk is lingering or in flight
                    if killed:
                        cluster.restart(killed[-1])
                    victim = cluster.leader_of((topic, len(killed)))
                    assert victim is not None
                    cluster.kill(victim)
                    killed.append(victim)
                for value, future in futures:
                    meta = future.result(timeout=120)
                    sent[meta.partition].append(value)
                    offsets[value] = meta.offset
            assert producer.producer_id[0] >= 0
            assert producer.retries > 0
        cluster.restart(killed[-1])

        ends = client.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()))
        consumer = client.consumer(auto_offset_reset="earliest")
        consumer.assign(tps)
        got: dict[int, list[ConsumerRecord]] = defaultdict(list)
        for record in poll_to(consumer, {tp: ends[tp].offset for tp in tps}):
            got[record.partition].append(record)

    assert sum(len(v) for v in sent.values()) == RECORDS
    for partition in range(PARTITIONS):
        assert [r.value for r in got[partition]] == sent[partition], f"partition {partition}"
        for record in got[partition]:
            # -1 only for DUPLICATE_SEQUENCE_NUMBER answers, whose offsets are unknown (Kafka).
            assert offsets[record.value or b""] in (record.offset, -1)


def test_a_new_producer_epoch_never_writes_a_sent_batch_twice() -> None:
    """Most answers lost and a short delivery timeout: batches time out with their outcome
    unknown and the producer must take a new epoch while the other partition's batch, already
    written but unacknowledged, waits for a retry. That batch must be failed, not renumbered
    under the new epoch (the leader could not recognise it and would write it again)."""
    with LocalCluster(1, **{"test.drop.produce.response.rate": 0.8}) as c:
        client = Client(c.bootstrap)
        try:
            client.create_topic("epochs", partitions=2, replication_factor=1)
            producer = client.producer(acks="all", delivery_timeout_ms=1500, linger_ms=1)
            futures = []
            for i in range(1500):
                futures.append(producer.send("epochs", b"v%d" % i, partition=i % 2))
                time.sleep(0.005)  # pacing the workload, not synchronisation
            producer.flush(timeout_ms=60_000)
            producer.close()
            tps = [TopicPartition("epochs", p) for p in range(2)]
            ends = client.list_offsets({tp: OffsetSpec.latest() for tp in tps})
            consumer = client.consumer(auto_offset_reset="earliest")
            consumer.assign(tps)
            values = [r.value for r in poll_to(consumer, {tp: ends[tp].offset for tp in tps})]
        finally:
            client.close()
    failed = sum(1 for f in futures if f.exception() is not None)
    assert failed > 0, "the scenario did not force a new producer epoch"
    duplicates = sorted({v for v in values if values.count(v) > 1})
    assert not duplicates, f"written twice: {duplicates[:10]}"
