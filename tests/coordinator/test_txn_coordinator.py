"""The transaction coordinator's state machine alone (no cluster): Kafka's transitions and
error codes for InitProducerId, AddPartitionsToTxn/AddOffsetsToTxn and EndTxn; fencing of an
older incarnation (its open transaction aborted first); timeouts; a new leader replaying what
the old one prepared; the records' codec with every byte checked; and a randomized run of many
producers against a replayed copy."""

from __future__ import annotations

import random
import struct

import pytest

from tidelog.coordinator.record_codec import CoordinatorRecordError
from tidelog.coordinator.txn_coordinator import (
    NEEDS_PRODUCER_ID,
    AddPartitions,
    Decision,
    MarkerWork,
    TransactionCoordinatorState,
    TxnConfig,
)
from tidelog.coordinator.txn_records import (
    EPOCH_EXHAUSTED,
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
)
from tidelog.records import (
    ControlType,
    RecordInput,
    assign_offsets,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)
from tidelog.types import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
T = 1_000_000
CONFIG = TxnConfig()
TIMEOUT = 60_000


class Log:
    """A partition's committed log as the driver feeds it: each decision's record appended as
    one batch and applied; `replay` builds a new leader's state from it."""

    def __init__(self, config: TxnConfig = CONFIG) -> None:
        self.config = config
        self.batches: list[bytes] = []
        #: The next offset.
        self.end = 0
        self.state = TransactionCoordinatorState(config)

    def commit(self, decision: Decision) -> Decision:
        if decision.records:
            batch = assign_offsets(build_batch(decision.records), self.end, 0)
            self.end += len(decision.records)
            self.batches.append(batch)
            self.state.apply(batch)
        return decision

    def replay(self) -> TransactionCoordinatorState:
        state = TransactionCoordinatorState(self.config)
        state.apply(b"".join(self.batches))
        assert state.finish_loading(T) == []
        return state


def init(log: Log, txn: str = "t", pid: int = -1, epoch: int = -1, fresh: int = 7,
         now: int = T) -> Decision:
    decision = log.state.init_producer_id(txn, TIMEOUT, pid, epoch, now)
    if decision.needs_producer_id:
        decision = log.state.init_producer_id(txn, TIMEOUT, pid, epoch, now, fresh)
    return log.commit(decision)


def test_a_new_id_needs_a_producer_id_then_starts_empty_at_epoch_0() -> None:
    log = Log()
    assert log.state.init_producer_id("t", TIMEOUT, -1, -1, T) == NEEDS_PRODUCER_ID
    assert init(log).producer == (7, 0)
    assert log.state.txns["t"] == TxnMetadata(7, 0, TIMEOUT, TxnState.EMPTY, (), T, -1)
    # Every call bumps the epoch, fencing the previous incarnation.
    assert init(log).producer == (7, 1)
    assert init(log, pid=7, epoch=1).producer == (7, 2)


def test_commit_and_abort_go_through_prepare_markers_and_complete() -> None:
    log = Log()
    init(log)
    assert log.commit(log.state.add_partitions("t", 7, 0, [A0, B0], T + 1)).error is None
    meta = log.state.txns["t"]
    assert (meta.state, meta.partitions, meta.start_ms) == (TxnState.ONGOING, (A0, B0), T + 1)
    # Adding partitions it already has writes nothing; new ones widen the set.
    assert log.state.add_partitions("t", 7, 0, [A0], T + 2) == Decision()
    log.commit(log.state.add_partitions("t", 7, 0, [A1], T + 2))
    assert log.state.txns["t"].partitions == (A0, A1, B0)
    assert log.state.prepared() == []
    assert log.commit(log.state.end_txn("t", 7, 0, True, T + 3)).error is None
    (work,) = log.state.prepared()
    assert (work.commit, work.partitions, work.producer_epoch) == (True, (A0, A1, B0), 0)
    # Until the markers are written the id is busy; a retried EndTxn too.
    assert isinstance(log.state.end_txn("t", 7, 0, True, T).error, ConcurrentTransactionsError)
    assert isinstance(log.state.add_partitions("t", 7, 0, [A0], T).error,
                      ConcurrentTransactionsError)
    assert isinstance(init(log, pid=7, epoch=0).error, ConcurrentTransactionsError)
    assert isinstance(log.state.end_txn("t", 7, 0, False, T).error, InvalidTxnStateError)
    complete = log.state.plan_complete(work, T + 4)
    assert complete is not None
    log.commit(complete)
    assert log.state.txns["t"].state is TxnState.COMPLETE_COMMIT
    assert log.state.txns["t"].partitions == ()
    assert log.state.prepared() == []
    assert log.state.plan_complete(work, T + 5) is None  # done already
    # A retried EndTxn of the decided outcome succeeds; the other one is refused.
    assert log.state.end_txn("t", 7, 0, True, T) == Decision()
    assert isinstance(log.state.end_txn("t", 7, 0, False, T).error, InvalidTxnStateError)
    # The next transaction starts afresh from CompleteCommit, and aborts.
    log.commit(log.state.add_partitions("t", 7, 0, [B0], T + 6))
    assert log.state.txns["t"].start_ms == T + 6
    log.commit(log.state.end_txn("t", 7, 0, False, T + 7))
    (work,) = log.state.prepared()
    assert not work.commit
    log.commit(log.state.plan_complete(work, T + 8) or Decision())
    assert log.state.txns["t"].state is TxnState.COMPLETE_ABORT


def test_error_codes_of_kafka() -> None:
    log = Log()
    assert isinstance(log.state.init_producer_id("t", 0, -1, -1, T).error,
                      InvalidTransactionTimeoutError)
    assert isinstance(log.state.init_producer_id("t", 900_001, -1, -1, T).error,
                      InvalidTransactionTimeoutError)
    assert log.state.init_producer_id("t", 900_000, -1, -1, T).needs_producer_id
    assert isinstance(log.state.add_partitions("t", 7, 0, [A0], T).error,
                      InvalidProducerIdMappingError)
    init(log)
    assert isinstance(log.state.add_partitions("t", 8, 0, [A0], T).error,
                      InvalidProducerIdMappingError)
    assert isinstance(log.state.add_partitions("t", 7, 1, [A0], T).error, ProducerFencedError)
    assert isinstance(log.state.end_txn("t", 7, 0, True, T).error, InvalidTxnStateError)  # Empty
    assert isinstance(log.state.end_txn("u", 7, 0, True, T).error,
                      InvalidProducerIdMappingError)
    assert isinstance(init(log, pid=8, epoch=0).error, ProducerFencedError)
    assert isinstance(init(log, pid=7, epoch=5).error, ProducerFencedError)


def test_a_leader_verifies_only_partitions_of_the_ongoing_transaction() -> None:
    """KIP-890 part 1: what a partition leader asks before a transaction's first batch on a
    partition. Nothing is written and nothing becomes pending."""
    log = Log()
    verify = log.state.verify_partitions
    assert isinstance(verify("t", 7, 0, [A0]), InvalidProducerIdMappingError)  # unknown id
    init(log)
    assert verify("t", 7, 0, [A0]) == frozenset()  # Empty: no transaction
    assert isinstance(verify("t", 8, 0, [A0]), InvalidProducerIdMappingError)
    assert isinstance(verify("t", 7, 1, [A0]), ProducerFencedError)
    log.commit(log.state.add_partitions("t", 7, 0, [A0, B0], T))
    assert verify("t", 7, 0, [A0, A1, B0]) == {A0, B0}
    assert log.state.pending("t") is None
    log.commit(log.state.end_txn("t", 7, 0, True, T))
    assert isinstance(verify("t", 7, 0, [A0]), ConcurrentTransactionsError)  # being decided
    (work,) = log.state.prepared()
    log.commit(log.state.plan_complete(work, T) or Decision())
    assert verify("t", 7, 0, [A0]) == frozenset()  # a late batch of the ended transaction


def test_a_pending_record_makes_others_wait_and_a_failed_append_frees_the_id() -> None:
    log = Log()
    init(log)
    decision = log.state.add_partitions("t", 7, 0, [A0], T)
    assert decision.record is not None
    assert log.state.pending("t") is TxnState.ONGOING
    assert isinstance(log.state.end_txn("t", 7, 0, True, T).error, ConcurrentTransactionsError)
    log.state.abandon("t")  # the append failed: nothing changed
    assert log.state.txns["t"].state is TxnState.EMPTY
    assert log.commit(log.state.add_partitions("t", 7, 0, [A0], T)).error is None


def test_a_new_incarnation_fences_the_old_one_and_aborts_its_open_transaction() -> None:
    log = Log()
    init(log)
    log.commit(log.state.add_partitions("t", 7, 0, [A0, B0], T))
    fence = init(log)  # the second producer's InitProducerId
    assert isinstance(fence.error, ConcurrentTransactionsError)
    meta = log.state.txns["t"]
    assert (meta.state, meta.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    # The zombie (epoch 0) is fenced everywhere.
    assert isinstance(log.state.add_partitions("t", 7, 0, [A1], T).error, ProducerFencedError)
    assert isinstance(log.state.end_txn("t", 7, 0, True, T).error, ProducerFencedError)
    (work,) = log.state.prepared()
    assert (work.commit, work.producer_epoch, work.partitions) == (False, 1, (A0, B0))
    assert isinstance(init(log).error, ConcurrentTransactionsError)  # markers still due
    log.commit(log.state.plan_complete(work, T) or Decision())
    assert init(log).producer == (7, 2)  # the retry gets a fresh epoch once it is aborted
    assert isinstance(log.state.end_txn("t", 7, 0, True, T).error, ProducerFencedError)


def test_an_expired_transaction_is_aborted_and_its_producer_fenced() -> None:
    log = Log()
    init(log)
    log.commit(log.state.add_partitions("t", 7, 0, [A0], T))
    assert log.state.plan_expiration(T + TIMEOUT) == []
    ((txn, decision),) = log.state.plan_expiration(T + TIMEOUT + 1)
    assert txn == "t" and decision.record is not None
    assert log.state.pending("t") is TxnState.PREPARE_EPOCH_FENCE
    assert log.state.plan_expiration(T + TIMEOUT + 2) == []  # once
    log.commit(decision)
    assert log.state.txns["t"].producer_epoch == 1
    assert isinstance(log.state.end_txn("t", 7, 0, True, T).error, ProducerFencedError)
    (work,) = log.state.prepared()
    assert not work.commit


def test_an_idle_id_expires_with_a_tombstone_and_then_starts_afresh() -> None:
    """transactional.id.expiration.ms (kafka-mapping §8.7): an id in Empty or Complete*
    whose last update is that old gets a tombstone; an open or deciding one never expires."""
    expiry = 3_600_000
    log = Log(TxnConfig(id_expiration_ms=expiry))
    init(log)
    init(log, "idle", fresh=8, now=T)  # Empty since T
    log.commit(log.state.add_partitions("t", 7, 0, [A0], T + 10))
    later = T + 10 * expiry
    ((txn, decision),) = log.state.plan_id_expiration(later)  # "t" is Ongoing
    assert txn == "idle" and decision.record is not None
    assert decision.record.value is None and decision.record.key == encode_key("idle")
    log.commit(decision)
    log.commit(log.state.end_txn("t", 7, 0, True, T + 20))
    assert log.state.plan_id_expiration(later) == []  # PrepareCommit
    (work,) = log.state.prepared()
    complete = log.state.plan_complete(work, T + 30)
    assert complete is not None
    log.commit(complete)
    assert log.state.plan_id_expiration(T + 30 + expiry - 1) == []
    ((txn, decision),) = log.state.plan_id_expiration(T + 30 + expiry)
    assert txn == "t" and log.state.pending("t") is TxnState.DEAD
    assert log.state.plan_id_expiration(later) == []  # planned once
    # Until the tombstone commits, the id's requests wait; a failed append frees it.
    assert isinstance(init(log, pid=7, epoch=0).error, ConcurrentTransactionsError)
    log.state.abandon("t")
    ((txn, decision),) = log.state.plan_id_expiration(later)
    log.commit(decision)
    assert log.state.txns == {} and log.replay().txns == {}
    # The old incarnation is unknown now; a new one gets a new producer id at epoch 0.
    assert isinstance(log.state.add_partitions("t", 7, 0, [A0], later).error,
                      InvalidProducerIdMappingError)
    assert init(log, fresh=9, now=later).producer == (9, 0)
    assert log.state.plan_id_expiration(later + expiry - 1) == []


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    log = Log()
    log.commit(log.state.init_producer_id("t", TIMEOUT, -1, -1, T, 7))
    log.state.txns["t"] = log.state.txns["t"]._replace(producer_epoch=EPOCH_EXHAUSTED)
    assert log.state.init_producer_id("t", TIMEOUT, -1, -1, T).needs_producer_id
    assert init(log, fresh=9).producer == (9, 0)


def test_a_retried_init_whose_answer_was_lost_gets_the_same_epoch() -> None:
    log = Log()
    init(log)
    assert init(log, pid=7, epoch=0).producer == (7, 1)
    assert init(log, pid=7, epoch=0).producer == (7, 1)  # no second bump


def test_a_new_leader_finishes_what_the_old_one_prepared() -> None:
    log = Log()
    init(log)
    init(log, "u", fresh=8)
    log.commit(log.state.add_partitions("t", 7, 0, [A0, B0], T))
    log.commit(log.state.add_partitions("u", 8, 0, [A1], T))
    log.commit(log.state.end_txn("t", 7, 0, True, T))
    new = log.replay()
    assert new.txns == log.state.txns
    (work,) = new.prepared()
    assert (work.transactional_id, work.commit, work.partitions) == ("t", True, (A0, B0))
    assert new.plan_complete(work, T) is not None


def _prepared(log: Log, commit: bool = True) -> tuple[TransactionCoordinatorState, MarkerWork]:
    init(log)
    log.commit(log.state.add_partitions("t", 7, 0, [A0, B0], T))
    log.commit(log.state.end_txn("t", 7, 0, commit, T + 1))
    (work,) = log.state.prepared()
    return log.state, work


def _states_of_last_batch(log: Log) -> list[TxnState]:
    data = log.batches[-1]
    ((pos, header),) = iter_batches(data)
    return [decode_value(r.value or b"").state for r in decode_records(data, pos, header)]


@pytest.mark.parametrize("commit", [True, False])
def test_an_add_held_during_the_markers_is_written_with_complete_in_one_batch(
    commit: bool,
) -> None:
    log = Log()
    state, work = _prepared(log, commit)
    held = AddPartitions(7, 0, (A1,))
    decision = state.plan_complete(work, T + 2, [held])
    assert decision is not None and decision.error is None and decision.then is not None
    # The id is busy until both records are applied: nothing can come between them.
    assert state.pending("t") is TxnState.ONGOING
    assert isinstance(state.add_partitions("t", 7, 0, [A1], T).error, ConcurrentTransactionsError)
    assert isinstance(state.end_txn("t", 7, 0, True, T).error, ConcurrentTransactionsError)
    assert state.plan_complete(work, T + 2, [held]) is None
    log.commit(decision)
    complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    assert _states_of_last_batch(log) == [complete, TxnState.ONGOING]
    meta = state.txns["t"]
    assert (meta.state, meta.partitions, meta.start_ms) == (TxnState.ONGOING, (A1,), T + 2)
    assert state.pending("t") is None and state.prepared() == []
    # The new transaction goes on as any other; a leader that replays the log agrees.
    assert state.add_partitions("t", 7, 0, [A1], T + 3) == Decision()
    assert log.replay().txns == state.txns
    log.commit(state.end_txn("t", 7, 0, True, T + 4))
    (next_work,) = state.prepared()
    assert next_work.partitions == (A1,)


def test_an_add_of_another_producer_or_epoch_is_not_written_with_complete() -> None:
    log = Log()
    state, work = _prepared(log)
    for stranger in (AddPartitions(8, 0, (A1,)), AddPartitions(7, 1, (A1,)),
                     AddPartitions(7, 0, ())):
        decision = state.plan_complete(work, T + 2, [stranger])
        assert decision is not None and decision.then is None
        state.abandon("t")
    log.commit(state.plan_complete(work, T + 2, [AddPartitions(8, 0, (A1,))]) or Decision())
    assert _states_of_last_batch(log) == [TxnState.COMPLETE_COMMIT]
    # Asked the usual way afterwards, it gets its error.
    assert isinstance(state.add_partitions("t", 8, 0, [A1], T).error,
                      InvalidProducerIdMappingError)
    assert isinstance(state.add_partitions("t", 7, 1, [A1], T).error, ProducerFencedError)


def test_every_add_of_the_producer_held_during_the_markers_is_in_the_one_ongoing_record(
) -> None:
    """A producer whose sends raced its sender asks for its partitions in two requests; both
    are held by the markers and written in the one batch, a stranger's left out."""
    log = Log()
    state, work = _prepared(log)
    held = [AddPartitions(7, 0, (A1,)), AddPartitions(8, 0, (B0,)), AddPartitions(7, 0, (A0,))]
    decision = state.plan_complete(work, T + 2, held)
    assert decision is not None and decision.then is not None
    log.commit(decision)
    assert _states_of_last_batch(log) == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
    meta = state.txns["t"]
    assert (meta.state, meta.partitions) == (TxnState.ONGOING, (A0, A1))
    assert state.add_partitions("t", 7, 0, [A0, A1], T + 3) == Decision()
    assert log.replay().txns == state.txns


def test_the_combined_append_failing_or_a_failover_before_it_commits_writes_the_markers_again(
) -> None:
    log = Log()
    state, work = _prepared(log)
    held = AddPartitions(7, 0, (A1,))
    assert state.plan_complete(work, T + 2, [held]) is not None
    state.abandon("t")  # the append failed: still prepared, its markers due again
    assert state.txns["t"].state is TxnState.PREPARE_COMMIT
    assert state.prepared() == [work]
    # A new leader (the combined batch never committed) finds the Prepare record and writes
    # the markers again; the producer's retried AddPartitionsToTxn is held by it in turn.
    new = log.replay()
    assert new.prepared() == [work]
    assert isinstance(new.add_partitions("t", 7, 0, [A1], T).error, ConcurrentTransactionsError)
    log.state = new
    log.commit(new.plan_complete(work, T + 3, [held]) or Decision())
    assert new.txns["t"].state is TxnState.ONGOING and new.txns["t"].partitions == (A1,)
    # A failover after the combined batch committed: the new leader has nothing to mark.
    newer = log.replay()
    assert newer.txns == new.txns and newer.prepared() == []


def test_a_fence_after_the_combined_batch_aborts_the_new_transaction() -> None:
    log = Log()
    state, work = _prepared(log)
    log.commit(state.plan_complete(work, T + 2, [AddPartitions(7, 0, (A1,))]) or Decision())
    fence = init(log)  # a newer incarnation of the id
    assert isinstance(fence.error, ConcurrentTransactionsError)
    meta = state.txns["t"]
    assert (meta.state, meta.producer_epoch, meta.partitions) == (
        TxnState.PREPARE_ABORT, 1, (A1,))
    (abort,) = state.prepared()
    assert (abort.commit, abort.producer_epoch, abort.partitions) == (False, 1, (A1,))
    # The zombie's add held during these markers is not written: fenced.
    decision = state.plan_complete(abort, T + 3, [AddPartitions(7, 0, (A0,))])
    assert decision is not None and decision.then is None


def test_control_batches_and_damaged_records_are_skipped() -> None:
    state = TransactionCoordinatorState(TxnConfig())
    good = assign_offsets(build_batch([_record("t")]), 0, 0)
    bad_key = assign_offsets(build_batch([_record("t")._replace(key=b"\x00\x09")]), 2, 0)
    corrupt = bytearray(assign_offsets(build_batch([_record("u")]), 3, 0))
    corrupt[-1] ^= 1  # CRC mismatch
    state.apply(good + assign_offsets(build_control_batch(ControlType.LEADER_CHANGE), 1, 0))
    state.apply(bad_key + bytes(corrupt) + b"\x00garbage")
    assert set(state.txns) == {"t"} and state.applied_offset == 3


def _record(txn: str) -> RecordInput:
    meta = TxnMetadata(1, 0, TIMEOUT, TxnState.EMPTY, (), T, -1)
    return RecordInput(encode_value(meta), encode_key(txn), T)


# ---- the records -----------------------------------------------------------------------------

METAS = [
    TxnMetadata(7, 0, TIMEOUT, TxnState.EMPTY, (), T, -1),
    TxnMetadata(7, 3, 1, TxnState.ONGOING, (A0, A1, B0), T, T - 5),
    TxnMetadata(2**62, 32767, 900_000, TxnState.PREPARE_COMMIT, (B0,), T, T),
    TxnMetadata(7, 3, TIMEOUT, TxnState.COMPLETE_ABORT, (), T, T),
]


@pytest.mark.parametrize("meta", METAS)
def test_values_round_trip_and_every_truncation_or_extension_is_refused(
    meta: TxnMetadata,
) -> None:
    data = encode_value(meta)
    assert decode_value(data) == meta
    for end in range(len(data)):
        with pytest.raises(CoordinatorRecordError):
            decode_value(data[:end])
    with pytest.raises(CoordinatorRecordError, match="left over"):
        decode_value(data + b"\x00")


def test_keys_round_trip_and_are_checked() -> None:
    assert decode_key(encode_key("tx-é")) == "tx-é"
    for bad, reason in [
        (b"", "ends inside"), (b"\x00\x01\x00\x01t", "unknown key version"),
        (b"\x00\x00\x00\x05t", "runs past"), (b"\x00\x00\x00\x01tt", "left over"),
        (b"\x00\x00\x00\x00", "empty"), (b"\x00\x00\x00\x01\xff", "not UTF-8"),
    ]:
        with pytest.raises(CoordinatorRecordError, match=reason):
            decode_key(bad)


def test_values_that_no_writer_produces_are_refused() -> None:
    ongoing = encode_value(METAS[1])
    head = struct.Struct(">hqhib")

    def patched(**fields: int) -> bytes:
        values = dict(zip(("v", "pid", "epoch", "timeout", "state"), head.unpack_from(ongoing),
                          strict=True))
        values.update(fields)
        return head.pack(*values.values()) + ongoing[head.size:]

    for fields, reason in [
        ({"v": 1}, "unknown value version"), ({"pid": -1}, "negative producer id"),
        ({"epoch": -1}, "negative producer epoch"), ({"timeout": 0}, "timeout"),
        ({"state": 6}, "not one a record holds"), ({"state": 7}, "not one a record holds"),
        ({"state": 0}, "partitions in state EMPTY"),
        ({"state": 4}, "partitions in state COMPLETE_COMMIT"),
    ]:
        with pytest.raises(CoordinatorRecordError, match=reason):
            decode_value(patched(**fields))
    empty = encode_value(METAS[0])
    with pytest.raises(CoordinatorRecordError, match="null partitions in state ONGOING"):
        decode_value(empty[:head.size - 1] + b"\x01" + empty[head.size:])
    twice = encode_value(METAS[1]._replace(partitions=(A0,)))
    twice = twice.replace(b"\x00\x00\x00\x01\x00\x00\x00\x00", b"\x00\x00\x00\x02" + bytes(8))
    with pytest.raises(CoordinatorRecordError, match="twice"):
        decode_value(twice)
    with pytest.raises(CoordinatorRecordError, match="never written"):
        encode_value(METAS[0]._replace(state=TxnState.PREPARE_EPOCH_FENCE))


# ---- randomized ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_random_producers_keep_kafkas_invariants(seed: int) -> None:
    """Many incarnations of a few transactional ids against one coordinator, with failed
    appends, expirations and leader changes (a replay of the log) mixed in. Checked after
    every step: each committed record is a valid transition from the one before; a transaction
    is decided only from Ongoing, and completes with the outcome it was decided with, over
    the partitions it had; a producer's epoch never goes back; the replayed state equals the
    live one; and a fenced epoch never gets a transaction decided."""
    rng = random.Random(seed)
    log = Log(TxnConfig(max_timeout_ms=100))
    ids = ["t0", "t1", "t2"]
    producers: dict[str, tuple[int, int]] = {}  # the newest incarnation's (pid, epoch)
    zombies: dict[str, tuple[int, int]] = {}
    decided: dict[str, tuple[bool, tuple[TopicPartition, ...], int]] = {}
    next_pid = 100
    now = T
    partitions = [TopicPartition(t, p) for t in "ab" for p in range(3)]
    for _ in range(400):
        now += rng.randrange(0, 30)
        state = log.state
        before = dict(state.txns)
        txn = rng.choice(ids)
        op = rng.randrange(7)
        decision: Decision | None = None
        who = producers.get(txn) if rng.random() < 0.85 else zombies.get(txn)
        if op == 0:
            decision = state.init_producer_id(txn, rng.choice([50, 100]), -1, -1, now)
            if decision.needs_producer_id:
                next_pid += 1
                decision = state.init_producer_id(txn, 100, -1, -1, now, next_pid)
        elif op in (1, 2) and who is not None:
            decision = state.add_partitions(txn, *who, rng.sample(partitions, 2), now)
        elif op == 3 and who is not None:
            decision = state.end_txn(txn, *who, rng.random() < 0.5, now)
        elif op == 4:
            for work in state.prepared():
                if rng.random() < 0.7:
                    # Sometimes with an AddPartitionsToTxn held meanwhile, of the newest
                    # incarnation or of a zombie.
                    held = producers.get(work.transactional_id) if rng.random() < 0.85 else (
                        zombies.get(work.transactional_id))
                    then = None if held is None or rng.random() < 0.5 else AddPartitions(
                        *held, tuple(rng.sample(partitions, 2)))
                    complete = state.plan_complete(work, now, () if then is None else [then])
                    if complete is not None:
                        _commit_checked(log, work.transactional_id, complete, before)
                        assert decided.pop(work.transactional_id)[:2] == (
                            work.commit, work.partitions)
                        meta = log.state.txns[work.transactional_id]
                        if complete.then is None:
                            assert meta.state in (TxnState.COMPLETE_COMMIT,
                                                  TxnState.COMPLETE_ABORT)
                        else:  # only the producer the markers were written for goes on
                            assert then is not None
                            assert (then.producer_id, then.producer_epoch) == (
                                work.producer_id, work.producer_epoch)
                            assert (meta.state, meta.partitions) == (
                                TxnState.ONGOING, tuple(sorted(then.partitions)))
        elif op == 5:
            for expired_txn, fence in state.plan_expiration(now):
                _commit_checked(log, expired_txn, fence, before)
                meta = log.state.txns[expired_txn]
                decided[expired_txn] = (False, meta.partitions, meta.producer_epoch)
        else:
            replayed = log.replay()
            assert replayed.txns == state.txns
            log.state = replayed  # a leader change: pending and lost-answer memory are gone
            continue
        if decision is None or decision.record is None:
            continue
        if rng.random() < 0.1:  # the append failed
            state.abandon(txn)
            assert state.txns == before
            continue
        prev = state.txns.get(txn)
        _commit_checked(log, txn, decision, before)
        meta = log.state.txns[txn]
        if op == 0:
            if meta.state is TxnState.PREPARE_ABORT:  # a fence of the open transaction
                assert isinstance(decision.error, ConcurrentTransactionsError)
                decided[txn] = (False, meta.partitions, meta.producer_epoch)
            else:
                assert decision.producer == (meta.producer_id, meta.producer_epoch)
                if txn in producers:
                    zombies[txn] = producers[txn]
                producers[txn] = decision.producer
        if op == 3:
            assert prev is not None and prev.state is TxnState.ONGOING
            assert who == (meta.producer_id, meta.producer_epoch)
            decided[txn] = (meta.state is TxnState.PREPARE_COMMIT, meta.partitions,
                            meta.producer_epoch)


def _commit_checked(log: Log, txn: str, decision: Decision,
                    before: dict[str, TxnMetadata]) -> None:
    prev = log.state.txns.get(txn)
    pending = log.state.pending(txn)
    log.commit(decision)
    meta = log.state.txns[txn]
    assert pending is not None and log.state.pending(txn) is None
    if decision.then is not None:  # Complete, then Ongoing from it, in one batch
        assert prev is not None and prev.state in (TxnState.PREPARE_COMMIT,
                                                   TxnState.PREPARE_ABORT)
        assert pending is TxnState.ONGOING and meta.producer_epoch == prev.producer_epoch
    if prev is not None:
        if decision.then is None:
            assert prev.state in VALID_PREVIOUS[pending], (prev.state, pending)
        assert (meta.producer_id, meta.producer_epoch) >= (prev.producer_id, 0)
        if meta.producer_id == prev.producer_id:
            assert meta.producer_epoch >= prev.producer_epoch
