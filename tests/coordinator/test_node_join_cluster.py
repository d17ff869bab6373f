"""Growing a running cluster: a 4th node joins a 3-node cluster through its node-to-node
listeners (`tidelog node --join`), is assigned an id, shows in Metadata and `tidelog cluster
status`, hosts a replica of a new topic that clients produce to and consume from through it,
is fenced when SIGKILLed and unfenced under the same id (before it serves) when it comes back,
and is fenced at its own request when stopped gracefully. Registration
refusals come over the wire with Kafka's codes, forwarded by a node that is not the
controller. One shared cluster, one test: the steps build on each other."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from waiting_helpers import poll_records

from tidelog import Client, TopicPartition
from tidelog.cli import main as cli_main
from tidelog.errors import (
    DuplicateBrokerRegistrationError,
    InvalidRequestError,
    StaleBrokerEpochError,
)
from tidelog.node.cluster.registration import META_FILE
from tidelog.properties import read_properties
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.v1 import raft_pb2, raft_pb2_grpc, tidelog_pb2

pytestmark = pytest.mark.timeout(180)

TOPIC = "grown"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    # A short session, so that fencing shows within seconds (the default is Kafka's 9 s).
    return {"broker_heartbeat_interval_ms": 300, "broker_session_timeout_ms": 2500}


def nodes(raw: Raw, node_id: int, include_fenced: bool) -> dict[int, tidelog_pb2.Node]:
    answer = raw.stub(node_id).Metadata(
        tidelog_pb2.MetadataRequest(topics=["-"], include_fenced_nodes=include_fenced),
        timeout=5,
    )
    return {node.node_id: node for node in answer.nodes}


def liveness(raw: Raw, node_id: int) -> dict[int, str]:
    return {n: "fenced" if node.is_fenced else "alive" if node.registered else "unregistered"
            for n, node in nodes(raw, node_id, include_fenced=True).items()}


def status_rows(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> dict[int, list[str]]:
    """`tidelog cluster status`'s node table: node id -> the row's cells."""
    assert cli_main(["cluster", "status", "--bootstrap", cluster.address_of(1)]) == 0
    rows = (line.split() for line in capsys.readouterr().out.splitlines())
    return {int(cells[0]): cells for cells in rows
            if len(cells) >= 4 and cells[0].isdigit() and ":" in cells[1]}


@contextlib.contextmanager
def raft_stub(cluster: LocalCluster, node_id: int) -> Iterator[raft_pb2_grpc.RaftTransportStub]:
    with grpc.insecure_channel(cluster.internal_address_of(node_id)) as channel:
        yield raft_pb2_grpc.RaftTransportStub(channel)


def test_a_node_joins_hosts_replicas_is_fenced_when_killed_and_returns_as_itself(
    cluster: LocalCluster, raw: Raw, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every node of the static peers list registers itself at start.
    wait_for(lambda: liveness(raw, 2) == {1: "alive", 2: "alive", 3: "alive"}, 30,
             "the static nodes' registrations")

    joined = cluster.join()
    assert joined == 4  # assigned by the controller, above every configured id
    incarnation = read_properties(cluster.data_dir / "joined-1" / META_FILE)["incarnation.id"]

    def listed_everywhere() -> bool:
        return all(
            (node := nodes(raw, n, include_fenced=False).get(joined)) is not None
            and node.address == cluster.address_of(joined) and not node.is_fenced
            for n in cluster.node_ids
        )

    wait_for(listed_everywhere, 30, "every node's Metadata to list the joined node")
    row = wait_for(lambda: status_rows(cluster, capsys).get(joined), 10, "a status row")
    assert row[1:4] == [cluster.address_of(joined), cluster.internal_address_of(joined),
                        "alive"]

    # Refusals, asked of a node that forwards them to the controller leader.
    asked = next(n for n in (1, 2, 3) if n != raw.stub(1).Metadata(
        tidelog_pb2.MetadataRequest(topics=["-"]), timeout=5).controller_id)
    with raft_stub(cluster, asked) as stub:
        register = raft_pb2.RegisterNodeRequest(
            node_id=joined, incarnation="ab" * 16,
            internal_address="127.0.0.1:1", client_address="127.0.0.1:2",
        )
        refused = stub.RegisterNode(register, timeout=10)
        assert refused.error_code == DuplicateBrokerRegistrationError.code, refused
        register.internal_address = "127.0.0.1:0"
        assert stub.RegisterNode(register, timeout=10).error_code == InvalidRequestError.code
        beat = stub.NodeHeartbeat(raft_pb2.NodeHeartbeatRequest(node_id=joined, epoch=10**9),
                                  timeout=10)
        assert beat.error_code == StaleBrokerEpochError.code

    # New replicas go to every live node, the joined one included: it leads a partition.
    raw.create_topic(TOPIC, 4, 2)
    assignment = [list(p.replicas) for p in raw.metadata(1, TOPIC).partitions]
    mine = next(p for p, replicas in enumerate(assignment) if replicas[0] == joined)
    wait_for(lambda: raw.wait_leaders(TOPIC)[mine] == joined, 30, "the joined node to lead")
    tp = TopicPartition(TOPIC, mine)
    client = Client(cluster.bootstrap)
    try:
        producer = client.producer(acks="all")
        for i in range(5):
            producer.send(TOPIC, f"v{i}".encode(), partition=mine).result()
        producer.close()
        consumer = client.consumer()
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = poll_records(consumer, 5)
        assert [r.value for r in got] == [f"v{i}".encode() for i in range(5)]
        consumer.close()
    finally:
        client.close()

    # SIGKILL: fenced once its session times out, then left out of Metadata.
    cluster.kill(joined)
    wait_for(lambda: liveness(raw, 1).get(joined) == "fenced", 30, "the killed node fenced")
    wait_for(lambda: joined not in nodes(raw, 1, include_fenced=False), 30,
             "Metadata to leave the fenced node out")
    assert status_rows(cluster, capsys)[joined][3] == "fenced"

    # Back from the same data dir: the same id and incarnation, and unfenced before it serves,
    # so a topic created as soon as it serves places a replica on it.
    cluster.restart(joined)
    raw.create_topic("everywhere", 1, 4)
    wait_for(lambda: liveness(raw, 3).get(joined) == "alive", 30, "the node unfenced")
    stored = read_properties(cluster.data_dir / "joined-1" / META_FILE)
    assert stored == {"incarnation.id": incarnation, "node.id": str(joined)}
    assert nodes(raw, 1, include_fenced=False)[joined].address == cluster.address_of(joined)

    # A graceful stop asks to be fenced at once rather than after the session timeout.
    cluster.stop(joined)
    wait_for(lambda: any(f"node {joined} fenced (stopping)" in cluster.logs(n)
                         for n in (1, 2, 3)), 30, "the stopping node fenced at its request")
