"""The transaction coordinator's state machine: the transactional ids of one
`__transaction_state` partition, and the records that move their transactions on.

contract §9, kafka-mapping §8.2-§8.7. Each transactional id has one record (`txn_records`), its
newest state in the compacted log: Empty after InitProducerId, Ongoing once partitions are
added, PrepareCommit / PrepareAbort once EndTxn is decided, CompleteCommit / CompleteAbort once
every partition has its marker. The leader of the partition replays it into a table (`apply`)
and answers from the table; a request that changes an id's state becomes one record, which the
table takes only when it comes back committed, so every answer follows a durable state and a
failed append changes nothing.

While an id's record is being appended the id is *pending*: every other request for it answers
CONCURRENT_TRANSACTIONS (51), as Kafka's pendingState does, until the record is applied or the
driver gives the append up (`abandon`). PrepareEpochFence is the pending state of a fence: a
new InitProducerId of an id with an open transaction, or the transaction's timeout, writes
PrepareAbort with the epoch bumped, so the fenced incarnation's requests fail with
PRODUCER_FENCED everywhere while its transaction is aborted.

After a Prepare* record is applied the transaction's markers are due (`prepared`): the driver
writes COMMIT or ABORT to every partition of it and then asks for the Complete record
(`plan_complete`). A new leader replays the Prepare* records of the old one and so finishes
what it decided.

The producer's next AddPartitionsToTxn usually comes while those markers are being written.
Its partitions may not join a transaction before the previous transaction's markers are on
them (a batch of the new transaction written ahead of the old marker would be ended by it), so
the driver holds it until the markers are written; `plan_complete` then plans the Complete
record and the new Ongoing record together (`Decision.then`, with the partitions of every
request of the producer held meanwhile), appended as one batch: one replicated write where
there were two. The Ongoing record never reaches the log before every marker of the previous
transaction is written, and never without the Complete record before it in the same batch, so
a new leader replaying the log finds either the Prepare* record (and writes the markers
again) or both.

Deterministic, like the group coordinator: no I/O, no clock (callers pass `now_ms`), no
threads, no event loop. A producer id comes from the controller, so a plan that needs a fresh
one says so (`NEEDS_PRODUCER_ID`) and the driver asks again with one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from tidelog.coordinator.record_codec import CoordinatorRecordError, checked_records, new_batches
from tidelog.coordinator.txn_records import (
    EPOCH_EXHAUSTED,
    MAX_EPOCH,
    VALID_PREVIOUS,
    TxnMetadata,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tidelog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    TidelogError,
)
from tidelog.records import BatchHeader, RecordInput
from tidelog.types import TopicPartition

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
#: The states an id may expire from: no transaction open or being decided.
_IDLE = VALID_PREVIOUS[TxnState.DEAD]


@dataclass(frozen=True)
class TxnConfig:
    """The node options the state machine decides with (Kafka's names and defaults)."""

    #: transaction.max.timeout.ms: the longest transaction.timeout.ms a producer may ask for.
    max_timeout_ms: int = 900_000
    #: transactional.id.expiration.ms: an id with no transaction for this long is removed.
    id_expiration_ms: int = 7 * 24 * 3_600_000


class Decision(NamedTuple):
    """What a request becomes: a record to append first (None: nothing to write) and the
    answer, given once the record is committed: an error, or the producer id and epoch."""

    record: RecordInput | None = None
    error: TidelogError | None = None
    producer: tuple[int, int] | None = None
    #: The plan needs a producer id from the controller: ask again with one.
    needs_producer_id: bool = False
    #: A second record, appended right after `record` in the same batch: the next
    #: transaction's Ongoing record after a Complete record (`plan_complete`).
    then: RecordInput | None = None

    @property
    def records(self) -> list[RecordInput]:
        """What to append, as one batch."""
        return [r for r in (self.record, self.then) if r is not None]


class AddPartitions(NamedTuple):
    """An AddPartitionsToTxn (or AddOffsetsToTxn) held until the markers of the id's previous
    transaction are written (`plan_complete`)."""

    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]

    @property
    def producer(self) -> tuple[int, int]:
        return self.producer_id, self.producer_epoch


NEEDS_PRODUCER_ID = Decision(needs_producer_id=True)


class MarkerWork(NamedTuple):
    """A decided transaction whose partitions need their markers."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


class TransactionCoordinatorState:
    """The state of ONE `__transaction_state` partition, kept by its leader."""

    def __init__(self, config: TxnConfig) -> None:
        self.config = config
        self.txns: dict[str, TxnMetadata] = {}
        #: The last log offset applied; -1 before any.
        self.applied_offset = -1
        #: Ids whose record is being appended, with the state it moves them to.
        self._pending: dict[str, TxnState] = {}
        #: Per id, the epoch before its last bump (Kafka's lastProducerEpoch): an InitProducerId
        #: retried after its answer was lost. In memory only, as in Kafka.
        self._last_epoch: dict[str, int] = {}
        #: Ids in PrepareCommit / PrepareAbort: their markers are due.
        self._prepared: dict[str, None] = {}

    # -- committed records (load and steady state) --------------------------------------------

    def apply(self, data: bytes | memoryview) -> None:
        """Apply committed record batches of the partition, in log order; batches at or below
        `applied_offset` are skipped. Nothing in `data` can make this raise: a damaged batch or
        record is logged and skipped."""
        for pos, header in new_batches(data, self.applied_offset, "transaction state"):
            self._apply_batch(data, pos, header)
            self.applied_offset = header.last_offset

    def _apply_batch(self, data: bytes | memoryview, pos: int, header: BatchHeader) -> None:
        if header.is_control or header.is_transactional:
            return  # a leader-change marker; nothing transactional is written here
        where = f"transaction state batch {header.base_offset}-{header.last_offset}"
        records = checked_records(data, pos, header, where)
        for record in records or ():
            if record.key is None:
                log.warning("transaction state record %d skipped: no key", record.offset)
                continue
            try:
                txn_id = decode_key(record.key)
                meta = None if record.value is None else decode_value(record.value)
            except CoordinatorRecordError as exc:
                log.warning("transaction state record %d skipped: %s", record.offset, exc)
                continue
            self._pending.pop(txn_id, None)
            if meta is None:
                self.txns.pop(txn_id, None)
                self._prepared.pop(txn_id, None)
                self._last_epoch.pop(txn_id, None)
                continue
            self.txns[txn_id] = meta
            if meta.state in _PREPARED:
                self._prepared[txn_id] = None
            else:
                self._prepared.pop(txn_id, None)

    def finish_loading(self, now_ms: int) -> list[RecordInput]:
        """Nothing to repair: each id's record is whole. What an earlier leader prepared is
        found by `prepared`."""
        return []

    def abandon(self, transactional_id: str) -> None:
        """The append of the id's pending record failed: it is no longer pending (its state is
        what the table says)."""
        self._pending.pop(transactional_id, None)

    def pending(self, transactional_id: str) -> TxnState | None:
        return self._pending.get(transactional_id)

    # -- decisions (leader only) ----------------------------------------------------------------

    def _write(
        self, txn_id: str, target: TxnMetadata, *, pending: TxnState | None = None,
        error: TidelogError | None = None, answer_producer: bool = False,
    ) -> Decision:
        current = self.txns.get(txn_id)
        moving_to = pending or target.state
        if current is not None and current.state not in VALID_PREVIOUS[moving_to]:
            raise AssertionError(f"{txn_id}: {current.state.name} -> {moving_to.name}")
        self._pending[txn_id] = moving_to
        producer = (target.producer_id, target.producer_epoch) if answer_producer else None
        return Decision(_record(txn_id, target), error, producer)

    def init_producer_id(
        self, txn_id: str, timeout_ms: int, producer_id: int, producer_epoch: int, now_ms: int,
        fresh_producer_id: int | None = None,
    ) -> Decision:
        """InitProducerId with a transactional id (kafka-mapping §8.4): the id's producer id
        with its epoch bumped, fencing the previous incarnation. `producer_id`/`producer_epoch`
        are the caller's current ones, or -1/-1. An open transaction is aborted first (fenced,
        answered CONCURRENT_TRANSACTIONS: the producer asks again)."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return Decision(error=InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms is not in 1..{self.config.max_timeout_ms} "
                f"(transaction.max.timeout.ms)"
            ))
        if txn_id in self._pending:
            return Decision(error=_concurrent(txn_id, self._pending[txn_id]))
        meta = self.txns.get(txn_id)
        if meta is None:
            if fresh_producer_id is None:
                return NEEDS_PRODUCER_ID
            target = TxnMetadata(fresh_producer_id, 0, timeout_ms, TxnState.EMPTY, (), now_ms, -1)
            return self._write(txn_id, target, answer_producer=True)
        if producer_id != NO_PRODUCER_ID and producer_id != meta.producer_id:
            return Decision(error=ProducerFencedError(
                f"{txn_id!r}: producer id {producer_id} is not the id's current one"
            ))
        if meta.state in _PREPARED:
            return Decision(error=_concurrent(txn_id, meta.state))
        if meta.state is TxnState.ONGOING:
            return self._fence(txn_id, meta, now_ms)
        last_epoch = self._last_epoch.get(txn_id, NO_PRODUCER_EPOCH)
        if producer_epoch not in (NO_PRODUCER_EPOCH, meta.producer_epoch):
            if producer_epoch == last_epoch:  # a retry whose answer was lost
                return Decision(producer=(meta.producer_id, meta.producer_epoch))
            return Decision(error=ProducerFencedError(
                f"{txn_id!r}: epoch {producer_epoch} is not the current {meta.producer_epoch}"
            ))
        if meta.producer_epoch >= EPOCH_EXHAUSTED:
            if fresh_producer_id is None:
                return NEEDS_PRODUCER_ID
            new_id, new_epoch = fresh_producer_id, 0
            self._last_epoch.pop(txn_id, None)
        else:
            new_id, new_epoch = meta.producer_id, meta.producer_epoch + 1
            if producer_epoch == NO_PRODUCER_EPOCH:
                self._last_epoch.pop(txn_id, None)
            else:
                self._last_epoch[txn_id] = meta.producer_epoch
        target = TxnMetadata(new_id, new_epoch, timeout_ms, TxnState.EMPTY, (), now_ms, -1)
        return self._write(txn_id, target, answer_producer=True)

    def _fence(self, txn_id: str, meta: TxnMetadata, now_ms: int) -> Decision:
        """Bump the epoch of an Ongoing transaction and abort it (PrepareEpochFence, then
        PrepareAbort under the new epoch, in one record)."""
        epoch = min(meta.producer_epoch + 1, MAX_EPOCH)
        target = meta._replace(producer_epoch=epoch, state=TxnState.PREPARE_ABORT,
                               last_update_ms=now_ms)
        return self._write(
            txn_id, target, pending=TxnState.PREPARE_EPOCH_FENCE,
            error=ConcurrentTransactionsError(
                f"{txn_id!r}: its open transaction is being aborted (epoch {epoch} fences the "
                f"previous producer); retry"
            ),
        )

    def _checked(
        self, txn_id: str, producer_id: int, producer_epoch: int
    ) -> TxnMetadata | TidelogError:
        """The id's metadata if the producer is its current one and nothing is pending."""
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return InvalidProducerIdMappingError(
                f"producer id {producer_id} is not that of transactional id {txn_id!r}"
            )
        if meta.producer_epoch != producer_epoch:
            return ProducerFencedError(
                f"{txn_id!r}: epoch {producer_epoch} is fenced by epoch {meta.producer_epoch}"
            )
        if txn_id in self._pending:
            return _concurrent(txn_id, self._pending[txn_id])
        return meta

    def add_partitions(
        self, txn_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[TopicPartition], now_ms: int,
    ) -> Decision:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition): the
        transaction is Ongoing with these partitions among its own."""
        meta = self._checked(txn_id, producer_id, producer_epoch)
        if isinstance(meta, TidelogError):
            return Decision(error=meta)
        if meta.state in _PREPARED:
            return Decision(error=_concurrent(txn_id, meta.state))
        wanted = set(partitions)
        if meta.state is TxnState.ONGOING and wanted <= set(meta.partitions):
            return Decision()
        return self._write(txn_id, _adding(meta, wanted, now_ms))

    def verify_partitions(
        self, txn_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> TidelogError | frozenset[TopicPartition]:
        """A partition leader's question before it appends the first transactional batch of
        a producer on a partition (KIP-890 part 1, Kafka's AddPartitionsToTxn with
        VerifyOnly): which of `partitions` are in the ongoing transaction of this producer id
        and epoch. Changes nothing. INVALID_PRODUCER_ID_MAPPING when the id has no such
        producer, PRODUCER_FENCED for another epoch, CONCURRENT_TRANSACTIONS while the
        transaction is being decided (its data must all be written before EndTxn). A pending
        record is not waited for, as in Kafka: a partition joins the table only once its
        Ongoing record is committed, and the producer sends nothing to it before then."""
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return InvalidProducerIdMappingError(
                f"producer id {producer_id} is not that of transactional id {txn_id!r}"
            )
        if meta.producer_epoch != producer_epoch:
            return ProducerFencedError(
                f"{txn_id!r}: epoch {producer_epoch} is fenced by epoch {meta.producer_epoch}"
            )
        if meta.state in _PREPARED:
            return _concurrent(txn_id, meta.state)
        return frozenset(partitions) & frozenset(meta.partitions)

    def end_txn(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> Decision:
        """EndTxn (kafka-mapping §8.6): an Ongoing transaction becomes PrepareCommit or
        PrepareAbort, answered once that is durable (the markers follow); a retry of a decided
        one is answered as it was decided, a contradiction is INVALID_TXN_STATE."""
        meta = self._checked(txn_id, producer_id, producer_epoch)
        if isinstance(meta, TidelogError):
            return Decision(error=meta)
        state = meta.state
        prepare, complete = (
            (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) if commit
            else (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
        )
        if state is TxnState.ONGOING:
            return self._write(txn_id, meta._replace(state=prepare, last_update_ms=now_ms))
        if state is complete:
            return Decision()
        if state is prepare:
            return Decision(error=_concurrent(txn_id, state))
        return Decision(error=InvalidTxnStateError(
            f"{txn_id!r} is {state.name}: cannot {'commit' if commit else 'abort'}"
        ))

    def prepared(self) -> list[MarkerWork]:
        """The decided transactions whose markers are due (none pending)."""
        work: list[MarkerWork] = []
        for txn_id in self._prepared:
            meta = self.txns[txn_id]
            if txn_id not in self._pending:
                work.append(MarkerWork(txn_id, meta.producer_id, meta.producer_epoch,
                                       meta.state is TxnState.PREPARE_COMMIT, meta.partitions))
        return work

    def plan_complete(
        self, work: MarkerWork, now_ms: int, held: Iterable[AddPartitions] = ()
    ) -> Decision | None:
        """Every partition of `work` has its marker: the Complete record; None when the id has
        moved on meanwhile (another leader completed it). `held`: the AddPartitionsToTxn
        requests that waited for these markers; those of the id's current producer become one
        Ongoing record with every partition they name, following in the same batch
        (`Decision.then`), and the id is pending until both are applied (a producer whose
        partitions were asked for in two requests, because its sends raced its sender, gets
        them in one write). The others are left out, and asked as usual once Complete is
        applied (which answers their error)."""
        txn_id = work.transactional_id
        meta = self.txns.get(txn_id)
        if (
            meta is None or txn_id in self._pending
            or meta.state not in _PREPARED
            or (meta.producer_id, meta.producer_epoch) != (work.producer_id, work.producer_epoch)
        ):
            return None
        state = TxnState.COMPLETE_COMMIT if work.commit else TxnState.COMPLETE_ABORT
        complete = meta._replace(state=state, partitions=(), last_update_ms=now_ms)
        decision = self._write(txn_id, complete)
        partitions = {
            tp for request in held if request.producer == (work.producer_id, work.producer_epoch)
            for tp in request.partitions
        }
        if not partitions:
            return decision
        assert complete.state in VALID_PREVIOUS[TxnState.ONGOING]
        self._pending[txn_id] = TxnState.ONGOING
        return decision._replace(then=_record(txn_id, _adding(complete, partitions, now_ms)))

    def plan_expiration(self, now_ms: int) -> list[tuple[str, Decision]]:
        """Ongoing transactions older than their timeout, fenced and aborted (kafka-mapping
        §8.7: the producer whose transaction timed out is fenced)."""
        return [
            (txn_id, self._fence(txn_id, meta, now_ms))
            for txn_id, meta in list(self.txns.items())
            if meta.state is TxnState.ONGOING and txn_id not in self._pending
            and meta.start_ms + meta.timeout_ms < now_ms
        ]

    def plan_id_expiration(self, now_ms: int) -> list[tuple[str, Decision]]:
        """Ids with no transaction since transactional.id.expiration.ms ago (kafka-mapping
        §8.7): each gets a tombstone, and is Dead (pending: its requests wait) until the
        tombstone commits and removes it. Its next InitProducerId then starts afresh, with a
        new producer id; a producer still using the old one gets INVALID_PRODUCER_ID_MAPPING."""
        expired: list[tuple[str, Decision]] = []
        for txn_id, meta in self.txns.items():
            if (
                meta.state in _IDLE and txn_id not in self._pending
                and meta.last_update_ms <= now_ms - self.config.id_expiration_ms
            ):
                self._pending[txn_id] = TxnState.DEAD
                expired.append((txn_id, Decision(RecordInput(None, encode_key(txn_id), now_ms))))
        return expired


def _record(txn_id: str, meta: TxnMetadata) -> RecordInput:
    return RecordInput(encode_value(meta), encode_key(txn_id), meta.last_update_ms)


def _adding(meta: TxnMetadata, partitions: Iterable[TopicPartition], now_ms: int) -> TxnMetadata:
    """`meta` (Empty, Ongoing or Complete*) Ongoing with `partitions` in its transaction (a
    transaction that was not open begins now)."""
    wanted = set(partitions)
    ongoing = meta.state is TxnState.ONGOING
    return meta._replace(
        state=TxnState.ONGOING,
        partitions=tuple(sorted(wanted | set(meta.partitions) if ongoing else wanted)),
        last_update_ms=now_ms,
        start_ms=meta.start_ms if ongoing else now_ms,
    )


def _concurrent(txn_id: str, state: TxnState) -> ConcurrentTransactionsError:
    return ConcurrentTransactionsError(f"{txn_id!r} is moving to {state.name}; retry")
