"""Requests a node accepts and another node answers: admin changes go to the controller, offset
requests to the group's coordinator. They travel on the other node's client port, marked as
forwarded, and a forwarded request is answered where it lands, never forwarded again: nodes
whose views of a leader disagree (one of them is behind) cannot pass it around."""

from __future__ import annotations

from typing import Any

import grpc

from tidelog.node.routing import Routing
from tidelog.node.security import client_port_channel
from tidelog.node.transport import CHANNEL_OPTIONS
from tidelog.v1 import tidelog_pb2_grpc

#: The gRPC metadata key that marks a forwarded request; its value is the forwarding node's id.
FORWARDED_BY = "tidelog-forwarded-by"


class Forwarder:
    def __init__(self, node_id: int, routing: Routing) -> None:
        self.node_id = node_id
        self.routing = routing
        #: One channel per address, kept: forwarding is on the request path.
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def call(self, node: int, method: str, request: Any, timeout_s: float) -> Any:
        """`request` answered by `node`'s `method`; raises grpc.aio.AioRpcError."""
        address = self.routing.address_of(node)
        channel = self._channels.get(address)
        if channel is None:
            channel = client_port_channel(self.routing.config, address, CHANNEL_OPTIONS)
            self._channels[address] = channel
        stub = tidelog_pb2_grpc.TidelogStub(channel)
        return await getattr(stub, method)(
            request, timeout=timeout_s, metadata=((FORWARDED_BY, str(self.node_id)),)
        )


def was_forwarded(context: grpc.aio.ServicerContext) -> bool:
    """Whether another node forwarded this request here."""
    return any(key == FORWARDED_BY for key, _ in context.invocation_metadata() or ())
