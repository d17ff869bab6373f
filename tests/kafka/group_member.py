"""A classic consumer group member of a real Kafka client (kafka-python or aiokafka) in its own
process, for tests/kafka/test_kafka_consumer_groups.py: it subscribes, prints every rebalance
callback and every record it reads as a JSON line stamped with the machine's monotonic clock
(the same clock in every process, so the test orders all members' callbacks by it), commits
synchronously after every batch, and on a ``close`` line from stdin closes (LeaveGroup) and
exits. A test kills it to see its partitions move within its session timeout.

Usage: ``python group_member.py kafka-python|aiokafka BOOTSTRAP GROUP TOPIC``
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


def run_kafka_python(bootstrap: str, group: str, topic: str) -> None:
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


if __name__ == "__main__":
    client, bootstrap, group, topic = sys.argv[1:5]
    if client == "kafka-python":
        run_kafka_python(bootstrap, group, topic)
    else:
        asyncio.run(run_aiokafka(bootstrap, group, topic))
