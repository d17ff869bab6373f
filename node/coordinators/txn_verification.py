"""Transaction verification (Kafka's KIP-890 part 1): before a partition leader appends a
client's transactional batch that would open a transaction on the partition, it asks the
producer's transaction coordinator whether the partition was added to that producer's ongoing
transaction, and refuses the batch otherwise. Without it, a batch with the transactional bit
that no coordinator knows of (a stray client's, or a zombie producer's batch that arrives after
its transaction ended) opens a transaction that no marker will ever end: the partition's last
stable offset stops there for good, and every read_committed consumer with it.

Both sides of the node-to-node VerifyTxnPartitions RPC (Kafka's AddPartitionsToTxn v4 with
VerifyOnly):

* `TxnVerification.handle` answers on the coordinator, from its table
  (`TransactionCoordinatorState.verify_partitions`); nothing changes there.
* `TxnVerification.refusals` is what Produce calls on the leader for the batches that need it
  (`PartitionReplica.verification_guard`): one question per producer of the request, asked
  here when this node coordinates the id. Only a transaction's first batch on a partition pays
  the round trip: the answer is kept on the leader (the guard), and once the batch is
  appended the transaction is open in the leader's producer state. The producer's next marker
  drops the guard, so an answer that comes back after the transaction ended verifies nothing.

The errors a producer sees are Kafka's (its ReplicaManager and AddPartitionsToTxnManager): a
partition not in the transaction is INVALID_TXN_STATE (48), a fenced epoch
INVALID_PRODUCER_EPOCH (47), a producer id the transactional id does not have
INVALID_PRODUCER_ID_MAPPING (49); a coordinator that cannot answer now (moving, loading, or
deciding the transaction) is NOT_ENOUGH_REPLICAS (19), which every producer retries. A
transactional batch in a request without a transactional id cannot be verified: Kafka refuses
it with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import NamedTuple

import grpc

from tidelog import errors
from tidelog.node.cluster.routing import Routing
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.coordinators.txn_driver import TxnCoordinatorDriver
from tidelog.storage.producer_state import VerificationGuard
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

log = logging.getLogger("tidelog.node")

_SERVICE = rpb.DESCRIPTOR.services_by_name["RaftTransport"].full_name
VERIFY_METHOD = f"/{_SERVICE}/VerifyTxnPartitions"
#: The longest a leader waits for the coordinator's answer (less when the Produce request's
#: own timeout is shorter).
VERIFY_TIMEOUT_S = 5.0
#: Coordinator answers that say "not now": the producer retries its batch (Kafka turns them
#: into NOT_ENOUGH_REPLICAS, retried by every client and without a metadata refresh).
_NOT_NOW = (errors.NotCoordinatorError, errors.CoordinatorNotAvailableError,
            errors.CoordinatorLoadInProgressError, errors.ConcurrentTransactionsError,
            errors.NetworkExceptionError, errors.RequestTimedOutError)


class PendingVerification(NamedTuple):
    """A batch that Produce holds until its transaction is verified."""

    tp: TopicPartition
    guard: VerificationGuard


class TxnVerification:
    """Both ends of VerifyTxnPartitions on one node."""

    def __init__(
        self, node_id: int, txn_topic: CoordinatorTopic, txns: TxnCoordinatorDriver,
        routing: Routing, channel: Callable[[str], grpc.aio.Channel],
    ) -> None:
        """`channel(address)` is the kept channel to a peer's node-to-node listener."""
        self.node_id = node_id
        self._txn_topic = txn_topic
        self._txns = txns
        self._routing = routing
        self._channel = channel

    # ---- the coordinator's side ----------------------------------------------------------

    def handle(self, request: rpb.VerifyTxnPartitionsRequest) -> rpb.VerifyTxnPartitionsResponse:
        tps = [TopicPartition(g.topic, g.partition) for g in request.partitions]
        if not request.transactional_id:
            invalid = errors.InvalidRequestError("an empty transactional id")
            return rpb.VerifyTxnPartitionsResponse(error_code=invalid.code,
                                                   error_message=str(invalid))
        try:
            verified = self._txns.verify_partitions(
                request.transactional_id, request.producer_id, request.producer_epoch, tps
            )
        except errors.TidelogError as exc:
            return rpb.VerifyTxnPartitionsResponse(error_code=exc.code, error_message=str(exc))
        return rpb.VerifyTxnPartitionsResponse(verified=[
            rpb.GroupId(topic=tp.topic, partition=tp.partition) for tp in sorted(verified)
        ])

    # ---- the partition leader's side -----------------------------------------------------

    async def refusals(
        self, transactional_id: str | None, pending: Iterable[PendingVerification],
        timeout_s: float,
    ) -> dict[TopicPartition, errors.TidelogError]:
        """Verify each pending batch with its producer's coordinator; the error each refused
        one is answered with. A verified one has its guard set (`propose` then takes it)."""
        by_producer: dict[tuple[int, int], list[PendingVerification]] = {}
        for item in pending:
            producer = (item.guard.producer_id, item.guard.producer_epoch)
            by_producer.setdefault(producer, []).append(item)
        if not by_producer:
            return {}
        if not transactional_id:
            refused = errors.TransactionalIdAuthorizationFailedError(
                "a transactional batch needs the request's transactional_id: the leader "
                "verifies its transaction with that id's coordinator"
            )
            return {item.tp: refused for items in by_producer.values() for item in items}
        timeout_s = min(timeout_s, VERIFY_TIMEOUT_S)
        answers = await asyncio.gather(*(
            self._verify(transactional_id, producer, items, timeout_s)
            for producer, items in by_producer.items()
        ))
        return {tp: error for answer in answers for tp, error in answer.items()}

    async def _verify(
        self, txn_id: str, producer: tuple[int, int], items: list[PendingVerification],
        timeout_s: float,
    ) -> dict[TopicPartition, errors.TidelogError]:
        pid, epoch = producer
        request = rpb.VerifyTxnPartitionsRequest(
            transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
            partitions=[rpb.GroupId(topic=i.tp.topic, partition=i.tp.partition) for i in items],
        )
        try:
            response = await self._ask(txn_id, request, timeout_s)
        except errors.TidelogError as exc:
            response = rpb.VerifyTxnPartitionsResponse(error_code=exc.code,
                                                       error_message=str(exc))
        if response.error_code:
            error = _as_produce_error(
                errors.for_code(response.error_code)(response.error_message), txn_id
            )
            return {item.tp: error for item in items}
        verified = {TopicPartition(g.topic, g.partition) for g in response.verified}
        refused: dict[TopicPartition, errors.TidelogError] = {}
        for item in items:
            if item.tp in verified:
                item.guard.verified = True
            else:
                refused[item.tp] = errors.InvalidTxnStateError(
                    f"{item.tp} was not added to an ongoing transaction of producer {pid} "
                    f"epoch {epoch} (transactional id {txn_id!r}): its coordinator knows of "
                    f"none, so the batch would open a transaction that nothing ends"
                )
        return refused

    async def _ask(
        self, txn_id: str, request: rpb.VerifyTxnPartitionsRequest, timeout_s: float
    ) -> rpb.VerifyTxnPartitionsResponse:
        """The coordinator's answer: asked here when this node coordinates the id, else of
        the node that does, as this node's routing knows it. Raises what the leader answers
        when there is no coordinator to ask."""
        _, coordinator = self._txn_topic.coordinator_of(txn_id)
        if coordinator == self.node_id:
            return self.handle(request)
        address = self._routing.internal_address_of(coordinator)
        if not address:
            raise errors.CoordinatorNotAvailableError(f"no address known for node {coordinator}")
        call = self._channel(address).unary_unary(
            VERIFY_METHOD,
            request_serializer=rpb.VerifyTxnPartitionsRequest.SerializeToString,
            response_deserializer=rpb.VerifyTxnPartitionsResponse.FromString,
        )
        try:
            response: rpb.VerifyTxnPartitionsResponse = await call(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.debug("VerifyTxnPartitions to node %d failed: %s", coordinator, exc.code().name)
            raise errors.NetworkExceptionError(
                f"the coordinator (node {coordinator}) did not answer: {exc.code().name}"
            ) from None
        return response


def _as_produce_error(error: errors.TidelogError, txn_id: str) -> errors.TidelogError:
    """A coordinator's answer as the producer's Produce answer carries it (Kafka's)."""
    if isinstance(error, _NOT_NOW):
        return errors.NotEnoughReplicasError(
            f"the transaction of {txn_id!r} could not be verified with its coordinator yet: "
            f"{error}"
        )
    if isinstance(error, errors.ProducerFencedError):
        return errors.InvalidProducerEpochError(str(error))
    return error


def add_verification_service(
    server: grpc.aio.Server, handle: Callable[[rpb.VerifyTxnPartitionsRequest],
                                              rpb.VerifyTxnPartitionsResponse],
) -> None:
    """Serve VerifyTxnPartitions on the node-to-node server, beside the RaftTransport methods
    `transport.add_raft_transport` serves (a generic handler answers only its own methods)."""

    async def verify(
        request: rpb.VerifyTxnPartitionsRequest, context: grpc.aio.ServicerContext
    ) -> rpb.VerifyTxnPartitionsResponse:
        return handle(request)

    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(_SERVICE, {
        "VerifyTxnPartitions": grpc.unary_unary_rpc_method_handler(
            verify,
            request_deserializer=rpb.VerifyTxnPartitionsRequest.FromString,
            response_serializer=rpb.VerifyTxnPartitionsResponse.SerializeToString,
        ),
    })])
