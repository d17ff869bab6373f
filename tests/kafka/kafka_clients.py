"""The real Kafka clients (kafka-python, confluent-kafka, aiokafka) and Tidelog's own, driven
the same way for the Kafka listener's tests: each writes keyed records with headers and
explicit timestamps to one partition under a compression codec, and each reads a partition
back as `Rec` tuples, so that what one wrote and another read compare with ``==``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import aiokafka
import aiokafka.codec
import confluent_kafka
import kafka
import kafka.codec

from tidelog.client import Client
from tidelog.testing import LocalCluster
from tidelog.types import TopicPartition

#: How long a client may take for what a test asks of it.
CLIENT_TIMEOUT_S = 15.0
#: Client settings that keep the tests' clients quiet and quick on loopback.
CONFLUENT_QUIET = {"log_level": 0, "socket.timeout.ms": int(CLIENT_TIMEOUT_S * 1000)}


class Rec(NamedTuple):
    """One record as a reader saw it (offset -1 before it was written)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def tls_config(cluster: LocalCluster, name: str) -> dict[str, Any]:
    """librdkafka's settings for the Kafka listener of a TLS cluster, presenting `name`'s
    certificate of the cluster's CA (its principal is ``User:CN=<name>``)."""
    options = cluster.client_options_as(name)
    return {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": options["ssl_cafile"],
        "ssl.certificate.location": options["ssl_certfile"],
        "ssl.key.location": options["ssl_keyfile"],
        "log_level": 0,
    }


def records_for(writer: str, codec: str, count: int, base_ts: int) -> list[Rec]:
    """`count` keyed records with two headers each (one repeated key, as Kafka allows)."""
    return [
        Rec(-1, f"{writer}-{codec}-k{i}".encode(), f"{writer}/{codec}/value {i}".encode() * 3,
            (("h", f"{i}".encode()), ("codec", codec.encode()), ("h", b"")), base_ts + i)
        for i in range(count)
    ]


def codecs(client: str) -> list[str]:
    """The compression codecs `client` can write with what is installed ("none" first)."""
    if client == "confluent-kafka":  # librdkafka carries every codec itself
        return ["none", "gzip", "snappy", "lz4", "zstd"]
    module = {"kafka-python": kafka.codec, "aiokafka": aiokafka.codec}[client].__dict__
    return ["none"] + [c for c in ("gzip", "snappy", "lz4", "zstd") if module[f"has_{c}"]()]


# ---- writers ----------------------------------------------------------------------------------

def write_kafka_python(bootstrap: str, topic: str, codec: str, records: Sequence[Rec]) -> None:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
        linger_ms=50, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
    )
    try:
        futures = [
            producer.send(topic, value=r.value, key=r.key, partition=0,
                          headers=list(r.headers), timestamp_ms=r.timestamp)
            for r in records
        ]
        producer.flush(timeout=CLIENT_TIMEOUT_S)
        for future in futures:
            future.get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close(timeout=CLIENT_TIMEOUT_S)


def write_confluent(bootstrap: str, topic: str, codec: str, records: Sequence[Rec]) -> None:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50,
        "enable.idempotence": True, **CONFLUENT_QUIET,
    })
    failures: list[Any] = []
    for r in records:
        producer.produce(
            topic, value=r.value, key=r.key, partition=0, timestamp=r.timestamp,
            headers=list(r.headers),
            on_delivery=lambda err, _msg: failures.append(err) if err is not None else None,
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "confluent-kafka did not deliver every record"
    assert failures == []


def write_aiokafka(bootstrap: str, topic: str, codec: str, records: Sequence[Rec]) -> None:
    async def write() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
            linger_ms=50, request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
        )
        await producer.start()
        try:
            futures = [
                await producer.send(topic, value=r.value, key=r.key, partition=0,
                                    headers=list(r.headers), timestamp_ms=r.timestamp)
                for r in records
            ]
            await asyncio.wait_for(asyncio.gather(*futures), CLIENT_TIMEOUT_S)
        finally:
            await producer.stop()

    asyncio.run(write())


def write_tidelog(bootstrap: str, topic: str, codec: str, records: Sequence[Rec]) -> None:
    with Client(bootstrap) as client:
        producer = client.producer(compression_type=codec, linger_ms=50)
        try:
            futures = [
                producer.send(topic, value=r.value, key=r.key, partition=0,
                              timestamp_ms=r.timestamp, headers=list(r.headers))
                for r in records
            ]
            producer.flush(timeout=CLIENT_TIMEOUT_S)
            for future in futures:
                future.get(timeout=CLIENT_TIMEOUT_S)
        finally:
            producer.close(timeout=CLIENT_TIMEOUT_S)


#: client -> writer(bootstrap, topic, codec, records); Tidelog's takes its gRPC bootstrap.
WRITERS: dict[str, Callable[[str, str, str, Sequence[Rec]], None]] = {
    "kafka-python": write_kafka_python,
    "confluent-kafka": write_confluent,
    "aiokafka": write_aiokafka,
}


# ---- readers ----------------------------------------------------------------------------------

def _until(count: int, poll: Callable[[], list[Rec]]) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        got.extend(poll())
    return got


def read_kafka_python(
    bootstrap: str, topic: str, start: int, count: int, isolation: str = "read_uncommitted"
) -> list[Rec]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation,
        request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
    )
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, start)
        return _until(count, lambda: [
            Rec(m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
            for batch in consumer.poll(timeout_ms=500).values() for m in batch
        ])
    finally:
        consumer.close()


def read_confluent(
    bootstrap: str, topic: str, start: int, count: int, isolation: str = "read_uncommitted"
) -> list[Rec]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "tidelog-tests", "enable.auto.commit": False,
        "isolation.level": isolation, **CONFLUENT_QUIET,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, start)])

        def poll() -> list[Rec]:
            out = []
            for m in consumer.consume(num_messages=count, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(Rec(m.offset(), m.key(), m.value(), tuple(m.headers() or ()),
                               m.timestamp()[1]))
            return out

        return _until(count, poll)
    finally:
        consumer.close()


def read_aiokafka(
    bootstrap: str, topic: str, start: int, count: int, isolation: str = "read_uncommitted"
) -> list[Rec]:
    async def read() -> list[Rec]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation,
            request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, start)
            got: list[Rec] = []
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while len(got) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got.extend(
                    Rec(m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                    for batch in batches.values() for m in batch
                )
            return got
        finally:
            await consumer.stop()

    return asyncio.run(read())


def read_tidelog(
    bootstrap: str, topic: str, start: int, count: int, isolation: str = "read_uncommitted"
) -> list[Rec]:
    with Client(bootstrap) as client:
        consumer = client.consumer(isolation_level=isolation)
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, start)
            return _until(count, lambda: [
                Rec(r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
                for batch in consumer.poll(timeout_ms=500).values() for r in batch
            ])
        finally:
            consumer.close()


#: client -> reader(bootstrap, topic, start offset, count, isolation level).
READERS: dict[str, Callable[..., list[Rec]]] = {
    "kafka-python": read_kafka_python,
    "confluent-kafka": read_confluent,
    "aiokafka": read_aiokafka,
}
