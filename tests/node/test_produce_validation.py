"""What a client writes is validated by the leader before anything is appended (one node,
shared by the module): a batch whose CRC is right but whose records lie is CORRUPT_MESSAGE,
control batches and transactional batches without a producer id are INVALID_RECORD, a codec id
Kafka does not define UNSUPPORTED_COMPRESSION_TYPE and records that are not a stream of their
codec CORRUPT_MESSAGE, Kafka's varint records are named as such; the node stays up and
consumers keep reading the records written before."""

from __future__ import annotations

import time

import pytest
from record_helpers import forge_batch, forge_record
from waiting_helpers import poll_records

from tidelog import Client, TopicPartition, errors
from tidelog.records import ControlType, RecordInput, build_batch, build_control_batch
from tidelog.testing import LocalCluster, Raw, make_batch

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def raw(raw: Raw) -> Raw:
    """The module's stubs, with its two topics created."""
    raw.create_topic("plain", 1, 1)
    raw.create_topic("compacted", 1, 1, cleanup_policy="compact")
    return raw


def _now() -> int:
    return int(time.time() * 1000)


def _lying(key: bytes | None) -> bytes:
    """Two records, a good one and one whose key length points far past its end (the CRC
    is right)."""
    return forge_batch(
        forge_record(key=key, value=b"good"),
        forge_record(key=b"k", key_len=1 << 20, offset_delta=1),
        first_timestamp=_now(),
        max_timestamp=_now(),
    )


def _consume(cluster: LocalCluster, topic: str, expected: int) -> list[bytes | None]:
    with Client(cluster.bootstrap) as client:
        consumer = client.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, 0)])
        got = [r.value for r in poll_records(consumer, expected)]
        assert consumer.poll(timeout_ms=200) == []  # nothing after, and no error
        return got


@pytest.mark.parametrize("topic", ["plain", "compacted"])
def test_records_lying_about_their_lengths_are_refused_and_readers_go_on(
    cluster: LocalCluster, raw: Raw, topic: str
) -> None:
    """Before: the plain topic acknowledged the batch and every poll after it raised
    struct.error; the compacted topic's Produce failed with gRPC UNKNOWN and a traceback."""
    node = cluster.node_ids[0]
    first = raw.produce(node, topic, 0, make_batch([b"before"]) if topic == "plain" else
                        build_batch([RecordInput(b"before", b"k0", _now())]))
    assert first.error_code == 0, first
    answer = raw.produce(node, topic, 0, _lying(b"k1"))
    assert answer.error_code == errors.CorruptMessageError.code, answer
    assert "malformed record 1" in answer.error_message
    assert "key length 1048576" in answer.error_message
    assert _consume(cluster, topic, 1) == [b"before"]
    assert "Traceback" not in cluster.logs(node)


@pytest.mark.parametrize(
    ("batch", "error", "says"),
    [
        (lambda: build_control_batch(ControlType.COMMIT, timestamp=_now(), producer_id=9,
                                     producer_epoch=0, transactional=True),
         errors.InvalidRecordError, "control batches"),
        (lambda: build_control_batch(ControlType.ABORT, timestamp=_now()),
         errors.InvalidRecordError, "control batches"),
        (lambda: build_batch([RecordInput(b"t", None, _now())], transactional=True),
         errors.InvalidRecordError, "without a producer id"),
        (lambda: forge_batch(forge_record(), attributes=6, first_timestamp=_now(),
                             max_timestamp=_now()),
         errors.UnsupportedCompressionTypeError, "codec 6"),
        (lambda: forge_batch(forge_record(), attributes=2, first_timestamp=_now(),
                             max_timestamp=_now()),
         errors.CorruptMessageError, "snappy records do not decompress"),
    ],
    ids=["txn-marker", "control", "transactional", "undefined-codec", "not-snappy"],
)
def test_what_only_the_leader_may_write_or_tidelog_cannot_read_is_refused(
    cluster: LocalCluster, raw: Raw, batch: object, error: type[errors.TidelogError], says: str
) -> None:
    """Before: each was acknowledged; a client's control batch then hid the records after it
    from every consumer."""
    node = cluster.node_ids[0]
    end = raw.list_offset(node, "plain", 0, -1).offset
    assert callable(batch)
    answer = raw.produce(node, "plain", 0, batch())
    assert answer.error_code == error.code, answer
    assert says in answer.error_message
    assert raw.list_offset(node, "plain", 0, -1).offset == end  # nothing was appended
    after = raw.produce(node, "plain", 0, make_batch([b"after"]))
    assert after.error_code == 0 and after.base_offset == end
