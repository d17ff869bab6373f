"""Requests a node accepts and another node answers: admin changes go to the controller, offset
requests to the group's coordinator. They travel on the other node's client port, marked as
forwarded, and a forwarded request is answered where it lands, never forwarded again: nodes
whose views of a leader disagree (one of them is behind) cannot pass it around.

A forwarded request carries the principal of the client that sent it, as Kafka's forwarding
envelope does: the node that answers authorizes the client, not the node that forwarded it, and
honours the carried principal only from a caller allowed CLUSTER_ACTION on the cluster
(`node.authorization`)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import grpc

from tidelog import errors
from tidelog.node.routing import Routing
from tidelog.node.security import client_port_channel
from tidelog.node.transport import CHANNEL_OPTIONS
from tidelog.v1 import tidelog_pb2_grpc

if TYPE_CHECKING:
    from tidelog.node.coordinator_topic import CoordinatorTopic

#: How long a forwarded request may take, and an admin change may take to commit, when the
#: client set no deadline.
FORWARD_TIMEOUT_S = 30.0

#: The gRPC metadata key that marks a forwarded request; its value is the forwarding node's id.
FORWARDED_BY = "tidelog-forwarded-by"
#: The gRPC metadata key that carries the principal of the client of a forwarded request.
FORWARDED_PRINCIPAL = "tidelog-forwarded-principal"


#: `method`, `request`, `context` -> the controller's answer when this node is not the
#: controller, None when it handles the request itself
#: (`api.TidelogServicer.forward_to_controller`).
Forward = Callable[[str, Any, grpc.aio.ServicerContext], Awaitable[Any | None]]


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


def change_timeout_s(request: Any) -> float:
    """How long an admin change may take to commit (and its forward to the controller): the
    request's ``timeout_ms``, or `FORWARD_TIMEOUT_S` when it sets none."""
    return getattr(request, "timeout_ms", 0) / 1000 or FORWARD_TIMEOUT_S


# ---- handlers answered elsewhere ------------------------------------------------------------


class ForwardsToController(Protocol):
    """An API whose admin changes any node accepts and the controller answers."""

    @property
    def forward_to_controller(self) -> Forward: ...


class ForwardsToCoordinator(Protocol):
    """An API whose requests the coordinator of their key (a group, a transactional id)
    answers; ``coordinator_answer(method, key, request, context)`` is `coordinator_answer`
    for the API's coordinator topic and failure answers."""

    async def coordinator_answer(
        self, method: str, key: str, request: Any, context: grpc.aio.ServicerContext
    ) -> Any | None: ...


A = TypeVar("A")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[A, Req, grpc.aio.ServicerContext], Awaitable[Resp]]
Route = Callable[[A, Req, grpc.aio.ServicerContext], Awaitable[Any | None]]
C = TypeVar("C", bound=ForwardsToController)
K = TypeVar("K", bound=ForwardsToCoordinator)


def _answered_elsewhere(
    route: Route[A, Req],
) -> Callable[[Handler[A, Req, Resp]], Handler[A, Req, Resp]]:
    """The request handler that returns `route`'s answer when it has one (the request went
    to the node that answers it), and runs the decorated handler otherwise."""

    def decorate(handler: Handler[A, Req, Resp]) -> Handler[A, Req, Resp]:
        @functools.wraps(handler)
        async def handle(api: A, request: Req, context: grpc.aio.ServicerContext) -> Resp:
            answer = await route(api, request, context)
            if answer is not None:
                return cast(Resp, answer)
            return await handler(api, request, context)

        return handle

    return decorate


def at_controller(method: str) -> Callable[[Handler[C, Req, Resp]], Handler[C, Req, Resp]]:
    """Decorates the handler of admin change `method`: it runs on the controller leader; on
    any other node the request is forwarded there and the controller's answer returned."""

    async def route(api: C, request: Req, context: grpc.aio.ServicerContext) -> Any | None:
        return await api.forward_to_controller(method, request, context)

    return _answered_elsewhere(route)


def at_coordinator(
    method: str, key_field: str
) -> Callable[[Handler[K, Req, Resp]], Handler[K, Req, Resp]]:
    """Decorates the handler of `method`: it runs on the coordinator of the key the request's
    `key_field` names (its group, its transactional id); on any other node the request is
    forwarded there and the coordinator's answer returned (or the API's failure answer when
    there is no coordinator to forward to)."""

    async def route(api: K, request: Req, context: grpc.aio.ServicerContext) -> Any | None:
        return await api.coordinator_answer(
            method, getattr(request, key_field), request, context
        )

    return _answered_elsewhere(route)
