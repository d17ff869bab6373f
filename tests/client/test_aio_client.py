"""The asyncio client in aiokafka's shape (issue 29): AIOProducer and AIOConsumer with
``async with``, ``await send()``/``send_and_wait()``, ``getmany()``, ``getone()`` and
``async for``, on the synchronous engine; the caller's loop keeps running while a send waits
for metadata, and a bad argument raises at once. Against one real node."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from tidelog import (
    AIOConsumer,
    AIOProducer,
    Client,
    ConfigurationError,
    RecordMetadata,
    TidelogError,
    TopicPartition,
)
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

T = TypeVar("T")
TOPIC = "aio-events"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(1) as cluster, Client(bootstrap_servers=cluster.bootstrap) as c:
        c.create_topic(TOPIC, partitions=2)
        yield c


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a test's coroutine, bounded."""
    return asyncio.run(asyncio.wait_for(coro, 120))


def bootstrap(client: Client) -> str:
    return ",".join(client.config.bootstrap)


async def produce(client: Client, topic: str, count: int) -> list[RecordMetadata]:
    async with AIOProducer(bootstrap_servers=bootstrap(client), linger_ms=0) as producer:
        return [await producer.send_and_wait(topic, f"v{n}".encode(), key=f"k{n}".encode())
                for n in range(count)]


def test_produce_with_async_with_send_and_send_and_wait(client: Client) -> None:
    topic = "aio-produce"
    client.create_topic(topic, partitions=1)

    async def main() -> None:
        async with AIOProducer(bootstrap_servers=bootstrap(client), client_id="aio",
                               key_serializer=lambda k: k and k.encode()) as producer:
            first = await producer.send_and_wait(topic, b"a", key="k", headers=[("h", b"1")])
            assert isinstance(first, RecordMetadata)
            assert (first.topic, first.partition, first.offset) == (topic, 0, 0)
            futures = [await producer.send(topic, b"x%d" % n, partition=0) for n in range(5)]
            await producer.flush()
            assert all(f.done() for f in futures)
            assert [(await f).offset for f in futures] == [1, 2, 3, 4, 5]
            assert await producer.partitions_for(topic) == {0}

    run(main())
    end = client.list_offsets({TopicPartition(topic, 0): -1})[TopicPartition(topic, 0)]
    assert end.offset == 6


def test_consume_with_getmany_and_async_for_in_a_group(client: Client) -> None:
    count = 10

    async def main() -> None:
        sent = await produce(client, TOPIC, count)
        assert len(sent) == count
        async with AIOConsumer(TOPIC, bootstrap_servers=bootstrap(client), group_id="aio-g1",
                               auto_offset_reset="earliest",
                               enable_auto_commit=False) as consumer:
            got: list[Any] = []
            loop = asyncio.get_running_loop()
            until = loop.time() + WAIT_S
            while len(got) < count:
                assert loop.time() < until, f"only {len(got)} of {count} records"
                batch = await consumer.getmany(timeout_ms=500, max_records=4)
                assert sum(map(len, batch.values())) <= 4
                for tp, records in batch.items():
                    assert isinstance(tp, TopicPartition)
                    assert all((r.topic, r.partition) == tp for r in records)
                    got += records
            assert sorted(r.value for r in got) == sorted(f"v{n}".encode() for n in range(count))
            await consumer.commit()
            for tp in consumer.assignment():
                committed = await consumer.committed(tp)
                assert committed is not None
                assert committed.offset == await consumer.position(tp)

        # A second group reads the same records by iteration, one at a time.
        async with AIOConsumer(TOPIC, bootstrap_servers=bootstrap(client), group_id="aio-g2",
                               auto_offset_reset="earliest") as consumer:
            values = []
            async for record in consumer:
                values.append(record.value)
                if len(values) == count:
                    break
            assert sorted(values) == sorted(f"v{n}".encode() for n in range(count))

    run(main())


def test_assign_seek_getone_and_iteration_that_ends(client: Client) -> None:
    tp = TopicPartition(TOPIC, 0)

    async def main() -> None:
        await produce(client, TOPIC, 4)
        async with AIOConsumer(bootstrap_servers=bootstrap(client),
                               consumer_timeout_ms=1000) as consumer:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            assert end >= 1
            consumer.seek(tp, end - 1)
            assert await consumer.position(tp) == end - 1
            record = await consumer.getone()
            assert (record.partition, record.offset) == (0, end - 1)
            # Nothing more: the iteration stops after consumer_timeout_ms.
            assert [r async for r in consumer] == []

    run(main())


def test_the_callers_loop_runs_while_a_send_waits_for_metadata(client: Client) -> None:
    """The topic is created by a task of the caller's loop once it has ticked while the send
    waits for the topic's metadata: a send that blocked the loop would never see it and fail
    after max_block_ms."""
    topic = "aio-later"
    ticks_before_create = 3

    async def main() -> None:
        ticks = 0
        sending = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            await sending.wait()
            while ticks < ticks_before_create:
                ticks += 1
                await asyncio.sleep(0.01)
            await asyncio.to_thread(client.create_topic, topic, 1)

        async with AIOProducer(bootstrap_servers=bootstrap(client),
                               max_block_ms=20_000) as producer:
            task = asyncio.create_task(ticker())

            async def send() -> RecordMetadata:
                sending.set()
                return await producer.send_and_wait(topic, b"late")

            metadata = await send()
            await task
        assert ticks == ticks_before_create
        assert (metadata.topic, metadata.offset) == (topic, 0)

    run(main())


def test_a_bad_argument_raises_at_once(client: Client) -> None:
    async def main() -> None:
        with pytest.raises(ConfigurationError, match="no_such_setting"):
            AIOProducer(bootstrap_servers=bootstrap(client), no_such_setting=1)
        with pytest.raises(ConfigurationError, match="no_such_setting"):
            AIOConsumer(TOPIC, bootstrap_servers=bootstrap(client), no_such_setting=1)
        async with AIOProducer(bootstrap_servers=bootstrap(client)) as producer:
            with pytest.raises(ConfigurationError, match="timestamp_ms"):
                await producer.send(TOPIC, b"v", timestamp_ms="now")  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError, match="header"):
                await producer.send(TOPIC, b"v", headers=[("h", "str")])  # type: ignore[list-item]
            with pytest.raises(ConfigurationError, match="topic"):
                await producer.send(7, b"v")  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError, match="partition"):
                await producer.send(TOPIC, b"v", partition=-1)
        async with AIOConsumer(bootstrap_servers=bootstrap(client)) as consumer:
            with pytest.raises(ConfigurationError, match="partition"):
                consumer.assign([TopicPartition(TOPIC, -1)])
            consumer.assign([TopicPartition(TOPIC, 0)])
            with pytest.raises(ConfigurationError, match="max_records"):
                await consumer.getmany(max_records=0)

    run(main())


def test_a_cancelled_getmany_loses_no_record(client: Client) -> None:
    """A poll cannot be stopped halfway: the records of one whose caller was cancelled are
    handed out by the next calls, so every offset comes exactly once."""
    topic = "aio-cancel"
    client.create_topic(topic, partitions=1)
    tp = TopicPartition(topic, 0)
    count = 20

    async def main() -> None:
        await produce(client, topic, count)
        async with AIOConsumer(bootstrap_servers=bootstrap(client)) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            offsets: list[int] = []
            loop = asyncio.get_running_loop()
            until = loop.time() + WAIT_S
            while len(offsets) < count:
                assert loop.time() < until, f"only {len(offsets)} of {count} records"
                # Cancelled while its poll runs (or before it starts): nothing may be lost.
                task = asyncio.create_task(consumer.getmany(timeout_ms=2000, max_records=3))
                await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    offsets += [r.offset for rs in (await task).values() for r in rs]
                batch = await consumer.getmany(timeout_ms=500, max_records=2)
                offsets += [r.offset for records in batch.values() for r in records]
            assert offsets == list(range(count))

    run(main())


def test_transactions_commit_and_abort(client: Client) -> None:
    """start() inits the transactional id; ``async with producer.transaction()`` commits the
    block's records, or aborts them when it raises: read_committed sees only the former."""
    topic = "aio-txn"
    client.create_topic(topic, partitions=1)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with AIOProducer(bootstrap_servers=bootstrap(client),
                               transactional_id="aio-txn-1") as producer:
            async with producer.transaction():
                await producer.send(topic, b"kept-1")
                await producer.send(topic, b"kept-2")
            with pytest.raises(RuntimeError, match="undo"):
                async with producer.transaction():
                    await producer.send(topic, b"aborted")
                    await producer.flush()
                    raise RuntimeError("undo")
            async with producer.transaction():
                await producer.send(topic, b"kept-3")
        async with AIOConsumer(bootstrap_servers=bootstrap(client),
                               isolation_level="read_committed") as consumer:
            consumer.assign([tp])
            await consumer.seek_to_beginning()
            values: list[bytes] = []
            loop = asyncio.get_running_loop()
            until = loop.time() + WAIT_S
            while len(values) < 3:
                assert loop.time() < until, f"only {values}"
                batch = await consumer.getmany(timeout_ms=500)
                values += [r.value for r in batch.get(tp, [])]
            assert values == [b"kept-1", b"kept-2", b"kept-3"]

    run(main())


@pytest.mark.cluster  # dials 127.0.0.1:1: the network, which the unit tier does not use
def test_start_fails_on_an_unreachable_bootstrap_and_stops() -> None:
    """start() bootstraps as aiokafka's does: nothing listening is an error within
    request_timeout_ms (the caller's loop running meanwhile), and the client is stopped."""
    async def main() -> None:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        for aio in (AIOProducer(bootstrap_servers="127.0.0.1:1", request_timeout_ms=2000),
                    AIOConsumer(bootstrap_servers="127.0.0.1:1", request_timeout_ms=2000)):
            with pytest.raises(TidelogError, match=r"127\.0\.0\.1:1\b"):
                await aio.start()
            assert aio._stopped
        task.cancel()
        assert ticks > 1

    run(main())
