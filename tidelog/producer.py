"""The producer: per-partition batching and a background sender, as Kafka's RecordAccumulator
and Sender.

``send()`` only appends the record to its partition's open batch and returns a future; it never
waits for the network. One sender thread per producer drains ready batches (full, lingered
``linger_ms``, or flushed), builds each batch once in the storage format, and sends one Produce
per leader node carrying one batch per partition; answers come back on gRPC's threads and are
handed to the sender, which alone changes the partitions' state.

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

import bisect
import contextlib
import itertools
import random
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidelog import wire
from tidelog.errors import (
    ConfigurationError,
    DuplicateSequenceNumberError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    TidelogError,
    UnknownProducerIdError,
)
from tidelog.hashing import partition_for_key
from tidelog.records import HEADER_SIZE, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, RecordInput, build_batch
from tidelog.retry import Deadline
from tidelog.types import RecordMetadata, TopicPartition

if TYPE_CHECKING:
    from tidelog.client import Client

_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
_RECORD_OVERHEAD = 29  # fixed bytes per record in the batch format (tidelog.records)
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
    records: list[RecordInput] = field(default_factory=list)
    futures: list[Future[RecordMetadata]] = field(default_factory=list)
    size: int = HEADER_SIZE
    #: Base sequence once numbered (first drained); None before, and again after a reset.
    sequence: int | None = None
    data: bytes | None = None
    #: (producer id, epoch, sequence) that `data` was built with.
    built_for: tuple[int, int, int] | None = None
    attempts: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def sealed(self) -> bool:
        """Once drained a batch takes no more records (it may come back as a retry)."""
        return self.attempts > 0 or self.sequence is not None


@dataclass(eq=False)
class _Partition:
    queue: deque[_Batch] = field(default_factory=deque)
    in_flight: list[_Batch] = field(default_factory=list)
    next_sequence: int = 0
    #: The sequence after the last acknowledged batch: the batch carrying it is "next".
    acked_sequence: int = 0
    retry_at: float = 0.0


@dataclass(eq=False)
class _Sent:
    node: int
    batches: dict[TopicPartition, _Batch]
    future: Any


class Producer:
    """Thread-safe: any number of threads may call send() concurrently."""

    def __init__(self, client: Client, config: ProducerConfig) -> None:
        self.client = client
        self.config = config
        self._acks = config.acks_value
        self._cond = threading.Condition()
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._sticky: dict[str, tuple[int, int]] = {}
        self._buffered = 0
        self._completions: list[_Sent] = []
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
        self._init_at = 0.0
        self._serial = itertools.count()
        self._sender = threading.Thread(target=self._run, name="tidelog-producer", daemon=True)
        self._sender.start()

    # ---- the user's side ---------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future gives its RecordMetadata once acknowledged (per acks)
        or the error that failed it, naming the partition."""
        if self._closing:
            raise ConfigurationError("send() on a closed producer")
        for name, data in (("value", value), ("key", key)):
            if data is not None and not isinstance(data, bytes | bytearray | memoryview):
                raise ConfigurationError(f"{name} must be bytes or None, got {type(data).__name__}")
        block = Deadline(self.config.max_block_ms)
        count = self.client.partitions_for(topic, block)
        sticky = key is None and partition is None
        if partition is None:
            partition = (
                partition_for_key(bytes(key), count) if key is not None
                else self._sticky_partition(topic, count)
            )
        elif not 0 <= partition < count:
            raise ConfigurationError(f"topic {topic!r} has no partition {partition} ({count})")
        record = RecordInput(
            None if value is None else bytes(value),
            None if key is None else bytes(key),
            int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            tuple(headers or ()),
        )
        size = _RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"") + sum(
            8 + len(k) + len(v or b"") for k, v in record.headers
        )
        future: Future[RecordMetadata] = Future()
        tp = TopicPartition(topic, partition)
        with self._cond:
            while self._buffered > 0 and self._buffered + size > self.config.buffer_memory:
                if not self._cond.wait(block.remaining()) and block.expired:
                    raise RequestTimedOutError(
                        f"{tp}: no room in the producer buffer within {self.config.max_block_ms} ms"
                    )
            self._buffered += size
            if sticky and partition == self._sticky.get(topic, (-1, 0))[0]:
                self._sticky[topic] = (partition, self._sticky[topic][1] + size)
            state = self._partitions.get(tp)
            if state is None:
                state = self._partitions[tp] = _Partition()
            batch = state.queue[-1] if state.queue else None
            wake = False
            if batch is None or batch.sealed or batch.size + size > self.config.batch_size:
                now = time.monotonic()
                batch = _Batch(
                    tp, now, now + self.config.delivery_timeout_ms / 1000, next(self._serial)
                )
                state.queue.append(batch)
                wake = len(state.queue) > 1 or self.config.linger_ms == 0 or not state.in_flight
            batch.records.append(record)
            batch.futures.append(future)
            batch.size += size
            if wake or batch.size >= self.config.batch_size:
                self._cond.notify_all()
        return future

    def _sticky_partition(self, topic: str, count: int) -> int:
        """Kafka's sticky partitioner for null keys: stay on one partition for about a batch's
        worth of bytes, then move to another one that has a leader."""
        with self._cond:
            current, produced = self._sticky.get(topic, (-1, 0))
            if 0 <= current < count and produced < self.config.batch_size:
                return current
            choices = [p for p in self.client.metadata.available_partitions(topic) if p < count]
            if len(choices) > 1 and current in choices:
                choices.remove(current)
            chosen = random.choice(choices) if choices else random.randrange(count)
            self._sticky[topic] = (chosen, 0)
            return chosen

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now, lingering or not, and wait until it is acknowledged or
        failed (the futures say which)."""
        deadline = None if timeout_ms is None else Deadline(timeout_ms)
        with self._cond:
            pending = [b for s in self._partitions.values() for b in (*s.queue, *s.in_flight)]
            self._flushing += 1
            self._cond.notify_all()
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
            self._cond.notify_all()
        self._sender.join(None if timeout_ms is None else timeout_ms / 1000)
        if self._sender.is_alive():
            with self._cond:
                self._force_close = True
                self._cond.notify_all()
            self._sender.join()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def producer_id(self) -> tuple[int, int]:
        """(producer id, epoch); (-1, -1) before InitProducerId or without idempotence."""
        return self._producer_id, self._producer_epoch

    # ---- the sender thread -------------------------------------------------------------------

    def _run(self) -> None:
        """One round: take answers, expire, then (outside the lock) get a producer id, refresh
        metadata or send, whichever is due; else sleep until the next linger or backoff ends.
        Refreshes are spaced by the retry backoff so an election does not cause a storm."""
        while True:
            init = refresh = False
            ready: list[_Batch] = []
            with self._cond:
                self._handle_completions()
                if self._force_close:
                    self._fail_all(RequestTimedOutError("the producer was closed before delivery"))
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
                if not (init or refresh or ready):
                    if not self._completions:
                        self._cond.wait(min(max(wake_at - now, 0.0), _IDLE_S))
                    continue
            if init:
                self._init_producer_id()
            if refresh:
                self._refresh()
            if ready:
                self._send(ready)

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
            full = len(state.queue) > 1 or head.size >= self.config.batch_size
            if not (draining or full or head.sealed or due <= now):
                wake_at = min(wake_at, due)
                continue
            if self.client.metadata.leader_for(tp) is None:
                self._refresh_wanted = True
                wake_at = min(wake_at, now + self.client.backoff.delay_s(1))
                continue
            state.queue.popleft()
            if self.config.idempotence and head.sequence is None:
                head.sequence = state.next_sequence
                state.next_sequence = (state.next_sequence + len(head.records)) % _SEQUENCE_WRAP
            state.in_flight.append(head)
            ready.append(head)
        return ready, wake_at

    def _send(self, batches: list[_Batch]) -> None:
        """Build (outside the lock) and send one Produce per leader."""
        by_leader: dict[int, dict[TopicPartition, _Batch]] = {}
        for batch in batches:
            self._build(batch)
            leader = self.client.metadata.leader_for(batch.tp)
            by_leader.setdefault(-1 if leader is None else leader, {})[batch.tp] = batch
        timeout_ms = self.client.config.request_timeout_ms
        for node, group in by_leader.items():
            request = wire.produce_request(
                {tp: b.data or b"" for tp, b in group.items()}, self._acks, timeout_ms
            )
            try:
                future = self.client.call_async(
                    node, "Produce", request, timeout_ms / 1000 + _RPC_SLACK_S
                )
            except TidelogError as exc:  # the leader vanished from the metadata meanwhile
                with self._cond:
                    for batch in group.values():
                        self._on_failure(batch, wire.Failure(exc), time.monotonic())
                continue
            sent = _Sent(node, group, future)
            future.add_done_callback(lambda _f, sent=sent: self._completed(sent))

    def _build(self, batch: _Batch) -> None:
        stamp = (self._producer_id, self._producer_epoch, -1 if batch.sequence is None
                 else batch.sequence)
        if batch.data is None or batch.built_for != stamp:
            batch.data = build_batch(
                batch.records,
                producer_id=stamp[0],
                producer_epoch=stamp[1],
                base_sequence=stamp[2],
            )
            batch.built_for = stamp

    def _completed(self, sent: _Sent) -> None:
        with self._cond:
            self._completions.append(sent)
            self._cond.notify_all()

    def _handle_completions(self) -> None:
        completions, self._completions = self._completions, []
        now = time.monotonic()
        for sent in completions:
            try:
                answers = wire.parse_produce(self.client.result_of(sent.future, sent.node))
            except TidelogError as exc:
                answers = {tp: wire.Failure(exc) for tp in sent.batches}
            for tp, batch in sent.batches.items():
                answer = answers.get(tp)
                if isinstance(answer, wire.ProduceAnswer):
                    self._complete(batch, answer.base_offset, answer.log_append_time_ms)
                elif isinstance(answer, wire.Failure):
                    self._on_failure(batch, answer, now)
                else:
                    self._on_failure(batch, wire.Failure(TidelogError(f"{tp}: no answer")), now)

    def _state(self, batch: _Batch) -> _Partition:
        return self._partitions[batch.tp]

    def _complete(self, batch: _Batch, base_offset: int, log_append_time_ms: int) -> None:
        state = self._state(batch)
        state.in_flight.remove(batch)
        if batch.sequence is not None:
            end = (batch.sequence + len(batch.records)) % _SEQUENCE_WRAP
            if _seq_after(end, state.acked_sequence):
                state.acked_sequence = end
        tp = batch.tp
        for i, (record, future) in enumerate(zip(batch.records, batch.futures, strict=True)):
            offset = -1 if base_offset < 0 else base_offset + i
            timestamp = log_append_time_ms if log_append_time_ms >= 0 else record.timestamp
            future.set_result(RecordMetadata(tp.topic, tp.partition, offset, timestamp))
        self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        self._buffered -= batch.size - HEADER_SIZE
        batch.done.set()
        self._cond.notify_all()

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        state = self._state(batch)
        if batch in state.in_flight:
            state.in_flight.remove(batch)
        elif batch in state.queue:
            state.queue.remove(batch)
        if batch.sequence is not None:
            self._needs_producer_id = True  # its sequence numbers are now a gap
        for future in batch.futures:
            future.set_exception(error)
        self._finish(batch)

    def _on_failure(self, batch: _Batch, failure: wire.Failure, now: float) -> None:
        error = failure.error
        state = self._state(batch)
        if isinstance(error, DuplicateSequenceNumberError):
            self._complete(batch, -1, -1)
            return
        retriable = error.retriable
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
        refresh, immediate = False, False
        if error.invalid_metadata:
            refresh, immediate = self.client.react(batch.tp, failure)
        self._refresh_wanted |= refresh
        batch.attempts += 1
        self.retries += 1
        state.in_flight.remove(batch)
        serials = [b.serial for b in state.queue]
        state.queue.insert(bisect.bisect_right(serials, batch.serial), batch)
        state.retry_at = now if immediate else now + self.client.backoff.delay_s(batch.attempts)

    def _expire(self, now: float) -> None:
        """Fail queued batches past their delivery timeout (in-flight ones wait for answers)."""
        for state in self._partitions.values():
            for batch in [b for b in state.queue if b.deadline <= now]:
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
                if exc.retriable:
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
    if exc.code == -1 or exc.name != "UNSUPPORTED_VERSION":
        return exc
    return type(exc)(
        f"idempotent producing needs InitProducerId, which this cluster does not support "
        f"({exc}); create the producer with idempotent=False"
    )


def _seq_after(a: int, b: int) -> bool:
    """Whether sequence a is after b, allowing for the wrap at 2**31."""
    return a != b and (a - b) % _SEQUENCE_WRAP < _SEQUENCE_WRAP // 2
