"""The transactions' admin requests of the client API (Kafka's KIP-664: what the
`tidelog transactions` command is built on): ListTransactions and DescribeTransactions from
the transaction coordinators' state, DescribeProducers from a partition leader's producer
state, and AbortTransaction, the ABORT marker a leader writes for a producer's open transaction
so that an operator can end a hanging one (a transaction no coordinator knows of, left by data
written before the leaders verified transactions, or with verification off).

Authorization as Kafka's (kafka-mapping §11.3): ListTransactions leaves out the ids the caller
may not DESCRIBE, DescribeTransactions answers them TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53);
DescribeProducers needs READ on the topic and AbortTransaction ALTER on it
(TOPIC_AUTHORIZATION_FAILED, 29).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.coordinator.txn_records import TxnMetadata, TxnState
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.rules import error_answer
from tidelog.node.coordinators.txn_driver import TxnCoordinatorDriver
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.records import MAX_PRODUCER_EPOCH
from tidelog.storage.producer_state import NO_TXN
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

#: How long an AbortTransaction waits for its marker to commit.
ABORT_WAIT_S = 30.0


def state_name(state: TxnState) -> str:
    """Kafka's name of a transaction state (PREPARE_COMMIT -> PrepareCommit)."""
    return "".join(word.capitalize() for word in state.name.split("_"))


class TxnAdminApi:
    """`resolve(tp)` is the client API's rule for the replica that may answer for a partition
    as its leader (or the error that says why none here may)."""

    def __init__(
        self, txns: TxnCoordinatorDriver, authorization: Authorization,
        resolve: Callable[[TopicPartition], PartitionReplica | errors.TidelogError],
    ) -> None:
        self.txns = txns
        self.authorization = authorization
        self._resolve = resolve

    def list_transactions(
        self, request: pb.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTransactionsResponse:
        principal = self.authorization.principal(context)
        states = set(request.state_filters)
        pids = set(request.producer_id_filters)
        response = pb.ListTransactionsResponse()
        for txn_id, meta in sorted(self.txns.listing()):
            name = state_name(meta.state)
            if (states and name not in states) or (pids and meta.producer_id not in pids):
                continue
            if self.authorization.refused(principal, Operation.DESCRIBE,
                                          ResourceType.TRANSACTIONAL_ID, txn_id) is None:
                response.transactions.add(transactional_id=txn_id, producer_id=meta.producer_id,
                                          transaction_state=name)
        return response

    def describe_transactions(
        self, request: pb.DescribeTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeTransactionsResponse:
        principal = self.authorization.principal(context)
        response = pb.DescribeTransactionsResponse()
        for txn_id in dict.fromkeys(request.transactional_ids):
            answer = response.transaction_states.add(transactional_id=txn_id)
            try:
                refused = self.authorization.refused(
                    principal, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id
                )
                if refused is not None:
                    raise refused
                _describe(answer, self.txns.describe(txn_id))
            except errors.TidelogError as exc:
                answer.error_code, answer.error_message = exc.code, str(exc)
        return response

    def describe_producers(
        self, request: pb.DescribeProducersRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeProducersResponse:
        principal = self.authorization.principal(context)
        tps = list(dict.fromkeys(
            TopicPartition(t.topic, p) for t in request.topics for p in t.partitions
        ))
        refused = self.authorization.refusals(
            principal, Operation.READ, ResourceType.TOPIC, (tp.topic for tp in tps)
        )
        response = pb.DescribeProducersResponse()
        for tp in tps:
            answer = response.partitions.add(topic=tp.topic, partition=tp.partition)
            try:
                if tp.topic in refused:
                    raise refused[tp.topic]
                replica = self._leader(tp)
                opened = replica.open_transactions()
                for pid, entry in sorted(replica.producers().items()):
                    first, start = opened.get(pid, (NO_TXN, -1))
                    answer.producers.add(
                        producer_id=pid, producer_epoch=entry.producer_epoch,
                        last_sequence=entry.last_seq, coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=first, current_txn_start_time_ms=start,
                    )
            except errors.TidelogError as exc:
                answer.error_code, answer.error_message = exc.code, str(exc)
        return response

    async def abort_transaction(
        self, request: pb.AbortTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortTransactionResponse:
        tp = TopicPartition(request.topic, request.partition)
        try:
            refused = self.authorization.refused(
                self.authorization.principal(context), Operation.ALTER, ResourceType.TOPIC,
                request.topic,
            )
            if refused is not None:
                raise refused
            if (request.producer_id < 0 or not 0 <= request.producer_epoch <= MAX_PRODUCER_EPOCH
                    or request.coordinator_epoch < 0):
                raise errors.InvalidRequestError(
                    f"producer id {request.producer_id} epoch {request.producer_epoch} "
                    f"coordinator epoch {request.coordinator_epoch}: an abort needs an id >= 0, "
                    f"an epoch in [0, {MAX_PRODUCER_EPOCH}] and a coordinator epoch >= 0"
                )
            done = self._leader(tp).write_txn_marker(
                request.producer_id, request.producer_epoch, False, request.coordinator_epoch
            )
            try:
                async with asyncio.timeout(ABORT_WAIT_S):
                    await done
            except TimeoutError:
                raise errors.RequestTimedOutError(
                    f"the ABORT marker on {tp} did not commit in {ABORT_WAIT_S:.0f}s"
                ) from None
        except errors.TidelogError as exc:
            return error_answer(pb.AbortTransactionResponse, exc)
        return pb.AbortTransactionResponse()

    def _leader(self, tp: TopicPartition) -> PartitionReplica:
        resolved = self._resolve(tp)
        if isinstance(resolved, errors.TidelogError):
            raise resolved
        return resolved


def _describe(answer: pb.TransactionState, meta: TxnMetadata) -> None:
    answer.transaction_state = state_name(meta.state)
    answer.transaction_timeout_ms = meta.timeout_ms
    answer.transaction_start_time_ms = meta.start_ms
    answer.producer_id = meta.producer_id
    answer.producer_epoch = meta.producer_epoch
    by_topic: dict[str, list[int]] = {}
    for tp in meta.partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    for topic, partitions in sorted(by_topic.items()):
        answer.topics.add(topic=topic, partitions=sorted(partitions))
