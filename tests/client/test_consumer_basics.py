"""The consumer calls a Kafka user expects (issue 19): poll() with nothing to read raises
IllegalStateError, pause()/resume()/paused(), max_poll_records, iterating over the consumer
until consumer_timeout_ms, close() committing and every call after it raising, and settings of
features Tidelog lacks failing with the feature's name. One cluster for the module; the
fetch policy's test needs none."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest
from waiting_helpers import poll_records

from tidelog import Client, TopicPartition, errors
from tidelog.consumer.fetcher import _Round
from tidelog.partitioned import Attempt
from tidelog.records import RecordInput, assign_offsets, build_batch
from tidelog.testing import LocalCluster, wait_for
from tidelog.wire import FetchAnswer, FetchPosition

pytestmark = pytest.mark.timeout(180)

TOPIC = "basics"
PER_PARTITION = 30
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as shared:
        shared.create_topic(TOPIC, partitions=2)
        producer = shared.producer(acks="all")
        for p in (0, 1):
            for i in range(PER_PARTITION):
                producer.send(TOPIC, f"{p}-{i}".encode(), partition=p)
        producer.flush()
        producer.close()
        yield shared


def _offsets(records: list, partition: int) -> list[int]:
    return [r.offset for r in records if r.partition == partition]


def test_poll_needs_partitions_and_paused_partitions_keep_their_position(client: Client) -> None:
    consumer = client.consumer(auto_offset_reset="earliest")
    with pytest.raises(errors.IllegalStateError, match="assign"):
        consumer.poll(timeout_ms=0)
    consumer.assign([])
    with pytest.raises(errors.IllegalStateError, match="assign"):
        consumer.poll(timeout_ms=0)
    consumer.assign([TP0, TP1])
    with pytest.raises(errors.ConfigurationError, match="not assigned"):
        consumer.pause(TopicPartition("other", 0))
    consumer.pause(TP0)
    assert consumer.paused() == {TP0}

    records = poll_records(consumer, PER_PARTITION)
    assert _offsets(records, 1) == list(range(PER_PARTITION)) and not _offsets(records, 0)
    assert consumer.poll(timeout_ms=300) == []  # TP1 is drained, TP0 paused
    assert consumer.position(TP0) == 0

    consumer.resume(TP0)
    assert consumer.paused() == set()
    assert _offsets(poll_records(consumer, PER_PARTITION), 0) == list(range(PER_PARTITION))
    consumer.assign([TP1])  # a partition leaving the assignment leaves the paused set too
    consumer.pause(TP1)
    consumer.assign([TP0])
    assert consumer.paused() == set()
    consumer.close()


def test_max_poll_records_hands_out_the_rest_by_later_polls(client: Client) -> None:
    consumer = client.consumer(group_id="basics-max", auto_offset_reset="earliest",
                               enable_auto_commit=False, max_poll_records=7)
    consumer.assign([TP0])
    first = wait_for(lambda: consumer.poll(timeout_ms=500), what="the first records")
    assert [r.offset for r in first] == list(range(7))
    # The position and the commit are those of the records handed out, not of the fetch.
    assert consumer.position(TP0) == 7
    consumer.commit()
    assert consumer.committed([TP0])[TP0].offset == 7  # type: ignore[union-attr]

    rest: list = []
    while len(rest) < PER_PARTITION - 7:
        batch = consumer.poll(timeout_ms=500)
        assert len(batch) <= 7
        rest += batch
    assert [r.offset for r in rest] == list(range(7, PER_PARTITION))
    consumer.seek(TP0, 3)  # a seek drops what was fetched beyond the records handed out
    assert [r.offset for r in consumer.poll(timeout_ms=2000)] == list(range(3, 10))
    consumer.close()


def test_iteration_stops_after_consumer_timeout_and_close_ends_the_consumer(
    client: Client,
) -> None:
    consumer = client.consumer(group_id="basics-iter", auto_offset_reset="earliest",
                               consumer_timeout_ms=3000)
    consumer.assign([TP1])
    assert consumer.position(TP1) == 0
    assert [record.offset for record in consumer] == list(range(PER_PARTITION))

    consumer.close()  # auto-commit is on: close commits the positions
    reader = client.consumer(group_id="basics-iter")
    assert reader.committed([TP1])[TP1].offset == PER_PARTITION  # type: ignore[union-attr]
    reader.close()
    for call in (lambda: consumer.poll(timeout_ms=0), lambda: next(consumer),
                 lambda: consumer.assign([TP0]), lambda: consumer.pause(TP1),
                 lambda: consumer.seek(TP1, 0), lambda: consumer.position(TP1),
                 lambda: consumer.commit()):
        with pytest.raises(errors.IllegalStateError, match="closed"):
            call()
    consumer.close()  # a second close does nothing


def test_settings_of_features_not_built_name_the_feature(client: Client) -> None:
    with pytest.raises(errors.ConfigurationError, match="KIP-392"):
        client.consumer(client_rack="rack-1")
    with pytest.raises(errors.ConfigurationError, match="KIP-848"):
        client.consumer(group_id="g", partition_assignment_strategy=["range"])
    with pytest.raises(errors.ConfigurationError, match=r"Client\(\.\.\.\)"):
        client.consumer(bootstrap_servers="localhost:9092")
    with pytest.raises(errors.ConfigurationError, match="unknown consumer setting 'max_poll'"):
        client.consumer(max_poll=5)
    with pytest.raises(errors.ConfigurationError, match="max_poll_records"):
        client.consumer(max_poll_records=0)


def test_a_fetch_sent_ahead_is_dropped_for_a_partition_seeked_paused_or_unassigned(
    client: Client,
) -> None:
    """poll() sends the next Fetch before it returns records (issue 18: Kafka's consumer
    does, so the network wait overlaps the application's work). Its answer must not reach
    the application for a partition seeked, paused or unassigned while it was in flight.
    The long-poll wait is long so that each answer carries the record sent meanwhile.
    Before: no Fetch was in flight after poll() returned."""
    topic = "ahead"
    tp = TopicPartition(topic, 0)
    client.create_topic(topic, partitions=1)
    producer = client.producer(acks="all")

    def send(value: bytes) -> None:
        producer.send(topic, value, partition=0).result(timeout=30)

    def answered() -> None:  # the Fetch sent ahead has come back, holding the new record
        wait_for(lambda: all(r.future.done() for r in consumer._fetcher.rounds), what="the answer")

    for i in range(3):
        send(b"v%d" % i)
    consumer = client.consumer(auto_offset_reset="earliest", fetch_max_wait_ms=20_000)
    consumer.assign([tp])
    assert [r.value for r in poll_records(consumer, 3)] == [b"v0", b"v1", b"v2"]
    assert [set(r.live) for r in consumer._fetcher.rounds] == [{tp}]  # the next Fetch, in flight

    send(b"v3")
    answered()
    consumer.seek(tp, 1)  # the answer (v3 at offset 3) is dropped, and 1 fetched again
    assert [(r.offset, r.value) for r in poll_records(consumer, 3)] == [
        (1, b"v1"), (2, b"v2"), (3, b"v3")
    ]

    consumer.pause(tp)
    send(b"v4")
    answered()
    assert consumer.poll(timeout_ms=300) == [] and consumer.position(tp) == 4
    consumer.resume(tp)
    assert [(r.offset, r.value) for r in poll_records(consumer, 1)] == [(4, b"v4")]

    consumer.assign([])
    send(b"v5")
    answered()
    consumer.assign([tp])  # no position: auto_offset_reset, not the dropped answer's offset
    assert [r.offset for r in poll_records(consumer, 6)] == list(range(6))
    consumer.close()
    producer.close()


def test_partitions_answered_together_are_fetched_again_together() -> None:
    """Two partitions of one answer: the one drained first is not fetched alone while the
    other still has records (they go again in one request once both are drained), unless
    the other is paused. Before: each went back in a request of its own as soon as it was
    drained, twice the Fetch requests for a consumer of two partitions per leader."""
    batch = build_batch([RecordInput(b"v%d" % i, None, 1000) for i in range(4)])
    answer = FetchAnswer(assign_offsets(batch, 0, 1), 4, 4, 0, ())
    with Client("127.0.0.1:9") as client:  # never connected: the answers are handed in here
        consumer = client.consumer(max_poll_records=4)
        consumer.assign([TP0, TP1])
        for tp in (TP0, TP1):
            consumer.seek(tp, 0)
        future: concurrent.futures.Future[Attempt[FetchAnswer]] = concurrent.futures.Future()
        future.set_result(Attempt(answers={TP0: answer, TP1: answer}))
        work = {TP0: FetchPosition(0, -1), TP1: FetchPosition(0, -1)}
        consumer._fetcher.rounds.append(_Round(future, work, {TP0, TP1}))
        consumer._fetcher.collect()
        first = consumer._fetcher.drain(4)
        assert len(first) == 4 and len({r.partition for r in first}) == 1
        assert consumer._fetcher.fetchable() == {}
        other = TP1 if first[0].partition == 0 else TP0
        consumer.pause(other)
        assert list(consumer._fetcher.fetchable()) == [TP0 if other == TP1 else TP1]
        consumer.resume(other)
        assert len(consumer._fetcher.drain(4)) == 4
        assert consumer._fetcher.fetchable() == {TP0: 4, TP1: 4}
        consumer.close()
