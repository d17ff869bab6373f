"""The consumer as a kafka-python user calls it (issue 29): key/value deserializers,
poll(max_records=) and poll()'s answer read as ``{TopicPartition: [records]}``, highwater(),
topics(), partitions_for_topic(), metrics(); and every argument of its entry points checked
where it is passed, a wrong one a ConfigurationError. Against one real node."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidelog import Client, ConfigurationError, TopicPartition
from tidelog.consumer import Consumer
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

TOPIC = "consumer-names"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
PER_PARTITION = 3
WAIT_S = 30.0


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(1) as cluster, Client(bootstrap_servers=cluster.bootstrap) as c:
        c.create_topic(TOPIC, partitions=2)
        with c.producer(key_serializer=str.encode,
                        value_serializer=lambda v: json.dumps(v).encode()) as producer:
            for n in range(PER_PARTITION):
                for tp in (TP0, TP1):
                    producer.send(TOPIC, {"n": n}, key=f"k{n}", partition=tp.partition)
            producer.flush(timeout=WAIT_S)
        yield c


def poll_until(consumer: Consumer, count: int, **kwargs: Any) -> list[Any]:
    """Poll (with a deadline) until `count` records came."""
    deadline = time.monotonic() + WAIT_S
    records: list[Any] = []
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records"
        records += consumer.poll(timeout_ms=500, **kwargs)
    return records


def test_deserializers_poll_as_a_dict_and_the_lookups(client: Client) -> None:
    consumer = client.consumer(key_deserializer=lambda k: None if k is None else k.decode(),
                               value_deserializer=json.loads, auto_offset_reset="earliest")
    try:
        assert consumer.highwater(TP0) is None  # not assigned
        consumer.assign([TP0, TP1])
        assert consumer.highwater(TP0) is None  # nothing fetched yet
        first = poll_until(consumer, 1, max_records=1)
        assert len(first) == 1 and first[0].value == {"n": 0} and first[0].key == "k0"
        rest = poll_until(consumer, 2 * PER_PARTITION - 1)
        assert len(rest) == 2 * PER_PARTITION - 1
        assert consumer.highwater(TP0) == consumer.highwater(TP1) == PER_PARTITION
        # kafka-python's shape: {TopicPartition: [records]} from the same answer.
        consumer.seek_to_beginning()
        deadline = time.monotonic() + WAIT_S
        polled = consumer.poll(timeout_ms=500)
        while not polled:
            assert time.monotonic() < deadline
            polled = consumer.poll(timeout_ms=500)
        grouped = dict(polled.items())
        assert set(grouped) == set(polled.keys()) and set(grouped) <= {TP0, TP1}
        for tp, records in grouped.items():
            assert polled[tp] == records == polled.get(tp)
            assert [r.offset for r in records] == sorted(r.offset for r in records)
            assert all(TopicPartition(r.topic, r.partition) == tp for r in records)
        assert sum(map(len, polled.values())) == len(polled)
        assert polled[0] is next(iter(polled)) and isinstance(polled, list)

        assert TOPIC in consumer.topics() and isinstance(consumer.topics(), set)
        assert consumer.partitions_for_topic(TOPIC) == {0, 1}
        assert consumer.partitions_for_topic("consumer-names-none") is None
        metrics = consumer.metrics()["consumer-metrics"]
        assert metrics["records-consumed-total"] == 2 * PER_PARTITION + len(polled)
        assert metrics["assigned-partitions"] == 2
    finally:
        consumer.close()


BAD_CALLS: list[tuple[str, Callable[[Consumer], Any], str]] = [
    ("assign a str", lambda c: c.assign(TOPIC), "list of TopicPartition"),
    ("assign one partition", lambda c: c.assign(TP0), "list of TopicPartition"),
    ("negative partition", lambda c: c.assign([TopicPartition(TOPIC, -1)]),
     "numbered from 0"),
    ("str partition", lambda c: c.assign([(TOPIC, "0")]), "TopicPartition"),
    ("topic not a str", lambda c: c.assign([(5, 0)]), "TopicPartition"),
    ("seek a str", lambda c: c.seek(TP0, "5"), "offset"),
    ("seek negative", lambda c: c.seek(TP0, -1), "offset"),
    ("pause a str", lambda c: c.pause((TOPIC, "x")), "TopicPartition"),
    ("position of a str", lambda c: c.position(TOPIC), "TopicPartition"),
    ("poll a str timeout", lambda c: c.poll(timeout_ms="1"), "timeout_ms"),
    ("poll no records", lambda c: c.poll(max_records=0), "max_records"),
    ("committed one", lambda c: c.committed(TP0), "list of TopicPartition"),
    ("end_offsets a str", lambda c: c.end_offsets(TOPIC), "list of TopicPartition"),
    ("beginning_offsets", lambda c: c.beginning_offsets([(TOPIC, -2)]), "numbered from 0"),
    ("a str timestamp", lambda c: c.offsets_for_times({TP0: "now"}), "timestamp"),
    ("times of a list", lambda c: c.offsets_for_times([TP0]), "mapping"),
    ("highwater of a str", lambda c: c.highwater(TOPIC), "TopicPartition"),
    ("partitions_for_topic", lambda c: c.partitions_for_topic(3), "topic name"),
    ("deserializer", lambda c: c.__class__(c.connections, c.config.__class__(
        value_deserializer="json")), "value_deserializer"),
]


@pytest.mark.parametrize(("call", "named"), [(c, n) for _, c, n in BAD_CALLS],
                         ids=[i for i, _, _ in BAD_CALLS])
def test_bad_arguments_are_refused_naming_them(
    client: Client, call: Callable[[Consumer], Any], named: str
) -> None:
    consumer = client.consumer(group_id="consumer-names")
    try:
        consumer.assign([TP0])
        with pytest.raises(ConfigurationError, match=named):
            call(consumer)
        assert consumer.assignment() == {TP0}
    finally:
        consumer.close(autocommit=False)
