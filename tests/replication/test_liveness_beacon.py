"""The liveness beacon's thread (node/replicas/liveness.py) against a real gRPC peer: it
sleeps between its envelopes whatever else the node's gRPC serves, and it reaches peers over
mutual TLS as the node's links do."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from tidelog.certificates import CertificateAuthority
from tidelog.node.config import NodeConfig
from tidelog.node.edge.security import PeerDialer
from tidelog.node.replicas.liveness import LivenessBeacon
from tidelog.node.replicas.transport import STREAM_METHOD, frames
from tidelog.v1 import raft_pb2 as pb

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]

_SERVICE, _, _METHOD = STREAM_METHOD.strip("/").partition("/")
_DEADLINE_S = 20.0


def _switches(thread: threading.Thread) -> int:
    """How often the kernel switched `thread` out, waiting or preempted."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return sum(int(n) for n in re.findall(r"voluntary_ctxt_switches:\s+(\d+)", status))


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {_DEADLINE_S} s: {what}")
        await asyncio.sleep(0.01)


class _Peer:
    """What a peer heard: each envelope's ticks, and how many streams are open to it."""

    def __init__(self) -> None:
        self.heard: list[int] = []
        self.streams = 0


async def _peer(port_of: Callable[[grpc.aio.Server], int]) -> tuple[grpc.aio.Server, int, _Peer]:
    """A server that takes the Raft stream as a peer would, and an echo method for the
    traffic the beacon must sleep through."""
    peer = _Peer()

    async def stream(messages: AsyncIterator[bytes], _: grpc.aio.ServicerContext) -> bytes:
        peer.streams += 1
        try:
            async for message in messages:
                peer.heard.extend(env.ticks for env, _ in frames(memoryview(message)))
        finally:
            peer.streams -= 1
        return pb.StreamSummary().SerializeToString()

    async def echo(request: bytes, _: grpc.aio.ServicerContext) -> bytes:
        return request

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(_SERVICE, {
        _METHOD: grpc.stream_unary_rpc_method_handler(stream),
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
    })])
    port = port_of(server)
    await server.start()
    return server, port, peer


def _config(**settings: str) -> NodeConfig:
    return NodeConfig.from_properties(
        {"node.id": "1", "listen": "127.0.0.1:0", "data.dir": "unused", **settings}
    )


def test_the_beacon_sleeps_through_the_nodes_own_grpc_traffic() -> None:
    """grpcio wakes every event loop that ever made an asyncio gRPC call for each completion
    of the process: a beacon with an event loop of its own woke for every message the node
    sent or received (hundreds of times here, where it should not wake at all)."""

    async def main() -> tuple[int, int]:
        server, port, peer = await _peer(lambda s: s.add_insecure_port("127.0.0.1:0"))
        address = f"127.0.0.1:{port}"
        # A beat at the start, then none for the length of the test.
        beacon = LivenessBeacon(1, {2: address}, PeerDialer(_config()), 3600.0,
                                time.monotonic, lambda: 7)
        beacon.start()
        try:
            await _until(lambda: peer.heard == [7], "the first envelope arrives")
            thread = beacon.thread
            assert thread is not None
            async with grpc.aio.insecure_channel(address) as channel:
                echo = channel.unary_unary(f"/{_SERVICE}/Echo")
                await echo(b"warm", timeout=_DEADLINE_S)
                before = _switches(thread)
                for _ in range(300):
                    await echo(b"x", timeout=_DEADLINE_S)
                after = _switches(thread)
            return before, after
        finally:
            await asyncio.to_thread(beacon.stop)
            await server.stop(0)

    before, after = asyncio.run(main())
    assert after - before <= 20, f"the beacon's thread woke {after - before} times"


def test_the_beacon_reaches_a_peer_over_mutual_tls_and_follows_a_peer_that_moved(
    tmp_path: Path,
) -> None:
    ca = CertificateAuthority(tmp_path)
    node = ca.issue("node", "node-1", node=True)
    credentials = grpc.ssl_server_credentials(
        [(node.keyfile.read_bytes(), node.certfile.read_bytes())],
        root_certificates=node.cafile.read_bytes(), require_client_auth=True,
    )
    config = _config(**{
        "security.inter.broker.protocol": "SSL", "ssl.certfile": str(node.certfile),
        "ssl.keyfile": str(node.keyfile), "ssl.cafile": str(node.cafile),
        "node.principals": "User:CN=node-1",
    })

    async def main() -> None:
        first, port, old = await _peer(
            lambda s: s.add_secure_port("127.0.0.1:0", credentials))
        second, moved, new = await _peer(
            lambda s: s.add_secure_port("127.0.0.1:0", credentials))
        beacon = LivenessBeacon(1, {2: f"127.0.0.1:{port}"}, PeerDialer(config), 0.05,
                                time.monotonic, lambda: 3)
        beacon.start()
        try:
            await _until(lambda: len(old.heard) >= 3, "envelopes over mutual TLS")
            beacon.add_peer(2, f"127.0.0.1:{moved}")
            await _until(lambda: len(new.heard) >= 3, "envelopes at the new address")
            await _until(lambda: old.streams == 0, "the stream to the old address ends")
            assert set(old.heard) == set(new.heard) == {3}
        finally:
            await asyncio.to_thread(beacon.stop)
            await first.stop(0)
            await second.stop(0)

    asyncio.run(main())


def test_a_peer_that_restarted_hears_the_beacon_again() -> None:
    """The stream breaks with the peer; the beacon makes it again once the peer is back."""

    async def main() -> None:
        first, port, before = await _peer(lambda s: s.add_insecure_port("127.0.0.1:0"))
        beacon = LivenessBeacon(1, {2: f"127.0.0.1:{port}"}, PeerDialer(_config()), 0.05,
                                time.monotonic, lambda: 5)
        beacon.start()
        try:
            await _until(lambda: len(before.heard) >= 2, "envelopes before the restart")
            await first.stop(0)
            second, _, after = await _peer(lambda s: s.add_insecure_port(f"127.0.0.1:{port}"))
            try:
                await _until(lambda: len(after.heard) >= 2, "envelopes after the restart")
            finally:
                await second.stop(0)
        finally:
            await asyncio.to_thread(beacon.stop)

    asyncio.run(main())
