"""Linearizable reads on a partition leader (`ReplicaSet.read_index`, issue 14's Seam 3), on three
replica sets in this process: each with its own directory, Ready and tick loops, and gRPC
transport over loopback, as a node runs them. A node is cut off by dropping every envelope to
or from it, and paused as SIGSTOP would: its loops stop and what reaches it waits, while the
clock runs on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from waiting_helpers import async_wait_for

from tidelog import errors
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica, ProduceResult
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.node.replicas.transport import SERVER_OPTIONS, add_raft_transport
from tidelog.replication import VoteRequest
from tidelog.replication.log_store import RAFT_STATE_FILE
from tidelog.storage import CheckpointFile
from tidelog.testing import make_batch
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

TP = TopicPartition("offsets", 0)
IDS = (1, 2, 3)


class _Node:
    def __init__(self, replicas: ReplicaSet) -> None:
        self.replicas = replicas
        self.cut = False
        self.paused: list[tuple[rpb.RaftEnvelope, memoryview]] | None = None
        self.tasks: list[asyncio.Task[None]] = []

    @property
    def replica(self) -> PartitionReplica:
        return self.replicas.partitions[TP]

    def start_loops(self) -> None:
        self.tasks = [asyncio.create_task(self.replicas.tick_loop()),
                      asyncio.create_task(self.replicas.ready_loop())]

    async def stop_loops(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.tasks = []

    async def pause(self) -> None:
        await self.stop_loops()
        self.paused = []

    def resume(self) -> None:
        held, self.paused = self.paused or [], None
        self.start_loops()
        for env, payload in held:
            self.replicas.step(env, payload)


class _Cluster:
    def __init__(self, nodes: dict[int, _Node]) -> None:
        self.nodes = nodes

    def leader(self, among: Callable[[_Node], bool] = lambda n: True) -> _Node | None:
        led = [n for n in self.nodes.values()
               if among(n) and n.paused is None and n.replica.is_leader]
        return max(led, key=lambda n: n.replica.leader_epoch) if led else None

    def receive(self, node: _Node, env: rpb.RaftEnvelope, payload: memoryview) -> None:
        sender = self.nodes.get(env.src)
        if node.cut or sender is None or sender.cut:
            return
        if node.paused is not None:
            node.paused.append((env, payload))
            return
        node.replicas.step(env, payload)


@contextlib.asynccontextmanager
async def _cluster(tmp_path: Path, election_timeout_ms: int) -> AsyncIterator[_Cluster]:
    servers: dict[int, grpc.aio.Server] = {}
    ports: dict[int, int] = {}
    for i in IDS:
        servers[i] = grpc.aio.server(options=SERVER_OPTIONS)
        ports[i] = servers[i].add_insecure_port("127.0.0.1:0")
    peers = {i: f"127.0.0.1:{ports[i]}" for i in IDS}
    nodes: dict[int, _Node] = {}
    cluster = _Cluster(nodes)
    for i in IDS:
        # Raft only: the peers' node-to-node listeners; no client listener is served.
        config = NodeConfig(node_id=i, listen="127.0.0.1:0", data_dir=tmp_path / f"node-{i}",
                            peers=peers, client_addresses=peers,
                            election_timeout_ms=election_timeout_ms,
                            heartbeat_interval_ms=election_timeout_ms // 6)
        node = nodes[i] = _Node(ReplicaSet(config))
        add_raft_transport(
            servers[i], lambda env, payload, node=node: cluster.receive(node, env, payload),
            lambda request: rpb.FetchMetadataResponse(),
            lambda request, wait: asyncio.sleep(0, rpb.WriteTxnMarkersResponse()),
            lambda request: asyncio.sleep(0, rpb.ReassignmentDoneResponse()),
            lambda request, wait: asyncio.sleep(0, rpb.RegisterNodeResponse()),
            lambda request, wait: asyncio.sleep(0, rpb.NodeHeartbeatResponse()),
            lambda request, context: asyncio.sleep(0, rpb.ForwardResponse()),
        )
    try:
        for i in IDS:
            await servers[i].start()
            node = nodes[i]
            node.replicas.open_replica(TP, IDS, {})
            node.replicas.start_links()
            node.start_loops()
        yield cluster
    finally:
        for node in nodes.values():
            await node.stop_loops()
            await node.replicas.close()
        for server in servers.values():
            await server.stop(None)


async def _leader(cluster: _Cluster, among: Callable[[_Node], bool] = lambda n: True) -> _Node:
    return await async_wait_for(lambda: cluster.leader(among), 30, "a leader")


async def _produce(node: _Node, value: bytes) -> int:
    """Append one record through `node` with acks=all; its offset once committed."""

    def proposed() -> ProduceResult | None:
        try:
            return node.replica.propose(make_batch([value]), acks=-1)
        except errors.NotEnoughReplicasError:  # the new leader is still settling its log
            return None

    result = await async_wait_for(proposed, 30, "the leader to take a write")
    assert result.done is not None
    await result.done
    return result.base_offset


def test_reads_cover_every_acknowledged_write_and_share_rounds(tmp_path: Path) -> None:
    """A read's offset lies past every write acknowledged before it; concurrent callers share
    rounds; while the lease holds, a read is answered without waiting for one."""

    async def scenario() -> None:
        async with _cluster(tmp_path, election_timeout_ms=3000) as cluster:
            leader = await _leader(cluster)
            reads = leader.replica.reads
            offset = await _produce(leader, b"a")
            rounds = reads.rounds
            answers = await asyncio.gather(
                *(leader.replicas.read_index(TP, 10) for _ in range(20)))
            assert all(index > offset for index in answers)
            assert reads.rounds - rounds <= 2, "concurrent readers did not share rounds"

            # Confirmed a moment ago: the lease answers before any message could travel.
            offset = await _produce(leader, b"b")
            rounds = reads.rounds
            task = asyncio.ensure_future(leader.replicas.read_index(TP, 10))
            await asyncio.sleep(0)
            assert task.done() and task.result() > offset
            assert reads.rounds == rounds

            follower = next(n for n in cluster.nodes.values() if n is not leader)
            with pytest.raises(errors.NotLeaderOrFollowerError):
                await follower.replicas.read_index(TP, 10)

    asyncio.run(scenario())


@pytest.mark.parametrize("isolation", ["paused", "cut off"])
def test_an_old_leader_never_answers_once_others_elected(tmp_path: Path, isolation: str) -> None:
    """The old leader reads right after it is confirmed (so it holds a lease), is then paused
    or cut off until the others have elected a leader that committed a write, and is asked
    again: it must refuse (its lease ran out on the clock, and its quorum round fails), never
    answer an offset that misses the new write."""

    async def scenario() -> None:
        async with _cluster(tmp_path, election_timeout_ms=300) as cluster:
            old = await _leader(cluster)
            await _produce(old, b"before")
            await old.replicas.read_index(TP, 10)
            term = old.replica.leader_epoch
            if isolation == "paused":
                await old.pause()
            else:
                old.cut = True
            new = await _leader(cluster, lambda n: n is not old and n.replica.leader_epoch > term)
            written = await _produce(new, b"after")
            if isolation == "paused":
                # Asked first thing once it runs again, before it hears anything.
                task = asyncio.ensure_future(old.replicas.read_index(TP, 10))
                await asyncio.sleep(0)
                old.resume()
            else:
                task = asyncio.ensure_future(old.replicas.read_index(TP, 10))
            try:
                index = await task
            except (errors.NotLeaderOrFollowerError, errors.RequestTimedOutError):
                return
            pytest.fail(f"the old leader answered {index}; the new leader committed {written}")

    asyncio.run(scenario())


def _vote_request(request: VoteRequest) -> rpb.RaftEnvelope:
    env = rpb.RaftEnvelope(src=request.src, dst=request.dst)
    pm = env.messages.add(group=rpb.GroupId(topic=TP.topic, partition=TP.partition),
                          term=request.term)
    pm.vote_request.transfer = request.transfer
    return env


def test_a_new_core_stays_out_of_elections_for_an_election_timeout(tmp_path: Path) -> None:
    """A replica that just (re)started cannot know it heard from a leader an instant ago, so it
    ignores vote requests for an election timeout, as a follower that had would: a leader's
    lease counts on that. A transfer's forced election is not refused. A replica that never
    had a term (a new partition's) promised nobody anything: it votes at once."""

    async def scenario() -> None:
        peers = {i: f"127.0.0.1:{i}" for i in IDS}
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path,
                            peers=peers, client_addresses=peers,
                            election_timeout_ms=60_000)
        fresh_tp = TopicPartition("fresh", 0)
        directory = tmp_path / f"{TP.topic}-{TP.partition}"
        directory.mkdir(parents=True)
        CheckpointFile(directory / RAFT_STATE_FILE, version=0, width=2, named=True).write(
            [("term", 1), ("vote", -1)])
        replicas = ReplicaSet(config)
        try:
            replicas.open_replica(TP, IDS, {})
            core = replicas.partitions[TP].core
            replicas.step(_vote_request(VoteRequest(5, 2, 1, 0, 0)), memoryview(b""))
            assert core.term == 1
            replicas.step(_vote_request(VoteRequest(5, 2, 1, 0, 0, transfer=True)),
                          memoryview(b""))
            assert core.term == 5

            replicas.open_replica(fresh_tp, (2, 1, 3), {})
            fresh = replicas.partitions[fresh_tp].core
            env = _vote_request(VoteRequest(1, 2, 1, 0, 0))
            env.messages[0].group.topic = fresh_tp.topic
            replicas.step(env, memoryview(b""))
            assert fresh.term == 1
        finally:
            await replicas.close()

    asyncio.run(scenario())
