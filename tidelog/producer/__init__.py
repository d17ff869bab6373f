"""The producer, as Kafka's: an accumulator of per-partition batches that ``send()`` fills
(``accumulator``), a sender that drains them to their leaders through the client's
partitioned-request engine (``sender``), and, on by default with acks=all, the idempotence
state that numbers each partition's records so that retries never write a batch twice
(``idempotence``). With a ``transactional_id`` it is transactional (``transactions``):
``init_transactions()`` once, then ``begin_transaction()``, sends (and
``send_offsets_to_transaction()``), and ``commit_transaction()`` or ``abort_transaction()``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from tidelog.connections import ClientConfig, Connections
from tidelog.coordinated import check_group_id, checked_offsets
from tidelog.errors import (
    ConfigurationError,
    IllegalTransactionStateError,
    RequestTimedOutError,
    RetriableError,
    TidelogError,
    TransactionAbortedError,
)
from tidelog.producer.accumulator import RecordAccumulator, RecordFuture
from tidelog.producer.config import ProducerConfig
from tidelog.producer.idempotence import IdempotenceState
from tidelog.producer.sender import Sender
from tidelog.producer.transactions import TransactionManager, TxnState
from tidelog.retry import Deadline
from tidelog.settings import CLIENT_SETTINGS
from tidelog.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

__all__ = ["Producer", "ProducerConfig", "RecordFuture"]


class Producer(RecordAccumulator):
    """Thread-safe: any number of threads may call send() concurrently. The accumulator is
    the producer's own side (send() is its method, the hot path); the sender runs on the
    client's event loop from construction to close()."""

    def __init__(
        self, bootstrap_servers: str | Sequence[str] | None = None, **settings: Any
    ) -> None:
        """A producer with connections of its own, as kafka-python's
        ``KafkaProducer(bootstrap_servers=..., **configs)``: the connection settings
        (``ClientConfig.of``) and the producer's (``ProducerConfig.from_settings``) by name,
        and close() closes the connections too. ``client.producer()`` makes one that shares
        a Client's connections instead."""
        client = {name: settings.pop(name) for name in list(settings) if name in CLIENT_SETTINGS}
        if bootstrap_servers is not None:
            client["bootstrap_servers"] = bootstrap_servers
        config = ProducerConfig.from_settings(**settings)  # checked before anything opens
        self._start(Connections(ClientConfig.of(**client)), config, owned=True)

    @classmethod
    def sharing(cls, connections: Connections, config: ProducerConfig) -> Producer:
        """A producer on a client's connections, which its close() leaves open."""
        producer = cls.__new__(cls)
        producer._start(connections, config, owned=False)
        return producer

    def _start(self, connections: Connections, config: ProducerConfig, owned: bool) -> None:
        self._owns_connections = owned
        idempotence = IdempotenceState(config.idempotence)
        transactions = None
        if config.transactional_id is not None:
            transactions = TransactionManager(
                connections, config.transactional_id, config.transaction_timeout_ms
            )
            idempotence.needs_producer_id = False  # init_transactions() gets it
        super().__init__(connections, config, idempotence, transactions)
        self._sender = Sender(connections, self, idempotence)
        self._wake_sender = self._sender.wake
        self._sending = connections.transport.submit(self._sender.run())

    def flush(self, timeout_ms: int | None = None, *, timeout: float | None = None) -> None:
        """Send everything queued now, lingering or not, and wait until it is acknowledged or
        failed (the futures say which), for at most `timeout_ms` or, by kafka-python's name,
        `timeout` seconds (None: for as long as it takes); RequestTimedOutError past it."""
        limit_ms = wait_ms("flush", timeout_ms, timeout)
        deadline = None if limit_ms is None else Deadline(limit_ms)
        with self._cond:
            pending = self.pending()
            self._flushing += 1
            self._wake_sender()
        try:
            for batch in pending:
                if not batch.done.wait(None if deadline is None else deadline.remaining()):
                    why = "" if batch.last_error is None else f"; last error: {batch.last_error}"
                    raise RequestTimedOutError(
                        f"flush did not complete within {limit_ms:g} ms{why}"
                    )
        finally:
            with self._cond:
                self._flushing -= 1

    def close(self, timeout_ms: int | None = None, *, timeout: float | None = None) -> None:
        """Deliver what is queued (bounded by `timeout_ms`, or `timeout` seconds as
        kafka-python's close() takes it), then stop the sender; records still queued at the
        timeout fail. A producer with connections of its own closes them too."""
        limit_ms = wait_ms("close", timeout_ms, timeout)
        try:
            self._stop(limit_ms)
        finally:
            if self._owns_connections:
                self.connections.close()

    def _stop(self, timeout_ms: float | None) -> None:
        with self._cond:
            self.closing = True
            self._wake_sender()
        try:
            self._sending.result(None if timeout_ms is None else timeout_ms / 1000)
        except concurrent.futures.TimeoutError:
            with self._cond:
                self._sender.force_close = True
            self.connections.transport.submit(self._sender.stop_now()).result()
            with contextlib.suppress(concurrent.futures.CancelledError):
                self._sending.result()
        except concurrent.futures.CancelledError:
            pass  # the client was closed first, which failed what was left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids (kafka-python's ``partitions_for``), waiting up to
        max_block_ms for metadata that has the topic."""
        if type(topic) is not str or not topic:
            raise ConfigurationError(f"topic must be a non-empty str, got {topic!r:.80}")
        count = self.connections.metadata.partitions_for(topic, Deadline(self.config.max_block_ms))
        return set(range(count))

    def metrics(self) -> dict[str, dict[str, float | int | str]]:
        """The producer's figures now, grouped as kafka-python's ``metrics()`` gives them
        ({group: {name: value}}), under Kafka's metric names: records acknowledged
        (record-send-total), failed (record-error-total) and sent again after a retriable
        error (record-retry-total), the buffer, the batches in flight; and the connections'
        own (``client-metrics``)."""
        with self._lock:
            producer: dict[str, float | int | str] = {
                "record-send-total": self.records_acknowledged,
                "record-error-total": self.records_failed,
                "record-retry-total": self.records_retried,
                "batch-retry-total": self.retries,
                "buffer-total-bytes": self.config.buffer_memory,
                "buffer-available-bytes": self.config.buffer_memory - self._buffered,
                "batches-in-flight": sum(len(s.in_flight) for s in self._partitions.values()),
            }
        return {"producer-metrics": producer, "client-metrics": self.connections.metrics()}

    @property
    def producer_id(self) -> tuple[int, int]:
        """(producer id, epoch); (-1, -1) before InitProducerId or without idempotence."""
        return self.idempotence.producer_id, self.idempotence.producer_epoch

    # ---- transactions (kafka-python's names) ------------------------------------------------

    def _transactions(self) -> TransactionManager:
        if self.transactions is None:
            raise IllegalTransactionStateError(
                "not a transactional producer: create it with transactional_id=..."
            )
        return self.transactions

    def init_transactions(self, timeout_ms: int | None = None) -> None:
        """Get the transactional id's producer id and a new epoch, which fences any earlier
        producer of the id; its open transaction is aborted first (the coordinator answers
        CONCURRENT_TRANSACTIONS meanwhile, which is retried)."""
        txn = self._transactions()
        txn.require(TxnState.UNINITIALIZED)
        txn.state = TxnState.INITIALIZING
        deadline = Deadline(self.config.max_block_ms if timeout_ms is None else timeout_ms)
        try:
            producer_id, epoch = self.connections.run(txn.init_producer_id(-1, -1, deadline))
        except TidelogError as exc:
            with self._lock:
                if isinstance(exc, RetriableError | RequestTimedOutError):
                    txn.state = TxnState.UNINITIALIZED  # may be called again
                else:
                    txn.failed(exc)
            raise
        with self._lock:
            self.new_epoch(producer_id, epoch)
            txn.state = TxnState.READY

    def begin_transaction(self) -> None:
        txn = self._transactions()
        with self._lock:
            txn.require(TxnState.READY)
            txn.state = TxnState.IN_TRANSACTION

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str, timeout_ms: int | None = None,
    ) -> None:
        """Commit a consumer group's offsets in the transaction: they become the group's
        committed offsets if, and when, the transaction commits (consume-transform-produce).

        Pass the consumer's `Consumer.group_metadata()` (KIP-447): the coordinator then
        commits only for a current member of the group at its current epoch, and a member
        fenced or behind a rebalance gets ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID (the
        transaction can only be aborted). A plain group id is a consumer of assign()ed
        partitions, outside any membership: a group with members refuses it."""
        txn = self._transactions()
        txn.require(TxnState.IN_TRANSACTION)
        group = checked_group_metadata(group_metadata)
        checked = checked_offsets(offsets)
        deadline = Deadline(self.config.max_block_ms if timeout_ms is None else timeout_ms)
        try:
            self.connections.run(txn.send_offsets(self.producer_id, checked, group, deadline))
        except TidelogError as exc:
            with self._lock:
                txn.failed(exc)
            raise

    def commit_transaction(self, timeout_ms: int | None = None) -> None:
        """Send what is queued, then commit: once this returns, the transaction's records
        and offsets are committed (every read_committed consumer will see all of them). An
        error that fails the transaction is raised; then call abort_transaction()."""
        txn = self._transactions()
        txn.require(TxnState.IN_TRANSACTION)
        deadline = Deadline(self.config.max_block_ms if timeout_ms is None else timeout_ms)
        self.flush(int(deadline.remaining() * 1000))
        with self._lock:
            txn.require(TxnState.IN_TRANSACTION)  # a batch failed: raises its error
            txn.state = TxnState.COMMITTING
        self._end(txn, True, deadline)

    def abort_transaction(self, timeout_ms: int | None = None) -> None:
        """Abort the transaction: records not sent yet fail (TransactionAbortedError), those
        sent are aborted; the producer can begin the next one."""
        txn = self._transactions()
        txn.require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING)
        deadline = Deadline(self.config.max_block_ms if timeout_ms is None else timeout_ms)
        with self._lock:
            txn.state = TxnState.ABORTING
            self.fail_queued(TransactionAbortedError("the transaction was aborted"))
        self.flush(int(deadline.remaining() * 1000))
        self._end(txn, False, deadline)
        if self.idempotence.needs_producer_id:
            # A failed batch left a gap in its partition's sequences: a new epoch restarts
            # them (the coordinator bumps it; KIP-360).
            producer_id, epoch = self.connections.run(
                txn.init_producer_id(*self.producer_id, deadline)
            )
            with self._lock:
                self.new_epoch(producer_id, epoch)

    def _end(self, txn: TransactionManager, commit: bool, deadline: Deadline) -> None:
        state = txn.state
        try:
            self.connections.run(txn.end(self.producer_id, commit, deadline))
        except TidelogError as exc:
            with self._lock:
                if isinstance(exc, RetriableError | RequestTimedOutError):
                    # Ask again: a retried EndTxn of a decided transaction is answered as
                    # it was decided.
                    txn.state = TxnState.IN_TRANSACTION if commit else state
                else:
                    txn.failed(exc)
            raise


def wait_ms(call: str, timeout_ms: object, timeout: object) -> float | None:
    """A blocking call's limit in ms: Tidelog's `timeout_ms`, or kafka-python's `timeout` in
    seconds (not both); None: no limit. Anything but a number >= 0 is a ConfigurationError."""
    if timeout_ms is not None and timeout is not None:
        raise ConfigurationError(f"{call}(): give timeout_ms or timeout (seconds), not both")
    for name, value in (("timeout_ms", timeout_ms), ("timeout", timeout)):
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)
                                  or not value >= 0):
            raise ConfigurationError(
                f"{call}(): {name} must be a number >= 0 or None, got {value!r:.80}"
            )
    if timeout is not None:
        return float(timeout) * 1000  # type: ignore[arg-type]  # checked above
    return None if timeout_ms is None else float(timeout_ms)  # type: ignore[arg-type]


def checked_group_metadata(group: ConsumerGroupMetadata | str) -> ConsumerGroupMetadata:
    """`send_offsets_to_transaction`'s group: a consumer's metadata, or a bare group id (a
    consumer outside any membership: member "", epoch -1)."""
    if isinstance(group, str):
        return ConsumerGroupMetadata(check_group_id(group))
    if not isinstance(group, ConsumerGroupMetadata):
        raise ConfigurationError(
            "send_offsets_to_transaction() takes consumer.group_metadata() or a group id, got "
            f"{type(group).__name__}"
        )
    check_group_id(group.group_id)
    generation, instance = group.generation_id, group.group_instance_id
    if (type(generation) is not int or not -(2**31) <= generation < 2**31
            or type(group.member_id) is not str
            or not (instance is None or type(instance) is str)):
        raise ConfigurationError(f"malformed group metadata {group!r}")
    return group
