"""The sender (Kafka's Sender): one task per producer on the client's event loop, which drains
ready batches from the accumulator, frames each with its header and joins them straight into a
serialized Produce, one per leader node carrying one batch per partition, sent through the
client's partitioned-request engine; the answers are handled on the loop as they arrive.

A failed batch goes by its error's class, through the engine (``PartitionedRequest.classify``)
and the idempotence state's verdict: final errors fail it, retriable ones requeue it (metadata
refreshed, or a newer leader hint adopted) until its delivery timeout (or its ``retries``, when
the application set fewer than Kafka's unbounded default). Its retries are bounded
by each batch's ``delivery_timeout_ms``, not by one call's deadline, which is why the sender
does not use the engine's ``run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from tidelog import wire
from tidelog.compression import compress
from tidelog.errors import RequestTimedOutError, RetriableError, TidelogError
from tidelog.metadata import NO_LEADER
from tidelog.partitioned import PartitionedRequest
from tidelog.producer.accumulator import IDLE_S, Batch, RecordAccumulator
from tidelog.producer.idempotence import (
    IdempotenceState,
    Verdict,
    explain_init_failure,
    init_producer_id,
)
from tidelog.producer.transactions import TransactionManager, TxnState
from tidelog.records import ATTR_TRANSACTIONAL, batch_header
from tidelog.retry import Deadline
from tidelog.types import TopicPartition

if TYPE_CHECKING:
    from tidelog.connections import Connections

log = logging.getLogger("tidelog.producer")
#: A Produce RPC may take the leader's commit wait (timeout_ms) plus this much.
_RPC_SLACK_S = 5.0


class Sender:
    """Drives one accumulator's batches to their leaders; its state is guarded by the
    accumulator's lock."""

    def __init__(
        self, connections: Connections, accumulator: RecordAccumulator,
        idempotence: IdempotenceState,
    ) -> None:
        self.connections = connections
        self.accumulator = accumulator
        self.idempotence = idempotence
        self.transactions = accumulator.transactions
        self._lock = accumulator._lock
        self._acks = accumulator.config.acks_value
        self._codec = accumulator.config.codec
        self._request: PartitionedRequest[Batch, wire.ProduceAnswer] = PartitionedRequest(
            connections.transport, connections.metadata, connections.backoff, "Produce",
            "ProduceSerialized", self._request_of, wire.parse_produce,
        )
        #: The client's event loop, where the sender runs; send() wakes it from any thread.
        self._loop = connections.transport.loop
        self._wakeup = asyncio.Event()
        self._wake_pending = False
        self.force_close = False
        self._refresh_wanted = False
        self._refresh_at = 0.0
        #: The Produce calls in flight (the loop keeps only weak references to its tasks).
        self._calls: set[asyncio.Task[None]] = set()
        #: The task running `run`, which a forced close cancels.
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """(Under the lock.) Make the sender look again, from any thread; one wakeup is
        pending at a time, so a burst of full batches costs one."""
        if not self._wake_pending:
            self._wake_pending = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: the sender is gone
                self._loop.call_soon_threadsafe(self._wakeup.set)

    async def run(self) -> None:
        """Rounds until the producer is closed. A round that fails for a reason no batch
        explains (a bug) is logged and the next one follows after a backoff, as Kafka's
        sender thread goes on after an uncaught error: the sender never stops while the
        producer is open, so later sends are still delivered, queued batches still expire,
        and close() ends cleanly."""
        accumulator = self.accumulator
        failures = 0
        self._task = asyncio.current_task()
        try:
            while True:
                try:
                    if await self._round():
                        return
                    failures = 0
                except Exception:
                    failures += 1
                    log.exception("the producer's sender failed a round; it goes on")
                    await asyncio.sleep(self.connections.backoff.delay_s(failures))
        except asyncio.CancelledError:
            closed = "producer" if self.force_close else "client"
            why = RequestTimedOutError(f"the {closed} was closed before delivery")
            with self._lock:
                accumulator.fail_all(why)
            raise
        finally:
            for task in self._calls:
                task.cancel()

    async def stop_now(self) -> None:
        """A forced close: end the sender at once, failing everything undelivered, wherever
        its round waits. A round may wait on the cluster for a whole request timeout (for a
        producer id, or a metadata refresh in a worker thread), and a close that does not wait
        must not wait for that either; what the worker thread brings back later is dropped."""
        self.force_close = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _round(self) -> bool:
        """One round: expire, then get a producer id, refresh metadata (both off the loop, in
        a worker thread) or send, whichever is due; else sleep until woken or until the next
        linger or backoff ends. Refreshes are spaced by the retry backoff so an election does
        not cause a storm. True when the sender is done (closed)."""
        accumulator, idempotence = self.accumulator, self.idempotence
        init = refresh = False
        ready: list[Batch] = []
        refresh_s: float | None = None
        with self._lock:
            self._wake_pending = False
            self._wakeup.clear()
            if self.force_close:
                accumulator.fail_all(
                    RequestTimedOutError("the producer was closed before delivery")
                )
                return True
            queued, in_flight = accumulator.has_batches()
            if accumulator.closing and not queued and not in_flight:
                return True
            now = time.monotonic()
            accumulator.expire(now)
            wake_at = now + IDLE_S
            txn = self.transactions
            if txn is not None and txn.in_error and queued:
                assert txn.error is not None
                accumulator.fail_queued(txn.error)  # a failed transaction sends nothing
            if idempotence.needs_producer_id and queued and txn is None:
                init = not in_flight and now >= idempotence.init_at
                wake_at = max(idempotence.init_at, now) if not in_flight else wake_at
            else:
                ready, wake_at, refresh_s = accumulator.ready(now)
                if txn is not None:
                    self._add_wanted(txn)
                if refresh_s is not None:
                    self._refresh_wanted = True
                    wake_at = min(wake_at, now + refresh_s)
            if self._refresh_wanted:
                if now >= self._refresh_at:
                    refresh, self._refresh_wanted = True, False
                    self._refresh_at = now + (
                        self.connections.backoff.delay_s(1) if refresh_s is None
                        else refresh_s
                    )
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
                async with asyncio.timeout(min(max(wake_at - now, 0.0), IDLE_S)):
                    await self._wakeup.wait()
        return False

    def _add_wanted(self, txn: TransactionManager) -> None:
        """(Under the lock.) The partitions that queued batches wait for, and that no
        AddPartitionsToTxn under way asks for, are added to the transaction in a new one."""
        if txn.wanted and txn.state is TxnState.IN_TRANSACTION:
            wanted, txn.wanted = txn.wanted - txn.partitions - txn.being_added, set()
            if wanted:
                txn.being_added |= wanted
                txn.adding.add(self._loop.create_task(self._add_partitions(txn, wanted)))

    async def _add_partitions(self, txn: TransactionManager, tps: set[TopicPartition]) -> None:
        idempotence = self.idempotence
        producer = (idempotence.producer_id, idempotence.producer_epoch)
        deadline = Deadline(self.accumulator.config.delivery_timeout_ms)
        try:
            await txn.add_partitions(producer, tps, deadline)
        except TidelogError as exc:
            with self._lock:
                txn.failed(exc)
        else:
            with self._lock:
                txn.partitions |= tps
        finally:
            with self._lock:
                txn.adding.discard(asyncio.current_task())
                txn.being_added -= tps
                self._wakeup.set()

    def _send(self, batches: list[Batch]) -> None:
        """Frame the batches (outside the lock) and start one Produce per leader."""
        work: dict[TopicPartition, Batch] = {}
        for batch in batches:
            try:
                self._frame(batch)
            except Exception as exc:
                self._fail_unsent([batch], exc)
                continue
            work[batch.tp] = batch
        groups, leaderless = self._request.by_leader(work)
        if leaderless:
            self._handle(work, leaderless, NO_LEADER)
        timeout_s = self.connections.config.request_timeout_ms / 1000 + _RPC_SLACK_S
        for node, tps in groups.items():
            group = {tp: work[tp] for tp in tps}
            task = self._loop.create_task(self._produce(node, group, timeout_s))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)

    def _request_of(self, batches: Mapping[TopicPartition, Batch]) -> bytes:
        return wire.serialized_produce_request(
            {tp: (b.header, b.body) for tp, b in batches.items()}, self._acks,
            self.connections.config.request_timeout_ms,
            None if self.transactions is None else self.transactions.transactional_id,
        )

    async def _produce(
        self, node: int, batches: dict[TopicPartition, Batch], timeout_s: float
    ) -> None:
        """One Produce request and what its answer does to each of its batches."""
        try:
            answers = await self._request.send(node, batches, timeout_s)
        except Exception as exc:  # building the request, not the call: its errors are answers
            self._fail_unsent(batches.values(), exc)
            return
        self._handle(batches, answers, node)

    def _fail_unsent(self, batches: Iterable[Batch], exc: Exception) -> None:
        """Batches that could not be framed or sent for a reason of their own (send() checks
        each record, so this is a bug): they fail, with `exc` named, and nothing else does;
        the sender goes on."""
        log.error("the producer could not send a batch", exc_info=exc)
        if isinstance(exc, TidelogError):
            error = exc
        else:
            error = TidelogError(f"the producer could not send the batch: {exc!r}")
            error.__cause__ = exc
        with self._lock:
            for batch in batches:
                self.accumulator.fail(batch, error)
                if self.transactions is not None:
                    self.transactions.failed(error, from_produce=True)
            self._wakeup.set()

    def _handle(
        self,
        batches: Mapping[TopicPartition, Batch],
        answers: Mapping[TopicPartition, wire.ProduceAnswer | wire.Failure],
        node: int,
    ) -> None:
        """`node`: where the batches went (NO_LEADER: nowhere, none was known). A batch
        whose outcome is already known (the producer was closed while its call was under way,
        and that failed it) keeps it: a late answer changes nothing."""
        with self._lock:
            now = time.monotonic()
            metadata = self.connections.metadata.cluster
            for tp, answer in answers.items():
                if batches[tp].done.is_set():
                    continue
                if isinstance(answer, wire.Failure):
                    self._on_failure(batches[tp], answer, now, (node, metadata.leader_epoch(tp)))
                else:
                    self.accumulator.complete(
                        batches[tp], answer.base_offset, answer.log_append_time_ms
                    )
            self._wakeup.set()

    def _frame(self, batch: Batch) -> None:
        """Frame the batch's encoded records for the producer id, epoch and sequence it
        leaves with (framed again when a new epoch renumbers it). The records are joined, and
        compressed with the producer's codec, once: a retry re-frames the same body."""
        stamp = self.idempotence.stamp(batch)
        if batch.built_for != stamp:
            if batch.parts:
                batch.body, batch.parts = b"".join(batch.parts), []
                if self._codec:
                    plain = len(batch.body)
                    batch.body = compress(self._codec, batch.body)
                    estimator = self.accumulator.estimator
                    if estimator is not None and plain:
                        estimator.observe(batch.tp.topic, len(batch.body) / plain)
            batch.header = batch_header(
                batch.body,
                base_offset=0,
                partition_leader_epoch=-1,
                attributes=self._codec | (0 if self.transactions is None else ATTR_TRANSACTIONAL),
                last_offset_delta=batch.count - 1,
                first_timestamp=batch.first_timestamp,
                max_timestamp=batch.max_timestamp,
                producer_id=stamp[0],
                producer_epoch=stamp[1],
                base_sequence=stamp[2],
                records_count=batch.count,
            )
            batch.built_for = stamp

    def _on_failure(
        self, batch: Batch, failure: wire.Failure, now: float, sent_to: tuple[int, int]
    ) -> None:
        error = failure.error
        accumulator = self.accumulator
        verdict = self.idempotence.verdict(batch, accumulator.queue_of(batch), error)
        if verdict is Verdict.DUPLICATE:
            accumulator.complete(batch, -1, -1)
            return
        retriable = (verdict in (Verdict.SEQUENCE, Verdict.OVERTAKEN)
                     or isinstance(error, RetriableError))
        # Sent 1 + retries times: it fails with this error, as Kafka's producer fails it.
        # An overtaken batch's resends are the transport's doing: they use up no retries.
        exhausted = (retriable and verdict is not Verdict.OVERTAKEN
                     and batch.attempts >= accumulator.config.retries)
        if not retriable or exhausted or now >= batch.deadline:
            if retriable and not exhausted:
                error = RequestTimedOutError(
                    f"{batch.tp}: not delivered within "
                    f"{accumulator.config.delivery_timeout_ms} ms; last error: {error}"
                )
            accumulator.fail(batch, error)
            if self.transactions is not None:
                self.transactions.failed(error, from_produce=True)
            return
        reaction = self._request.classify(batch.tp, failure)
        # Overtaken: no backoff; the batches ahead of it are in flight, and a retry leaves
        # only once they are answered (`RecordAccumulator.ready`).
        immediate = verdict is Verdict.OVERTAKEN or (reaction is not None and reaction.immediate)
        refresh = reaction is not None and reaction.refresh
        self._refresh_wanted |= refresh
        retry_at = now if immediate else now + self.connections.backoff.delay_s(batch.attempts + 1)
        batch.last_error = error
        accumulator.requeue(batch, now, retry_at, sent_to if refresh else None)

    def _refresh(self) -> None:
        # On failure the batches stay queued and the next round asks again.
        with contextlib.suppress(TidelogError):
            self.connections.metadata.refresh(self.connections.deadline())

    def _init_producer_id(self) -> None:
        """Get a producer id (or a new epoch of ours) and restart every sequence at 0; runs
        only when nothing is in flight. A non-retriable answer fails what is queued."""
        idempotence = self.idempotence
        try:
            producer_id, epoch = init_producer_id(
                self.connections, idempotence.producer_id, idempotence.producer_epoch
            )
        except TidelogError as exc:
            with self._lock:
                if isinstance(exc, RetriableError):
                    idempotence.init_at = time.monotonic() + self.connections.backoff.delay_s(1)
                else:
                    self.accumulator.fail_all(explain_init_failure(exc))
            return
        with self._lock:
            self.accumulator.new_epoch(producer_id, epoch)
