"""The real Kafka clients (kafka-python, confluent-kafka, aiokafka; kcat and kafkajs where they
are installed) and Tidelog's own, driven the same way for the Kafka listener's tests: each
writes keyed records with headers and explicit timestamps to one partition under a compression
codec, and each reads a partition back as `Rec` tuples, so that what one wrote and another read
compare with ``==``."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import aiokafka
import aiokafka.codec
import confluent_kafka
import kafka
import kafka.codec
import pytest

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


def kafka_python_admin(cluster: LocalCluster, name: str) -> kafka.KafkaAdminClient:
    """A kafka-python admin client for the Kafka listener of a TLS cluster, presenting `name`'s
    certificate of the cluster's CA."""
    options = cluster.client_options_as(name)
    return kafka.KafkaAdminClient(
        bootstrap_servers=cluster.kafka_bootstrap, security_protocol="SSL",
        ssl_cafile=options["ssl_cafile"], ssl_certfile=options["ssl_certfile"],
        ssl_keyfile=options["ssl_keyfile"], request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
    )


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


# ---- clients outside Python: kcat (Debian's package) and kafkajs (npm) ------------------------

#: Where scripts/setup.sh installs kafkajs (npm's --prefix), and the node script driving it.
KAFKAJS_MODULES = Path(__file__).resolve().parents[2] / ".venv" / "node" / "node_modules"
KAFKAJS_SCRIPT = Path(__file__).with_name("kafkajs_client.mjs")
#: How to install each, for the message of a test that cannot run without it.
INSTALL_HINTS = {
    "kcat": "kcat is not installed: apt-get install kcat (scripts/setup.sh does it as root)",
    "kafkajs": "kafkajs is not installed: run scripts/setup.sh (with node and npm on the PATH "
               "it installs kafkajs 2.2.4 and kafkajs-snappy under .venv/node)",
}


def tool_missing(client: str) -> str | None:
    """How to install `client` (kcat or kafkajs) when it cannot run here; None when it can."""
    if client == "kcat":
        found = shutil.which("kcat") is not None
    else:
        found = shutil.which("node") is not None and (KAFKAJS_MODULES / "kafkajs").is_dir()
    return None if found else INSTALL_HINTS[client]


def tool_ready(client: str) -> bool:
    """Whether `client` (kcat or kafkajs) can run here. In CI (CI=true) a missing one fails the
    test, with how to install it, so that a CI run never loses these checks silently; elsewhere
    the test may go on without it."""
    missing = tool_missing(client)
    if missing is not None and os.environ.get("CI") == "true":
        pytest.fail(missing)
    return missing is None


def tool_codecs(client: str) -> list[str]:
    """The codecs kcat (its librdkafka has them all) or kafkajs (gzip built in, snappy with
    kafkajs-snappy; lz4 and zstd need native modules, not installed) reads and writes."""
    if client == "kcat":
        return codecs("confluent-kafka")
    return ["none", "gzip"] + (["snappy"] if (KAFKAJS_MODULES / "kafkajs-snappy").is_dir()
                               else [])


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _run(args: list[str], stdin: bytes = b"") -> bytes:
    done = subprocess.run(args, input=stdin, capture_output=True, timeout=CLIENT_TIMEOUT_S * 2,
                          check=False, env={**os.environ, "KAFKAJS_MODULES": str(KAFKAJS_MODULES)})
    assert done.returncode == 0, f"{args[0]} failed: {done.stderr.decode(errors='replace')}"
    return done.stdout


def write_kcat(bootstrap: str, topic: str, codec: str, records: Sequence[Rec]) -> None:
    """kcat cannot set a record's timestamp (the records get the time they are sent) and sets
    the same headers on every record of a run: one run per record."""
    for r in records:
        assert r.key is not None and r.value is not None and b"\t" not in r.key
        headers = [arg for name, value in r.headers
                   for arg in ("-H", f"{name}={(value or b'').decode()}")]
        _run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-K", "\t",
              "-X", f"compression.codec={codec}", *headers], r.key + b"\t" + r.value)


def read_kcat(
    bootstrap: str, topic: str, start: int, count: int, isolation: str = "read_uncommitted"
) -> list[Rec]:
    out = _run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", str(start),
                "-c", str(count), "-e", "-J", "-X", f"isolation.level={isolation}"])
    got = []
    for line in out.decode().splitlines():
        m = json.loads(line)
        flat = m.get("headers") or []
        headers = tuple((flat[i], _encoded(flat[i + 1])) for i in range(0, len(flat), 2))
        got.append(Rec(m["offset"], _encoded(m["key"]), _encoded(m["payload"]), headers,
                       m["ts"]))
    return got


def _encoded(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def write_kafkajs(bootstrap: str, topic: str, codec: str, records: Sequence[Rec]) -> None:
    """kafkajs takes a record's headers as an object: the values of a repeated name go
    together (`kafkajs_headers`), which is what it writes."""
    _run(["node", str(KAFKAJS_SCRIPT), "produce", bootstrap, topic, codec], json.dumps([
        {"key": _b64(r.key), "value": _b64(r.value), "timestamp": r.timestamp,
         "headers": [[name, _b64(value)] for name, value in r.headers]}
        for r in records
    ]).encode())


def read_kafkajs(
    bootstrap: str, topic: str, start: int, count: int, isolation: str = "read_uncommitted"
) -> list[Rec]:
    out = _run(["node", str(KAFKAJS_SCRIPT), "consume", bootstrap, topic, str(start),
                str(count), isolation])
    return [Rec(m["offset"], _unb64(m["key"]), _unb64(m["value"]),
                tuple((name, _unb64(value)) for name, value in m["headers"]), m["timestamp"])
            for m in json.loads(out)]


def kafkajs_headers(headers: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
    """`headers` as kafkajs writes and reads them: the values of each name together, the names
    in the order they first come."""
    names = list(dict.fromkeys(name for name, _ in headers))
    return tuple((name, value) for n in names for name, value in headers if name == n)


#: kcat and kafkajs, as WRITERS and READERS (bootstrap, topic, ...), for the tests that check
#: them (`tool_ready` first).
TOOL_WRITERS: dict[str, Callable[[str, str, str, Sequence[Rec]], None]] = {
    "kcat": write_kcat,
    "kafkajs": write_kafkajs,
}
TOOL_READERS: dict[str, Callable[..., list[Rec]]] = {
    "kcat": read_kcat,
    "kafkajs": read_kafkajs,
}
