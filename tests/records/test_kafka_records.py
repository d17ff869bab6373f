"""Tidelog's batches are Kafka's v2 batches, records included: a batch a real Kafka client
library builds is one the leader accepts and decodes to the same records, and a batch Tidelog
builds (data and control) is one that library parses to the same records, uncompressed and
compressed. kafka-python's own encoder and decoder are the other side; a codec is tested when
kafka-python has its library installed."""

from __future__ import annotations

import kafka.codec
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tidelog.compression import Codec
from tidelog.records import (
    ControlType,
    RecordInput,
    build_batch,
    build_txn_marker,
    control_record_of,
    decode_records,
    read_header,
    validate_batch,
)

T = 1_700_000_000_000
#: Records with and without keys, values and headers, and deltas and lengths of one, two
#: and three varint bytes.
RECORDS = [
    RecordInput(value=b"hello", key=b"k", timestamp=T, headers=[("h", b"v")]),
    RecordInput(value=None, key=b"deleted", timestamp=T + 5),
    RecordInput(value=b"x" * 200, key=None, timestamp=T - 3, headers=[("a", None), ("b", b"")]),
    RecordInput(value=b"y" * 9000, key=b"big", timestamp=T + 70_000),
    *(RecordInput(value=b"%d" % i, key=None, timestamp=T + i) for i in range(70)),
]
_HAS = {
    Codec.NONE: True,
    Codec.GZIP: kafka.codec.has_gzip(),
    Codec.SNAPPY: kafka.codec.has_snappy(),
    Codec.LZ4: kafka.codec.has_lz4(),
    Codec.ZSTD: kafka.codec.has_zstd(),
}
CODECS = [
    pytest.param(codec, marks=pytest.mark.skipif(
        not present, reason=f"kafka-python has no {codec.name.lower()} library installed"))
    for codec, present in _HAS.items()
]


def _as_tuples(records: list[RecordInput]) -> list[tuple[object, ...]]:
    return [
        (offset, r.timestamp, r.key, r.value, tuple(r.headers))
        for offset, r in enumerate(records)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_kafka_python_builds_is_accepted_and_decodes_to_its_records(
    codec: Codec,
) -> None:
    """Before: the leader refused every such batch (CORRUPT_MESSAGE, "Kafka's v2 record
    encoding"), as Tidelog's records were fixed-width."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=int(codec), is_transactional=False, producer_id=7,
        producer_epoch=0, base_sequence=0, batch_size=1 << 20,
    )
    for offset, r in enumerate(RECORDS):
        assert builder.append(offset, r.timestamp, r.key, r.value, list(r.headers)) is not None
    batch = bytes(builder.build())
    header = validate_batch(
        batch, now_ms=T, timestamp_before_max_ms=1 << 40, timestamp_after_max_ms=1 << 40,
        from_client=True,
    )
    assert header.attributes & 0x07 == codec
    decoded = decode_records(batch, 0, header)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == _as_tuples(
        RECORDS
    )


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_tidelog_builds_is_parsed_by_kafka_python_to_its_records(codec: Codec) -> None:
    batch = build_batch(RECORDS, producer_id=7, producer_epoch=0, base_sequence=0,
                        compression=codec)
    parsed = DefaultRecordBatch(batch)
    assert parsed.validate_crc()
    assert (parsed.compression_type, parsed.producer_id, parsed.base_sequence) == (codec, 7, 0)
    assert [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in parsed
    ] == _as_tuples(RECORDS)


@pytest.mark.parametrize("commit", [True, False])
def test_a_transaction_marker_is_kafkas_control_record(commit: bool) -> None:
    """kafka-python reads the marker's key as Kafka's (version 0, type) and Tidelog reads a
    marker kafka-python's control-record layout describes: the same bytes."""
    batch = build_txn_marker(commit, producer_id=7, producer_epoch=3, coordinator_epoch=11)
    parsed = DefaultRecordBatch(batch)
    assert parsed.is_control_batch and parsed.is_transactional
    (record,) = list(parsed)
    assert (record.version, record.type, record.commit) == (0, int(commit), commit)
    assert record.value == b"\x00\x00\x00\x00\x00\x0b"  # version 0, coordinator epoch 11
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    assert control_record_of(batch, 0, read_header(batch)) == (kind, 11)
