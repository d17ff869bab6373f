"""The client takes a Kafka user's names (issue 29): kafka-python's settings (bootstrap_servers,
client_id, enable_idempotence, max_in_flight_requests_per_connection, retries,
request_timeout_ms, serializers, a partitioner), its futures (get, add_callback, add_errback)
and flush(timeout); an unknown or mistyped setting is a ConfigurationError naming it, never a
TypeError. Against a real cluster of three nodes, one of them stopped at the start."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tidelog import Client, ConfigurationError, TopicPartition, errors
from tidelog.producer import Producer, ProducerConfig
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

TOPIC = "names"
PARTITIONS = 3
#: min.insync.replicas 3 on a topic of three replicas, one of them stopped: every acks=all
#: write is refused with NOT_ENOUGH_REPLICAS, a retriable error, which is what `retries`
#: bounds (once the stopped replica has left the in-sync set, after LAG_MS).
GUARDED = "names-guarded"
LAG_MS = 1000
RESULT_S = 30.0
SETUP_S = 60.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, replica_lag_max_ms=LAG_MS) as c:
        with Client(bootstrap_servers=c.bootstrap) as client:
            client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
            client.create_topic(GUARDED, partitions=1, replication_factor=3,
                                config={"min.insync.replicas": "3"})
            c.stop(3)
            wait_until_refused(client)
        yield c


def wait_until_refused(client: Client) -> None:
    """Poll (with a deadline) until an acks=all write to GUARDED is refused."""
    deadline = time.monotonic() + SETUP_S
    with client.producer(retries=0, enable_idempotence=False) as probe:
        while True:
            try:
                probe.send(GUARDED, b"probe").get(RESULT_S)
            except errors.NotEnoughReplicasError:
                return
            except errors.RetriableError:
                pass  # the stopped node led it: an election is under way
            assert time.monotonic() < deadline, "GUARDED never refused a write"


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(bootstrap_servers=cluster.bootstrap.split(","), client_id="kafka-names") as c:
        yield c


def read_all(client: Client, tp: TopicPartition) -> list[Any]:
    consumer = client.consumer()
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        records: list[Any] = []
        while consumer.position(tp) < end:
            records += consumer.poll(timeout_ms=1000)
        return records
    finally:
        consumer.close()


# ---- settings --------------------------------------------------------------------------------


def test_kafka_python_names_are_aliases_of_tidelogs() -> None:
    config = ProducerConfig.from_settings(
        enable_idempotence=False, max_in_flight_requests_per_connection=3, retries=7
    )
    assert (config.idempotent, config.max_in_flight, config.retries) == (False, 3, 7)
    assert not config.idempotence
    with pytest.raises(ConfigurationError, match="enable_idempotence and idempotent"):
        ProducerConfig.from_settings(enable_idempotence=True, idempotent=True)
    client = Client(bootstrap_servers=["127.0.0.1:1", "127.0.0.1:2"], client_id="app",
                    request_timeout_ms=1234)
    assert client.config.bootstrap == ("127.0.0.1:1", "127.0.0.1:2")
    assert (client.config.client_id, client.config.request_timeout_ms) == ("app", 1234)
    assert Client(bootstrap_servers="127.0.0.1:1,127.0.0.1:2").config.bootstrap == (
        "127.0.0.1:1", "127.0.0.1:2")


def test_idempotence_follows_kafkas_rules() -> None:
    # Not asked for: off when a setting rules it out, as Kafka's producer decides.
    assert ProducerConfig().idempotence
    assert not ProducerConfig(retries=0).idempotence
    assert not ProducerConfig(max_in_flight=6).idempotence
    assert not ProducerConfig(acks=1).idempotence
    # Asked for: those settings are refused.
    for bad in ({"retries": 0}, {"max_in_flight_requests_per_connection": 6}, {"acks": 1}):
        with pytest.raises(ConfigurationError):
            ProducerConfig.from_settings(enable_idempotence=True, **bad)
    with pytest.raises(ConfigurationError, match="transactional"):
        ProducerConfig(transactional_id="t", retries=0)


@pytest.mark.parametrize(("settings", "named"), [
    ({"bogus": 1}, "bogus"),
    ({"batch_size": "16384"}, "batch_size"),
    ({"linger_ms": 1.5}, "linger_ms"),
    ({"retries": True}, "retries"),
    ({"retries": -1}, "retries"),
    ({"enable_idempotence": "yes"}, "enable_idempotence"),
    ({"value_serializer": "json"}, "value_serializer"),
    ({"partitioner": 3}, "partitioner"),
    ({"request_timeout_ms": 5000}, "request_timeout_ms"),  # the Client's
    ({"sasl_mechanism": "PLAIN"}, "sasl_mechanism"),  # not built
    ({"acks": []}, "acks"),
])
def test_a_bad_producer_setting_is_a_configuration_error_naming_it(
    client: Client, settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        client.producer(**settings)


@pytest.mark.parametrize(("settings", "named"), [
    ({"bootstrap_servers": "127.0.0.1:1", "bogus": 1}, "bogus"),
    ({"bootstrap_servers": "127.0.0.1:1", "linger_ms": 5}, "linger_ms"),  # the producer's
    ({"bootstrap_servers": 7}, "bootstrap_servers"),
    ({"bootstrap_servers": "127.0.0.1:99999"}, "bootstrap_servers"),
    ({"bootstrap_servers": ["127.0.0.1:1,127.0.0.1:2"]}, "bootstrap_servers"),
    ({}, "bootstrap_servers"),
    ({"bootstrap": "127.0.0.1:1", "bootstrap_servers": "127.0.0.1:1"}, "same setting"),
    ({"bootstrap_servers": "127.0.0.1:1", "client_id": 5}, "client_id"),
    ({"bootstrap_servers": "127.0.0.1:1", "request_timeout_ms": "30s"}, "request_timeout_ms"),
    ({"bootstrap_servers": "127.0.0.1:1", "security_protocol": 1}, "security_protocol"),
    ({"bootstrap_servers": "127.0.0.1:1", "ssl_cafile": 1}, "ssl_cafile"),
])
def test_a_bad_client_setting_is_a_configuration_error_naming_it(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        Client(**settings)


# ---- a producer as a Kafka user writes it ----------------------------------------------------


def test_a_producer_of_its_own_with_serializers_and_a_partitioner(cluster: LocalCluster) -> None:
    calls: list[tuple[bytes | None, list[int], list[int]]] = []

    def last_partition(key: bytes | None, all_partitions: list[int],
                       available: list[int]) -> int:
        calls.append((key, all_partitions, available))
        return all_partitions[-1]

    producer = Producer(
        bootstrap_servers=cluster.bootstrap, client_id="kafka-names", request_timeout_ms=20_000,
        enable_idempotence=True, max_in_flight_requests_per_connection=2, retries=5,
        key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode(),
        partitioner=last_partition,
    )
    try:
        assert producer.connections.config.request_timeout_ms == 20_000
        assert producer.partitions_for(TOPIC) == set(range(PARTITIONS))
        meta = producer.send(TOPIC, {"n": 1}, key="user-1").get(timeout=RESULT_S)
        assert meta.partition == PARTITIONS - 1
        assert calls[0][:2] == (b"user-1", [0, 1, 2]) and calls[0][2] == [0, 1, 2]
        # An explicit partition wins over the partitioner.
        assert producer.send(TOPIC, {"n": 2}, key="k", partition=0).get(RESULT_S).partition == 0
        with pytest.raises(ConfigurationError, match="key_serializer must return bytes"):
            Producer.sharing(producer.connections, ProducerConfig(
                key_serializer=lambda k: k)).send(TOPIC, b"v", key="not bytes")
        producer.flush(timeout=RESULT_S)
        metrics = producer.metrics()
        assert metrics["producer-metrics"]["record-send-total"] == 2
        assert metrics["client-metrics"]["client-id"] == "kafka-names"
    finally:
        producer.close(timeout=RESULT_S)
    with Client(cluster.bootstrap) as reader:
        records = read_all(reader, TopicPartition(TOPIC, PARTITIONS - 1))
    assert [(r.key, json.loads(r.value)) for r in records] == [(b"user-1", {"n": 1})]


def test_a_partitioner_answer_out_of_range_is_refused(client: Client) -> None:
    producer = client.producer(partitioner=lambda key, every, available: len(every))
    try:
        with pytest.raises(ConfigurationError, match="partitioner must return"):
            producer.send(TOPIC, b"v")
    finally:
        producer.close()


def test_retries_bound_the_resends_of_a_batch(client: Client) -> None:
    """NOT_ENOUGH_REPLICAS is retriable: with retries=2 a batch is sent three times, then
    fails with that error, long before its delivery timeout; retries=0 fails at the first."""
    for retries in (0, 2):
        producer = client.producer(retries=retries, enable_idempotence=False,
                                   delivery_timeout_ms=600_000)
        try:
            future = producer.send(GUARDED, b"v")
            with pytest.raises(errors.NotEnoughReplicasError):
                future.get(RESULT_S)
            assert producer.metrics()["producer-metrics"]["record-retry-total"] == retries
        finally:
            producer.close()


# ---- futures ---------------------------------------------------------------------------------


def test_futures_take_kafka_python_callbacks(client: Client) -> None:
    producer = client.producer()
    done = threading.Event()
    seen: list[tuple[str, Any]] = []
    try:
        future = producer.send(TOPIC, b"v", partition=1)
        assert future.add_callback(lambda tag, meta: seen.append((tag, meta)), "ok") is future
        future.add_errback(lambda error: seen.append(("error", error)))
        future.add_callback(lambda meta: done.set())
        meta = future.get(timeout=RESULT_S)
        assert done.wait(RESULT_S)
        assert future.is_done and future.succeeded() and not future.failed()
        assert seen == [("ok", meta)]
        # Added once done: called at once; a callback's own failure is logged, not raised.
        late: list[Any] = []
        future.add_callback(late.append).add_callback(lambda meta: 1 / 0)
        assert late == [meta]

        failing = producer.send(GUARDED, b"v")  # NOT_ENOUGH_REPLICAS until the timeout
        errbacks: list[BaseException] = []
        failed = threading.Event()
        failing.add_errback(lambda error: (errbacks.append(error), failed.set()))
        failing.add_callback(lambda meta: seen.append(("unexpected", meta)))
        with pytest.raises(TimeoutError):
            failing.get(timeout=0.01)
    finally:
        producer.close(timeout=0)  # fails what is queued: the guarded record
    assert failed.wait(RESULT_S) and failing.failed()
    assert isinstance(errbacks[0], errors.TidelogError) and seen == [("ok", meta)]


def test_flush_takes_kafka_pythons_timeout_in_seconds(client: Client) -> None:
    producer = client.producer(linger_ms=60_000)
    try:
        future = producer.send(TOPIC, b"v")
        producer.flush(timeout=RESULT_S)
        assert future.is_done and future.succeeded()
        producer.send(GUARDED, b"v")  # never acknowledged
        with pytest.raises(errors.RequestTimedOutError, match="flush did not complete"):
            producer.flush(timeout=0.2)
        for bad in ({"timeout": -1}, {"timeout": "1"}, {"timeout_ms": 1, "timeout": 1}):
            with pytest.raises(ConfigurationError):
                producer.flush(**bad)
    finally:
        producer.close(timeout=0)
