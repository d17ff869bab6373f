"""The client's coordinator calls (tidelog.coordinated) against scripted nodes: real gRPC servers
on loopback, in this process, whose answers each test writes, so that NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, a stalled coordinator or a per-partition error happen exactly
when wanted (kafka-mapping §7.9). The client's own code runs unchanged."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from tidelog import Client, OffsetAndMetadata, TopicPartition, errors
from tidelog.consumer import ConsumerConfig
from tidelog.types import CONSUMER_OFFSETS_TOPIC, GroupListing
from tidelog.v1 import tidelog_pb2 as pb
from tidelog.v1 import tidelog_pb2_grpc

pytestmark = pytest.mark.timeout(60)

TOPIC = "t"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
GROUP = "g"


class _Cluster:
    """What every scripted node says in Metadata and FindCoordinator."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.addresses: dict[int, str] = {}
        #: FindCoordinator answers, one per request; the last one repeats.
        self.coordinators: list[tuple[int, int]] = [(0, 1)]  # (error code, node id)
        self.lookups = 0
        #: Leaders of the __consumer_offsets partitions (none: the topic does not exist).
        self.offsets_leaders: list[int] = []

    def metadata(self) -> pb.MetadataResponse:
        with self.lock:
            topics = [pb.TopicMetadata(name=TOPIC, partitions=[
                pb.PartitionMetadata(partition=p, leader_id=1, leader_epoch=3, replicas=[1, 2],
                                     isr=[1, 2])
                for p in (0, 1)
            ])]
            if self.offsets_leaders:
                topics.append(pb.TopicMetadata(
                    name=CONSUMER_OFFSETS_TOPIC, is_internal=True, partitions=[
                        pb.PartitionMetadata(partition=p, leader_id=leader, leader_epoch=1)
                        for p, leader in enumerate(self.offsets_leaders)
                    ]))
            return pb.MetadataResponse(
                nodes=[pb.Node(node_id=n, address=a) for n, a in self.addresses.items()],
                controller_id=1, topics=topics,
            )

    def find(self) -> pb.FindCoordinatorResponse:
        with self.lock:
            self.lookups += 1
            code, node = self.coordinators[0]
            if len(self.coordinators) > 1:
                self.coordinators.pop(0)
            if code:
                return pb.FindCoordinatorResponse(error_code=code, node_id=-1)
            return pb.FindCoordinatorResponse(node_id=node, address=self.addresses[node])


class _Node(tidelog_pb2_grpc.TidelogServicer):
    """Answers offset requests from a script: error codes to answer first (one per request),
    then success. Commits are stored, so fetches read them back."""

    def __init__(self, cluster: _Cluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.script: dict[str, list[int]] = {}
        #: Per-partition codes of the next OffsetCommit answer (the others succeed).
        self.partition_codes: dict[TopicPartition, int] = {}
        self.requests: list[tuple[str, Any]] = []
        self.committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self.groups: list[pb.ListedGroup] = []
        self.stall = False
        self.release = threading.Event()

    def _next_error(self, method: str, request: Any) -> int:
        self.requests.append((method, request))
        if self.stall:
            self.release.wait(30)
        codes = self.script.get(method)
        return codes.pop(0) if codes else 0

    def methods(self) -> list[str]:
        return [m for m, _ in self.requests]

    def Metadata(self, request: Any, context: Any) -> pb.MetadataResponse:
        return self.cluster.metadata()

    def FindCoordinator(self, request: Any, context: Any) -> pb.FindCoordinatorResponse:
        return self.cluster.find()

    def OffsetCommit(self, request: Any, context: Any) -> pb.OffsetCommitResponse:
        code = self._next_error("OffsetCommit", request)
        response = pb.OffsetCommitResponse()
        for t in request.topics:
            topic = response.topics.add(name=t.name)
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                own = code or self.partition_codes.get(tp, 0)
                topic.partitions.add(partition=p.partition, error_code=own)
                if not own:
                    epoch = p.committed_leader_epoch
                    self.committed[tp] = OffsetAndMetadata(
                        p.committed_offset, p.committed_metadata, None if epoch < 0 else epoch
                    )
        return response

    def OffsetFetch(self, request: Any, context: Any) -> pb.OffsetFetchResponse:
        code = self._next_error("OffsetFetch", request)
        if code:
            return pb.OffsetFetchResponse(error_code=code)
        response = pb.OffsetFetchResponse()
        for t in request.topics:
            topic = response.topics.add(name=t.name)
            for p in t.partitions:
                found = self.committed.get(TopicPartition(t.name, p))
                if found is None:
                    topic.partitions.add(partition=p, committed_offset=-1,
                                         committed_leader_epoch=-1)
                else:
                    topic.partitions.add(
                        partition=p, committed_offset=found.offset, metadata=found.metadata,
                        committed_leader_epoch=-1 if found.leader_epoch is None
                        else found.leader_epoch,
                    )
        return response

    def ListGroups(self, request: Any, context: Any) -> pb.ListGroupsResponse:
        code = self._next_error("ListGroups", request)
        return pb.ListGroupsResponse(error_code=code, groups=[] if code else self.groups)

    def DeleteGroups(self, request: Any, context: Any) -> pb.DeleteGroupsResponse:
        code = self._next_error("DeleteGroups", request)
        return pb.DeleteGroupsResponse(results=[
            pb.DeleteGroupResult(group_id=g, error_code=code) for g in request.group_ids
        ])

    def ListOffsets(self, request: Any, context: Any) -> pb.ListOffsetsResponse:
        self.requests.append(("ListOffsets", request))
        response = pb.ListOffsetsResponse()
        for t in request.topics:
            topic = response.topics.add(name=t.name)
            for p in t.partitions:
                topic.partitions.add(partition=p.partition, offset=500, timestamp=-1,
                                     leader_epoch=3)
        return response


Nodes = tuple[_Cluster, dict[int, _Node], dict[int, grpc.Server]]


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    cluster = _Cluster()
    servers: dict[int, grpc.Server] = {}
    scripted: dict[int, _Node] = {}
    for node_id in (1, 2):
        server = grpc.server(ThreadPoolExecutor(4))
        node = scripted[node_id] = _Node(cluster, node_id)
        tidelog_pb2_grpc.add_TidelogServicer_to_server(node, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers[node_id] = server
        cluster.addresses[node_id] = f"127.0.0.1:{port}"
    try:
        yield cluster, scripted, servers
    finally:
        for node in scripted.values():
            node.release.set()
        for server in servers.values():
            server.stop(0)


def _client(cluster: _Cluster, timeout_ms: int = 10_000) -> Client:
    return Client(cluster.addresses[1], request_timeout_ms=timeout_ms, retry_backoff_ms=20,
                  retry_backoff_max_ms=50)


def test_find_coordinator_names_the_node_and_later_calls_go_straight_to_it(nodes: Nodes) -> None:
    cluster, node, _ = nodes
    cluster.coordinators = [(0, 2)]
    with _client(cluster) as client:
        assert client.admin.find_coordinator(GROUP) == 2
        client.admin.alter_consumer_group_offsets(GROUP, {TP0: OffsetAndMetadata(5, "m")})
        client.admin.alter_consumer_group_offsets(GROUP, {TP0: OffsetAndMetadata(6, "m")})
        assert cluster.lookups == 1
        assert node[2].methods() == ["OffsetCommit", "OffsetCommit"]
        assert client.admin.list_consumer_group_offsets(GROUP, [TP0, TP1]) == {
            TP0: OffsetAndMetadata(6, "m", None)
        }


def test_not_coordinator_finds_the_coordinator_again_then_retries(nodes: Nodes) -> None:
    """NOT_COORDINATOR (16): the coordinator moved; the client asks FindCoordinator again and
    sends the commit to the new one (Kafka's markCoordinatorUnknown)."""
    cluster, node, _ = nodes
    cluster.coordinators = [(0, 1), (0, 2)]
    node[1].script = {"OffsetCommit": [errors.NotCoordinatorError.code]}
    with _client(cluster) as client:
        client.admin.alter_consumer_group_offsets(GROUP, {TP0: OffsetAndMetadata(7)})
        assert node[1].methods() == ["OffsetCommit"]
        assert node[2].methods() == ["OffsetCommit"]
        assert node[2].committed == {TP0: OffsetAndMetadata(7, "", None)}
        assert cluster.lookups == 2
        assert client.connections.coordinators.cached(GROUP) == 2


@pytest.mark.parametrize("code", [errors.CoordinatorNotAvailableError.code,
                                  errors.RequestTimedOutError.code])
def test_coordinator_not_available_and_timeouts_rediscover_too(nodes: Nodes, code: int) -> None:
    cluster, node, _ = nodes
    cluster.coordinators = [(0, 1), (0, 2)]
    node[1].script = {"OffsetFetch": [code]}
    with _client(cluster) as client:
        assert client.admin.list_consumer_group_offsets(GROUP, [TP0]) == {}
        assert node[1].methods() == ["OffsetFetch"] and node[2].methods() == ["OffsetFetch"]
        assert cluster.lookups == 2


def test_load_in_progress_retries_at_the_same_coordinator(nodes: Nodes) -> None:
    """COORDINATOR_LOAD_IN_PROGRESS (14): the coordinator is right but still replaying its
    partition; the client waits and asks it again, without a new FindCoordinator."""
    cluster, node, _ = nodes
    load = errors.CoordinatorLoadInProgressError.code
    node[1].script = {"OffsetCommit": [load, load], "OffsetFetch": [load]}
    with _client(cluster) as client:
        client.admin.alter_consumer_group_offsets(GROUP, {TP0: OffsetAndMetadata(9)})
        assert client.admin.list_consumer_group_offsets(GROUP, [TP0])[TP0].offset == 9
        assert node[1].methods() == ["OffsetCommit"] * 3 + ["OffsetFetch"] * 2
        assert cluster.lookups == 1 and not node[2].requests


def test_no_coordinator_yet_is_waited_for(nodes: Nodes) -> None:
    """FindCoordinator answers COORDINATOR_NOT_AVAILABLE while the group's partition has no
    leader (the offsets topic being created): the lookup is repeated after a backoff."""
    cluster, _, _ = nodes
    unavailable = errors.CoordinatorNotAvailableError.code
    cluster.coordinators = [(unavailable, -1), (unavailable, -1), (0, 2)]
    with _client(cluster) as client:
        assert client.admin.find_coordinator(GROUP) == 2
        assert cluster.lookups == 3


def test_retries_stop_at_the_deadline_naming_the_error(nodes: Nodes) -> None:
    cluster, node, _ = nodes
    node[1].script = {"OffsetCommit": [errors.CoordinatorLoadInProgressError.code] * 1000}
    with _client(cluster, timeout_ms=600) as client:
        started = time.monotonic()
        with pytest.raises(errors.RequestTimedOutError, match="COORDINATOR_LOAD_IN_PROGRESS"):
            client.admin.alter_consumer_group_offsets(GROUP, {TP0: OffsetAndMetadata(1)})
        assert time.monotonic() - started < 5  # bounded by the deadline, not by the script
        assert len(node[1].requests) >= 2


def test_a_stalled_coordinator_costs_one_slice_of_the_deadline(nodes: Nodes) -> None:
    """The coordinator takes the commit and never answers (as a paused process does). The
    attempt times out after its slice of the 8 s deadline, the coordinator is forgotten, and
    the commit reaches the one FindCoordinator names next, well within the deadline."""
    cluster, node, _ = nodes
    cluster.coordinators = [(0, 1), (0, 2)]
    node[1].stall = True
    with _client(cluster, timeout_ms=8_000) as client:
        client.admin.alter_consumer_group_offsets(GROUP, {TP0: OffsetAndMetadata(3)})
        assert node[2].committed == {TP0: OffsetAndMetadata(3, "", None)}


def test_metadata_too_large_is_raised_for_its_partition_and_not_retried(nodes: Nodes) -> None:
    """OFFSET_METADATA_TOO_LARGE for one partition while the other commits (contract §8): the
    caller gets the typed error naming that partition, after one request."""
    cluster, node, _ = nodes
    node[1].partition_codes = {TP1: errors.OffsetMetadataTooLargeError.code}
    with _client(cluster) as client, pytest.raises(errors.OffsetMetadataTooLargeError,
                                                   match="t-1"):
        client.admin.alter_consumer_group_offsets(
            GROUP, {TP0: OffsetAndMetadata(1), TP1: OffsetAndMetadata(2, "x" * 5000)}
        )
    assert node[1].methods() == ["OffsetCommit"]
    assert node[1].committed == {TP0: OffsetAndMetadata(1, "", None)}


def test_the_request_carries_offset_metadata_and_epoch(nodes: Nodes) -> None:
    cluster, node, _ = nodes
    with _client(cluster) as client:
        client.admin.alter_consumer_group_offsets(GROUP, {
            TP0: OffsetAndMetadata(10, "meta", 4), TP1: OffsetAndMetadata(20),
        })
        request = node[1].requests[0][1]
        assert request.group_id == GROUP and request.generation_id == -1
        sent = {(t.name, p.partition): (p.committed_offset, p.committed_leader_epoch,
                                        p.committed_metadata)
                for t in request.topics for p in t.partitions}
        assert sent == {(TOPIC, 0): (10, 4, "meta"), (TOPIC, 1): (20, -1, "")}
        assert client.admin.list_consumer_group_offsets(GROUP, [TP0, TP1]) == {
            TP0: OffsetAndMetadata(10, "meta", 4), TP1: OffsetAndMetadata(20, "", None)
        }


def test_a_read_committed_consumer_asks_for_stable_offsets(nodes: Nodes) -> None:
    """KIP-447: a read_committed consumer's OffsetFetch waits for pending transactional
    commits (require_stable); a read_uncommitted one does not; UNSTABLE_OFFSET_COMMIT (88),
    retriable, is asked again."""
    cluster, node, _ = nodes
    node[1].script = {"OffsetFetch": [errors.UnstableOffsetCommitError.code]}
    with _client(cluster) as client:
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = client.consumer(group_id=GROUP, isolation_level=isolation)
            assert consumer.committed([TP0]) == {TP0: None}
        assert [r.require_stable for m, r in node[1].requests] == [True, True, False]


def test_commit_async_is_not_retried_and_its_callback_runs_in_the_callers_thread(
    nodes: Nodes,
) -> None:
    """A failed asynchronous commit reaches its future and its callback with the typed error,
    without a retry (a retry could land after a newer commit); the callback runs inside the
    consumer's next call, in the application's thread. The coordinator is forgotten, so the
    next commit finds the new one."""
    cluster, node, _ = nodes
    cluster.coordinators = [(0, 1), (0, 2)]
    node[1].script = {"OffsetCommit": [errors.NotCoordinatorError.code]}
    seen: list[tuple[dict[TopicPartition, OffsetAndMetadata], BaseException | None, int]] = []
    with _client(cluster) as client:
        consumer = client.consumer(group_id=GROUP, enable_auto_commit=False)
        offsets = {TP0: OffsetAndMetadata(4)}
        future = consumer.commit_async(
            offsets, lambda o, e: seen.append((o, e, threading.get_ident()))
        )
        with pytest.raises(errors.NotCoordinatorError):
            future.result(timeout=10)
        assert seen == []  # not on the client's loop
        consumer.commit(offsets)
        assert len(seen) == 1 and seen[0][0] == offsets
        assert isinstance(seen[0][1], errors.NotCoordinatorError)
        assert seen[0][2] == threading.get_ident()
        assert node[1].methods() == ["OffsetCommit"] and node[2].methods() == ["OffsetCommit"]
        assert consumer.commit_async(offsets).result(timeout=10) == offsets


def test_a_group_consumer_starts_from_the_committed_offset(nodes: Nodes) -> None:
    """With a group: a committed partition starts there (and its committed epoch is what a
    later commit() sends); one without a committed offset falls back to auto_offset_reset
    (ListOffsets latest: 500 here)."""
    cluster, node, _ = nodes
    node[1].committed = {TP0: OffsetAndMetadata(42, "", 2)}
    with _client(cluster) as client:
        consumer = client.consumer(group_id=GROUP, enable_auto_commit=False)
        consumer.assign([TP0, TP1])
        assert consumer.position(TP0) == 42
        assert consumer.position(TP1) == 500
        consumer.commit()
        assert node[1].committed == {TP0: OffsetAndMetadata(42, "", 2),
                                     TP1: OffsetAndMetadata(500, "", None)}
        assert consumer.committed([TP0, TP1, TopicPartition("other", 0)]) == {
            TP0: OffsetAndMetadata(42, "", 2), TP1: OffsetAndMetadata(500, "", None),
            TopicPartition("other", 0): None,
        }
        consumer.seek_to_beginning(TP0)  # a pending seek wins over the committed offset
        assert consumer.position(TP0) == 500


def test_close_commits_the_positions_when_auto_commit_is_on(nodes: Nodes) -> None:
    cluster, node, _ = nodes
    with _client(cluster) as client:
        with client.consumer(group_id=GROUP) as consumer:
            consumer.assign([TP0])
            consumer.seek(TP0, 17)
        assert node[1].committed == {TP0: OffsetAndMetadata(17, "", None)}
        with pytest.raises(errors.ConfigurationError, match="closed"):
            consumer.commit()
        manual = client.consumer(group_id=GROUP, enable_auto_commit=False)
        manual.assign([TP0])
        manual.seek(TP0, 99)
        manual.close()
        assert node[1].committed[TP0].offset == 17


def test_list_groups_asks_every_node_and_merges(nodes: Nodes) -> None:
    cluster, node, servers = nodes
    cluster.offsets_leaders = [1, 1, 2]
    node[1].groups = [pb.ListedGroup(group_id="b", group_state="Empty", coordinator_id=1),
                      pb.ListedGroup(group_id="a", group_state="Empty", coordinator_id=1)]
    node[2].groups = [pb.ListedGroup(group_id="c", protocol_type="consumer",
                                     group_state="Stable", coordinator_id=2)]
    node[2].script = {"ListGroups": [errors.CoordinatorLoadInProgressError.code]}
    with _client(cluster) as client:
        assert client.admin.list_consumer_groups() == [
            GroupListing("a", "", "Empty", 1), GroupListing("b", "", "Empty", 1),
            GroupListing("c", "consumer", "Stable", 2),
        ]
        assert node[2].methods() == ["ListGroups", "ListGroups"]  # the loading one, again
        # A node that is down and leads no offsets partition is not waited for.
        cluster.offsets_leaders = [1, 1, 1]
        servers[2].stop(0)
        assert [g.group_id for g in client.admin.list_consumer_groups()] == ["a", "b"]


def test_list_groups_waits_for_a_coordinator_that_does_not_answer(nodes: Nodes) -> None:
    cluster, _, servers = nodes
    cluster.offsets_leaders = [1, 2]
    servers[2].stop(0)
    with _client(cluster, timeout_ms=1500) as client, pytest.raises(
        errors.RequestTimedOutError, match="ListGroups"
    ):
        client.admin.list_consumer_groups()


def test_delete_groups_raises_the_typed_error_of_a_missing_group(nodes: Nodes) -> None:
    cluster, node, _ = nodes
    node[1].script = {"DeleteGroups": [errors.NotCoordinatorError.code, 0,
                                       errors.GroupIdNotFoundError.code]}
    cluster.coordinators = [(0, 1)]
    with _client(cluster) as client:
        client.admin.delete_consumer_groups([GROUP])  # NOT_COORDINATOR, found again, deleted
        # The first lookup, then those of the backoff, which name the same node every time.
        assert cluster.lookups >= 2
        with pytest.raises(errors.GroupIdNotFoundError, match="'gone'"):
            client.admin.delete_consumer_groups(["gone"])
        with pytest.raises(errors.ConfigurationError, match="list"):
            client.admin.delete_consumer_groups(GROUP)


# ---- argument checks (no node needed) ---------------------------------------------------------


def test_commits_need_a_group() -> None:
    with Client("127.0.0.1:1") as client:
        consumer = client.consumer()
        for call in (lambda: consumer.commit(), lambda: consumer.commit_async(),
                     lambda: consumer.committed([TP0])):
            with pytest.raises(errors.InvalidGroupIdError, match="group_id"):
                call()


@pytest.mark.parametrize("offsets, message", [
    ({TP0: 5}, "expected OffsetAndMetadata"),
    ({TP0: OffsetAndMetadata(-1)}, "must be an int >= 0"),
    ({TP0: OffsetAndMetadata(1, b"bytes")}, "metadata must be a string"),  # type: ignore[arg-type]
    ({TP0: OffsetAndMetadata(1, "", -3)}, "leader epoch"),
    ({("t", -1): OffsetAndMetadata(1)}, "TopicPartition"),
    ([(TP0, OffsetAndMetadata(1))], "mapping"),
])
def test_commit_arguments_are_checked_before_anything_is_sent(
    offsets: Any, message: str
) -> None:
    with Client("127.0.0.1:1") as client:
        consumer = client.consumer(group_id=GROUP)
        with pytest.raises(errors.ConfigurationError, match=message):
            consumer.commit(offsets)
        with pytest.raises(errors.ConfigurationError, match=message):
            client.admin.alter_consumer_group_offsets(GROUP, offsets)


def test_consumer_group_settings_are_checked() -> None:
    with pytest.raises(errors.ConfigurationError, match="group_id"):
        ConsumerConfig(group_id="")
    with pytest.raises(errors.ConfigurationError, match="auto_commit_interval_ms"):
        ConsumerConfig(group_id=GROUP, auto_commit_interval_ms=-1)
    with Client("127.0.0.1:1") as client:
        with pytest.raises(errors.ConfigurationError, match=r"committed\(\[tp\]\)"):
            client.consumer(group_id=GROUP).committed(TP0)  # type: ignore[arg-type]
        with pytest.raises(errors.ConfigurationError, match="string"):
            client.admin.find_coordinator(7)  # type: ignore[arg-type]
