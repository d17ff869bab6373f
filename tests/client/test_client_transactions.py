"""The transactional producer's own rules, without a cluster: its settings, the states a call
needs, and which errors only fail the transaction (abortable) and which end the producer
(fatal), as Kafka's producer treats them (kafka-mapping §8.11)."""

from __future__ import annotations

import pytest

from tidelog import errors
from tidelog.producer import ProducerConfig
from tidelog.producer.transactions import TransactionManager, TxnState, is_fatal


def manager() -> TransactionManager:
    return TransactionManager(None, "t", 60_000)  # type: ignore[arg-type]  # no calls made


def test_a_transactional_producer_must_be_idempotent() -> None:
    assert ProducerConfig(transactional_id="t").idempotence
    for bad in ({"transactional_id": "t", "idempotent": False},
                {"transactional_id": "t", "acks": 1}, {"transactional_id": ""},
                {"transactional_id": "t", "transaction_timeout_ms": 0}):
        with pytest.raises(errors.ConfigurationError):
            ProducerConfig(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("error", "coordinator", "produce"), [
    (errors.ProducerFencedError, True, True),
    (errors.TransactionalIdAuthorizationFailedError, True, True),
    (errors.InvalidProducerEpochError, True, False),  # from Produce: abortable
    (errors.InvalidTxnStateError, True, False),
    (errors.InvalidTransactionTimeoutError, True, False),
    (errors.UnsupportedVersionError, True, False),
    (errors.TopicAuthorizationFailedError, False, False),
    (errors.GroupAuthorizationFailedError, False, False),
    (errors.OperationNotAttemptedError, False, False),
    (errors.InvalidProducerIdMappingError, False, False),
    (errors.TransactionAbortableError, False, False),
    (errors.RequestTimedOutError, False, False),
])
def test_fatal_and_abortable_errors(
    error: type[errors.TidelogError], coordinator: bool, produce: bool
) -> None:
    assert is_fatal(error("x")) is coordinator
    assert is_fatal(error("x"), from_produce=True) is produce


def test_states_a_call_needs_and_errors_that_stick() -> None:
    txn = manager()
    with pytest.raises(errors.IllegalTransactionStateError, match="UNINITIALIZED"):
        txn.check_send()  # before init_transactions()
    txn.state = TxnState.READY
    with pytest.raises(errors.IllegalTransactionStateError, match="needs IN_TRANSACTION"):
        txn.check_send()  # outside a transaction
    txn.state = TxnState.IN_TRANSACTION
    txn.check_send()
    abortable = errors.TopicAuthorizationFailedError("no WRITE on the topic")
    txn.failed(abortable)
    assert (txn.state, txn.error) == (TxnState.ABORTABLE_ERROR, abortable)
    with pytest.raises(errors.TopicAuthorizationFailedError):
        txn.check_send()  # the error that failed the transaction, until it is aborted
    txn.require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR)  # abort_transaction() may
    txn.failed(errors.OperationNotAttemptedError("later"))
    assert txn.error is abortable  # the first error is the one reported
    fenced = errors.ProducerFencedError("a newer producer has the id")
    txn.failed(fenced)
    assert (txn.state, txn.error) == (TxnState.FATAL_ERROR, fenced)
    txn.failed(abortable)
    assert txn.error is fenced  # fatal for good
    with pytest.raises(errors.ProducerFencedError):
        txn.require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR)
