"""The controller's state machine alone (no cluster): typed metadata records, their encoding
(format 1, and format 0 as nodes wrote it before), strict decoding, and applying committed
batches as read from a real metadata log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tidelog.clock import wall_clock_ms
from tidelog.coordinator.controller import METADATA_TP, MetadataImage, TopicImage
from tidelog.coordinator.metadata_records import (
    FORMAT_VERSION,
    MetadataRecord,
    MetadataRecordError,
    ProducerIdsRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)
from tidelog.records import ControlType, RecordInput, build_batch, build_control_batch
from tidelog.storage import Log

NODES = [1, 2, 3]
RECORDS: list[MetadataRecord] = [
    TopicRecord("events", 1, ((1, 2), (2, 3), (3, 1)), {"retention.ms": "1000", "ü": "ß"}),
    TopicRecord("solo", 2, ((7,),)),
    RemoveTopicRecord("events", 1),
    ProducerIdsRecord(0, 1000),
    ProducerIdsRecord(2**40, 1),
    UserScramCredentialRecord("alice", 1, b"salt", b"k" * 32, b"s" * 32, 8192),
    RemoveUserScramCredentialRecord("alice", 2),
]

#: Exactly what the JSON encoder before format 1 wrote (sorted keys, no spaces).
FORMAT_0 = [
    b'{"assignment":[[1,2],[2,3],[3,1]],"configs":{"retention.ms":"1000"},"name":"events",'
    b'"topic_id":1,"type":"create_topic"}',
    b'{"count":1000,"first":0,"type":"allocate_producer_ids"}',
    b'{"name":"events","topic_id":1,"type":"delete_topic"}',
]


@pytest.mark.parametrize("record", RECORDS)
def test_records_round_trip_in_format_1(record: MetadataRecord) -> None:
    encoded = encode_record(record)
    assert encoded[0] == FORMAT_VERSION
    assert decode_record(encoded) == record
    assert decode_record(memoryview(encoded)) == record


def test_format_0_records_decode_to_the_same_typed_records() -> None:
    assert [decode_record(raw) for raw in FORMAT_0] == [
        TopicRecord("events", 1, ((1, 2), (2, 3), (3, 1)), {"retention.ms": "1000"}),
        ProducerIdsRecord(0, 1000),
        RemoveTopicRecord("events", 1),
    ]


@pytest.mark.parametrize("record", RECORDS)
def test_every_truncation_and_any_trailing_byte_is_refused(record: MetadataRecord) -> None:
    encoded = encode_record(record)
    for end in range(len(encoded)):
        with pytest.raises(MetadataRecordError):
            decode_record(encoded[:end])
    with pytest.raises(MetadataRecordError, match="left over"):
        decode_record(encoded + b"\0")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\x07\x01", "unknown metadata record format 7"),
        (b"\x01\x63", "unknown metadata record kind 99"),
        (b"\x01\x02\x00\x00\x00\x02\xff\xfe" + bytes(8), "not UTF-8"),
        (b"\x01\x01\x00\x00\x00\x01t" + (1).to_bytes(8) + b"\xff\xff\xff\xff", "does not fit"),
        (encode_record(TopicRecord("t", 1, ((1, 1),))), "bad replica list"),
        (encode_record(TopicRecord("t", 0, ((1,),))), "lacks a name, id or partition"),
        (encode_record(TopicRecord("t", 1, ())), "lacks a name, id or partition"),
        (encode_record(ProducerIdsRecord(5, 0)), "is empty"),
        (b"{not json", "undecodable format-0"),
        (b"{}", "unknown format-0 metadata record type None"),
        (b'{"type":"create_topic"}', "'assignment' is missing"),
        (b'{"type":"delete_topic","name":"t","topic_id":true}', "'topic_id' is missing or not"),
        (
            b'{"type":"create_topic","name":"t","topic_id":1,"assignment":[["1"]],"configs":{}}',
            "not lists of node ids",
        ),
        (b'{"type":"allocate_producer_ids","first":0,"count":-1}', "is empty"),
    ],
)
def test_a_record_that_does_not_decode_is_a_clear_error(raw: bytes, why: str) -> None:
    """Before typed records, a format-0 record missing a field failed later, in apply, with a
    KeyError (or an AssertionError) that named nothing."""
    with pytest.raises(MetadataRecordError, match=why):
        decode_record(raw)


def test_plans_are_typed_records_and_replay_to_the_same_image() -> None:
    leader = MetadataImage()
    offset = 0
    log: list[tuple[int, bytes]] = []

    def commit(record: MetadataRecord) -> None:
        nonlocal offset
        leader.apply(offset, record)
        log.append((offset, encode_record(record)))
        offset += 1

    commit(leader.plan_create("a", 2, 3, {"cleanup.policy": "compact"}, NODES))
    commit(leader.plan_allocate_producer_ids(1000))
    commit(leader.plan_create("b", 1, 1, {}, NODES))
    commit(leader.plan_delete("a"))
    commit(leader.plan_allocate_producer_ids(1000))
    assert leader.plan_allocate_producer_ids(10) == ProducerIdsRecord(2000, 10)
    assert leader.plan_create("c", 1, 1, {}, NODES).topic_id == 3

    follower = MetadataImage()
    for at, raw in log:
        follower.apply(at, decode_record(raw))
    assert (follower.topics, follower.next_topic_id, follower.next_producer_id) == (
        leader.topics,
        leader.next_topic_id,
        leader.next_producer_id,
    )
    assert follower.topics == {"b": TopicImage("b", leader.topics["b"].assignment, {}, 2)}


def _metadata_log(directory: Path, values: list[bytes]) -> bytes:
    """A real metadata log with a leader-change marker and then one batch per record value,
    read back whole, as a node applies it."""
    log = Log.open(directory / f"{METADATA_TP.topic}-{METADATA_TP.partition}", clock=wall_clock_ms)
    try:
        log.append_as_leader(build_control_batch(ControlType.LEADER_CHANGE), 1)
        now = int(time.time() * 1000)
        for value in values:
            log.append_as_leader(build_batch([RecordInput(value=value, timestamp=now)]), 1)
        return log.read(0, 1 << 20)
    finally:
        log.close()


def test_a_metadata_log_written_in_format_0_still_loads(tmp_path: Path) -> None:
    image = MetadataImage()
    image.apply_batches(_metadata_log(tmp_path, FORMAT_0))
    assert image.topics == {}
    assert (image.applied_offset, image.next_topic_id, image.next_producer_id) == (3, 2, 1000)


def test_formats_mix_in_one_log_and_replays_are_skipped(tmp_path: Path) -> None:
    values = [*FORMAT_0[:2], encode_record(TopicRecord("later", 2, ((1, 2),), {"a": "b"}))]
    data = _metadata_log(tmp_path, values)
    image = MetadataImage()
    image.apply_batches(data)
    image.apply_batches(data)  # a non-voter may be handed the same records again
    assert image.topics == {"events": TopicImage("events", ((1, 2), (2, 3), (3, 1)),
                                                {"retention.ms": "1000"}, 1),
                            "later": TopicImage("later", ((1, 2),), {"a": "b"}, 2)}
    assert image.applied_offset == 3


def test_a_bad_record_in_the_log_names_its_offset(tmp_path: Path) -> None:
    data = _metadata_log(tmp_path, [FORMAT_0[1], b'{"type":"create_topic","name":"x"}'])
    image = MetadataImage()
    with pytest.raises(MetadataRecordError, match="offset 2: format-0 field 'assignment'"):
        image.apply_batches(data)
    assert image.applied_offset == 1  # everything before it was applied, nothing after


def test_a_null_record_is_refused() -> None:
    data = build_batch([RecordInput(value=None)])
    with pytest.raises(MetadataRecordError, match="offset 0 is null"):
        MetadataImage().apply_batches(data)
