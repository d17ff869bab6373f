"""Node liveness: a node's liveness envelopes leave from a thread of its own
(`tidelog.node.replicas.liveness`), so a node whose main loop is busy for longer than an election
timeout is not taken for dead by its peers; the main loop's own `_liveness` names the replicas
out of service, and counts its peers' silence in its own ticks."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from replica_helpers import follow_and_lead

from tidelog.node.config import NodeConfig
from tidelog.node.replicas.liveness import LivenessBeacon
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.transport import (
    SERVER_OPTIONS,
    Outgoing,
    PeerLink,
    add_raft_transport,
    frames,
)
from tidelog.replication import Role
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
                                lambda: turned[0], lambda: 42, stall_limit_s=5.0)
        link = PeerLink(1, 2, "127.0.0.1:1", beacon._dialer)  # never started
        beacon.beat({2: link})
        assert (len(link._queue), beacon.sent, beacon.withheld) == (1, 1, 0)
        (env, _), = frames(b"".join(link._queue[0][1]))
        assert (env.src, env.dst, env.ticks) == (1, 2, 42)  # how far the main loop got
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
        add_raft_transport(server, lambda env, payload: heard.append(env.src), *[_unused] * 6)
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
            add_raft_transport(server, two.step, *[_unused] * 6)
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


def test_timers_that_wait_on_a_slow_node_run_at_its_pace_and_a_dead_one_is_not_waited_for(
    tmp_path: Path,
) -> None:
    """Nodes 2 and 3 live (their liveness threads report) but their loops tick once for ten
    of node 1's. Node 1's follower of a leader on node 2 does not stand, and its leader with
    followers on 2 and 3 keeps its check-quorum window still instead of stepping down: before,
    both happened within an election timeout of node 1's ticks (30 to 60), a tenth of one of
    theirs, and under load the elections fed themselves. Once 2 and 3 fall silent, node
    liveness takes over: the follower stands and the leader steps down."""

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        follows, leads = TopicPartition("f", 0), TopicPartition("l", 0)
        try:
            follower, leader = follow_and_lead(replicas, follows, leads)
            assert (follower.role, follower.leader_id, leader.role) == (
                Role.FOLLOWER, 2, Role.LEADER)
            election_ticks = replicas.raft_config.election_ticks
            # Three election timeouts of node 1's ticks: a third of one of 2's and 3's.
            for tick in range(3 * election_ticks):
                if tick % 10 == 0:
                    for peer in (2, 3):  # a liveness envelope of a slow node
                        report = Outgoing(peer, 1)
                        report.env.ticks = 1 + tick // 10
                        replicas.step(report.env, memoryview(b""))
                replicas.tick()
                assert (follower.role, leader.role) == (Role.FOLLOWER, Role.LEADER), tick
            for _ in range(3 * election_ticks):  # 2 and 3 die
                replicas.tick()
            assert not leader.quiesced
            assert follower.role is not Role.FOLLOWER and leader.role is not Role.LEADER
        finally:
            await replicas.close()

    asyncio.run(scenario())
