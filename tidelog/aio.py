"""The asyncio client, in aiokafka's shape: `AIOProducer` and `AIOConsumer`, each started and
stopped with ``await start()``/``await stop()`` or ``async with``.

They are the synchronous engine (``tidelog.producer``, ``tidelog.consumer``), which already
runs its RPCs on a grpc.aio loop of the client's own, under an interface that never blocks the
caller's event loop:

- a record's outcome reaches the caller's loop by a callback (the engine completes it on its
  own loop thread, and ``call_soon_threadsafe`` hands it over), so ``await send()`` costs no
  thread while the topic's metadata is known and the buffer has room;
- a call that waits in the engine (a send() that must first learn the topic's partitions or
  wait for room, flush, a poll, a commit, a metadata lookup) runs on a worker thread of the
  producer's or consumer's own, one each so that their calls keep the order they were made
  in and a long poll never holds up another client's work.

Arguments are checked by the engine, as the synchronous client checks them: a wrong one
raises ``ConfigurationError`` from the call that passed it, without waiting for anything.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from tidelog.client import Client
from tidelog.consumer import Consumer, ConsumerConfig
from tidelog.membership import ConsumerRebalanceListener
from tidelog.producer import Producer, RecordFuture
from tidelog.settings import CLIENT_SETTINGS
from tidelog.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
)

__all__ = ["AIOConsumer", "AIOProducer"]

T = TypeVar("T")
#: How long each poll of ``getone()`` and async iteration waits before it polls again.
_POLL_WAIT_MS = 1000


class _Worker:
    """One thread that runs a client's blocking calls, in the order they are made, for the
    coroutines of the caller's loop."""

    def __init__(self, name: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)


class _Outcomes:
    """Hands records' outcomes from the engine's loop thread to the caller's loop, where each
    completes its record's asyncio future. The records of a batch complete together, so the
    caller's loop is woken once for all the outcomes that arrived since it last ran them, not
    once per record (a wake-up is a write to its self-pipe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Per caller's loop (a producer may serve several), the outcomes it has to run.
        self._arrived: dict[
            asyncio.AbstractEventLoop, list[tuple[RecordFuture, asyncio.Future[RecordMetadata]]]
        ] = {}

    def future_of(
        self, record: RecordFuture, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[RecordMetadata]:
        """An asyncio future on `loop` completed with `record`'s outcome, without a thread
        waiting for it."""
        future: asyncio.Future[RecordMetadata] = loop.create_future()

        def on_done(_: RecordFuture) -> None:
            with self._lock:
                arrived = self._arrived.setdefault(loop, [])
                arrived.append((record, future))
                if len(arrived) > 1:
                    return  # a wake-up is on its way
            try:
                loop.call_soon_threadsafe(self._settle, loop)
            except RuntimeError:  # the caller's loop is closed: nobody waits
                with self._lock:
                    self._arrived.pop(loop, None)

        record.add_done_callback(on_done)
        return future

    def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            arrived = self._arrived.pop(loop, [])
        for record, future in arrived:
            if future.done():  # cancelled by its awaiter: the record is sent regardless
                continue
            error = record.exception(0)
            if error is None:
                future.set_result(record.result(0))
            else:
                future.set_exception(error)


class AIOProducer:
    """aiokafka's AIOKafkaProducer on the synchronous `Producer`: ``await send()`` queues a
    record and returns a future of its RecordMetadata; ``await send_and_wait()`` returns the
    metadata itself."""

    def __init__(
        self, bootstrap_servers: str | Sequence[str] | None = None, **settings: Any
    ) -> None:
        """The settings of `Producer` (connection settings and producer settings, by Tidelog's
        or kafka-python's names), checked here: a wrong one raises ConfigurationError now.
        The producer's sender starts now; `start()` fetches the cluster's metadata."""
        self._producer = Producer(bootstrap_servers, **settings)
        self._worker = _Worker("tidelog-aio-producer")
        self._outcomes = _Outcomes()
        #: Sends handed to the worker and not queued yet: later sends follow them there, so
        #: records queue in the order send() was called.
        self._in_worker = 0
        self._stopped = False

    @property
    def producer(self) -> Producer:
        """The synchronous engine underneath (its metrics(), producer_id...)."""
        return self._producer

    async def start(self) -> None:
        """Fetch the cluster's metadata (within request_timeout_ms, or the bootstrap's error)
        and, for a transactional producer, init_transactions(), as aiokafka's start() does;
        the producer is stopped again if that fails."""
        connections = self._producer.connections
        try:
            await self._worker.run(connections.metadata.ensure, connections.deadline())
            if self._producer.transactions is not None:
                await self._worker.run(self._producer.init_transactions)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Deliver what is queued (up to delivery_timeout_ms), then close the producer and
        its connections."""
        if self._stopped:
            return
        self._stopped = True
        try:
            await self._worker.run(self._producer.close)
        finally:
            self._worker.shutdown()

    async def __aenter__(self) -> AIOProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record (as `Producer.send`), and return a future of its RecordMetadata, or
        of the error that failed it. Returns as soon as the record is queued: at once while
        the topic's metadata is known and the buffer has room, else after the wait for them
        (up to max_block_ms), which runs on the producer's worker thread."""
        loop = asyncio.get_running_loop()
        producer = self._producer
        if self._in_worker or not self._queues_at_once(topic, partition, value, key):
            self._in_worker += 1
            try:
                record = await self._worker.run(
                    producer.send, topic, value, key, partition, timestamp_ms, headers
                )
            finally:
                self._in_worker -= 1
        else:
            record = producer.send(topic, value, key, partition, timestamp_ms, headers)
        return self._outcomes.future_of(record, loop)

    def _queues_at_once(self, topic: object, partition: object, *data: object) -> bool:
        """Whether `Producer.send` would queue the record without waiting: its topic's
        partitions (and the partition asked for) are known and the buffer has room for the
        record and a batch more (the record's size after a serializer is not known yet). A
        topic that is no str is refused by send() at once."""
        if type(topic) is not str:
            return True
        count = self._producer.connections.metadata.cluster.partition_count(topic)
        if count is None or (type(partition) is int and partition >= count):
            return False
        size = sum(len(d) for d in data if isinstance(d, bytes | bytearray | memoryview))
        return self._producer.buffer_available >= size + self._producer.config.batch_size

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """`send`, then wait for the record's acknowledgement: its RecordMetadata, or the
        error that failed it."""
        return await (await self.send(topic, value, key, partition, timestamp_ms, headers))

    async def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed (as
        `Producer.flush`)."""
        await self._worker.run(self._producer.flush, timeout_ms)

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids, waiting up to max_block_ms for metadata that has it."""
        return await self._worker.run(self._producer.partitions_for, topic)

    # ---- transactions (a producer made with transactional_id) ------------------------------

    async def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    async def commit_transaction(self) -> None:
        """Send what is queued, then commit (as `Producer.commit_transaction`)."""
        await self._worker.run(self._producer.commit_transaction)

    async def abort_transaction(self) -> None:
        await self._worker.run(self._producer.abort_transaction)

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit a consumer group's offsets in the transaction (as
        `Producer.send_offsets_to_transaction`)."""
        await self._worker.run(self._producer.send_offsets_to_transaction, offsets,
                               group_metadata)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends and aborts it when the block raises, as aiokafka's."""
        await self.begin_transaction()
        try:
            yield
        except BaseException:
            await self.abort_transaction()
            raise
        await self.commit_transaction()


class AIOConsumer:
    """aiokafka's AIOKafkaConsumer on the synchronous `Consumer`: ``await getmany()``,
    ``await getone()`` and ``async for record in consumer``, on a client of its own.

    assign(), seek(), subscribe() and the other calls that only change the consumer's state
    are plain methods, as aiokafka's are; they take the consumer's lock, which a poll under
    way holds, so call them between polls (as an ``async for`` body does)."""

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | Sequence[str] | None = None,
        group_id: str | None = None,
        **settings: Any,
    ) -> None:
        """`topics` are subscribed (in the group `group_id`) by `start()`; without them,
        assign() or subscribe() the partitions to read. The settings are the connection
        settings of `Client` and the consumer settings of `ConsumerConfig`, checked here: a
        wrong one raises ConfigurationError now."""
        client_settings = {n: settings.pop(n) for n in list(settings) if n in CLIENT_SETTINGS}
        config = ConsumerConfig.from_settings(group_id=group_id, **settings)
        self._client = Client(bootstrap_servers=bootstrap_servers, **client_settings)
        self._consumer = Consumer(self._client.connections, config)
        self._topics = list(topics)
        self._worker = _Worker("tidelog-aio-consumer")
        #: A poll whose caller was cancelled while it ran: its records go to the next call.
        self._polling: asyncio.Future[list[ConsumerRecord]] | None = None
        #: Records polled and not handed out yet (of such a poll, beyond max_records).
        self._held: list[ConsumerRecord] = []
        self._stopped = False

    @property
    def consumer(self) -> Consumer:
        """The synchronous engine underneath."""
        return self._consumer

    async def start(self) -> None:
        """Fetch the cluster's metadata (within request_timeout_ms, or the bootstrap's error)
        and subscribe to the topics given; the consumer is stopped again if that fails."""
        connections = self._client.connections
        try:
            await self._worker.run(connections.metadata.ensure, connections.deadline())
            if self._topics:
                await self._worker.run(self._consumer.subscribe, self._topics)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Close the consumer (committing its positions with auto-commit on, leaving its
        group) once a poll under way ends, then its client."""
        if self._stopped:
            return
        self._stopped = True
        try:
            await self._worker.run(self._consumer.close)
        finally:
            try:
                await self._worker.run(self._client.close)
            finally:
                self._worker.shutdown()

    async def __aenter__(self) -> AIOConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- reading ---------------------------------------------------------------------------

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned partitions' positions as ``{TopicPartition: [records]}``,
        at most `max_records` (default max_poll_records); empty when none came within
        `timeout_ms` (`Consumer.poll`)."""
        records = await self._poll(timeout_ms, max_records)
        grouped: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in records:
            grouped.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        return grouped

    async def getone(self) -> ConsumerRecord:
        """The next record, waiting for it as long as it takes."""
        while True:
            records = await self._poll(_POLL_WAIT_MS, 1)
            if records:
                return records[0]

    def __aiter__(self) -> AIOConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record; the iteration ends when the consumer is stopped, or after
        consumer_timeout_ms without one (if set), as the synchronous consumer's."""
        timeout_ms = self._consumer.config.consumer_timeout_ms
        loop = asyncio.get_running_loop()
        until = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        while not self._stopped:
            left_ms = _POLL_WAIT_MS if until is None else max(0, (until - loop.time()) * 1000)
            records = await self._poll(int(min(left_ms, _POLL_WAIT_MS)), 1)
            if records:
                return records[0]
            if until is not None and loop.time() >= until:
                break
        raise StopAsyncIteration

    async def _poll(self, timeout_ms: int, max_records: int | None) -> list[ConsumerRecord]:
        """`Consumer.poll` on the worker. A poll cannot be stopped halfway (its records have
        moved the positions once it returns), so a caller cancelled meanwhile leaves it
        running, and the next call hands out its records first."""
        if self._held:
            count = len(self._held) if max_records is None else max_records
            records, self._held = self._held[:count], self._held[count:]
            return records
        polling = self._polling
        if polling is None:
            polling = self._polling = asyncio.ensure_future(self._worker.run(
                lambda: list(self._consumer.poll(timeout_ms, max_records))
            ))
        try:
            records = list(await asyncio.shield(polling))
        finally:
            if polling.done():
                self._polling = None
        count = len(records) if max_records is None else max_records
        self._held = records[count:]
        return records[:count]

    # ---- assignment and positions ----------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """`Consumer.subscribe` (the listener's callbacks run on the consumer's worker
        thread, inside its polls)."""
        self._consumer.subscribe(topics, pattern=pattern, listener=listener)

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()

    def subscription(self) -> set[str]:
        return self._consumer.subscription()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """`Consumer.assign`."""
        self._consumer.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """`Consumer.seek`: the next record read from the partition is at `offset`."""
        self._consumer.seek(partition, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Resolved at the next poll or position() (no partitions: every assigned one)."""
        self._consumer.seek_to_beginning(*partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._consumer.seek_to_end(*partitions)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record read from the partition (looked up if need be)."""
        return await self._worker.run(self._consumer.position, partition)

    def pause(self, *partitions: TopicPartition) -> None:
        self._consumer.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._consumer.resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        return self._consumer.paused()

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._consumer.highwater(partition)

    # ---- commits and lookups ---------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None
    ) -> None:
        """Commit `offsets`, or the position of every assigned partition, and wait until
        the commit is in the log (`Consumer.commit`)."""
        await self._worker.run(self._consumer.commit, offsets)

    async def committed(self, partition: TopicPartition) -> OffsetAndMetadata | None:
        """The group's committed offset of the partition; None if it has none."""
        found = await self._worker.run(self._consumer.committed, [partition])
        return found.get(partition)

    async def topics(self) -> set[str]:
        return await self._worker.run(self._consumer.topics)

    async def partitions_for_topic(self, topic: str) -> set[int] | None:
        return await self._worker.run(self._consumer.partitions_for_topic, topic)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await self._worker.run(self._consumer.beginning_offsets, partitions)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._worker.run(self._consumer.end_offsets, partitions)
