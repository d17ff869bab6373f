"""The controller's decisions: Kafka's topic-name rules and error codes, and replica
assignments that spread preferred leaders and never repeat a node within a partition."""

from __future__ import annotations

from collections import Counter

import pytest

from tidelog.coordinator.controller import MetadataImage, assign_replicas
from tidelog.coordinator.metadata_records import decode_record, encode_record
from tidelog.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

NODES = [1, 2, 3]


@pytest.mark.parametrize(
    ("nodes", "partitions", "rf"), [([1, 2, 3], 6, 3), ([1, 2, 3, 4, 5], 10, 3), ([7], 4, 1)]
)
def test_assignment_is_balanced_and_distinct(nodes: list[int], partitions: int, rf: int) -> None:
    assignment = assign_replicas(partitions, rf, nodes, {})
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(nodes)
    leaders = Counter(r[0] for r in assignment)
    assert max(leaders.values()) - min(leaders.get(n, 0) for n in nodes) <= 1
    replica_load = Counter(n for r in assignment for n in r)
    assert max(replica_load.values()) - min(replica_load.values()) <= 1


def test_new_topics_start_on_the_least_loaded_leader() -> None:
    image = MetadataImage()
    image.apply(0, image.plan_create("a", 1, 3, {}, NODES))
    image.apply(1, image.plan_create("b", 1, 3, {}, NODES))
    image.apply(2, image.plan_create("c", 1, 3, {}, NODES))
    assert sorted(t.assignment[0][0] for t in image.topics.values()) == NODES


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a" * 250, "bad name", "bad/name", "ü", "__consumer_offsets"]
)
def test_illegal_topic_names_are_invalid_topic_exception(name: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        MetadataImage().plan_create(name, 1, 1, {}, NODES)
    assert info.value.code == 17


def test_create_errors_carry_kafka_codes() -> None:
    image = MetadataImage()
    image.apply(0, image.plan_create("a.b", 2, 2, {"retention.ms": "1000"}, NODES))
    with pytest.raises(TopicAlreadyExistsError):
        image.plan_create("a.b", 1, 1, {}, NODES)
    with pytest.raises(InvalidTopicError, match="collides"):
        image.plan_create("a_b", 1, 1, {}, NODES)
    for partitions in (0, -1):
        with pytest.raises(InvalidPartitionsError):
            image.plan_create("p", partitions, 1, {}, NODES)
    for rf in (0, 4):
        with pytest.raises(InvalidReplicationFactorError):
            image.plan_create("r", 1, rf, {}, NODES)
    with pytest.raises(UnknownTopicOrPartitionError):
        image.plan_delete("missing")


def test_records_replay_to_the_same_image_and_skip_duplicates() -> None:
    leader = MetadataImage()
    records = []
    for offset, name in enumerate(["x", "y", "z"]):
        record = leader.plan_create(name, 3, 2, {"segment.bytes": "1048576"}, NODES)
        leader.apply(offset, record)
        records.append(encode_record(record))
    records.append(encode_record(leader.plan_delete("y")))
    leader.apply(3, decode_record(records[-1]))

    follower = MetadataImage()
    for offset, raw in enumerate(records):
        follower.apply(offset, decode_record(raw))
        follower.apply(offset, decode_record(raw))  # a replay changes nothing
    assert follower.topics == leader.topics
    assert sorted(follower.topics) == ["x", "z"]
    # A re-created topic gets a new id, so a stale delete record cannot remove it.
    follower.apply(4, follower.plan_create("y", 1, 1, {}, NODES))
    follower.apply(5, decode_record(records[3]))
    assert "y" in follower.topics
