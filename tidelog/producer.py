"""The producer: per-partition batching and a background sender, as Kafka's RecordAccumulator
and Sender.

``send()`` only encodes the record into its partition's open batch (the storage format's
record bytes) and returns a future that shares the batch's outcome; it never waits for the
network. One sender task per producer, on the client's event loop, drains ready batches (full,
lingered ``linger_ms``, or flushed), frames each with its header and joins them straight into a
serialized Produce, one per leader node carrying one batch per partition, sent through the
client's partitioned-request engine; the answers are handled on that loop as they arrive.
Per record that is a few microseconds of Python, which is what a producer's throughput is
made of.

Idempotence (on by default with acks=all): the producer gets an id and epoch from
InitProducerId and numbers each partition's records; a batch keeps its sequence across
retries, so a leader (also a new one, which rebuilds the state from its log) acknowledges a
retried batch it already holds with the original offsets instead of writing it twice. Retries
go back to the head of their partition's queue in sequence order, and a partition with a retry
pending has only that batch in flight, so the log keeps the send order. Kafka's reactions:
DUPLICATE_SEQUENCE_NUMBER is a success whose offsets are unknown (-1);
OUT_OF_ORDER_SEQUENCE_NUMBER is retried while an earlier batch of the partition is unresolved,
and when it is a real gap (or UNKNOWN_PRODUCER_ID) the producer takes a new epoch and restarts
every partition's sequences (KIP-360); a batch that fails for good after it was numbered also
leaves a gap, handled the same way.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidelog import wire
from tidelog.errors import (
    ConfigurationError,
    DuplicateSequenceNumberError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    RetriableError,
    TidelogError,
    UnknownProducerIdError,
    UnsupportedVersionError,
)
from tidelog.hashing import partition_for_key
from tidelog.partitioned import PartitionedRequest
from tidelog.records import (
    HEADER_SIZE,
    NO_HEADERS,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_OVERHEAD,
    batch_header,
    encode_record,
    pack_plain_record_prefix,
)
from tidelog.retry import Deadline
from tidelog.types import RecordMetadata, TopicPartition

if TYPE_CHECKING:
    from tidelog.client import Client

log = logging.getLogger("tidelog.producer")
_time_ns = time.time_ns

_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
_SEQUENCE_WRAP = 1 << 31
#: The sender's longest sleep when nothing is due; wakeups normally come from notifications.
_IDLE_S = 0.5
#: A Produce RPC may take the leader's commit wait (timeout_ms) plus this much.
_RPC_SLACK_S = 5.0


@dataclass(frozen=True)
class ProducerConfig:
    """A producer's settings, with Kafka's names and defaults; picklable."""

    acks: str | int = "all"
    #: None: on exactly when acks is "all" (Kafka's default); True with other acks is an error.
    idempotent: bool | None = None
    linger_ms: int = 5
    batch_size: int = 16_384
    buffer_memory: int = 32 * 1024 * 1024
    delivery_timeout_ms: int = 120_000
    #: Batches of one partition in flight at once (Kafka's max.in.flight, at most 5 with
    #: idempotence).
    max_in_flight: int = 5
    #: How long send() may block for metadata or for room in the buffer.
    max_block_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.acks not in _ACKS:
            raise ConfigurationError(f"acks must be 'all', -1, 0 or 1, got {self.acks!r}")
        if self.idempotent and _ACKS[self.acks] != -1:
            raise ConfigurationError(
                "idempotence needs acks='all'; pass idempotent=False for acks=0 or 1"
            )
        if self.idempotence and not 1 <= self.max_in_flight <= 5:
            raise ConfigurationError("max_in_flight must be 1..5 with idempotence (Kafka's rule)")
        if self.max_in_flight < 1 or self.batch_size < 1 or self.linger_ms < 0:
            raise ConfigurationError("need max_in_flight >= 1, batch_size >= 1, linger_ms >= 0")
        if self.delivery_timeout_ms <= 0 or self.max_block_ms < 0 or self.buffer_memory < 1:
            raise ConfigurationError(
                "need delivery_timeout_ms > 0, max_block_ms >= 0, buffer_memory >= 1"
            )

    @property
    def acks_value(self) -> int:
        return _ACKS[self.acks]

    @property
    def idempotence(self) -> bool:
        return self.acks_value == -1 if self.idempotent is None else self.idempotent


@dataclass(eq=False)
class _Batch:
    tp: TopicPartition
    created: float
    deadline: float
    #: Creation order, which is also sequence order within a partition.
    serial: int
    #: Guards `callbacks` against the completion (the producer's lock).
    lock: threading.RLock
    #: The records, encoded as they were sent: pieces of the batch body, joined when it leaves.
    parts: list[bytes] = field(default_factory=list)
    body: bytes = b""
    count: int = 0
    first_timestamp: int = 0
    max_timestamp: int = -1
    size: int = HEADER_SIZE
    #: Base sequence once numbered (first drained); None before, and again after a reset.
    sequence: int | None = None
    header: bytes = b""
    #: (producer id, epoch, sequence) that `header` was built with.
    built_for: tuple[int, int, int] | None = None
    attempts: int = 0
    #: Takes no more records: full, or drained (it may come back as a retry).
    sealed: bool = False
    #: The outcome, shared by the batch's records, set before `done`.
    base_offset: int = -1
    log_append_time_ms: int = -1
    error: BaseException | None = None
    callbacks: list[Callable[[], object]] | None = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def add_callback(self, callback: Callable[[], object]) -> None:
        with self.lock:
            if self.callbacks is not None:
                self.callbacks.append(callback)
                return
        callback()

    def resolve(self) -> None:
        """Publish the outcome (under the producer's lock) and run the records' callbacks."""
        self.done.set()
        callbacks, self.callbacks = self.callbacks or [], None
        for callback in callbacks:
            try:
                callback()
            except Exception:  # as concurrent.futures does: a callback's failure is logged
                log.exception("a send() callback failed")


class RecordFuture:
    """What `send()` returns: the record's RecordMetadata once its batch is acknowledged, or
    the error that failed it (Kafka's FutureRecordMetadata). The records of a batch share one
    outcome, so a future is a pair of slots, not a `concurrent.futures.Future` with its own
    lock and condition: at tens of thousands of records per second those cost more than
    encoding the record. It offers the `Future` methods a caller uses; it cannot be
    cancelled."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: _Batch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    def done(self) -> bool:
        return self._batch.done.is_set()

    def running(self) -> bool:
        return not self._batch.done.is_set()

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.done.wait(timeout):
            raise TimeoutError(f"{self._batch.tp}: not acknowledged within {timeout} s")
        return self._batch.error

    def result(self, timeout: float | None = None) -> RecordMetadata:
        error = self.exception(timeout)
        if error is not None:
            raise error
        batch = self._batch
        offset = -1 if batch.base_offset < 0 else batch.base_offset + self._index
        timestamp = batch.log_append_time_ms if batch.log_append_time_ms >= 0 else self._timestamp
        return RecordMetadata(batch.tp.topic, batch.tp.partition, offset, timestamp)

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        """`fn(future)` once the outcome is known: at once if it is, else on the producer's
        sender thread (keep it short)."""
        self._batch.add_callback(lambda: fn(self))


@dataclass(eq=False)
class _Partition:
    tp: TopicPartition
    queue: deque[_Batch] = field(default_factory=deque)
    in_flight: list[_Batch] = field(default_factory=list)
    next_sequence: int = 0
    #: The sequence after the last acknowledged batch: the batch carrying it is "next".
    acked_sequence: int = 0
    retry_at: float = 0.0


@dataclass(eq=False)
class _Topic:
    """What send() needs of a topic, found with one dict lookup by name."""

    partitions: list[_Partition | None]
    #: Kafka's sticky partitioner: the partition keyless records go to.
    sticky: int = -1
    #: The metadata version `partitions` was sized for.
    version: int = -1
    #: The sticky partition's open batch, where send()'s fast path appends.
    open: _Batch | None = None


class Producer:
    """Thread-safe: any number of threads may call send() concurrently."""

    def __init__(self, client: Client, config: ProducerConfig) -> None:
        self.client = client
        self.config = config
        self._acks = config.acks_value
        # send()'s hot settings as plain attributes, one lookup each.
        self._batch_size = config.batch_size
        self._buffer_memory = config.buffer_memory
        self._linger_ms = config.linger_ms
        #: send() takes the lock itself, not through the Condition's Python-level wrapper.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._topics: dict[str, _Topic] = {}
        self._buffered = 0
        self._flushing = 0
        self._closing = False
        self._force_close = False
        self._producer_id = NO_PRODUCER_ID
        self._producer_epoch = NO_PRODUCER_EPOCH
        self._needs_producer_id = config.idempotence
        self._refresh_wanted = False
        self._refresh_at = 0.0
        #: Batches sent again after a retriable error (Kafka's record-retry metric, by batch).
        self.retries = 0
        #: Records acknowledged and records failed so far (Kafka's record-send-total and
        #: record-error-total), for callers that check a stream without keeping its futures.
        self.records_acknowledged = 0
        self.records_failed = 0
        self._init_at = 0.0
        self._serial = itertools.count()
        self._produce_request: PartitionedRequest[_Batch, wire.ProduceAnswer] = (
            PartitionedRequest(client, "Produce", "ProduceSerialized", self._request_of,
                               wire.parse_produce)
        )
        #: The client's event loop, where the sender runs; send() wakes it from any thread.
        self._loop = client.transport.loop
        self._wakeup = asyncio.Event()
        self._wake_pending = False
        #: The Produce calls in flight (the loop keeps only weak references to its tasks).
        self._calls: set[asyncio.Task[None]] = set()
        self._sender = client.transport.submit(self._send_loop())

    # ---- the user's side ---------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """Queue one record; the future gives its RecordMetadata once acknowledged (per acks)
        or the error that failed it, naming the partition. A bytearray or memoryview key or
        value is copied to bytes.

        This is the producer's per-record cost, so it does the least it can: the record is
        encoded into its batch's body at once (no object per record survives the call but
        the future) and everything per batch waits for the sender thread. A keyless record
        with no partition or headers, the common one, goes straight into the batch the
        sticky partitioner has open for its topic, when that has room: one dict lookup."""
        if self._closing:
            raise ConfigurationError("send() on a closed producer")
        timestamp = _time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        plain = key is None and not headers and type(value) is bytes
        if not plain:
            value, key = _checked_bytes("value", value), _checked_bytes("key", key)
        lock = self._lock
        if plain and partition is None:
            size = RECORD_OVERHEAD + len(value)  # type: ignore[arg-type]  # plain: bytes
            lock.acquire()  # (not `with`: its method lookups cost as much as the lock)
            known = self._topics.get(topic)
            batch = None if known is None else known.open
            if (batch is None or batch.sealed or batch.size + size > self._batch_size
                    or self._buffered + size > self._buffer_memory):
                lock.release()
                batch, size = self._choose_batch(topic, value, key, partition, timestamp, headers)
        else:
            batch, size = self._choose_batch(topic, value, key, partition, timestamp, headers)
        try:  # the lock is held
            index = batch.count
            if plain:
                batch.parts += (
                    pack_plain_record_prefix(size - 4, 0, index, timestamp - batch.first_timestamp,
                                             -1, size - RECORD_OVERHEAD),
                    value, NO_HEADERS,
                )  # type: ignore[arg-type]  # plain: value is bytes
            else:
                encode_record(batch.parts, index, timestamp - batch.first_timestamp, key, value,
                              headers or ())
            batch.count = index + 1
            batch.size += size
            if timestamp > batch.max_timestamp:
                batch.max_timestamp = timestamp
            self._buffered += size
            if batch.size >= self._batch_size:
                batch.sealed = True
                self._wake_sender()
            return RecordFuture(batch, index, timestamp)
        finally:
            lock.release()

    def _choose_batch(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> tuple[_Batch, int]:
        """The batch for any record, and the record's size: checks the input, finds the
        partition (opening the topic's state on its first record), opens a new batch when the
        current one has no room. Returns holding the lock, which the caller releases."""
        metadata = self.client.metadata
        version = metadata.version
        known = self._topics.get(topic)
        if known is not None and known.version == version:
            count = len(known.partitions)  # a count changes only with a metadata update
        else:
            count = metadata.partition_count(topic) or self.client.partitions_for(
                topic, Deadline(self.config.max_block_ms)
            )
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, count)
        elif not 0 <= partition < count:
            raise ConfigurationError(f"topic {topic!r} has no partition {partition} ({count})")
        size = RECORD_OVERHEAD + (0 if value is None else len(value)) + (
            0 if key is None else len(key)
        )
        if headers:
            size += sum(8 + len(k.encode()) + len(v or b"") for k, v in headers)
        self._lock.acquire()
        try:
            if self._buffered + size > self._buffer_memory and self._buffered > 0:
                self._wait_for_room(topic, size)
            topic_state = self._topics.get(topic)
            if topic_state is None or len(topic_state.partitions) != count:
                topic_state = self._topic(topic, count)
            topic_state.version = version
            sticky = partition is None
            if partition is None:
                partition = topic_state.sticky
                if not 0 <= partition < count:
                    partition = self._move_sticky(topic, topic_state, count)
                    sticky = False  # moved already
            state = topic_state.partitions[partition] or self._partition(topic, partition)
            batch = self._batch_with_room(state, size)
            if batch is None and sticky:
                # KIP-480: fill another partition rather than open a second batch on this one.
                partition = self._move_sticky(topic, topic_state, count)
                state = topic_state.partitions[partition] or self._partition(topic, partition)
                batch = self._batch_with_room(state, size)
            if batch is None:
                batch = self._open_batch(state, timestamp)
                if len(state.queue) > 1 or not self._linger_ms or not state.in_flight:
                    self._wake_sender()
            if partition == topic_state.sticky:
                topic_state.open = batch
        except BaseException:
            self._lock.release()
            raise
        return batch, size

    def _batch_with_room(self, state: _Partition, size: int) -> _Batch | None:
        """The partition's open batch if `size` more bytes fit in it. One they do not fit is
        sealed: it is full, so it leaves now rather than when it has lingered."""
        batch = state.queue[-1] if state.queue else None
        if batch is None or batch.sealed:
            return None
        if batch.size + size > self._batch_size:
            batch.sealed = True
            self._wake_sender()
            return None
        return batch

    def _topic(self, topic: str, count: int) -> _Topic:
        """The topic's send() state, (re)made when its partition count changes."""
        known = self._topics.get(topic)
        partitions = [self._partitions.get(TopicPartition(topic, p)) for p in range(count)]
        state = self._topics[topic] = _Topic(partitions)
        if known is not None:
            state.sticky = known.sticky
        return state

    def _partition(self, topic: str, partition: int) -> _Partition:
        tp = TopicPartition(topic, partition)
        state = self._partitions[tp] = _Partition(tp)
        self._topics[topic].partitions[partition] = state
        return state

    def _open_batch(self, state: _Partition, timestamp: int) -> _Batch:
        now = time.monotonic()
        batch = _Batch(state.tp, now, now + self.config.delivery_timeout_ms / 1000,
                       next(self._serial), self._lock, first_timestamp=timestamp)
        state.queue.append(batch)
        return batch

    def _wait_for_room(self, topic: str, size: int) -> None:
        """Block (up to max_block_ms) until the buffer has room for `size` more bytes."""
        block = Deadline(self.config.max_block_ms)
        while self._buffered > 0 and self._buffered + size > self.config.buffer_memory:
            if not self._cond.wait(block.remaining()) and block.expired:
                raise RequestTimedOutError(
                    f"{topic}: no room in the producer buffer within "
                    f"{self.config.max_block_ms} ms"
                )

    def _move_sticky(self, topic: str, state: _Topic, count: int) -> int:
        """Kafka's sticky partitioner for null keys (KIP-480): keyless records fill one
        partition's batch; when it has no room, they move to another partition that has a
        leader rather than open a second, small batch on the same one."""
        current = state.sticky
        choices = [p for p in self.client.metadata.available_partitions(topic) if p < count]
        if len(choices) > 1 and current in choices:
            choices.remove(current)
        state.sticky = random.choice(choices) if choices else random.randrange(count)
        return state.sticky

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now, lingering or not, and wait until it is acknowledged or
        failed (the futures say which)."""
        deadline = None if timeout_ms is None else Deadline(timeout_ms)
        with self._cond:
            pending = [b for s in self._partitions.values() for b in (*s.queue, *s.in_flight)]
            self._flushing += 1
            self._wake_sender()
        try:
            for batch in pending:
                if not batch.done.wait(None if deadline is None else deadline.remaining()):
                    raise RequestTimedOutError(f"flush did not complete within {timeout_ms} ms")
        finally:
            with self._cond:
                self._flushing -= 1

    def close(self, timeout_ms: int | None = None) -> None:
        """Deliver what is queued (bounded by `timeout_ms`), then stop the sender; records
        still queued at the timeout fail."""
        with self._cond:
            self._closing = True
            self._wake_sender()
        try:
            self._sender.result(None if timeout_ms is None else timeout_ms / 1000)
        except concurrent.futures.TimeoutError:
            with self._cond:
                self._force_close = True
                self._wake_sender()
            self._sender.result()
        except concurrent.futures.CancelledError:
            pass  # the client was closed first, which failed what was left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def producer_id(self) -> tuple[int, int]:
        """(producer id, epoch); (-1, -1) before InitProducerId or without idempotence."""
        return self._producer_id, self._producer_epoch

    # ---- the sender thread -------------------------------------------------------------------

    def _wake_sender(self) -> None:
        """(Under the lock.) Make the sender look again, from any thread; one wakeup is
        pending at a time, so a burst of full batches costs one."""
        if not self._wake_pending:
            self._wake_pending = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: the sender is gone
                self._loop.call_soon_threadsafe(self._wakeup.set)

    async def _send_loop(self) -> None:
        """One round: expire, then get a producer id, refresh metadata (both off the loop, in
        a worker thread) or send, whichever is due; else sleep until woken or until the next
        linger or backoff ends. Refreshes are spaced by the retry backoff so an election does
        not cause a storm."""
        try:
            while True:
                init = refresh = False
                ready: list[_Batch] = []
                with self._lock:
                    self._wake_pending = False
                    self._wakeup.clear()
                    if self._force_close:
                        self._fail_all(
                            RequestTimedOutError("the producer was closed before delivery")
                        )
                        return
                    queued = any(s.queue for s in self._partitions.values())
                    in_flight = any(s.in_flight for s in self._partitions.values())
                    if self._closing and not queued and not in_flight:
                        return
                    now = time.monotonic()
                    self._expire(now)
                    wake_at = now + _IDLE_S
                    if self._needs_producer_id and queued:
                        init = not in_flight and now >= self._init_at
                        wake_at = max(self._init_at, now) if not in_flight else wake_at
                    else:
                        ready, wake_at = self._ready(now)
                    if self._refresh_wanted:
                        if now >= self._refresh_at:
                            refresh, self._refresh_wanted = True, False
                            self._refresh_at = now + self.client.backoff.delay_s(1)
                        else:
                            wake_at = min(wake_at, self._refresh_at)
                if init:
                    await asyncio.to_thread(self._init_producer_id)
                if refresh:
                    await asyncio.to_thread(self._refresh)
                if ready:
                    self._send(ready)
                if not (init or refresh or ready):
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(max(wake_at - now, 0.0), _IDLE_S)):
                            await self._wakeup.wait()
        except asyncio.CancelledError:
            with self._lock:
                self._fail_all(RequestTimedOutError("the client was closed before delivery"))
            raise
        finally:
            for task in self._calls:
                task.cancel()

    def _ready(self, now: float) -> tuple[list[_Batch], float]:
        """Pop the batches to send now (numbering them); also when to look again."""
        wake_at = now + _IDLE_S
        linger = self.config.linger_ms / 1000
        draining = self._flushing > 0 or self._closing
        ready: list[_Batch] = []
        for tp, state in self._partitions.items():
            if not state.queue:
                continue
            head = state.queue[0]
            if len(state.in_flight) >= (1 if head.attempts else self.config.max_in_flight):
                continue
            if state.retry_at > now:
                wake_at = min(wake_at, state.retry_at)
                continue
            due = head.created + linger
            # A batch is sealed once full (or once sent, when it comes back as a retry).
            if not (draining or head.sealed or due <= now):
                wake_at = min(wake_at, due)
                continue
            if self.client.metadata.leader_for(tp) is None:
                self._refresh_wanted = True
                wake_at = min(wake_at, now + self.client.backoff.delay_s(1))
                continue
            state.queue.popleft()
            head.sealed = True
            if self.config.idempotence and head.sequence is None:
                head.sequence = state.next_sequence
                state.next_sequence = (state.next_sequence + head.count) % _SEQUENCE_WRAP
            state.in_flight.append(head)
            ready.append(head)
        return ready, wake_at

    def _send(self, batches: list[_Batch]) -> None:
        """Frame the batches (outside the lock) and start one Produce per leader."""
        work: dict[TopicPartition, _Batch] = {}
        for batch in batches:
            self._build(batch)
            work[batch.tp] = batch
        groups, leaderless = self._produce_request.by_leader(work)
        if leaderless:
            self._handle(work, leaderless)
        timeout_s = self.client.config.request_timeout_ms / 1000 + _RPC_SLACK_S
        for node, tps in groups.items():
            task = self._loop.create_task(self._produce(node, {tp: work[tp] for tp in tps},
                                                        timeout_s))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)

    def _request_of(self, batches: Mapping[TopicPartition, _Batch]) -> bytes:
        return wire.serialized_produce_request(
            {tp: (b.header, b.body) for tp, b in batches.items()}, self._acks,
            self.client.config.request_timeout_ms,
        )

    async def _produce(
        self, node: int, batches: dict[TopicPartition, _Batch], timeout_s: float
    ) -> None:
        """One Produce request and what its answer does to each of its batches."""
        self._handle(batches, await self._produce_request.send(node, batches, timeout_s))

    def _handle(
        self,
        batches: Mapping[TopicPartition, _Batch],
        answers: Mapping[TopicPartition, wire.ProduceAnswer | wire.Failure],
    ) -> None:
        with self._lock:
            now = time.monotonic()
            for tp, answer in answers.items():
                if isinstance(answer, wire.Failure):
                    self._on_failure(batches[tp], answer, now)
                else:
                    self._complete(batches[tp], answer.base_offset, answer.log_append_time_ms)
            self._wakeup.set()

    def _build(self, batch: _Batch) -> None:
        """Frame the batch's encoded records for the producer id, epoch and sequence it
        leaves with (framed again when a new epoch renumbers it)."""
        stamp = (self._producer_id, self._producer_epoch,
                 NO_SEQUENCE if batch.sequence is None else batch.sequence)
        if batch.built_for != stamp:
            if batch.parts:
                batch.body, batch.parts = b"".join(batch.parts), []
            batch.header = batch_header(
                batch.body,
                base_offset=0,
                partition_leader_epoch=-1,
                attributes=0,
                last_offset_delta=batch.count - 1,
                first_timestamp=batch.first_timestamp,
                max_timestamp=batch.max_timestamp,
                producer_id=stamp[0],
                producer_epoch=stamp[1],
                base_sequence=stamp[2],
                records_count=batch.count,
            )
            batch.built_for = stamp

    def _state(self, batch: _Batch) -> _Partition:
        return self._partitions[batch.tp]

    def _complete(self, batch: _Batch, base_offset: int, log_append_time_ms: int) -> None:
        state = self._state(batch)
        state.in_flight.remove(batch)
        if batch.sequence is not None:
            end = (batch.sequence + batch.count) % _SEQUENCE_WRAP
            if _seq_after(end, state.acked_sequence):
                state.acked_sequence = end
        batch.base_offset, batch.log_append_time_ms = base_offset, log_append_time_ms
        self.records_acknowledged += batch.count
        self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        self._buffered -= batch.size - HEADER_SIZE
        batch.parts, batch.body = [], b""
        batch.resolve()
        self._cond.notify_all()

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        state = self._state(batch)
        if batch in state.in_flight:
            state.in_flight.remove(batch)
        elif batch in state.queue:
            state.queue.remove(batch)
        if batch.sequence is not None:
            self._needs_producer_id = True  # its sequence numbers are now a gap
        batch.error = error
        self.records_failed += batch.count
        self._finish(batch)

    def _on_failure(self, batch: _Batch, failure: wire.Failure, now: float) -> None:
        error = failure.error
        state = self._state(batch)
        if isinstance(error, DuplicateSequenceNumberError):
            self._complete(batch, -1, -1)
            return
        retriable = isinstance(error, RetriableError)
        if isinstance(error, OutOfOrderSequenceNumberError | UnknownProducerIdError):
            retriable = True
            if batch.sequence == state.acked_sequence:
                self._needs_producer_id = True  # a real gap: new epoch, sequences from 0
        if not retriable or now >= batch.deadline:
            if retriable:
                error = RequestTimedOutError(
                    f"{batch.tp}: not delivered within {self.config.delivery_timeout_ms} ms; "
                    f"last error: {error}"
                )
            self._fail(batch, error)
            return
        reaction = self._produce_request.classify(batch.tp, failure)
        refresh = reaction is not None and reaction.refresh
        immediate = reaction is not None and reaction.immediate
        self._refresh_wanted |= refresh
        batch.attempts += 1
        self.retries += 1
        state.in_flight.remove(batch)
        serials = [b.serial for b in state.queue]
        state.queue.insert(bisect.bisect_right(serials, batch.serial), batch)
        state.retry_at = now if immediate else now + self.client.backoff.delay_s(batch.attempts)

    def _expire(self, now: float) -> None:
        """Fail queued batches past their delivery timeout (in-flight ones wait for answers).
        A queue is in creation order (retries go back by serial), so deadlines rise along it
        and each round looks at the heads only."""
        for state in self._partitions.values():
            while state.queue and state.queue[0].deadline <= now:
                batch = state.queue[0]
                self._fail(batch, RequestTimedOutError(
                    f"{batch.tp}: not delivered within {self.config.delivery_timeout_ms} ms"
                ))

    def _fail_all(self, error: TidelogError) -> None:
        for state in self._partitions.values():
            for batch in [*state.queue, *state.in_flight]:
                self._fail(batch, error)

    def _refresh(self) -> None:
        # On failure the batches stay queued and the next round asks again.
        with contextlib.suppress(TidelogError):
            self.client.refresh_metadata(Deadline(self.client.config.request_timeout_ms))

    def _init_producer_id(self) -> None:
        """Get a producer id (or a new epoch of ours) and restart every sequence at 0; runs
        only when nothing is in flight. A non-retriable answer fails what is queued."""
        try:
            producer_id, epoch = self.client.init_producer_id(
                self._producer_id, self._producer_epoch
            )
        except TidelogError as exc:
            with self._cond:
                if isinstance(exc, RetriableError):
                    self._init_at = time.monotonic() + self.client.backoff.delay_s(1)
                else:
                    self._fail_all(_explain_init_failure(exc))
            return
        with self._cond:
            self._producer_id, self._producer_epoch = producer_id, epoch
            for state in self._partitions.values():
                # A batch already sent under the old epoch may be in the log with its answer
                # lost; renumbered under the new epoch the leader could not recognise it and
                # would write it twice. Its outcome is unknown: fail it, as Kafka does.
                for batch in [b for b in state.queue if b.attempts > 0]:
                    self._fail(batch, RequestTimedOutError(
                        f"{batch.tp}: outcome unknown (sent, never acknowledged) when the "
                        f"producer had to take a new epoch; not resent, to avoid a duplicate"
                    ))
                state.next_sequence = state.acked_sequence = 0
                for batch in state.queue:
                    batch.sequence = None
            self._needs_producer_id = False


def _explain_init_failure(exc: TidelogError) -> TidelogError:
    if not isinstance(exc, UnsupportedVersionError):
        return exc
    return type(exc)(
        f"idempotent producing needs InitProducerId, which this cluster does not support "
        f"({exc}); create the producer with idempotent=False"
    )


def _checked_bytes(name: str, data: object) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ConfigurationError(f"{name} must be bytes or None, got {type(data).__name__}")
    return bytes(data)


def _seq_after(a: int, b: int) -> bool:
    """Whether sequence a is after b, allowing for the wrap at 2**31."""
    return a != b and (a - b) % _SEQUENCE_WRAP < _SEQUENCE_WRAP // 2
