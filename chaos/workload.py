"""The client side of a chaos run: idempotent acks=all producers of unique values, and consumers
that look offsets up (earliest, latest, max and by time, under both isolation levels), seek to
the answer and poll, all recorded in the history.

Both use the real client library: the point is to see what a user of it would see. What the
library does not report, the node that answered, comes from a ``Tracer``, which each client
is given as an observer (the client's public hook for seeing its traffic).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from tidelog import wire
from tidelog.chaos.history import FAIL, OK, UNKNOWN, History
from tidelog.client import Client
from tidelog.clock import wall_clock_ms
from tidelog.errors import RetriableError, TidelogError
from tidelog.producer import RecordFuture
from tidelog.records import read_header
from tidelog.transport import CallObserver
from tidelog.types import IsolationLevel, OffsetSpec, TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

__all__ = ["AckInfo", "Tracer", "Workload", "WorkloadConfig"]

#: Kinds of ListOffsets lookups consumers make, each with the spec it sends.
LOOKUPS = ("earliest", "latest", "max", "timestamp")
#: Records of one poll kept in the history: enough to compare reads with the final log.
_POLL_RECORDS_KEPT = 200


@dataclass(frozen=True)
class AckInfo:
    """Who acknowledged one record, and whether its batch was sent only once: a batch sent
    again may be acknowledged by a later leader as a duplicate of what an earlier one wrote."""

    node: int
    single_send: bool


class Tracer(CallObserver):
    """Which node answered: the last answer of any kind (the one client it observes belongs to
    one thread, which reads it right after a synchronous lookup) and, for Produce, every
    acknowledged offset. Produce answers reach it on the client's loop before the producer
    completes the records' futures, so the futures' callbacks find their offsets here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_node: int | None = None
        #: (tp, producer id, epoch, base sequence) -> how many times that batch was sent.
        self._sends: collections.Counter[tuple[TopicPartition, int, int, int]] = (
            collections.Counter()
        )
        self._acks: dict[tuple[TopicPartition, int], AckInfo] = {}

    def on_request(self, node_id: int | None, method: str, request: Any) -> None:
        if method == "ProduceSerialized":
            with self._lock:
                for tp, (pid, epoch, sequence, _) in _batches(request).items():
                    self._sends[(tp, pid, epoch, sequence)] += 1

    def on_response(self, node_id: int | None, method: str, request: Any, response: Any) -> None:
        self.last_node = node_id
        if method != "ProduceSerialized" or node_id is None:
            return
        batches = _batches(request)
        with self._lock:
            for tp, answer in wire.parse_produce(response).items():
                if not isinstance(answer, wire.ProduceAnswer) or answer.base_offset < 0:
                    continue
                pid, epoch, sequence, count = batches[tp]
                info = AckInfo(node_id, self._sends[(tp, pid, epoch, sequence)] == 1)
                for offset in range(answer.base_offset, answer.base_offset + count):
                    self._acks[(tp, offset)] = info

    def take_ack(self, tp: TopicPartition, offset: int) -> AckInfo | None:
        with self._lock:
            return self._acks.pop((tp, offset), None)


def _batches(request: bytes) -> dict[TopicPartition, tuple[int, int, int, int]]:
    """The batches of a serialized Produce request: (producer id, epoch, base sequence,
    record count) by partition."""
    batches = {}
    for topic in pb.ProduceRequest.FromString(request).topics:
        for part in topic.partitions:
            header = read_header(part.records)
            batches[TopicPartition(topic.name, part.partition)] = (
                header.producer_id, header.producer_epoch, header.base_sequence,
                header.records_count,
            )
    return batches


@dataclass(frozen=True)
class WorkloadConfig:
    topic: str
    partitions: int
    #: Writes per second over all producers.
    rate: float = 100.0
    producers: int = 2
    consumers: int = 2
    #: Writes a producer may have unanswered before it waits (bounds memory during outages).
    max_pending: int = 300
    request_timeout_ms: int = 5_000
    delivery_timeout_ms: int = 20_000
    seed: int = 0


class Workload:
    """Producer and consumer threads against the cluster behind ``bootstrap``."""

    def __init__(self, bootstrap: str, config: WorkloadConfig, history: History) -> None:
        self.bootstrap = bootstrap
        self.config = config
        self.history = history
        self.tps = [TopicPartition(config.topic, p) for p in range(config.partitions)]
        self._stop_writes = threading.Event()
        self._stop_reads = threading.Event()
        self._threads: list[threading.Thread] = []
        self._clients: list[Client] = []
        self._pending: dict[str, set[RecordFuture]] = {}
        self._pending_lock = threading.Lock()
        self._producers: list[Any] = []
        self.errors: list[str] = []

    def _client(self) -> tuple[Client, Tracer]:
        tracer = Tracer()
        client = Client(self.bootstrap, request_timeout_ms=self.config.request_timeout_ms,
                        observers=[tracer])
        self._clients.append(client)
        return client, tracer

    def start(self) -> None:
        for i in range(self.config.producers):
            self._spawn(f"p{i}", self._produce, f"p{i}")
        for i in range(self.config.consumers):
            self._spawn(f"c{i}", self._consume, f"c{i}", random.Random(f"{self.config.seed}-c{i}"))

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except Exception as exc:  # a workload bug must fail the run, not vanish in a thread
                self.errors.append(f"{name}: {exc!r}")
                raise

        thread = threading.Thread(target=guarded, name=f"chaos-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # ---- producers -------------------------------------------------------------------------

    def _produce(self, process: str) -> None:
        client, tracer = self._client()
        producer = client.producer(
            acks="all", idempotent=True, linger_ms=5,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
        )
        self._producers.append(producer)
        pending: set[RecordFuture] = set()
        with self._pending_lock:
            self._pending[process] = pending
        interval = self.config.producers / self.config.rate
        next_at = time.monotonic()
        for n in itertools.count():
            if self._stop_writes.is_set():
                break
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
            while len(pending) >= self.config.max_pending and not self._stop_writes.is_set():
                time.sleep(0.01)  # polling our own bound; the producer has no "room" signal
                next_at = time.monotonic()
            tp = self.tps[n % len(self.tps)]
            value = f"{process}:{n}"
            op = self.history.invoke(process, "write", partition=tp.partition, value=value)
            try:
                future = producer.send(tp.topic, value.encode(), partition=tp.partition)
            except TidelogError as exc:
                self.history.complete(op, process, "write", UNKNOWN, partition=tp.partition,
                                      value=value, error=str(exc))
                continue
            with self._pending_lock:
                pending.add(future)
            future.add_done_callback(
                functools.partial(self._written, process, tracer, op, tp, value, pending)
            )

    def _written(self, process: str, tracer: Tracer, op: int, tp: TopicPartition,
                 value: str, pending: set[RecordFuture],
                 future: RecordFuture) -> None:
        with self._pending_lock:
            pending.discard(future)
        fields: dict[str, Any] = {"partition": tp.partition, "value": value}
        exc = future.exception()
        if exc is None:
            offset = future.result().offset
            ack = tracer.take_ack(tp, offset) if offset >= 0 else None
            self.history.complete(
                op, process, "write", OK, offset=offset,
                node=None if ack is None else ack.node,
                single_send=ack is not None and ack.single_send, **fields,
            )
            return
        # A timeout or a lost connection may hide a write that happened: unknown. A refusal the
        # producer does not retry (a bad batch, an unknown topic) is taken as a failure; the
        # checker never counts a "failed" value it finds in the log against the cluster, since
        # an earlier, retried attempt of the same batch may have written it.
        certain = isinstance(exc, TidelogError) and not isinstance(exc, RetriableError)
        self.history.complete(op, process, "write", FAIL if certain else UNKNOWN,
                              error=str(exc), **fields)

    def stop_writes(self, drain_timeout_s: float) -> None:
        """Stop sending, then wait for every write to be answered; what is still pending at
        the deadline stays without completion (unknown)."""
        self._stop_writes.set()
        deadline = time.monotonic() + drain_timeout_s
        for thread in self._threads:
            if thread.name.startswith("chaos-p"):
                thread.join(max(0.0, deadline - time.monotonic()))
        for producer in self._producers:
            with contextlib.suppress(TidelogError):  # unanswered writes remain unknown
                producer.flush(timeout_ms=max(0, int((deadline - time.monotonic()) * 1000)))
        for producer in self._producers:
            producer.close(timeout_ms=1000)

    # ---- consumers -------------------------------------------------------------------------

    def _consume(self, process: str, rng: random.Random) -> None:
        client, tracer = self._client()
        consumers = {
            level: client.consumer(isolation_level=level, fetch_max_wait_ms=100)
            for level in IsolationLevel
        }
        started_ms = wall_clock_ms()
        while not self._stop_reads.is_set():
            tp = rng.choice(self.tps)
            level = rng.choice(list(IsolationLevel))
            kind = rng.choice(LOOKUPS)
            target = rng.randint(started_ms, wall_clock_ms())
            spec = {
                "earliest": OffsetSpec.earliest(),
                "latest": OffsetSpec.latest(),
                "max": OffsetSpec.max_timestamp(),
                "timestamp": OffsetSpec.for_timestamp(target),
            }[kind]
            fields: dict[str, Any] = {
                "partition": tp.partition, "isolation": level.name.lower(), "lookup": kind,
                "target": spec.timestamp,
            }
            op = self.history.invoke(process, "list_offsets", **fields)
            try:
                answer = client.list_offsets(
                    {tp: spec}, isolation_level=level, timeout_ms=self.config.request_timeout_ms
                )[tp]
            except TidelogError as exc:
                self.history.complete(op, process, "list_offsets", FAIL, error=str(exc), **fields)
                continue
            self.history.complete(
                op, process, "list_offsets", OK, offset=answer.offset,
                timestamp=answer.timestamp, leader_epoch=answer.leader_epoch,
                node=tracer.last_node, **fields,
            )
            if answer.offset >= 0:
                start = max(0, answer.offset - 20) if kind == "latest" else answer.offset
                self._poll(process, consumers[level], tp, start, level)
            time.sleep(rng.uniform(0.0, 0.05))

    def _poll(self, process: str, consumer: Any, tp: TopicPartition, start: int,
              level: IsolationLevel) -> None:
        fields: dict[str, Any] = {
            "partition": tp.partition, "isolation": level.name.lower(), "from": start
        }
        op = self.history.invoke(process, "poll", **fields)
        consumer.assign([tp])
        consumer.seek(tp, start)
        try:
            records = consumer.poll(timeout_ms=300)
        except TidelogError as exc:
            self.history.complete(op, process, "poll", FAIL, error=str(exc), **fields)
            return
        read = [[r.offset, (r.value or b"").decode()] for r in records[:_POLL_RECORDS_KEPT]]
        self.history.complete(op, process, "poll", OK, records=read, **fields)

    def stop_reads(self) -> None:
        self._stop_reads.set()
        for thread in self._threads:
            if thread.name.startswith("chaos-c"):
                thread.join(30)

    def close(self) -> None:
        self._stop_writes.set()
        self._stop_reads.set()
        for client in self._clients:
            client.close()
