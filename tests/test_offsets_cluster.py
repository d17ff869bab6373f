"""Consumer offsets on real node processes (SPEC §8, kafka-reference §7): the internal topic
and where groups live in it (FindCoordinator). Requests are built here with the raw stubs, so
every field is what the test says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tidelog import errors
from tidelog.hashing import group_partition
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(180)

OFFSETS = "__consumer_offsets"
PARTITIONS = 5


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 3, "offsets_topic_num_partitions": PARTITIONS}


@pytest.fixture(scope="module")
def coordinators(raw: Raw) -> Iterator[Raw]:
    """The module's cluster once its offsets topic exists and every partition has a leader."""
    found(raw, 1, "warm-up")
    raw.wait_leaders(OFFSETS, PARTITIONS)
    yield raw


def find(raw: Raw, node: int, group: str, key_type: int = 0) -> pb.FindCoordinatorResponse:
    answer: pb.FindCoordinatorResponse = raw.stub(node).FindCoordinator(
        pb.FindCoordinatorRequest(key=group, key_type=key_type), timeout=10
    )
    return answer


def found(raw: Raw, node: int, group: str) -> pb.FindCoordinatorResponse:
    """The first answer of `node` that names a coordinator for `group`."""

    def answer() -> pb.FindCoordinatorResponse | None:
        response = find(raw, node, group)
        return response if response.error_code == 0 else None

    return wait_for(answer, 60, f"node {node} to name a coordinator for {group!r}")


# ---- the topic and FindCoordinator ----------------------------------------------------------


def test_the_first_find_coordinator_creates_the_topic_and_answers_not_available_meanwhile(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    """Asked of a node that is not the controller, before the topic exists: 15 with a reason,
    and the topic comes, compacted, with the configured partitions and replication factor."""
    controller = wait_for(
        lambda: fresh_raw.stub(1).Metadata(pb.MetadataRequest(), timeout=5).controller_id + 1,
        what="a controller",
    ) - 1
    asked = next(n for n in fresh_cluster.node_ids if n != controller)
    first = find(fresh_raw, asked, "g")
    assert first.error_code == errors.CoordinatorNotAvailableError.code, first
    assert first.error_message and first.node_id == -1 and not first.address
    answer = found(fresh_raw, asked, "g")
    md = fresh_raw.metadata(asked, OFFSETS)
    assert len(md.partitions) == PARTITIONS
    assert all(len(p.replicas) == 3 for p in md.partitions)
    assert md.configs["cleanup.policy"] == "compact"
    assert int(md.configs["segment.bytes"]) == 100 * 1024 * 1024
    leader = fresh_raw.wait_leaders(OFFSETS, PARTITIONS)[group_partition("g", PARTITIONS)]
    assert answer.node_id == leader
    assert answer.address == fresh_cluster.address_of(leader)


@pytest.mark.parametrize(
    ("group", "hash_code"),
    [("", 0), ("grp", 102629), ("foo", 101574), ("my-group", -1906497762),
     ("test-group", 627841412), ("polygenelubricants", -2147483648)],
)
def test_every_node_names_the_leader_of_the_groups_partition(
    coordinators: Raw, group: str, hash_code: int
) -> None:
    """kafka-reference §7.3's vectors: abs (MIN_VALUE -> 0) of Java's hashCode, modulo the
    topic's partitions."""
    partition = (0 if hash_code == -2**31 else abs(hash_code)) % PARTITIONS
    assert group_partition(group, PARTITIONS) == partition

    def agreed() -> int | None:
        leader = coordinators.wait_leaders(OFFSETS, PARTITIONS)[partition]
        answers = [find(coordinators, n, group) for n in coordinators.cluster.node_ids]
        return leader if all(a.error_code == 0 and a.node_id == leader for a in answers) else None

    wait_for(agreed, 30, f"every node to name the coordinator of {group!r}")


def test_users_cannot_create_or_delete_the_offsets_topic(coordinators: Raw) -> None:
    created = coordinators.create_topic_once(OFFSETS, 1, 1, {})
    assert created.topics[0].error_code == errors.InvalidTopicError.code, created
    deleted = coordinators.stub(2).DeleteTopics(
        pb.DeleteTopicsRequest(topic_names=[OFFSETS], timeout_ms=10_000), timeout=20
    )
    assert deleted.topics[0].error_code == errors.InvalidTopicError.code, deleted
    assert len(coordinators.metadata(1, OFFSETS).partitions) == PARTITIONS


def test_find_coordinator_refuses_unknown_key_types(coordinators: Raw) -> None:
    """Transactions (key type 1) are not built yet: UNIMPLEMENTED, as transactional Produce
    and InitProducerId, so no client retries it; any other key type is malformed."""
    with pytest.raises(grpc.RpcError) as info:
        find(coordinators, 1, "txn", key_type=1)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    for key_type in (-1, 2, 2**31 - 1):
        with pytest.raises(grpc.RpcError) as info:
            find(coordinators, 2, "g", key_type=key_type)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert find(coordinators, 3, "still-answers").error_code == 0
