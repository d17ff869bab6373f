"""A transactional producer's side of transactions (Kafka's TransactionManager): its state,
the calls to its transaction coordinator, and which partitions its batches may go to.

The states are Kafka's: UNINITIALIZED until ``init_transactions()`` has the id's producer id
and epoch (fencing any earlier producer of the id), READY between transactions,
IN_TRANSACTION from ``begin_transaction()``, COMMITTING / ABORTING while EndTxn is under way,
ABORTABLE_ERROR after an error that only fails the transaction (the application calls
``abort_transaction()`` and goes on) and FATAL_ERROR after one that ends the producer
(PRODUCER_FENCED: a newer producer has the id; kafka-mapping §8.11).

A batch leaves only once its partition is in the transaction at the coordinator: the sender
collects the partitions of queued batches (``wanted``), adds them with AddPartitionsToTxn off
the send path, and sends their batches afterwards, marked transactional. Partitions that turn
up while an AddPartitionsToTxn is under way go in another one at once, not after it: the first
is usually held by the coordinator until the previous transaction's markers are written, and
the coordinator then writes both requests' partitions in one record (an application sending a
burst over several partitions races the sender, which often sees only the first partition on
its first round). Everything that
touches the sender's side runs under the producer's lock; the coordinator calls run on the
client's event loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidelog import wire
from tidelog.coordinated import GROUP, TRANSACTION, raise_first
from tidelog.errors import (
    ConcurrentTransactionsError,
    IllegalTransactionStateError,
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    RetriableError,
    TidelogError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from tidelog.retry import Deadline
from tidelog.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from tidelog.connections import Connections

log = logging.getLogger("tidelog.producer")

#: How soon AddPartitionsToTxn is tried again after CONCURRENT_TRANSACTIONS: the previous
#: transaction's markers are being written, which takes milliseconds (Kafka's 20 ms).
CONCURRENT_RETRY_S = 0.02
#: Errors of the coordinator's APIs after which the producer cannot go on.
_FATAL = (ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError,
          InvalidTransactionTimeoutError, TransactionalIdAuthorizationFailedError,
          UnsupportedVersionError)


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


def is_fatal(error: TidelogError, *, from_produce: bool = False) -> bool:
    """Whether `error` ends the producer (else it only fails the transaction). On Produce,
    INVALID_PRODUCER_EPOCH and INVALID_TXN_STATE only fail the transaction, as Kafka's
    producer treats them; from the coordinator they mean this producer was fenced."""
    if from_produce:
        return isinstance(error, ProducerFencedError | TransactionalIdAuthorizationFailedError)
    return isinstance(error, _FATAL)


class TransactionManager:
    def __init__(self, connections: Connections, transactional_id: str, timeout_ms: int) -> None:
        self.connections = connections
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.state = TxnState.UNINITIALIZED
        #: The partitions the coordinator has in this transaction; their batches may leave.
        self.partitions: set[TopicPartition] = set()
        #: Partitions of queued batches not in the transaction yet (the sender adds them).
        self.wanted: set[TopicPartition] = set()
        #: The AddPartitionsToTxn calls under way, and the partitions they ask for.
        self.adding: set[asyncio.Task[None]] = set()
        self.being_added: set[TopicPartition] = set()
        #: The error that moved the producer to ABORTABLE_ERROR or FATAL_ERROR.
        self.error: TidelogError | None = None
        #: Offsets were added to the transaction (it must be ended even without partitions).
        self._offsets_added = False

    # ---- state --------------------------------------------------------------------------------

    def require(self, *states: TxnState) -> None:
        """Raise unless the producer is in one of `states`: the error that failed it, if any."""
        if self.state in states:
            return
        if self.error is not None and self.state in (TxnState.ABORTABLE_ERROR,
                                                     TxnState.FATAL_ERROR):
            raise self.error
        raise IllegalTransactionStateError(
            f"transactional id {self.transactional_id!r} is {self.state.value}; this needs "
            f"{' or '.join(s.value for s in states)}"
        )

    def check_send(self) -> None:
        """send() of a transactional producer: only inside a transaction."""
        if self.state is not TxnState.IN_TRANSACTION:
            self.require(TxnState.IN_TRANSACTION)

    def failed(self, error: TidelogError, *, from_produce: bool = False) -> None:
        """An error that fails the transaction, or the producer when it is fatal."""
        if self.state is TxnState.FATAL_ERROR:
            return
        if is_fatal(error, from_produce=from_produce):
            self.state, self.error = TxnState.FATAL_ERROR, error
        elif self.state is not TxnState.ABORTABLE_ERROR:
            self.state, self.error = TxnState.ABORTABLE_ERROR, error

    @property
    def in_error(self) -> bool:
        return self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR)

    # ---- the coordinator ----------------------------------------------------------------------

    async def _call(
        self, method: str, request: Any, parse: Any, deadline: Deadline, *,
        key: str | None = None, key_type: int = TRANSACTION,
    ) -> Any:
        """`method` at the coordinator, retried while the error is retriable (found again on
        NOT_COORDINATOR), CONCURRENT_TRANSACTIONS after a short backoff."""
        attempts = 0
        while True:
            try:
                return await self.connections.coordinators.call(
                    key or self.transactional_id, method, request, parse, deadline,
                    retry=False, key_type=key_type,
                )
            except RetriableError as exc:
                attempts += 1
                delay = (CONCURRENT_RETRY_S if isinstance(exc, ConcurrentTransactionsError)
                         else self.connections.backoff.delay_s(attempts))
                if deadline.remaining() <= delay:
                    raise
                await asyncio.sleep(delay)

    async def init_producer_id(
        self, producer_id: int, producer_epoch: int, deadline: Deadline
    ) -> tuple[int, int]:
        request = wire.init_producer_id_request(
            producer_id, producer_epoch, self.transactional_id, self.timeout_ms
        )
        result: tuple[int, int] = await self._call(
            "InitProducerId", request, wire.parse_init_producer_id, deadline
        )
        return result

    async def add_partitions(
        self, producer: tuple[int, int], partitions: set[TopicPartition], deadline: Deadline
    ) -> None:
        """AddPartitionsToTxn of `partitions`; raises the first partition's error."""
        request = wire.add_partitions_to_txn_request(self.transactional_id, *producer,
                                                     partitions)

        def parse(response: Any) -> None:
            outcome = wire.parse_add_partitions_to_txn(response)
            raise_first({tp: e for tp, e in outcome.items() if e is not None})

        await self._call("AddPartitionsToTxn", request, parse, deadline)

    async def send_offsets(
        self, producer: tuple[int, int], offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata, deadline: Deadline,
    ) -> None:
        """AddOffsetsToTxn at the transaction's coordinator, then TxnOffsetCommit at the
        group's, which checks the member's id and epoch in `group` (kafka-mapping §8.5)."""
        group_id = group.group_id
        await self.connections.coordinators.find(group_id, deadline)  # creates __consumer_offsets
        request = wire.add_offsets_to_txn_request(self.transactional_id, *producer, group_id)
        await self._call(
            "AddOffsetsToTxn", request,
            lambda r: wire.raise_txn_error(r, f"AddOffsetsToTxn of group {group_id!r}"), deadline,
        )
        self._offsets_added = True
        commit = wire.txn_offset_commit_request(self.transactional_id, group, *producer, offsets)

        def parse(response: Any) -> None:
            outcome = wire.parse_offset_commit(response)
            raise_first({tp: e for tp, e in outcome.items() if e is not None})

        await self._call("TxnOffsetCommit", commit, parse, deadline, key=group_id,
                         key_type=GROUP)

    async def end(self, producer: tuple[int, int], commit: bool, deadline: Deadline) -> None:
        """EndTxn, when the coordinator has anything of this transaction; then READY."""
        if self.adding:
            await asyncio.gather(*self.adding, return_exceptions=True)
        if self.partitions or self._offsets_added:
            request = wire.end_txn_request(self.transactional_id, *producer, commit)
            await self._call(
                "EndTxn", request,
                lambda r: wire.raise_txn_error(r, "EndTxn " + ("commit" if commit else "abort")),
                deadline,
            )
        self.partitions.clear()
        self.wanted.clear()
        self._offsets_added = False
        self.state, self.error = TxnState.READY, None
