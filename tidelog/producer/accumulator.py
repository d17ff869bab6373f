"""The accumulator (Kafka's RecordAccumulator): per-partition queues of batches that send()
fills and the sender drains.

``send()`` only encodes the record into its partition's open batch (the storage format's record
bytes) and returns a future that shares the batch's outcome; it never waits for the network.
Per record that is a few microseconds of Python, which is what a producer's throughput is made
of: a keyless record with no partition or headers, the common one, goes straight into the batch
the sticky partitioner has open for its topic (KIP-480), with one dict lookup.

A batch leaves when full, when it has lingered ``linger_ms``, or on flush/close. With a
compression codec, "full" is ``batch_size`` of *compressed* bytes, as in Kafka: the records are
counted at the topic's estimated compression ratio (`CompressionRatioEstimator`), so a batch of
records that compress 3x carries about 3x the records, and the costs per batch (the request,
the leader's checks, a Raft entry, three fsyncs) are spread over that much more payload. Retries go
back to the head of their partition's queue in creation (= sequence) order, and a partition
with a retry pending has only that batch in flight, so the log keeps the send order.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import operator
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidelog.errors import ConfigurationError, RequestTimedOutError, TidelogError
from tidelog.hashing import partition_for_key
from tidelog.producer.config import ProducerConfig
from tidelog.producer.idempotence import IdempotenceState
from tidelog.records import (
    HEADER_SIZE,
    NO_HEADERS,
    RECORD_OVERHEAD,
    encode_record,
    plain_record_head,
)
from tidelog.retry import Deadline, leader_poll_s
from tidelog.types import RecordMetadata, TopicPartition

if TYPE_CHECKING:
    from tidelog.connections import Connections
    from tidelog.producer.transactions import TransactionManager

log = logging.getLogger("tidelog.producer")
_time_ns = time.time_ns
#: The sender's longest sleep when nothing is due; wakeups normally come from notifications.
IDLE_S = 0.5
#: Kafka's CompressionRatioEstimator steps: an estimate improves slowly (a batch that compresses
#: better than estimated moves it by 0.005) and deteriorates at once (worse: by at least 0.05,
#: up to the ratio seen), so that batches rarely come out above batch_size.
COMPRESSION_RATIO_IMPROVING_STEP = 0.005
COMPRESSION_RATIO_DETERIORATE_STEP = 0.05
#: Kafka's COMPRESSION_RATE_ESTIMATION_FACTOR: the margin on the estimate when filling a batch.
COMPRESSION_RATE_ESTIMATION_FACTOR = 1.05
#: The most bytes of uncompressed records a compressed batch carries, whatever the estimate
#: (or batch_size, when that is larger): Kafka's default max.request.size. Kafka's producer
#: splits a batch the broker refuses as too large (the estimate was too hopeful: records that
#: suddenly stop compressing); Tidelog's does not, so it bounds a batch instead, keeping one of
#: incompressible records near the nodes' default max.message.bytes (1 MiB).
MAX_UNCOMPRESSED_BATCH_BYTES = 1024 * 1024


class CompressionRatioEstimator:
    """Each topic's estimated compression ratio (compressed / uncompressed bytes of a batch's
    records) for the producer's codec, as Kafka's CompressionRatioEstimator keeps it: 1.0 until
    batches have been seen, then moved by each batch the sender compresses (`observe`)."""

    def __init__(self) -> None:
        self._ratios: dict[str, float] = {}

    def estimate(self, topic: str) -> float:
        return self._ratios.get(topic, 1.0)

    def observe(self, topic: str, ratio: float) -> float:
        """Take the ratio one batch of `topic` compressed to; return the new estimate."""
        current = self._ratios.get(topic, 1.0)
        if ratio > current:
            current = max(current + COMPRESSION_RATIO_DETERIORATE_STEP, ratio)
        elif ratio < current:
            current = max(current - COMPRESSION_RATIO_IMPROVING_STEP, ratio)
        self._ratios[topic] = current
        return current


def batch_limit(batch_size: int, ratio: float) -> int:
    """The most bytes (header and uncompressed records) a batch is filled to so that it
    compresses to about `batch_size` at the estimated `ratio` (1.0: no codec): Kafka's
    MemoryRecordsBuilder counts the records at the ratio times 1.05, so with no codec the limit
    is batch_size itself. Kafka counts the record about to be appended uncompressed; here it is
    counted at the estimate too, so that send() keeps one comparison per record (the 5% margin
    covers the difference), and a compressed batch's records stay within
    MAX_UNCOMPRESSED_BATCH_BYTES (or batch_size, if larger)."""
    if ratio >= 1.0:
        return batch_size
    records = (batch_size - HEADER_SIZE) / (ratio * COMPRESSION_RATE_ESTIMATION_FACTOR)
    return HEADER_SIZE + int(min(records, max(MAX_UNCOMPRESSED_BATCH_BYTES, batch_size)))


@dataclass(eq=False)
class Batch:
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
    #: The `size` at which the batch is full: batch_size, or with a codec what compresses to
    #: about batch_size at the topic's estimated ratio (`batch_limit`).
    limit: int = 0
    #: Base sequence once numbered (first drained); None before, and again after a reset.
    sequence: int | None = None
    #: Its last send went while batches ahead of it were unanswered (`IdempotenceState`).
    sent_behind: bool = False
    header: bytes = b""
    #: (producer id, epoch, sequence) that `header` was built with.
    built_for: tuple[int, int, int] | None = None
    attempts: int = 0
    #: Why the last attempt failed (a retriable error): named when the batch expires, so a
    #: delivery timeout says what kept the batch from being delivered.
    last_error: TidelogError | None = None
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
        _run_callback(callback)

    def resolve(self) -> None:
        """Publish the outcome (under the producer's lock) and run the records' callbacks."""
        self.done.set()
        callbacks, self.callbacks = self.callbacks or [], None
        for callback in callbacks:
            _run_callback(callback)


def _run_callback(callback: Callable[[], object]) -> None:
    """As concurrent.futures and kafka-python do: a callback's failure is logged, and neither
    stops the others nor reaches the caller that added it to a future already done."""
    try:
        callback()
    except Exception:
        log.exception("a send() callback failed")


class RecordFuture:
    """What `send()` returns: the record's RecordMetadata once its batch is acknowledged, or
    the error that failed it (Kafka's FutureRecordMetadata). The records of a batch share one
    outcome, so a future is a pair of slots, not a `concurrent.futures.Future` with its own
    lock and condition: at tens of thousands of records per second those cost more than
    encoding the record. It offers the `Future` methods a caller uses (`result`,
    `add_done_callback`) and kafka-python's (`get`, `add_callback`, `add_errback`,
    `succeeded`, `failed`, `is_done`); it cannot be cancelled."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: Batch, index: int, timestamp: int) -> None:
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
        """`fn(future)` once the outcome is known: at once if it is, else on the client's
        event loop thread (keep it short; the client's blocking calls refuse to run there)."""
        self._batch.add_callback(lambda: fn(self))

    # ---- kafka-python's FutureRecordMetadata ------------------------------------------------

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """kafka-python's name of `result`: the RecordMetadata, waiting up to `timeout`
        seconds (None: for ever); raises the error that failed the record, or TimeoutError."""
        return self.result(timeout)

    @property
    def is_done(self) -> bool:
        return self._batch.done.is_set()

    def succeeded(self) -> bool:
        batch = self._batch
        return batch.done.is_set() and batch.error is None

    def failed(self) -> bool:
        batch = self._batch
        return batch.done.is_set() and batch.error is not None

    def add_callback(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> RecordFuture:
        """`fn(*args, metadata, **kwargs)` once the record is acknowledged, as kafka-python
        calls it (never if it fails); when and where as `add_done_callback`. Returns the
        future, so calls chain."""
        def on_done() -> None:
            if self._batch.error is None:
                fn(*args, self.result(0), **kwargs)

        self._batch.add_callback(on_done)
        return self

    def add_errback(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> RecordFuture:
        """`fn(*args, error, **kwargs)` if the record fails, as kafka-python calls it."""
        def on_done() -> None:
            error = self._batch.error
            if error is not None:
                fn(*args, error, **kwargs)

        self._batch.add_callback(on_done)
        return self


@dataclass(eq=False)
class PartitionQueue:
    tp: TopicPartition
    queue: deque[Batch] = field(default_factory=deque)
    in_flight: list[Batch] = field(default_factory=list)
    next_sequence: int = 0
    #: The sequence after the last acknowledged batch: the batch carrying it is "next".
    acked_sequence: int = 0
    retry_at: float = 0.0
    #: The (leader, epoch) that failed the batch waiting for `retry_at`, when the failure asked
    #: for fresh metadata: the batch goes before `retry_at` once the metadata names another
    #: leader (`ClusterMetadata.moved`), the sender polling it every `poll_s` meanwhile.
    failed_leader: tuple[int, int] | None = None
    poll_s: float = 0.0


@dataclass(eq=False)
class _Topic:
    """What send() needs of a topic, found with one dict lookup by name."""

    partitions: list[PartitionQueue | None]
    #: Kafka's sticky partitioner: the partition keyless records go to.
    sticky: int = -1
    #: The metadata version `partitions` was sized for.
    version: int = -1
    #: The sticky partition's open batch, where send()'s fast path appends.
    open: Batch | None = None



class RecordAccumulator:
    """The producer's batches and the records' side of it; thread-safe: any number of threads
    may call send() concurrently. Everything else runs on the sender, under the same lock."""

    #: Tells the sender to look again (set by the producer once its sender exists); called
    #: under the lock.
    _wake_sender: Callable[[], None]

    def __init__(self, connections: Connections, config: ProducerConfig,
                 idempotence: IdempotenceState,
                 transactions: TransactionManager | None = None) -> None:
        self.connections = connections
        self.config = config
        self.idempotence = idempotence
        #: A transactional producer's transactions; None for any other.
        self.transactions = transactions
        # send()'s hot settings as plain attributes, one lookup each.
        self._batch_size = config.batch_size
        #: With a codec, each topic's compression ratio, which sizes its batches.
        self.estimator = CompressionRatioEstimator() if config.codec else None
        self._buffer_memory = config.buffer_memory
        self._linger_ms = config.linger_ms
        #: Whether send() calls a serializer or a partitioner of the application's.
        self._hooks = bool(config.key_serializer or config.value_serializer
                           or config.partitioner)
        #: send() takes the lock itself, not through the Condition's Python-level wrapper.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._partitions: dict[TopicPartition, PartitionQueue] = {}
        self._topics: dict[str, _Topic] = {}
        self._buffered = 0
        self._flushing = 0
        self.closing = False
        self._serial = itertools.count()
        #: Batches, and their records, sent again after a retriable error (Kafka's
        #: record-retry-total counts records).
        self.retries = 0
        self.records_retried = 0
        #: Records acknowledged and records failed so far (Kafka's record-send-total and
        #: record-error-total), for callers that check a stream without keeping its futures.
        self.records_acknowledged = 0
        self.records_failed = 0

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """Queue one record; the future gives its RecordMetadata once acknowledged (per acks)
        or the error that failed it, naming the partition. A bytearray or memoryview key or
        value is copied to bytes.

        This is the producer's per-record cost, so it does the least it can: the record is
        encoded into its batch's body at once (no object per record survives the call but
        the future) and everything per batch waits for the sender. A keyless record
        with no partition or headers, the common one, goes straight into the batch the
        sticky partitioner has open for its topic, when that has room: one dict lookup.

        With the producer's key_serializer or value_serializer, `key` and `value` are what
        they take; with a partitioner, it picks the partition of a record sent without one."""
        if self.closing:
            raise ConfigurationError("send() on a closed producer")
        if self.transactions is not None:
            self.transactions.check_send()
        if self._hooks:
            value, key, partition = self._apply_hooks(topic, value, key, partition)
        timestamp = (_time_ns() // 1_000_000 if timestamp_ms is None
                     else _checked_timestamp(timestamp_ms))
        plain = (type(topic) is str and topic != "" and key is None and headers is None
                 and type(value) is bytes)
        if not plain:
            topic, value, key, headers = _checked_record(topic, value, key, headers)
        if partition is not None:
            partition = _checked_partition(partition)
        lock = self._lock
        head = None
        if plain and partition is None:
            lock.acquire()  # (not `with`: its method lookups cost as much as the lock)
            known = self._topics.get(topic)
            opened = None if known is None else known.open
            if opened is not None and not opened.sealed:
                # The record's exact bytes: its varints depend on its place in the batch.
                head = plain_record_head(opened.count, timestamp - opened.first_timestamp,
                                         len(value))
                size = len(head) + len(value) + 1
                if (opened.size + size > opened.limit
                        or self._buffered + size > self._buffer_memory):
                    head = None
            if opened is not None and head is not None:
                batch = opened
            else:
                lock.release()
                batch, size = self._choose_batch(topic, value, key, partition, timestamp, headers)
        else:
            batch, size = self._choose_batch(topic, value, key, partition, timestamp, headers)
        try:  # the lock is held
            index = batch.count
            # From here `size` is the record's exact size, not the bound `_choose_batch` took.
            if plain:
                if head is None:
                    head = plain_record_head(index, timestamp - batch.first_timestamp, len(value))
                    size = len(head) + len(value) + 1
                batch.parts += (head, value, NO_HEADERS)
            else:
                size = encode_record(batch.parts, index, timestamp - batch.first_timestamp, key,
                                     value, headers or ())
            batch.count = index + 1
            batch.size += size
            if timestamp > batch.max_timestamp:
                batch.max_timestamp = timestamp
            self._buffered += size
            if batch.size >= batch.limit:
                batch.sealed = True
                self._wake_sender()
            return RecordFuture(batch, index, timestamp)
        finally:
            lock.release()

    @property
    def buffer_available(self) -> int:
        """The bytes the buffer has room for now (a snapshot): a send() of more waits for
        room, up to max_block_ms."""
        return self._buffer_memory - self._buffered

    def _apply_hooks(
        self, topic: object, value: Any, key: Any, partition: int | None
    ) -> tuple[Any, Any, int | None]:
        """The application's serializers, then its partitioner (for a record sent without a
        partition), as kafka-python's send() calls them: the partitioner gets the serialized
        key, every partition of the topic and those with a leader. What a serializer raises
        reaches the caller as it is; what it or the partitioner returns is checked."""
        config = self.config
        if config.key_serializer is not None:
            key = _serialized("key_serializer", config.key_serializer, key)
        if config.value_serializer is not None:
            value = _serialized("value_serializer", config.value_serializer, value)
        if partition is None and config.partitioner is not None:
            topic, value, key, _ = _checked_record(topic, value, key, None)
            metadata = self.connections.metadata
            count = metadata.cluster.partition_count(topic) or metadata.partitions_for(
                topic, Deadline(config.max_block_ms)
            )
            available = [p for p in metadata.cluster.available_partitions(topic) if p < count]
            chosen = config.partitioner(key, list(range(count)), available)
            number = -1
            if not isinstance(chosen, bool):
                with contextlib.suppress(TypeError):
                    number = operator.index(chosen)
            if not 0 <= number < count:
                raise ConfigurationError(
                    f"the partitioner must return a partition of topic {topic!r} (0-"
                    f"{count - 1}), returned {chosen!r:.80}"
                )
            partition = number
        return value, key, partition

    def _choose_batch(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> tuple[Batch, int]:
        """The batch for any record, and the record's size: checks the input, finds the
        partition (opening the topic's state on its first record), opens a new batch when the
        current one has no room. Returns holding the lock, which the caller releases."""
        metadata = self.connections.metadata.cluster
        version = metadata.version
        known = self._topics.get(topic)
        if known is not None and known.version == version:
            count = len(known.partitions)  # a count changes only with a metadata update
        else:
            count = metadata.partition_count(topic) or self.connections.metadata.partitions_for(
                topic, Deadline(self.config.max_block_ms)
            )
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, count)
        elif partition >= count:  # (send() refused a negative one)
            # Perhaps just added by another client: wait for metadata that has it, as Kafka's
            # producer does. `version` stays the one `count` was read at, so the next send()
            # reads the grown count from the metadata.
            count = self.connections.metadata.partitions_for(
                topic, Deadline(self.config.max_block_ms), partition=partition
            )
        # At most the record's size (RECORD_OVERHEAD: its varints at their widest), before
        # its place in a batch fixes its offset and timestamp deltas.
        size = RECORD_OVERHEAD + (0 if value is None else len(value)) + (
            0 if key is None else len(key)
        )
        if headers:
            size += sum(10 + len(k.encode()) + len(v or b"") for k, v in headers)
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

    def _batch_with_room(self, state: PartitionQueue, size: int) -> Batch | None:
        """The partition's open batch if `size` more bytes fit in it. One they do not fit is
        sealed: it is full, so it leaves now rather than when it has lingered."""
        batch = state.queue[-1] if state.queue else None
        if batch is None or batch.sealed:
            return None
        if batch.size + size > batch.limit:
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

    def _partition(self, topic: str, partition: int) -> PartitionQueue:
        tp = TopicPartition(topic, partition)
        state = self._partitions[tp] = PartitionQueue(tp)
        self._topics[topic].partitions[partition] = state
        return state

    def _open_batch(self, state: PartitionQueue, timestamp: int) -> Batch:
        now = time.monotonic()
        limit = self._batch_size if self.estimator is None else batch_limit(
            self._batch_size, self.estimator.estimate(state.tp.topic)
        )
        batch = Batch(state.tp, now, now + self.config.delivery_timeout_ms / 1000,
                       next(self._serial), self._lock, first_timestamp=timestamp, limit=limit)
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
        available = self.connections.metadata.cluster.available_partitions(topic)
        choices = [p for p in available if p < count]
        if len(choices) > 1 and current in choices:
            choices.remove(current)
        state.sticky = random.choice(choices) if choices else random.randrange(count)
        return state.sticky

    # ---- the sender's side (under the lock) --------------------------------------------------

    def ready(self, now: float) -> tuple[list[Batch], float, float | None]:
        """Pop the batches to send now (numbering them); also when to look again, and how
        soon metadata must be refreshed (None: no need), for a partition that waits for a
        leader or watches for one other than the leader that failed it."""
        wake_at = now + IDLE_S
        linger = self.config.linger_ms / 1000
        draining = self._flushing > 0 or self.closing
        metadata = self.connections.metadata.cluster
        refresh_s: float | None = None
        ready: list[Batch] = []
        txn = self.transactions
        for tp, state in self._partitions.items():
            if not state.queue:
                continue
            if txn is not None and tp not in txn.partitions:
                txn.wanted.add(tp)  # its batches leave once the coordinator has it
                continue
            head = state.queue[0]
            if len(state.in_flight) >= (1 if head.attempts else self.config.max_in_flight):
                continue
            if state.retry_at > now and (
                state.failed_leader is None or not metadata.moved(tp, state.failed_leader)
            ):
                wake_at = min(wake_at, state.retry_at)
                if state.failed_leader is not None:
                    refresh_s = _sooner(refresh_s, state.poll_s)
                continue
            due = head.created + linger
            # A batch is sealed once full (or once sent, when it comes back as a retry).
            if not (draining or head.sealed or due <= now):
                wake_at = min(wake_at, due)
                continue
            if metadata.leader_for(tp) is None:
                refresh_s = _sooner(refresh_s, self.connections.backoff.delay_s(1))
                continue
            state.failed_leader = None
            state.queue.popleft()
            head.sealed = True
            self.idempotence.leaving(head, state)
            state.in_flight.append(head)
            ready.append(head)
        return ready, wake_at, refresh_s

    def has_batches(self) -> tuple[bool, bool]:
        """(anything queued, anything in flight)."""
        partitions = self._partitions.values()
        return any(s.queue for s in partitions), any(s.in_flight for s in partitions)

    def queue_of(self, batch: Batch) -> PartitionQueue:
        return self._partitions[batch.tp]

    def complete(self, batch: Batch, base_offset: int, log_append_time_ms: int) -> None:
        state = self.queue_of(batch)
        state.in_flight.remove(batch)
        self.idempotence.acknowledged(batch, state)
        batch.base_offset, batch.log_append_time_ms = base_offset, log_append_time_ms
        self.records_acknowledged += batch.count
        self._finish(batch)

    def _finish(self, batch: Batch) -> None:
        # A finished batch takes no more records: send()'s fast path appends to the topic's
        # open batch while it is not sealed, and a batch failed while queued (an aborted
        # transaction's) would otherwise fail the next transaction's records with its error.
        batch.sealed = True
        self._buffered -= batch.size - HEADER_SIZE
        batch.parts, batch.body = [], b""
        batch.resolve()
        self._cond.notify_all()

    def fail(self, batch: Batch, error: BaseException) -> None:
        state = self.queue_of(batch)
        if batch in state.in_flight:
            state.in_flight.remove(batch)
        elif batch in state.queue:
            state.queue.remove(batch)
        self.idempotence.failed(batch)
        batch.error = error
        self.records_failed += batch.count
        self._finish(batch)

    def requeue(
        self, batch: Batch, now: float, retry_at: float,
        failed_leader: tuple[int, int] | None = None,
    ) -> None:
        """Put a batch that will be sent again back in its queue, in creation order; with
        `failed_leader`, it goes before `retry_at` once another leader is known."""
        state = self.queue_of(batch)
        batch.attempts += 1
        self.retries += 1
        self.records_retried += batch.count
        state.in_flight.remove(batch)
        serials = [b.serial for b in state.queue]
        state.queue.insert(bisect.bisect_right(serials, batch.serial), batch)
        state.retry_at = retry_at
        state.failed_leader = failed_leader
        state.poll_s = leader_poll_s(retry_at - now)

    def expire(self, now: float) -> None:
        """Fail queued batches past their delivery timeout (in-flight ones wait for answers).
        A queue is in creation order (retries go back by serial), so deadlines rise along it
        and each round looks at the heads only."""
        for state in self._partitions.values():
            while state.queue and state.queue[0].deadline <= now:
                batch = state.queue[0]
                why = "" if batch.last_error is None else f"; last error: {batch.last_error}"
                self.fail(batch, RequestTimedOutError(
                    f"{batch.tp}: not delivered within {self.config.delivery_timeout_ms} ms{why}"
                ))

    def fail_queued(self, error: TidelogError) -> None:
        """Fail the batches not in flight (those in flight wait for their answers)."""
        for state in self._partitions.values():
            for batch in list(state.queue):
                self.fail(batch, error)

    def fail_all(self, error: TidelogError) -> None:
        for state in self._partitions.values():
            for batch in [*state.queue, *state.in_flight]:
                self.fail(batch, error)

    def new_epoch(self, producer_id: int, epoch: int) -> None:
        """Restart every sequence under a new producer id/epoch; batches already sent under
        the old one fail (see `IdempotenceState.new_epoch`)."""
        for batch in self.idempotence.new_epoch(producer_id, epoch, self._partitions.values()):
            self.fail(batch, RequestTimedOutError(
                f"{batch.tp}: outcome unknown (sent, never acknowledged) when the producer had "
                f"to take a new epoch; not resent, to avoid a duplicate"
            ))

    def pending(self) -> list[Batch]:
        return [b for s in self._partitions.values() for b in (*s.queue, *s.in_flight)]


def _sooner(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


# ---- send()'s arguments, checked where they are passed -------------------------------------
# A record send() takes is encoded into a batch shared with other records, so an argument of
# the wrong type or out of range must be refused by send() itself (ConfigurationError, a
# ValueError, as kafka-python and aiokafka raise at once): found later, it would fail the
# whole batch in the sender, other records with it.

#: The largest timestamp a record can carry: milliseconds in a signed 64-bit field.
MAX_TIMESTAMP_MS = (1 << 63) - 1


def _checked_bytes(name: str, data: object) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ConfigurationError(f"{name} must be bytes or None, got {type(data).__name__}")
    return bytes(data)


def _serialized(name: str, serializer: Callable[[Any], object], data: object) -> bytes | None:
    out = serializer(data)
    if out is None or type(out) is bytes:
        return out
    if isinstance(out, bytearray | memoryview):
        return bytes(out)
    raise ConfigurationError(f"{name} must return bytes or None, returned {type(out).__name__}")


def _checked_int(name: str, number: object) -> int:
    """`number` as an int: an int (or an integer type such as numpy's), never a bool."""
    if type(number) is int:
        return number
    if not isinstance(number, bool):
        with contextlib.suppress(TypeError):
            return operator.index(number)  # type: ignore[arg-type]  # TypeError if it is none
    raise ConfigurationError(f"{name} must be an int or None, got {type(number).__name__}")


def _checked_timestamp(timestamp_ms: object) -> int:
    timestamp = _checked_int("timestamp_ms", timestamp_ms)
    if not 0 <= timestamp <= MAX_TIMESTAMP_MS:
        raise ConfigurationError(  # Kafka's wording
            f"invalid timestamp: {timestamp}; a timestamp is never negative (or None: now)"
        )
    return timestamp


def _checked_partition(partition: object) -> int:
    number = _checked_int("partition", partition)
    if number < 0:
        raise ConfigurationError(f"invalid partition {number}: partitions are numbered from 0")
    return number


def _checked_record(
    topic: object, value: object, key: object, headers: object
) -> tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...] | None]:
    """The record's topic, value, key and headers checked (a bytearray or memoryview copied
    to bytes, the headers a tuple of (str, bytes | None) pairs), or ConfigurationError."""
    if type(topic) is not str or not topic:
        raise ConfigurationError(
            f"topic must be a non-empty str, got {topic!r}" if type(topic) is str
            else f"topic must be a str, got {type(topic).__name__}"
        )
    value, key = _checked_bytes("value", value), _checked_bytes("key", key)
    if headers is None:
        return topic, value, key, None
    if not isinstance(headers, list | tuple):
        raise ConfigurationError(
            f"headers must be a list of (str, bytes | None) pairs, got {type(headers).__name__}"
        )
    checked: list[tuple[str, bytes | None]] = []
    for header in headers:
        if not isinstance(header, list | tuple) or len(header) != 2:
            raise ConfigurationError(
                f"each header must be a (str, bytes | None) pair, got {header!r:.80}"
            )
        name, data = header
        if type(name) is not str:
            raise ConfigurationError(f"a header's key must be a str, got {type(name).__name__}")
        try:
            name.encode()
        except UnicodeEncodeError as exc:
            raise ConfigurationError(f"header key {name!r:.80} is not valid UTF-8: {exc}") from None
        checked.append((name, _checked_bytes(f"the value of header {name!r:.80}", data)))
    return topic, value, key, tuple(checked)


