"""A consumer group member of a real Kafka client in its own process (kafka-python, aiokafka,
confluent-kafka classic, or confluent-kafka with ``group.protocol=consumer``), for
tests/kafka/test_kafka_consumer_groups.py: it subscribes, prints every rebalance callback and
every record it reads as a JSON line stamped with the machine's monotonic clock (the same
clock in every process, so the test orders all members' callbacks by it), commits
synchronously after every batch, and on a ``close`` line from stdin closes (LeaveGroup) and
exits. A test kills it to see its partitions move within its session timeout.

Usage: ``python group_member.py CLIENT BOOTSTRAP GROUP TOPIC [INSTANCE_ID]``, CLIENT one of
kafka-python, aiokafka, confluent-classic, confluent-cooperative, confluent-consumer; an
instance id (``group.instance.id``, a static member) for kafka-python only.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

#: The member's session timeout and heartbeat interval: short, so that a killed member's
#: partitions move in seconds.
SESSION_MS = 6000
HEARTBEAT_MS = 500


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"t": time.monotonic(), "kind": kind, **fields}), flush=True)


def _partitions(tps: Any) -> list[int]:
    return sorted(tp.partition for tp in tps)


def _closing() -> threading.Event:
    """Set when stdin says ``close`` (or ends)."""
    closing = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        closing.set()

    threading.Thread(target=read, daemon=True).start()
    return closing


def run_kafka_python(bootstrap: str, group: str, topic: str, instance_id: str | None) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=_partitions(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=_partitions(assigned))

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS, request_timeout_ms=20_000,
        group_instance_id=instance_id,
    )
    consumer.subscribe([topic], listener=Listener())
    closing = _closing()
    while not closing.is_set():
        batches = consumer.poll(timeout_ms=100)
        for tp, records in batches.items():
            emit("records", partition=tp.partition, offsets=[r.offset for r in records])
        if batches:
            consumer.commit()
    emit("closing")  # reads nothing more from here on
    consumer.close()
    emit("closed")


async def run_aiokafka(bootstrap: str, group: str, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=_partitions(revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=_partitions(assigned))

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS, request_timeout_ms=20_000,
    )
    consumer.subscribe([topic], listener=Listener())
    await consumer.start()
    closing = _closing()
    while not closing.is_set():
        batches = await consumer.getmany(timeout_ms=100)
        for tp, records in batches.items():
            emit("records", partition=tp.partition, offsets=[r.offset for r in records])
        if batches:
            await consumer.commit()
    emit("closing")  # reads nothing more from here on (aiokafka revokes nothing on stop)
    await consumer.stop()
    emit("closed")


def run_confluent(bootstrap: str, group: str, topic: str, protocol: str) -> None:
    """librdkafka: its classic protocol (eager range assignors, or cooperative-sticky, which
    revokes only what it loses and joins again) or the consumer protocol (KIP-848, whose
    session timeout and heartbeat interval are the coordinator's)."""
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "log_level": 0,
    }
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    if protocol == "cooperative":
        config["partition.assignment.strategy"] = "cooperative-sticky"
    consumer = Consumer(config)

    def revoked(_: Any, tps: Any) -> None:
        emit("revoked", partitions=_partitions(tps))

    consumer.subscribe(
        [topic], on_assign=lambda _, tps: emit("assigned", partitions=_partitions(tps)),
        on_revoke=revoked, on_lost=revoked,
    )
    closing = _closing()
    while not closing.is_set():
        messages = [m for m in consumer.consume(100, 0.1) if m.error() is None]
        by_partition: dict[int, list[int]] = {}
        for message in messages:
            by_partition.setdefault(message.partition(), []).append(message.offset())
        for partition, offsets in by_partition.items():
            emit("records", partition=partition, offsets=offsets)
        if messages:
            consumer.commit(asynchronous=False)
    emit("closing")
    consumer.close()
    emit("closed")


if __name__ == "__main__":
    client, bootstrap, group, topic = sys.argv[1:5]
    if client == "kafka-python":
        run_kafka_python(bootstrap, group, topic, sys.argv[5] if len(sys.argv) > 5 else None)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, group, topic))
    else:
        run_confluent(bootstrap, group, topic, client.removeprefix("confluent-"))
