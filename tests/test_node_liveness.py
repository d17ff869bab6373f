"""Node liveness: a node's liveness envelopes leave from a thread of its own
(`tidelog.node.liveness`), so a node whose main loop is busy for longer than an election
timeout is not taken for dead by its peers; the main loop's own `_liveness` names the replicas
out of service, and counts its peers' silence in its own ticks."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from tidelog.node.config import NodeConfig
from tidelog.node.liveness import LivenessBeacon
from tidelog.node.replicas import ReplicaSet
from tidelog.node.transport import SERVER_OPTIONS, PeerLink, add_raft_transport
from tidelog.types import TopicPartition

CLIENT_ADDRESSES = {1: "127.0.0.1:3", 2: "127.0.0.1:4"}


def _unused(*_: Any) -> Any:
    """The node-to-node calls other than Stream, which these tests do not make."""
    raise AssertionError("not called here")


def test_the_loop_names_only_replicas_out_of_service(tmp_path: Path) -> None:
    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        try:
            links = {peer: PeerLink(1, peer, "127.0.0.1:1", replicas.dialer) for peer in (2, 3)}
            replicas.links = links  # never started: frames stay queued
            queued = lambda: [len(link._queue) for link in links.values()]  # noqa: E731
            replicas._liveness()
            assert queued() == [0, 0]  # that this node lives is the beacon's to say
            replicas._offline[TopicPartition("t", 0)] = asyncio.get_running_loop().create_future()
            replicas._liveness()
            assert queued() == [1, 1]
            assert [len(link._queue[0][1]) for link in links.values()] == [2, 2]
            del replicas._offline[TopicPartition("t", 0)]
        finally:
            await replicas.close()

    asyncio.run(scenario())


def test_the_beacon_vouches_only_for_a_loop_that_turned_lately(tmp_path: Path) -> None:
    async def scenario() -> None:
        turned = [time.monotonic()]
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path)
        beacon = LivenessBeacon(1, {2: "127.0.0.1:1"}, ReplicaSet(config).dialer, 0.05,
                                lambda: turned[0], stall_limit_s=5.0)
        link = PeerLink(1, 2, "127.0.0.1:1", beacon._dialer)  # never started
        beacon.beat({2: link})
        assert (len(link._queue), beacon.sent, beacon.withheld) == (1, 1, 0)
        turned[0] -= 4.0  # a loop late by less than the limit is still vouched for
        beacon.beat({2: link})
        turned[0] -= 2.0  # wedged past it: its quiet groups must fail over
        beacon.beat({2: link})
        assert (len(link._queue), beacon.sent, beacon.withheld) == (2, 2, 1)

    asyncio.run(scenario())


def test_the_beacon_reaches_a_peer_learned_after_its_start(tmp_path: Path) -> None:
    """A node that joined the cluster is dialled once the metadata names it (a static node
    with no other peer has no beacon thread until then): it hears this node's envelopes."""

    async def scenario() -> None:
        heard: list[int] = []
        server = grpc.aio.server(options=SERVER_OPTIONS)
        add_raft_transport(server, lambda env, payload: heard.append(env.src), *[_unused] * 5)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path)
        replicas = ReplicaSet(config)
        replicas.start_links()  # no peers: no thread yet
        try:
            replicas.link_peer(4, f"127.0.0.1:{port}")
            deadline = time.monotonic() + 30
            while not heard:
                assert time.monotonic() < deadline, "the joined node heard nothing"
                await asyncio.sleep(0.01)
            assert set(heard) == {1} and set(replicas.links) == {4}
        finally:
            await replicas.close()
            await server.stop(0)

    asyncio.run(scenario())


def test_a_node_whose_loop_is_busy_past_an_election_timeout_is_not_taken_for_dead(
    tmp_path: Path,
) -> None:
    """Node 1's main loop computes for three election timeouts without turning; node 2, whose
    loop turns all along (in a thread of its own here), must hear node 1 all the time. Before
    the beacon, node 1's envelopes left from its loop, and node 2 found it silent."""
    listening = threading.Event()
    stop = threading.Event()
    watching = threading.Event()  # while node 1's loop is busy, and a little after
    address: list[str] = []
    silent_ticks: list[int] = []
    election_s: list[float] = []

    def node_two() -> None:
        async def run() -> None:
            config = NodeConfig(node_id=2, listen="127.0.0.1:0", data_dir=tmp_path / "two",
                                peers={1: "127.0.0.1:1", 2: "127.0.0.1:2"},
                                client_addresses=CLIENT_ADDRESSES)
            two = ReplicaSet(config)
            election_s.append(config.election_timeout_ms / 1000)
            server = grpc.aio.server(options=SERVER_OPTIONS)
            add_raft_transport(server, two.step, *[_unused] * 5)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            ticking = asyncio.create_task(two.tick_loop())
            address.append(f"127.0.0.1:{port}")
            listening.set()
            try:
                while not stop.is_set():
                    if watching.is_set() and not two.peer_live(1):
                        silent_ticks.append(two._ticks)
                    await asyncio.sleep(0.01)
            finally:
                ticking.cancel()
                await server.stop(0)

        try:
            asyncio.run(run())
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            listening.set()

    failed: list[BaseException] = []
    thread = threading.Thread(target=node_two, daemon=True)
    thread.start()
    assert listening.wait(30)
    assert not failed

    async def node_one() -> None:
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path / "one",
                            peers={1: "127.0.0.1:1", 2: address[0]},
                            client_addresses=CLIENT_ADDRESSES)
        one = ReplicaSet(config)
        ticking = asyncio.create_task(one.tick_loop())
        one.start_links()
        try:
            deadline = time.monotonic() + 30
            while one.beacon.sent < 3:  # node 2 heard it: its stream is up
                assert time.monotonic() < deadline, "the beacon sent nothing"
                await asyncio.sleep(0.01)
            watching.set()
            busy_until = time.monotonic() + 3 * election_s[0]
            while time.monotonic() < busy_until:  # the loop does not turn, and holds the GIL
                sum(range(1000))
            await asyncio.sleep(0.2)
            watching.clear()
        finally:
            ticking.cancel()
            await one.close()

    try:
        asyncio.run(node_one())
    finally:
        stop.set()
        thread.join(30)
    assert silent_ticks == []
