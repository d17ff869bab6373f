"""The partitioned-request engine (tidelog.partitioned) against scripted nodes: real gRPC
servers on loopback, in this process, whose per-partition answers each test writes, so that
partial failures, final errors and a stalled leader happen exactly when wanted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from tidelog import Client, ListOffsetsResult, OffsetSpec, TopicPartition, errors, wire
from tidelog.partitioned import PartitionedRequest
from tidelog.producer.idempotence import init_producer_id
from tidelog.retry import Deadline
from tidelog.v1 import tidelog_pb2 as pb
from tidelog.v1 import tidelog_pb2_grpc

pytestmark = pytest.mark.timeout(60)

TOPIC = "t"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


class _Cluster:
    """What every scripted node says in Metadata: the nodes and each partition's leader."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.addresses: dict[int, str] = {}
        self.leaders = {0: 1, 1: 1}
        self.epoch = 1
        self.controller = 1

    def move(self, partition: int, leader: int) -> None:
        with self.lock:
            self.leaders[partition] = leader
            self.epoch += 1

    def metadata(self) -> pb.MetadataResponse:
        with self.lock:
            return pb.MetadataResponse(
                nodes=[pb.Node(node_id=n, address=a) for n, a in self.addresses.items()],
                controller_id=self.controller,
                topics=[pb.TopicMetadata(name=TOPIC, partitions=[
                    pb.PartitionMetadata(partition=p, leader_id=leader, leader_epoch=self.epoch,
                                         replicas=[1, 2], isr=[1, 2])
                    for p, leader in sorted(self.leaders.items())
                ])],
            )


class _Node(tidelog_pb2_grpc.TidelogServicer):
    """Answers ListOffsets from a script: per partition, error codes to answer first (one per
    request), then offset 100 + partition. `on_request` runs before the answer."""

    def __init__(self, cluster: _Cluster) -> None:
        self.cluster = cluster
        self.script: dict[int, list[int]] = {}
        self.requests: list[set[int]] = []
        #: DeleteTopics: the error code of each answer, in order (the last one repeats).
        self.delete_codes: list[int] = [0]
        self.on_request: Any = None
        self.release = threading.Event()

    def Metadata(self, request: Any, context: Any) -> pb.MetadataResponse:
        return self.cluster.metadata()

    def InitProducerId(self, request: Any, context: Any) -> pb.InitProducerIdResponse:
        self.requests.append(set())
        if self.on_request is not None:
            self.on_request()
        return pb.InitProducerIdResponse(producer_id=7, producer_epoch=0)

    def DeleteTopics(self, request: Any, context: Any) -> pb.DeleteTopicsResponse:
        self.requests.append(set())
        if self.on_request is not None:
            self.on_request()
        code = self.delete_codes.pop(0) if len(self.delete_codes) > 1 else self.delete_codes[0]
        return pb.DeleteTopicsResponse(
            topics=[pb.DeletableTopicResult(name=n, error_code=code) for n in request.topic_names]
        )

    def ListOffsets(self, request: Any, context: Any) -> pb.ListOffsetsResponse:
        partitions = {p.partition for t in request.topics for p in t.partitions}
        self.requests.append(partitions)
        if self.on_request is not None:
            self.on_request()
        response = pb.ListOffsetsResponse()
        topic = response.topics.add(name=TOPIC)
        for p in sorted(partitions):
            codes = self.script.get(p)
            if codes:
                topic.partitions.add(partition=p, error_code=codes.pop(0), offset=-1)
            else:
                topic.partitions.add(partition=p, offset=100 + p, leader_epoch=self.cluster.epoch)
        return response


@pytest.fixture
def nodes() -> Iterator[tuple[_Cluster, dict[int, _Node]]]:
    cluster = _Cluster()
    servers: list[grpc.Server] = []
    scripted: dict[int, _Node] = {}
    for node_id in (1, 2):
        server = grpc.server(ThreadPoolExecutor(4))
        node = scripted[node_id] = _Node(cluster)
        tidelog_pb2_grpc.add_TidelogServicer_to_server(node, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        cluster.addresses[node_id] = f"127.0.0.1:{port}"
    try:
        yield cluster, scripted
    finally:
        for node in scripted.values():
            node.release.set()
        for server in servers:
            server.stop(0)


def _client(cluster: _Cluster, timeout_ms: int = 10_000) -> Client:
    return Client(cluster.addresses[1], request_timeout_ms=timeout_ms, retry_backoff_ms=20,
                  retry_backoff_max_ms=50)


def test_only_the_failed_partitions_are_retried(nodes: tuple[_Cluster, dict[int, _Node]]) -> None:
    """Partition 1's leader moved (NOT_LEADER_OR_FOLLOWER, no hint): metadata is refreshed and
    only partition 1 goes to its new leader; partition 0 meets a retriable error that needs no
    refresh (OFFSET_NOT_AVAILABLE) and is asked again alone, at the same leader."""
    cluster, node = nodes
    node[1].script = {0: [errors.OffsetNotAvailableError.code],
                      1: [errors.NotLeaderOrFollowerError.code]}
    node[1].on_request = lambda: cluster.move(1, 2) if len(node[1].requests) == 1 else None
    with _client(cluster) as client:
        found = client.list_offsets({TP0: OffsetSpec.latest(), TP1: OffsetSpec.latest()})
        assert {tp: r.offset for tp, r in found.items()} == {TP0: 100, TP1: 101}
        assert node[1].requests == [{0, 1}, {0}]
        assert node[2].requests == [{1}]
        assert client.metadata_refreshes == 2  # the first load, then the one the move needed


def test_a_final_error_fails_its_partition_alone(nodes: tuple[_Cluster, dict[int, _Node]]) -> None:
    """A non-retriable error is that partition's outcome, beside the others' answers; the
    blocking call raises it, naming the partition, without sending it again."""
    cluster, node = nodes
    node[1].script = {1: [errors.TopicAuthorizationFailedError.code] * 2}
    with _client(cluster) as client:
        client.admin.describe_cluster()
        conn = client.connections
        request: PartitionedRequest[int, ListOffsetsResult] = PartitionedRequest(
            conn.transport, conn.metadata, conn.backoff, "ListOffsets", "ListOffsets",
            lambda work: wire.list_offsets_request(
                {tp: wire.OffsetLookup(ts) for tp, ts in work.items()}, 0, -1),
            wire.parse_list_offsets,
        )
        outcome = client.connections.run(request.attempt({TP0: -1, TP1: -1}, 5.0))
        assert outcome.answers[TP0].offset == 100 and list(outcome.answers) == [TP0]
        assert list(outcome.final) == [TP1] and not outcome.retry
        assert isinstance(outcome.final[TP1], errors.TopicAuthorizationFailedError)
        with pytest.raises(errors.AuthorizationError, match="t-1"):
            client.list_offsets({TP0: OffsetSpec.latest(), TP1: OffsetSpec.latest()})
        assert node[1].requests == [{0, 1}, {0, 1}]


def test_a_stalled_leader_costs_one_slice_of_the_deadline(
    nodes: tuple[_Cluster, dict[int, _Node]],
) -> None:
    """The leader takes the request and never answers (as a paused process does), while the
    cluster moves leadership away. The attempt times out after its slice of the 8 s deadline,
    the node becomes suspect, and the retry reaches the new leader well within the deadline;
    an attempt given the whole deadline would have raised REQUEST_TIMED_OUT instead."""
    cluster, node = nodes

    def stall() -> None:
        cluster.move(0, 2)
        node[1].release.wait(30)

    node[1].on_request = stall
    with _client(cluster, timeout_ms=8_000) as client:
        found = client.list_offsets({TP0: OffsetSpec.latest()})
        assert found[TP0].offset == 100
        assert node[2].requests == [{0}]


def test_a_stalled_controller_costs_one_slice_of_the_deadline(
    nodes: tuple[_Cluster, dict[int, _Node]],
) -> None:
    """Admin requests go to the controller with the same bounded attempts: a controller that
    stalls is given up after a slice and the request goes to the one the cluster named next."""
    cluster, node = nodes

    def stall() -> None:
        with cluster.lock:
            cluster.controller = 2
        node[1].release.wait(30)

    node[1].on_request = stall
    with _client(cluster, timeout_ms=8_000) as client:
        assert init_producer_id(client.connections) == (7, 0)
        assert len(node[1].requests) == 1 and len(node[2].requests) == 1


@pytest.mark.parametrize("first", [errors.UnknownTopicOrPartitionError,
                                   errors.NotControllerError])
def test_deleting_a_topic_that_never_existed_fails(
    nodes: tuple[_Cluster, dict[int, _Node]], first: type[errors.TidelogError],
) -> None:
    """UNKNOWN_TOPIC_OR_PARTITION answered to a first attempt, or after one that changed
    nothing (NOT_CONTROLLER), is the answer, not retried (Kafka's AdminClient). It was
    retried, being retriable, and the retry's same answer was taken for a deletion that had
    gone through: success."""
    cluster, node = nodes
    node[1].delete_codes = [first.code, errors.UnknownTopicOrPartitionError.code]
    with _client(cluster) as client, pytest.raises(errors.UnknownTopicOrPartitionError):
        client.admin.delete_topic("never")
    assert len(node[1].requests) == (1 if first is errors.UnknownTopicOrPartitionError else 2)


def test_a_retried_deletion_whose_first_attempt_may_have_done_it_succeeds(
    nodes: tuple[_Cluster, dict[int, _Node]],
) -> None:
    """The controller answered REQUEST_TIMED_OUT, or no answer came in the attempt's slice of
    the deadline: the topic may be gone by the retry, whose UNKNOWN_TOPIC_OR_PARTITION then
    means done."""
    cluster, node = nodes
    node[1].delete_codes = [errors.RequestTimedOutError.code,
                            errors.UnknownTopicOrPartitionError.code]
    with _client(cluster) as client:
        client.admin.delete_topic("slow")
        assert len(node[1].requests) == 2

        node[1].requests.clear()
        node[1].on_request = lambda: len(node[1].requests) == 1 and node[1].release.wait(30)
        client.admin.delete_topic("stalled", timeout_ms=3_000)  # attempts of 1 s: the first stalls
        assert len(node[1].requests) == 2


def test_an_attempt_gets_a_slice_of_the_deadline_never_all_of_it() -> None:
    assert Deadline(8_000).attempt_s() == pytest.approx(2.0, abs=0.05)
    assert Deadline(120_000).attempt_s() == pytest.approx(30.0, abs=0.05)
    assert Deadline(2_000).attempt_s() == pytest.approx(1.0, abs=0.05)  # the floor
    assert Deadline(500).attempt_s() <= 0.5  # never past the end of the call
