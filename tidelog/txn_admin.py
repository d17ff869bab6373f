"""The transactions' admin calls of the client (Kafka's Admin listTransactions,
describeTransactions, describeProducers and abortTransaction, KIP-664), behind the `Client`
methods of the same names and the `tidelog transactions` command.

ListTransactions goes to every node (each answers the ids it coordinates) and the answers are
merged; DescribeTransactions too, each id taken from the node that coordinates it;
DescribeProducers and AbortTransaction go to each partition's leader. Retriable errors (a
leader or coordinator moving) are retried within the deadline, as the client's other admin
calls are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidelog.errors import (
    NotCoordinatorError,
    TidelogError,
    for_code,
)
from tidelog.retry import Deadline, call_with_retry
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

if TYPE_CHECKING:
    from tidelog.client import Client


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    #: When the open transaction began (ms since the epoch), -1 without one.
    start_time_ms: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ProducerInfo:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    coordinator_epoch: int
    #: The first offset of the producer's open transaction on the partition, -1 without one.
    txn_start_offset: int
    #: The timestamp of that transaction's first batch, -1 without one.
    txn_start_time_ms: int


def _error(code: int, message: str) -> TidelogError:
    return for_code(code)(message)


def list_transactions(
    client: Client, deadline: Deadline, states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
) -> list[TransactionListing]:
    request = pb.ListTransactionsRequest(state_filters=list(states),
                                         producer_id_filters=list(producer_ids))

    def attempt() -> list[TransactionListing]:
        client.refresh_metadata(deadline)
        found: dict[str, TransactionListing] = {}
        for node_id in sorted(client.metadata.nodes()):
            response = client.call(node_id, "ListTransactions", request, deadline.attempt_s())
            if response.error_code:
                raise _error(response.error_code, response.error_message)
            for t in response.transactions:
                found[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.transaction_state
                )
        return [found[t] for t in sorted(found)]

    return call_with_retry(attempt, what="ListTransactions", deadline=deadline,
                           backoff=client.backoff)


def describe_transactions(
    client: Client, transactional_ids: Iterable[str], deadline: Deadline
) -> dict[str, TransactionDescription]:
    """Each id's state at its coordinator; raises TRANSACTIONAL_ID_NOT_FOUND for an id no
    coordinator knows, or the first other error."""
    ids = list(dict.fromkeys(transactional_ids))
    request = pb.DescribeTransactionsRequest(transactional_ids=ids)

    def attempt() -> dict[str, TransactionDescription]:
        client.refresh_metadata(deadline)
        found: dict[str, TransactionDescription] = {}
        errors: dict[str, TidelogError] = {}
        for node_id in sorted(client.metadata.nodes()):
            response = client.call(node_id, "DescribeTransactions", request,
                                   deadline.attempt_s())
            for s in response.transaction_states:
                if s.error_code == 0:
                    found[s.transactional_id] = TransactionDescription(
                        s.transactional_id, s.transaction_state, s.producer_id,
                        s.producer_epoch, s.transaction_timeout_ms,
                        s.transaction_start_time_ms,
                        tuple(TopicPartition(t.topic, p) for t in s.topics for p in t.partitions),
                    )
                elif s.error_code != NotCoordinatorError.code:
                    errors[s.transactional_id] = _error(s.error_code, s.error_message)
        missing = [i for i in ids if i not in found]
        for txn_id in missing:
            error = errors.get(txn_id)
            if error is None:  # no node coordinates it: its coordinator is moving
                raise NotCoordinatorError(f"no node answered for transactional id {txn_id!r}")
            raise error
        return found

    return call_with_retry(attempt, what="DescribeTransactions", deadline=deadline,
                           backoff=client.backoff)


def _leaders(client: Client, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
    by_leader: dict[int, list[TopicPartition]] = {}
    for tp in tps:
        topic = client.metadata.topic(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            raise _error(3, f"{tp} does not exist")
        by_leader.setdefault(topic.partitions[tp.partition].leader, []).append(tp)
    return by_leader


def describe_producers(
    client: Client, partitions: Iterable[TopicPartition], deadline: Deadline
) -> dict[TopicPartition, list[ProducerInfo]]:
    """The producers each partition's leader knows of."""
    wanted = list(dict.fromkeys(partitions))

    def attempt() -> dict[TopicPartition, list[ProducerInfo]]:
        client.refresh_metadata(deadline)
        found: dict[TopicPartition, list[ProducerInfo]] = {}
        for leader, tps in _leaders(client, wanted).items():
            if leader < 0:
                raise _error(5, f"no leader of {tps[0]}")  # LEADER_NOT_AVAILABLE
            request = pb.DescribeProducersRequest()
            for tp in tps:
                request.topics.add(topic=tp.topic, partitions=[tp.partition])
            response = client.call(leader, "DescribeProducers", request, deadline.attempt_s())
            for part in response.partitions:
                if part.error_code:
                    raise _error(part.error_code, part.error_message)
                found[TopicPartition(part.topic, part.partition)] = [
                    ProducerInfo(p.producer_id, p.producer_epoch, p.last_sequence,
                                 p.coordinator_epoch, p.current_txn_start_offset,
                                 p.current_txn_start_time_ms)
                    for p in part.producers
                ]
        return found

    return call_with_retry(attempt, what="DescribeProducers", deadline=deadline,
                           backoff=client.backoff)


def abort_transaction(
    client: Client, tp: TopicPartition, producer_id: int, producer_epoch: int,
    coordinator_epoch: int, deadline: Deadline,
) -> None:
    """An ABORT marker for the producer's open transaction, written by the partition's leader
    (raises its error: INVALID_PRODUCER_EPOCH for an epoch older than the producer's,
    TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the last marker's)."""
    request = pb.AbortTransactionRequest(
        topic=tp.topic, partition=tp.partition, producer_id=producer_id,
        producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch,
    )

    def attempt() -> None:
        client.refresh_metadata(deadline)
        [(leader, _)] = _leaders(client, [tp]).items()
        if leader < 0:
            raise _error(5, f"no leader of {tp}")
        response = client.call(leader, "AbortTransaction", request, deadline.attempt_s())
        if response.error_code:
            raise _error(response.error_code, response.error_message)

    call_with_retry(attempt, what="AbortTransaction", deadline=deadline, backoff=client.backoff)
