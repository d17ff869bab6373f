"""Requests a node accepts and another node answers: admin changes go to the controller, offset
requests to the group's coordinator. They travel on the other node's client port, marked as
forwarded, and a forwarded request is answered where it lands, never forwarded again: nodes
whose views of a leader disagree (one of them is behind) cannot pass it around.

A forwarded request carries the principal of the client that sent it, as Kafka's forwarding
envelope does: the node that answers authorizes the client, not the node that forwarded it, and
honours the carried principal only from a caller allowed CLUSTER_ACTION on the cluster
(`node.authorization`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from tidelog import errors
from tidelog.node.routing import Routing
from tidelog.node.security import client_port_channel
from tidelog.node.transport import CHANNEL_OPTIONS
from tidelog.v1 import tidelog_pb2_grpc

if TYPE_CHECKING:
    from tidelog.node.coordinator_topic import CoordinatorTopic

#: How long a forwarded request may take when the client set no deadline.
FORWARD_TIMEOUT_S = 30.0

#: The gRPC metadata key that marks a forwarded request; its value is the forwarding node's id.
FORWARDED_BY = "tidelog-forwarded-by"
#: The gRPC metadata key that carries the principal of the client of a forwarded request.
FORWARDED_PRINCIPAL = "tidelog-forwarded-principal"


class Forwarder:
    def __init__(self, node_id: int, routing: Routing) -> None:
        self.node_id = node_id
        self.routing = routing
        #: One channel per address, kept: forwarding is on the request path.
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def call(
        self, node: int, method: str, request: Any, timeout_s: float, principal: str
    ) -> Any:
        """`request` of `principal` answered by `node`'s `method`; raises
        grpc.aio.AioRpcError."""
        address = self.routing.address_of(node)
        channel = self._channels.get(address)
        if channel is None:
            channel = client_port_channel(self.routing.config, address, CHANNEL_OPTIONS)
            self._channels[address] = channel
        stub = tidelog_pb2_grpc.TidelogStub(channel)
        return await getattr(stub, method)(
            request,
            timeout=timeout_s,
            metadata=((FORWARDED_BY, str(self.node_id)), (FORWARDED_PRINCIPAL, principal)),
        )


async def coordinator_answer(
    forwarder: Forwarder,
    topic: CoordinatorTopic,
    key: str,
    method: str,
    request: Any,
    context: grpc.aio.ServicerContext,
    principal: str,
    failed: Callable[[errors.TidelogError], Any],
) -> Any | None:
    """None when this node answers for `key` (it leads the key's partition of `topic`, or the
    request was forwarded here); else the answer of the coordinator the request was forwarded
    to, or `failed(error)` when there is none to forward to."""
    try:
        _, leader = topic.coordinator_of(key)
    except errors.TidelogError as exc:
        return failed(exc)
    if leader == forwarder.node_id or was_forwarded(context):
        return None
    remaining = context.time_remaining()
    timeout_s = FORWARD_TIMEOUT_S if remaining is None else min(remaining, FORWARD_TIMEOUT_S)
    try:
        return await forwarder.call(leader, method, request, timeout_s, principal)
    except grpc.aio.AioRpcError as exc:
        unreachable = errors.CoordinatorNotAvailableError(
            f"coordinator {leader} unreachable: {exc.code()}"
        )
        return failed(unreachable)


def was_forwarded(context: grpc.aio.ServicerContext) -> bool:
    """Whether another node forwarded this request here."""
    return any(key == FORWARDED_BY for key, _ in context.invocation_metadata() or ())


def forwarded_principal(context: grpc.aio.ServicerContext) -> str | None:
    """The principal a forwarded request says it comes from; None when it says nothing."""
    for key, value in context.invocation_metadata() or ():
        if key == FORWARDED_PRINCIPAL:
            return str(value)
    return None
