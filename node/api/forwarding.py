"""Requests a node accepts and another node answers: admin changes go to the controller, offset
and transaction requests to the coordinator of their group or transactional id.

A request travels in an envelope, as in Kafka (its EnvelopeRequest): the RaftTransport Forward
call on the other node's node-to-node listener, carrying the method, the serialized request and
the principal of the client that sent it. The node that answers runs the same handler as for a
client of its own, with a context (`Forwarded`) that reports the carried principal, so it
authorizes the client and not the node that forwarded the request; and a forwarded request is
answered where it lands, never forwarded again: nodes whose views of a leader disagree (one of
them is behind) cannot pass it around.

Only a node may assert another's principal: the node-to-node listener answers node principals
only (`security.NodesOnly`), and the client listener has no way to carry one (a principal comes
from the connection's certificate there, and no request metadata is read).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar, cast

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from tidelog import errors
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.edge.malformed import reject_malformed
from tidelog.node.edge.security import PeerDialer, principal_of
from tidelog.node.replicas.transport import CHANNEL_OPTIONS, FORWARD_METHOD
from tidelog.v1 import raft_pb2, tidelog_pb2

if TYPE_CHECKING:
    from tidelog.node.coordinators.topic import CoordinatorTopic

#: How long a forwarded request may take, and an admin change may take to commit, when the
#: client set no deadline.
FORWARD_TIMEOUT_S = 30.0

_TIDELOG = tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"]


#: `method`, `request`, `context` -> the controller's answer when this node is not the
#: controller, None when it handles the request itself
#: (`controller_api.ControllerApi.forward_to_controller`).
Forward = Callable[[str, Any, grpc.aio.ServicerContext], Awaitable[Any | None]]


class Forwarder:
    def __init__(self, config: NodeConfig, routing: Routing) -> None:
        self.node_id = config.node_id
        self.routing = routing
        #: Envelopes travel to the node-to-node listener, as this node's other calls there.
        self._dialer = PeerDialer(config)
        #: One channel per address, kept: forwarding is on the request path.
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def call(
        self, node: int, method: str, request: Any, timeout_s: float, principal: str
    ) -> Any:
        """`request` of `principal` answered by `node`'s Tidelog `method`, in an envelope to
        its node-to-node listener; raises grpc.aio.AioRpcError, with the status the method
        refused the request with when it did."""
        address = self.routing.internal_address_of(node)
        channel = self._channels.get(address)
        if channel is None:
            channel = self._dialer.channel(address, CHANNEL_OPTIONS)
            self._channels[address] = channel
        forward = channel.unary_unary(
            FORWARD_METHOD,
            request_serializer=raft_pb2.ForwardRequest.SerializeToString,
            response_deserializer=raft_pb2.ForwardResponse.FromString,
        )
        envelope = raft_pb2.ForwardRequest(
            method=method, request=request.SerializeToString(), principal=principal,
            node_id=self.node_id,
        )
        answer = await forward(envelope, timeout=timeout_s)
        response_type = GetMessageClass(_TIDELOG.methods_by_name[method].output_type)
        return response_type.FromString(answer.response)


class Forwarded:
    """The context a forwarded request is answered with: the Forward call's own (its deadline,
    its abort, which answers the forwarding node with the status the method chose), but the
    caller is the client the envelope names. Handlers ask `principal_of_call`, never the
    connection, whose certificate is the forwarding node's."""

    def __init__(
        self, context: grpc.aio.ServicerContext, principal: str, forwarded_by: int
    ) -> None:
        self._context = context
        #: The principal of the client that sent the request to the forwarding node.
        self.principal = principal
        #: The id of the node that forwarded it.
        self.forwarded_by = forwarded_by

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def auth_context(self) -> dict[str, list[bytes]]:
        """Nothing: the connection's identity is the forwarding node's, not the caller's."""
        return {}

    def invocation_metadata(self) -> tuple[()]:
        """Nothing: whatever the forwarding node's call carried is not the client's."""
        return ()


class ListenerCall:
    """The base of a call context of a listener other than gRPC's (the Kafka listener,
    node/kafka/call.py): that listener authenticated the connection and names its principal
    in `principal`; nothing was forwarded (`was_forwarded` is False for it)."""

    principal: str

    def appended(self) -> None:
        """Produce calls it once each of its batches is in its leader's log or refused, before
        it waits for them to commit: a listener that handles a connection's requests in order
        lets the connection's next Produce go on from there (node/kafka/connection.py)."""


async def answer_forwarded(
    servicer: Any, envelope: raft_pb2.ForwardRequest, context: grpc.aio.ServicerContext
) -> raft_pb2.ForwardResponse:
    """The Forward handler: `servicer`'s (the Tidelog service's) answer to the request in
    `envelope`, as to the client it names. The caller was checked already: only node
    principals reach the node-to-node service (`security.NodesOnly`)."""
    method = _TIDELOG.methods_by_name.get(envelope.method)
    if method is None:
        await _invalid(
            context, f"{envelope.method[:100]!r} is not a method of the Tidelog service"
        )
    kind, sep, name = envelope.principal.partition(":")
    if not (sep and kind and name):
        await _invalid(
            context, f"{envelope.principal[:100]!r} is not a principal such as User:alice"
        )
    try:
        request = GetMessageClass(method.input_type).FromString(envelope.request)
    except DecodeError as exc:
        await reject_malformed(context, f"/{_TIDELOG.full_name}/{method.name}", exc)
    forwarded = cast(
        grpc.aio.ServicerContext, Forwarded(context, envelope.principal, envelope.node_id)
    )
    response = await getattr(servicer, method.name)(request, forwarded)
    return raft_pb2.ForwardResponse(response=response.SerializeToString())


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


async def _invalid(context: grpc.aio.ServicerContext, why: str) -> NoReturn:
    """Aborts a Forward call with INVALID_ARGUMENT (a node's bug: its envelope is wrong)."""
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Forward: {why}")
    raise AssertionError("abort raises")


def was_forwarded(context: grpc.aio.ServicerContext) -> bool:
    """Whether another node forwarded this request here (in an envelope: nothing a client
    sends can say so)."""
    return isinstance(context, Forwarded)


def principal_of_call(context: grpc.aio.ServicerContext) -> str:
    """Who a request is answered as: for a forwarded one, the client the envelope names; for
    one of another listener (Kafka's), the principal that listener gave its call; otherwise
    the connection's principal (its certificate's subject, or ANONYMOUS)."""
    if isinstance(context, Forwarded | ListenerCall):
        return context.principal
    return principal_of(context)


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
