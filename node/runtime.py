"""PLACEHOLDER node runtime, until the real one (Raft cores over storage, controller, the
Tidelog servicer) lands: it serves Metadata from the config alone and answers every other RPC
with UNIMPLEMENTED, so the process shell, health, reflection and the launchers can be built and
tested against the final interface.
"""

from __future__ import annotations

from typing import Any

import grpc

from node.config import NodeConfig
from tidelog.v1 import tidelog_pb2, tidelog_pb2_grpc


class _PlaceholderServicer(tidelog_pb2_grpc.TidelogServicer):
    def __init__(self, config: NodeConfig) -> None:
        self._config = config

    async def Metadata(
        self, request: tidelog_pb2.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> tidelog_pb2.MetadataResponse:
        nodes = [
            tidelog_pb2.Node(node_id=node_id, address=address)
            for node_id, address in sorted(self._config.peers.items())
        ]
        return tidelog_pb2.MetadataResponse(nodes=nodes, controller_id=-1)


def _unimplemented(method: str) -> Any:
    async def handler(self: _PlaceholderServicer, request: Any, context: Any) -> None:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{method} is not implemented yet: this node runs the placeholder runtime",
        )

    return handler


for _method in tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"].methods_by_name:
    if _method != "Metadata":
        setattr(_PlaceholderServicer, _method, _unimplemented(_method))


class NodeRuntime:
    def __init__(self, config: NodeConfig) -> None:
        self._config = config

    def register(self, server: grpc.aio.Server) -> None:
        tidelog_pb2_grpc.add_TidelogServicer_to_server(_PlaceholderServicer(self._config), server)

    async def start(self) -> None:
        self._config.data_dir.mkdir(parents=True, exist_ok=True)

    async def stop(self, graceful: bool) -> None:
        del graceful
