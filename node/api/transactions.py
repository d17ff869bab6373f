"""The producer-id and transaction requests of the client API (InitProducerId, of an
idempotent or a transactional producer, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn),
translated to the transaction coordinator's calls (`coordinators.txn_driver`).

Any node accepts them: a request for a transactional id that another node coordinates is
forwarded to that node's client port, once (`forwarding.coordinator_answer`), and answered
NOT_COORDINATOR (16) where it lands if that node does not coordinate the id after all.
Authorization comes first where the request is answered (kafka-mapping §11.3): WRITE on the
transactional id (53), then for AddPartitionsToTxn WRITE on each topic (29) and for
AddOffsetsToTxn READ on the group (30). AddPartitionsToTxn is all or nothing as in Kafka: when
some partition is refused or unknown, the others are answered OPERATION_NOT_ATTEMPTED (55).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.controller_api import ControllerForward
from tidelog.node.api.forwarding import (
    FORWARD_TIMEOUT_S,
    Forwarder,
    at_coordinator,
    coordinator_answer,
)
from tidelog.node.api.rules import answer_of, error_answer, or_unset
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.coordinators.txn_driver import TxnCoordinatorDriver
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

#: What an unset InitProducerIdRequest.transaction_timeout_ms means (Kafka's producer default).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


class TxnApi:
    def __init__(
        self,
        config: NodeConfig,
        routing: Routing,
        controller: ControllerDriver,
        txn_topic: CoordinatorTopic,
        txns: TxnCoordinatorDriver,
        forwarder: Forwarder,
        authorization: Authorization,
        forward: ControllerForward,
    ) -> None:
        self.config = config
        self.routing = routing
        self._forward = forward
        self.controller = controller
        self.txn_topic = txn_topic
        self.txns = txns
        self.forwarder = forwarder
        self.authorization = authorization

    async def coordinator_answer(
        self, method: str, txn_id: str, request: Any, context: grpc.aio.ServicerContext
    ) -> Any | None:
        return await coordinator_answer(
            self.forwarder, self.txn_topic, txn_id, method, request, context,
            self.authorization.principal(context), partial(failed, method, request),
        )

    def _id_refused(
        self, context: grpc.aio.ServicerContext, txn_id: str
    ) -> tuple[str, errors.AuthorizationError | None]:
        principal = self.authorization.principal(context)
        return principal, self.authorization.refused(
            principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
        )

    async def init_producer_id(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> pb.InitProducerIdResponse:
        """Idempotent producers get a fresh id at epoch 0 from the controller's blocks. Kafka's
        check: IDEMPOTENT_WRITE on the cluster or WRITE on some topic (31 otherwise); with a
        transactional id, WRITE on it (53)."""
        principal = self.authorization.principal(context)
        if request.HasField("transactional_id"):
            refused = self.authorization.refused(
                principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                request.transactional_id,
            )
            if refused is not None:
                return error_answer(
                    pb.InitProducerIdResponse, refused, producer_id=-1, producer_epoch=-1
                )
            return await self._init_transactional(request, context)
        refused = self.authorization.cluster_refused(principal, Operation.IDEMPOTENT_WRITE)
        if refused is not None and not self.authorization.allowed_any(
            principal, Operation.WRITE, ResourceType.TOPIC
        ):
            return pb.InitProducerIdResponse(
                error_code=refused.code, producer_id=-1, producer_epoch=-1
            )
        forwarded = await self._forward(
            "InitProducerId", request, context,
            lambda exc: pb.InitProducerIdResponse(
                error_code=exc.code, producer_id=-1, producer_epoch=-1
            ),
        )
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        try:
            producer_id = await self.controller.allocate_producer_id(FORWARD_TIMEOUT_S)
        except errors.TidelogError as exc:
            return pb.InitProducerIdResponse(error_code=exc.code, producer_id=-1, producer_epoch=-1)
        return pb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    async def _new_producer_id(self, timeout_s: float, principal: str) -> int:
        """A producer id from the controller's blocks, for a transaction coordinator: asked
        of the controller leader, for the client whose InitProducerId needs it."""
        controller = self.routing.controller_id
        if controller == self.config.node_id:
            return await self.controller.allocate_producer_id(timeout_s)
        if controller < 0 or not self.routing.internal_address_of(controller):
            raise errors.CoordinatorNotAvailableError("no controller known to allocate an id")
        try:
            response = await self.forwarder.call(
                controller, "InitProducerId", pb.InitProducerIdRequest(), timeout_s, principal
            )
        except grpc.aio.AioRpcError as exc:
            raise errors.CoordinatorNotAvailableError(
                f"controller unreachable for a producer id: {exc.code()}"
            ) from None
        if response.error_code:
            error = errors.for_code(response.error_code)(response.error_message)
            if isinstance(error, errors.NotControllerError | errors.RequestTimedOutError):
                raise errors.CoordinatorNotAvailableError(f"no producer id yet: {error}")
            raise error
        return int(response.producer_id)

    async def _init_transactional(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> pb.InitProducerIdResponse:
        """InitProducerId of a transactional producer (the caller checked WRITE on the id);
        a new id comes from the controller (`_new_producer_id`)."""
        txn_id = request.transactional_id
        producer_id = or_unset(request, "producer_id", -1)
        producer_epoch = or_unset(request, "producer_epoch", -1)
        if not txn_id:
            return _init_failed(errors.InvalidRequestError(
                "an empty transactional id (leave it unset for an idempotent producer)"
            ))
        if (producer_id == -1) != (producer_epoch == -1):
            return _init_failed(errors.InvalidRequestError(
                "producer_id and producer_epoch must both be set or both be unset (-1)"
            ))
        forwarded = await self.coordinator_answer("InitProducerId", txn_id, request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        timeout_ms = request.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
        try:
            principal = self.authorization.principal(context)
            pid, epoch = await self.txns.init_producer_id(
                txn_id, timeout_ms, producer_id, producer_epoch,
                lambda timeout_s: self._new_producer_id(timeout_s, principal),
            )
        except errors.TidelogError as exc:
            return _init_failed(exc)
        return pb.InitProducerIdResponse(producer_id=pid, producer_epoch=epoch)

    @at_coordinator("AddPartitionsToTxn", "transactional_id")
    async def add_partitions_to_txn(
        self, request: pb.AddPartitionsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddPartitionsToTxnResponse:
        principal, refused = self._id_refused(context, request.transactional_id)
        if refused is not None:
            return _partition_answers(tps_of(request), dict.fromkeys(tps_of(request), refused))
        tps = tps_of(request)
        topics_refused = self.authorization.refusals(
            principal, Operation.WRITE, ResourceType.TOPIC, (tp.topic for tp in tps)
        )
        results: dict[TopicPartition, errors.TidelogError] = {}
        for tp in tps:
            topic = self.controller.image.topics.get(tp.topic)
            if tp.topic in topics_refused:
                results[tp] = topics_refused[tp.topic]
            elif topic is None or not 0 <= tp.partition < topic.partition_count:
                results[tp] = errors.UnknownTopicOrPartitionError(f"{tp} does not exist")
        if results or not tps:
            skipped = errors.OperationNotAttemptedError("another partition of the request failed")
            return _partition_answers(tps, {tp: results.get(tp, skipped) for tp in tps})
        try:
            await self.txns.add_partitions(
                request.transactional_id, request.producer_id, request.producer_epoch, tps
            )
        except errors.TidelogError as exc:
            return _partition_answers(tps, dict.fromkeys(tps, exc))
        return _partition_answers(tps, {})

    @at_coordinator("AddOffsetsToTxn", "transactional_id")
    async def add_offsets_to_txn(
        self, request: pb.AddOffsetsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddOffsetsToTxnResponse:
        principal, refused = self._id_refused(context, request.transactional_id)
        if refused is None:
            refused = self.authorization.refused(
                principal, Operation.READ, ResourceType.GROUP, request.group_id
            )
        return await answer_of(pb.AddOffsetsToTxnResponse, refused, lambda: self.txns.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id,
        ))

    @at_coordinator("EndTxn", "transactional_id")
    async def end_txn(
        self, request: pb.EndTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndTxnResponse:
        _, refused = self._id_refused(context, request.transactional_id)
        return await answer_of(pb.EndTxnResponse, refused, lambda: self.txns.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed,
        ))


def tps_of(request: pb.AddPartitionsToTxnRequest) -> list[TopicPartition]:
    """The partitions a request names, each once, in request order."""
    return list(dict.fromkeys(
        TopicPartition(t.name, p) for t in request.topics for p in t.partitions
    ))


def _partition_answers(
    tps: list[TopicPartition], errors_of: Mapping[TopicPartition, errors.TidelogError]
) -> pb.AddPartitionsToTxnResponse:
    response = pb.AddPartitionsToTxnResponse()
    by_topic: dict[str, Any] = {}
    for tp in tps:
        entry = by_topic.get(tp.topic)
        if entry is None:
            entry = by_topic[tp.topic] = response.results.add(name=tp.topic)
        error = errors_of.get(tp)
        entry.partitions.add(
            partition=tp.partition, error_code=0 if error is None else error.code,
            error_message="" if error is None else str(error),
        )
    return response


def _init_failed(exc: errors.TidelogError) -> pb.InitProducerIdResponse:
    return error_answer(pb.InitProducerIdResponse, exc, producer_id=-1, producer_epoch=-1)


def failed(method: str, request: Any, exc: errors.TidelogError) -> Any:
    """The answer of a whole request that failed with `exc` (every partition of an
    AddPartitionsToTxn carries it)."""
    if method == "InitProducerId":
        return _init_failed(exc)
    if method == "AddPartitionsToTxn":
        tps = tps_of(request)
        return _partition_answers(tps, dict.fromkeys(tps, exc))
    if method == "AddOffsetsToTxn":
        return error_answer(pb.AddOffsetsToTxnResponse, exc)
    return error_answer(pb.EndTxnResponse, exc)
