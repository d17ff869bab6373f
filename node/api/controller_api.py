"""What the API families that the controller answers share (topics, partitions and configs,
ACLs, reassignments, decommissioning): their constructor, the forward of a request to the
controller leader with the family's answer for a request that could not get there, and the
change that is only validated or proposed.

Admin changes go through the controller leader; any node accepts and forwards them
(`forwarding.at_controller`). A forwarded request is answered where it lands, never forwarded
again: the controller's own checks answer NOT_CONTROLLER rather than the request bouncing
between nodes that disagree.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection, Mapping
from functools import partial
from typing import Any, TypeVar, cast

import grpc

from tidelog import errors
from tidelog.acl import Operation
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.forwarding import Forwarder, change_timeout_s, was_forwarded
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig


class ControllerForward:
    """Sends a request to the controller leader when this node is not it."""

    def __init__(
        self, config: NodeConfig, routing: Routing, forwarder: Forwarder,
        authorization: Authorization,
    ) -> None:
        self.node_id = config.node_id
        self.routing = routing
        self.forwarder = forwarder
        self.authorization = authorization

    async def __call__(
        self, method: str, request: Any, context: grpc.aio.ServicerContext,
        failed: Callable[[errors.TidelogError], Any],
    ) -> Any | None:
        """The controller's answer to `request`, or `failed(error)` when it could not be
        asked; None when this node should handle the request itself: it is the controller, or
        the request was forwarded here already."""
        controller = self.routing.controller_id
        if controller == self.node_id or was_forwarded(context):
            return None
        if controller < 0 or not self.routing.internal_address_of(controller):
            return failed(errors.NotControllerError("no controller known"))
        try:
            return await self.forwarder.call(
                controller, method, request, change_timeout_s(request),
                self.authorization.principal(context),
            )
        except grpc.aio.AioRpcError as exc:
            return failed(_forward_failure(exc))


def _forward_failure(exc: grpc.aio.AioRpcError) -> errors.TidelogError:
    """NOT_CONTROLLER when the controller did not get the request (retry it there), but
    REQUEST_TIMED_OUT when it may have: the change may commit, and a client must not take a
    retry's TOPIC_ALREADY_EXISTS or UNKNOWN_TOPIC_OR_PARTITION for the first answer (Kafka's
    ForwardingManager answers a timed-out envelope with a TimeoutException: 7 too)."""
    if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.RequestTimedOutError(f"the controller did not answer in time: {exc.code()}")
    return errors.NotControllerError(f"controller unreachable: {exc.code()}")



class ControllerApi:
    """An API family answered on the controller leader. `failed(method, request, exc)` is the
    family's answer of a request that failed as a whole (`exc` for each item it names)."""

    def __init__(
        self, config: NodeConfig, controller: ControllerDriver, authorization: Authorization,
        forward: ControllerForward,
    ) -> None:
        self.config = config
        self.controller = controller
        self.authorization = authorization
        self._forward = forward
        #: Changes planned against the controller's image (ACLs, SCRAM credentials) go one at
        #: a time, so that each plan sees what the one before it applied.
        self._changing = asyncio.Lock()

    def failed(self, method: str, request: Any, exc: errors.TidelogError) -> Any:
        raise NotImplementedError

    async def forward_to_controller(
        self, method: str, request: Any, context: grpc.aio.ServicerContext
    ) -> Any | None:
        """The controller's answer when this node is not the controller, None when it is
        (`forwarding.at_controller`)."""
        return await self._forward(method, request, context, partial(self.failed, method, request))

    async def change(
        self, result: Any, plan: Callable[[], Any], validate_only: bool, timeout_s: float
    ) -> None:
        """One item of an admin change: `plan()` (its metadata records, or the error that
        refuses it) only checked when the request is validate-only, else proposed and
        committed; a refusal is the item's error code and message in `result`."""
        try:
            if validate_only:
                plan()
            else:
                await self.controller.propose_metadata_records(plan, timeout_s)
        except errors.TidelogError as exc:
            result.error_code = exc.code
            result.error_message = str(exc)


def check_topic(
    name: str, twice: Collection[str], refused: Mapping[str, errors.TidelogError]
) -> None:
    """Raises what refuses a topic a change names, before its plan: INVALID_REQUEST when the
    request names it more than once, else the caller's refusal."""
    if name in twice:
        raise errors.InvalidRequestError(f"topic {name!r} appears more than once")
    if name in refused:
        raise refused[name]


A = TypeVar("A", bound=ControllerApi)
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[A, Req, grpc.aio.ServicerContext], Awaitable[Resp]]


def cluster_allowed(
    method: str, operation: Operation
) -> Callable[[Handler[A, Req, Resp]], Handler[A, Req, Resp]]:
    """Decorates the handler of `method`, which needs `operation` on the cluster: a caller
    without it gets the family's answer of the request refused whole (`ControllerApi.failed`),
    before anything else is looked at."""

    def decorate(handler: Handler[A, Req, Resp]) -> Handler[A, Req, Resp]:
        @functools.wraps(handler)
        async def handle(api: A, request: Req, context: grpc.aio.ServicerContext) -> Resp:
            refused = api.authorization.caller_cluster_refused(context, operation)
            if refused is not None:
                return cast(Resp, api.failed(method, request, refused))
            return await handler(api, request, context)

        return handle

    return decorate
