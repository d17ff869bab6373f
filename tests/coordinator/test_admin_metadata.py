"""The controller's side of CreatePartitions and IncrementalAlterConfigs, without processes:
the PartitionRecord and ConfigRecord encodings, the plans (Kafka's checks and error codes) and
what applying them does to the metadata image."""

from __future__ import annotations

import re

import pytest

from tidelog.configs import AlterConfigOpType, ConfigResourceType
from tidelog.coordinator.controller import MetadataImage
from tidelog.coordinator.metadata_records import (
    ConfigRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionRecord,
    RemoveTopicRecord,
    decode_record,
    encode_record,
)
from tidelog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)

NODES = [1, 2, 3]
TOPIC, NODE = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
RECORDS: list[MetadataRecord] = [
    PartitionRecord("events", 4, 3, (2, 3, 1)),
    ConfigRecord(TOPIC, "events", "retention.ms", "1000"),
    ConfigRecord(TOPIC, "events", "retention.ms", None),
    ConfigRecord(NODE, "", "segment.bytes", "ü"),
    ConfigRecord(NODE, "2", "retention.bytes", ""),
]


@pytest.mark.parametrize("record", RECORDS)
def test_new_records_round_trip_and_refuse_every_truncation(record: MetadataRecord) -> None:
    encoded = encode_record(record)
    assert decode_record(encoded) == record
    for end in range(len(encoded)):
        with pytest.raises(MetadataRecordError):
            decode_record(encoded[:end])
    with pytest.raises(MetadataRecordError, match="left over"):
        decode_record(encoded + b"\0")


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (PartitionRecord("t", 1, 0, (1,)), "an index past 0"),
        (PartitionRecord("t", 1, 1, (1, 1)), "good replica list"),
        (PartitionRecord("t", 0, 1, (1,)), "lacks a topic, an id"),
        (ConfigRecord(3, "t", "k", "v"), "resource type 3"),
        (ConfigRecord(TOPIC, "", "k", "v"), "lacks a config or topic name"),
        (ConfigRecord(NODE, "x", "k", "v"), "names node 'x'"),
    ],
)
def test_bad_new_records_are_refused_by_name(record: MetadataRecord, why: str) -> None:
    with pytest.raises(MetadataRecordError, match=why):
        decode_record(encode_record(record))


def image_with_topic(partitions: int = 2) -> MetadataImage:
    image = MetadataImage()
    image.apply(0, image.plan_create("events", partitions, 2, {"retention.ms": "5"}, NODES))
    return image


def test_create_partitions_plans_records_that_grow_the_topic() -> None:
    image = image_with_topic()
    records = image.plan_create_partitions("events", 5, None, NODES)
    topic_id = image.topics["events"].topic_id
    assert [(r.topic_id, r.partition) for r in records] == [(topic_id, p) for p in (2, 3, 4)]
    assert all(len(r.replicas) == 2 and len(set(r.replicas)) == 2 for r in records)
    for offset, record in enumerate(records, start=1):
        image.apply(offset, record)
    topic = image.topics["events"]
    assert topic.partition_count == 5 and topic.configs == {"retention.ms": "5"}
    assert topic.assignment[2:] == tuple(r.replicas for r in records)
    # A replay of the same offsets changes nothing; a record for a topic since re-created
    # (another id) or out of order is not applied.
    image.apply(3, records[-1])
    image.apply(10, PartitionRecord("events", topic_id + 1, 5, (1, 2)))
    image.apply(11, PartitionRecord("events", topic_id, 7, (1, 2)))
    assert image.topics["events"].partition_count == 5


@pytest.mark.parametrize(
    ("name", "count", "assignment", "error", "message"),
    [
        ("nope", 3, None, UnknownTopicOrPartitionError, "does not exist"),
        ("events", 2, None, InvalidPartitionsError, "already has 2 partition(s)"),
        ("events", 1, None, InvalidPartitionsError, "1 would not be an increase"),
        ("events", 10_001, None, InvalidPartitionsError, "at most 10000"),
        ("events", 4, [[1, 2]], InvalidReplicaAssignmentError, "1 assignment(s) were given"),
        ("events", 3, [[1, 2, 3]], InvalidReplicaAssignmentError, "which have 2"),
        ("events", 3, [[2, 2]], InvalidReplicaAssignmentError, "names a node twice"),
        ("events", 3, [[1, 9]], InvalidReplicaAssignmentError, "unknown node(s) [9]"),
        ("__consumer_offsets", 60, None, InvalidRequestError, "internal topic"),
    ],
)
def test_create_partitions_refusals_carry_kafkas_codes(
    name: str,
    count: int,
    assignment: list[list[int]] | None,
    error: type[Exception],
    message: str,
) -> None:
    image = image_with_topic()
    image.apply(1, image.plan_create("__consumer_offsets", 50, 1, {}, NODES,
                                     allow_internal=True))
    with pytest.raises(error, match=re.escape(message)):
        image.plan_create_partitions(name, count, assignment, NODES)


def test_a_manual_assignment_is_taken_as_given() -> None:
    image = image_with_topic()
    records = image.plan_create_partitions("events", 4, [[3, 1], [2, 3]], NODES)
    assert [r.replicas for r in records] == [(3, 1), (2, 3)]


def no_rules(configs: dict[str, str]) -> None:
    del configs


def test_incremental_alter_configs_ops_on_a_topic() -> None:
    image = image_with_topic()
    ops: list[tuple[str, int, str | None]] = [
        ("retention.ms", AlterConfigOpType.DELETE, None),
        ("segment.bytes", AlterConfigOpType.SET, "1024"),
        ("cleanup.policy", AlterConfigOpType.APPEND, "compact"),
    ]
    records = image.plan_alter_configs(
        TOPIC, "events", ops, NODES, {"cleanup.policy": "delete"}, no_rules
    )
    assert records == [
        ConfigRecord(TOPIC, "events", "cleanup.policy", "delete,compact"),
        ConfigRecord(TOPIC, "events", "retention.ms", None),
        ConfigRecord(TOPIC, "events", "segment.bytes", "1024"),
    ]
    for offset, record in enumerate(records, start=1):
        image.apply(offset, record)
    assert image.topics["events"].configs == {
        "cleanup.policy": "delete,compact", "segment.bytes": "1024"}
    subtract = [("cleanup.policy", int(AlterConfigOpType.SUBTRACT), "delete")]
    (record,) = image.plan_alter_configs(
        TOPIC, "events", subtract, NODES, {}, no_rules)
    assert record.value == "compact"
    # Setting what is already set writes nothing.
    same = [("segment.bytes", int(AlterConfigOpType.SET), "1024")]
    assert image.plan_alter_configs(TOPIC, "events", same, NODES, {},
                                    no_rules) == []


def test_node_configs_apply_per_node_and_as_the_default() -> None:
    image = MetadataImage()
    set_default = [("retention.ms", int(AlterConfigOpType.SET), "60000")]
    set_node = [("retention.ms", int(AlterConfigOpType.SET), "1000")]
    records = [
        *image.plan_alter_configs(NODE, "", set_default, NODES, {}, no_rules),
        *image.plan_alter_configs(NODE, "2", set_node, NODES, {}, no_rules),
    ]
    for offset, record in enumerate(records):
        image.apply(offset, record)
    assert image.node_configs == {"": {"retention.ms": "60000"}, "2": {"retention.ms": "1000"}}
    unset = [("retention.ms", int(AlterConfigOpType.DELETE), None)]
    (removal,) = image.plan_alter_configs(NODE, "2", unset, NODES, {}, no_rules)
    image.apply(5, removal)
    assert image.node_configs == {"": {"retention.ms": "60000"}}


@pytest.mark.parametrize(
    ("resource_type", "name", "ops", "error", "message"),
    [
        (TOPIC, "nope", [("a", 0, "1")], UnknownTopicOrPartitionError,
         "does not exist"),
        (NODE, "9", [("a", 0, "1")], InvalidRequestError, "no node '9'"),
        (NODE, "x", [("a", 0, "1")], InvalidRequestError, "no node 'x'"),
        (3, "g", [("a", 0, "1")], InvalidRequestError, "resource type 3"),
        (TOPIC, "events", [("a", 0, "1"), ("a", 1, None)],
         InvalidRequestError, "more than once"),
        (TOPIC, "events", [("a", 7, "1")], InvalidRequestError,
         "unknown config operation 7"),
        (TOPIC, "events", [("a", 0, None)], InvalidRequestError,
         "null value not supported"),
        (TOPIC, "events", [("retention.ms", 2, "1")], InvalidConfigError,
         "APPEND applies to list configs only"),
    ],
)
def test_alter_configs_refusals(
    resource_type: int,
    name: str,
    ops: list[tuple[str, int, str | None]],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        image_with_topic().plan_alter_configs(resource_type, name, ops, NODES, {}, no_rules)


def test_the_validator_sees_the_whole_result_and_its_refusal_stands() -> None:
    seen: list[dict[str, str]] = []

    def refuse(configs: dict[str, str]) -> None:
        seen.append(configs)
        raise InvalidConfigError("retention.ms='x' is not an integer")

    with pytest.raises(InvalidConfigError, match="not an integer"):
        image_with_topic().plan_alter_configs(
            TOPIC, "events", [("retention.ms", 0, "x")], NODES, {}, refuse)
    assert seen == [{"retention.ms": "x"}]


def test_a_deleted_topic_takes_no_config_record() -> None:
    image = image_with_topic()
    image.apply(1, RemoveTopicRecord("events", image.topics["events"].topic_id))
    image.apply(2, ConfigRecord(TOPIC, "events", "retention.ms", "1"))
    assert "events" not in image.topics
