"""The controller's side of partition reassignment (KIP-455), without processes: the
PartitionChangeRecord encoding, AlterPartitionReassignments' plans with Kafka's error codes
(start, retarget, cancel), the completion the partition's leader reports, and what applying
the records does to the image."""

from __future__ import annotations

import pytest

from tidelog.coordinator.controller import MetadataImage, Reassignment
from tidelog.coordinator.metadata_records import (
    MetadataRecordError,
    PartitionChangeRecord,
    RemoveTopicRecord,
    decode_record,
    encode_record,
)
from tidelog.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from tidelog.types import TopicPartition

NODES = [1, 2, 3, 4]
TP = TopicPartition("events", 0)


@pytest.mark.parametrize(
    "record",
    [
        PartitionChangeRecord("events", 4, 0, (2, 3, 1), (3,), (1,)),
        PartitionChangeRecord("ü", 1, 7, (5,)),
        PartitionChangeRecord("t", 1, 0, (1, 2, 3), (3,), (3,)),
        PartitionChangeRecord("t", 1, 0, (1, 2, 3), (), (), (3,)),
    ],
)
def test_the_record_round_trips_and_refuses_every_truncation(
    record: PartitionChangeRecord,
) -> None:
    encoded = encode_record(record)
    assert decode_record(encoded) == record
    for end in range(len(encoded)):
        with pytest.raises(MetadataRecordError):
            decode_record(encoded[:end])
    with pytest.raises(MetadataRecordError, match="left over"):
        decode_record(encoded + b"\0")


@pytest.mark.parametrize(
    "record",
    [
        PartitionChangeRecord("", 1, 0, (1,)),
        PartitionChangeRecord("t", 0, 0, (1,)),
        PartitionChangeRecord("t", 1, -1, (1,)),
        PartitionChangeRecord("t", 1, 0, ()),
        PartitionChangeRecord("t", 1, 0, (1, 1)),
        PartitionChangeRecord("t", 1, 0, (1, -2)),
        PartitionChangeRecord("t", 1, 0, (1, 2), (3,)),  # adding a node it does not list
        PartitionChangeRecord("t", 1, 0, (1, 2), (), (1, 2)),  # no target left
        PartitionChangeRecord("t", 1, 0, (1, 2), (1, 2)),  # nothing before the change
        PartitionChangeRecord("t", 1, 0, (1, 2), (2, 2)),
        PartitionChangeRecord("t", 1, 0, (1, 2), (), (), (3,)),  # restoring one not listed
        PartitionChangeRecord("t", 1, 0, (1, 2), (2,), (), (2,)),  # restoring one added
        PartitionChangeRecord("t", 1, 0, (1, 2), (), (2,), (2,)),  # restoring one removed
    ],
)
def test_a_bad_record_is_refused_by_name(record: PartitionChangeRecord) -> None:
    with pytest.raises(MetadataRecordError, match="partition change record"):
        decode_record(encode_record(record))


def image_with(replicas: tuple[int, ...] = (1, 2)) -> MetadataImage:
    image = MetadataImage()
    image.apply(0, image.plan_create("events", 2, len(replicas), {}, NODES))
    topic = image.topics["events"]
    # Place partition 0 as the test wants it, with a completion-shaped record.
    image.apply(1, PartitionChangeRecord("events", topic.topic_id, 0, replicas))
    return image


def apply(image: MetadataImage, record: PartitionChangeRecord | None) -> None:
    assert record is not None
    image.apply(image.applied_offset + 1, record)


def test_a_move_lists_target_then_leaving_and_completes_on_the_groups_report() -> None:
    image = image_with((1, 2))
    record = image.plan_alter_reassignment("events", 0, [2, 3], NODES)
    assert record == PartitionChangeRecord(
        "events", image.topics["events"].topic_id, 0, (2, 3, 1), (3,), (1,)
    )
    apply(image, record)
    topic = image.topics["events"]
    assert topic.assignment[0] == (2, 3, 1)
    moving = topic.reassignments[0]
    # The set before the change, in the order the record lists it (as Kafka's revert).
    assert (moving.target, moving.original) == ((2, 3), (2, 1))
    assert image.reassignments() == {TP: moving}
    assert image.reassignments([TP, TopicPartition("events", 1), TopicPartition("x", 0)]) == {
        TP: moving
    }
    # The same target again changes nothing; a report of another configuration is refused.
    assert image.plan_alter_reassignment("events", 0, [2, 3], NODES) is None
    with pytest.raises(InvalidReplicaAssignmentError, match="voters"):
        image.plan_complete_reassignment("events", topic.topic_id, 0, [1, 2, 3])
    apply(image, image.plan_complete_reassignment("events", topic.topic_id, 0, [3, 2]))
    topic = image.topics["events"]
    assert topic.assignment[0] == (2, 3) and not topic.reassignments
    assert image.reassignments() == {}
    with pytest.raises(NoReassignmentInProgressError):  # a repeated report
        image.plan_complete_reassignment("events", topic.topic_id, 0, [2, 3])


def test_cancelling_goes_back_keeping_every_node_the_group_may_count() -> None:
    image = image_with((1, 2))
    apply(image, image.plan_alter_reassignment("events", 0, [2, 3], NODES))
    cancel = image.plan_alter_reassignment("events", 0, None, NODES)
    assert cancel is not None
    apply(image, cancel)
    moving = image.topics["events"].reassignments[0]
    # Node 3 may be a member by now: listed (adding and removing) until the group reports;
    # node 1 may have been removed already: it is restored, but it is not adding: a replica
    # from before the change opens as a voter, never as a learner (with node 1 adding, a
    # restarted node 2 with no configuration stored took itself for the group's only voter).
    assert moving.target == (2, 1)
    assert set(moving.replicas) == {1, 2, 3} and 3 in moving.removing
    assert moving.adding == (3,) and moving.restoring == (1,)
    apply(image, image.plan_complete_reassignment("events", image.topics["events"].topic_id,
                                                  0, [1, 2]))
    assert image.topics["events"].assignment[0] == (2, 1)
    with pytest.raises(NoReassignmentInProgressError, match="no reassignment"):
        image.plan_alter_reassignment("events", 0, None, NODES)


def test_cancelling_a_removal_adds_the_node_back() -> None:
    image = image_with((1, 2, 3))
    apply(image, image.plan_alter_reassignment("events", 0, [1, 2], NODES))
    assert image.topics["events"].reassignments[0] == Reassignment((1, 2, 3), (), (3,))
    apply(image, image.plan_alter_reassignment("events", 0, None, NODES))
    # Still under way: the group may have let node 3 go and must take it back.
    assert image.topics["events"].reassignments[0] == Reassignment((1, 2, 3), (), (), (3,))
    apply(image, image.plan_complete_reassignment(
        "events", image.topics["events"].topic_id, 0, [1, 2, 3]))
    assert image.reassignments() == {}


def test_a_new_target_keeps_the_first_original_and_the_nodes_added_meanwhile() -> None:
    image = image_with((1, 2))
    apply(image, image.plan_alter_reassignment("events", 0, [2, 3], NODES))
    apply(image, image.plan_alter_reassignment("events", 0, [4, 2], NODES))
    moving = image.topics["events"].reassignments[0]
    assert moving.target == (4, 2) and set(moving.original) == {1, 2}
    assert set(moving.replicas) == {1, 2, 3, 4} and set(moving.removing) == {1, 3}
    assert 3 in moving.adding  # added by the first target, dropped by this one


def test_reordering_alone_needs_no_change_of_the_group() -> None:
    image = image_with((1, 2))
    apply(image, image.plan_alter_reassignment("events", 0, [2, 1], NODES))
    assert image.topics["events"].assignment[0] == (2, 1)
    assert image.reassignments() == {}
    assert image.plan_alter_reassignment("events", 0, [2, 1], NODES) is None


@pytest.mark.parametrize(
    ("topic", "partition", "target", "error", "message"),
    [
        ("nope", 0, [1], UnknownTopicOrPartitionError, "does not exist"),
        ("events", 2, [1], UnknownTopicOrPartitionError, "does not exist"),
        ("events", -1, [1], UnknownTopicOrPartitionError, "does not exist"),
        ("events", 0, [], InvalidReplicaAssignmentError, "cannot be empty"),
        ("events", 0, [1, 1], InvalidReplicaAssignmentError, "twice"),
        ("events", 0, [1, 9], InvalidReplicaAssignmentError, r"unknown node\(s\) \[9\]"),
        ("events", 1, None, NoReassignmentInProgressError, "no reassignment"),
    ],
)
def test_kafkas_checks_and_codes(
    topic: str, partition: int, target: list[int] | None, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        image_with().plan_alter_reassignment(topic, partition, target, NODES)


def test_records_for_another_incarnation_or_partition_are_not_applied() -> None:
    image = image_with((1, 2))
    topic_id = image.topics["events"].topic_id
    apply(image, PartitionChangeRecord("events", topic_id + 1, 0, (3, 4), (3, 4), (1, 2)))
    apply(image, PartitionChangeRecord("events", topic_id, 5, (3,)))
    assert image.topics["events"].assignment[0] == (1, 2) and image.reassignments() == {}
    apply(image, image.plan_alter_reassignment("events", 0, [3], NODES))
    apply(image, RemoveTopicRecord("events", topic_id))
    assert image.reassignments() == {}


def test_the_controllers_own_group_is_not_moved_this_way() -> None:
    """The metadata partition is no topic of the image: its group's membership is the
    controller's business, not a reassignment's (which its nodes would otherwise apply from
    the very log they are moving)."""
    with pytest.raises(UnknownTopicOrPartitionError):
        image_with().plan_alter_reassignment("__cluster_metadata", 0, [1, 2, 3], NODES)
