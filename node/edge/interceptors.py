"""The shape the node's server interceptors share: each method's handler is rewritten once,
the first time the method is called, and the rewritten handler is cached for every later call.

A gRPC interceptor runs on every call; looking the handler up and rewriting it each time would
put that work on every request's path. Unknown methods are not cached: gRPC answers them
UNIMPLEMENTED, and a client could otherwise grow the cache without bound.

An instance belongs to one server: the cache holds the handlers that server found, by method
name, and answers later calls from it without asking the server again. Shared by two servers,
it would serve a method on both once either had served it (the client listener would speak the
node-to-node service). The node gives each of its servers interceptors of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc


def behavior_kind(handler: Any) -> str:
    """The field of an RpcMethodHandler that holds its behavior ("unary_unary", ...)."""
    return "{}_{}".format(
        "stream" if handler.request_streaming else "unary",
        "stream" if handler.response_streaming else "unary",
    )


class HandlerRewriter(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Subclasses say how a handler is rewritten (`rewrite`); this class caches the result."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is None:
            found = await continuation(handler_call_details)
            if found is None:  # an unknown method: grpc answers UNIMPLEMENTED; nothing cached
                return found
            handler = self._handlers[method] = self.rewrite(method, found)
        return handler

    def rewrite(self, method: str, handler: Any) -> Any:
        """The handler to serve `method` ("/service/Method") with, in place of `handler`."""
        raise NotImplementedError
