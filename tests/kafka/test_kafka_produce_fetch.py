"""Produce, Fetch and ListOffsets through the Kafka listener with the real clients: what each of
kafka-python, confluent-kafka, aiokafka, Tidelog's own client, kcat and kafkajs writes (keyed
records with headers and their timestamps, under every compression codec it has), every one of
them reads back equal, offsets included; Kafka clients' beginning, end and by-time offsets
under both isolation levels are Tidelog's; a fetch from inside a batch returns the whole batch
and the client skips to its offset; fetch sessions are answered as by a Kafka broker that keeps
none."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest
from kafka_clients import (
    CLIENT_TIMEOUT_S,
    CONFLUENT_QUIET,
    INSTALL_HINTS,
    READERS,
    TOOL_READERS,
    TOOL_WRITERS,
    WRITERS,
    Rec,
    codecs,
    kafkajs_headers,
    read_tidelog,
    records_for,
    tool_codecs,
    tool_ready,
    write_tidelog,
)
from kafka_wire import ask, connect, frame_of, read_answer, served_table
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from tidelog.cli import main
from tidelog.client import Client
from tidelog.node.kafka.codec import request_type
from tidelog.node.kafka.fetch import FETCH_KEY, LIST_OFFSETS_KEY
from tidelog.node.kafka.fields import build, entity_of
from tidelog.node.kafka.produce import INIT_PRODUCER_ID_KEY, PRODUCE_KEY
from tidelog.producer import Producer
from tidelog.records import RecordInput, build_batch, read_header
from tidelog.testing import LocalCluster, wait_for
from tidelog.types import IsolationLevel, OffsetSpec, TopicPartition

pytestmark = pytest.mark.timeout(60)

#: Records each writer writes per codec.
PER_CODEC = 4
ALL_READERS = [*READERS, "tidelog"]


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as opened:
        yield opened


def _now_ms() -> int:
    # Recent timestamps: far older ones would fall to the topic's time retention at once.
    return int(time.time() * 1000) - 60_000


def _read(cluster: LocalCluster, reader: str, topic: str, start: int, count: int,
          isolation: str = "read_uncommitted") -> list[Rec]:
    if reader == "tidelog":
        return read_tidelog(cluster.bootstrap, topic, start, count, isolation)
    return READERS[reader](cluster.kafka_bootstrap, topic, start, count, isolation)


@pytest.mark.parametrize("writer", [*WRITERS, "tidelog", *TOOL_WRITERS])
def test_what_each_client_writes_every_client_reads_equal(
    cluster: LocalCluster, client: Client, writer: str
) -> None:
    """kcat and kafkajs (when installed) write and read too, each as far as it can: kcat sets
    no timestamps (its records carry the time they were sent); kafkajs groups a record's
    headers by name, and has no lz4 or zstd, so it reads the records of the other codecs
    before those are written (it decodes every batch a fetch returns)."""
    if writer in TOOL_WRITERS and not tool_ready(writer):
        pytest.skip(INSTALL_HINTS[writer])
    topic = f"from-{writer}"
    client.create_topic(topic, partitions=1, replication_factor=1)
    base = _now_ms()
    written: list[Rec] = []
    sent_from = int(time.time() * 1000)
    kafkajs_reads = tool_codecs("kafkajs") if tool_ready("kafkajs") else []
    for codec in (tool_codecs(writer) if writer in TOOL_WRITERS
                  else codecs(writer if writer != "tidelog" else "confluent-kafka")):
        if kafkajs_reads and codec not in kafkajs_reads:
            _check_kafkajs_reads(cluster, topic, writer, written, sent_from)
            kafkajs_reads = []
        records = records_for(writer, codec, PER_CODEC, base + len(written))
        if writer == "kafkajs":
            records = [r._replace(headers=kafkajs_headers(r.headers)) for r in records]
        if writer == "tidelog":
            write_tidelog(cluster.bootstrap, topic, codec, records)
        else:
            {**WRITERS, **TOOL_WRITERS}[writer](cluster.kafka_bootstrap, topic, codec, records)
        written += [r._replace(offset=len(written) + i) for i, r in enumerate(records)]
    if kafkajs_reads:
        _check_kafkajs_reads(cluster, topic, writer, written, sent_from)
    written = _stamped(cluster, topic, writer, written, sent_from)
    for reader in ALL_READERS:
        assert _read(cluster, reader, topic, 0, len(written)) == written, reader
    if tool_ready("kcat"):
        assert TOOL_READERS["kcat"](cluster.kafka_bootstrap, topic, 0, len(written)) == written


def _stamped(cluster: LocalCluster, topic: str, writer: str, written: list[Rec],
             sent_from: int) -> list[Rec]:
    """`written` with the timestamps kcat's records got (the time each was sent), which Tidelog's
    reader finds between the first send and now; other writers' records as they are."""
    if writer != "kcat":
        return written
    stamped = _read(cluster, "tidelog", topic, 0, len(written))
    assert all(sent_from <= r.timestamp <= time.time() * 1000 for r in stamped), stamped
    return [r._replace(timestamp=s.timestamp) for r, s in zip(written, stamped, strict=True)]


def _check_kafkajs_reads(cluster: LocalCluster, topic: str, writer: str, written: list[Rec],
                         sent_from: int) -> None:
    expected = [r._replace(headers=kafkajs_headers(r.headers))
                for r in _stamped(cluster, topic, writer, written, sent_from)]
    assert TOOL_READERS["kafkajs"](cluster.kafka_bootstrap, topic, 0, len(expected)) == expected


@pytest.fixture(scope="module")
def open_transaction(cluster: LocalCluster, client: Client) -> Iterator[tuple[int, Producer]]:
    """A partition of 5 committed records (timestamps base..base+4) followed by 2 records of
    a transaction left open: its high watermark is 7, its last stable offset 5."""
    client.create_topic("offsets", partitions=1, replication_factor=1)
    base = _now_ms()
    write_tidelog(cluster.bootstrap, "offsets", "none", records_for("t", "none", 5, base))
    producer = client.producer(transactional_id="offsets-open")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(2):
        producer.send("offsets", value=b"open", partition=0, timestamp_ms=base + 10 + i)
    producer.flush(timeout=CLIENT_TIMEOUT_S)
    try:
        yield base, producer
    finally:
        producer.close(timeout=CLIENT_TIMEOUT_S)


def _tidelog_offsets(cluster: LocalCluster, capsys: pytest.CaptureFixture[str], time_spec: str,
                     isolation: str) -> int:
    """The offset `tidelog offsets` prints for the partition (``offsets:0:7``, a time lookup
    followed by its record's timestamp)."""
    assert main(["offsets", "offsets", "--time", time_spec, "--isolation", isolation,
                 "--bootstrap", cluster.bootstrap]) == 0
    [line] = capsys.readouterr().out.splitlines()
    return int(line.split(":")[2].split()[0])


def _kafka_python_offsets(cluster: LocalCluster, isolation: str, ts: int) -> tuple[int, ...]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap,
                                   isolation_level=isolation, enable_auto_commit=False)
    try:
        tp = kafka.TopicPartition("offsets", 0)
        found = consumer.offsets_for_times({tp: ts})[tp]
        return (consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp],
                found.offset, found.timestamp)
    finally:
        consumer.close()


def _confluent_offsets(cluster: LocalCluster, isolation: str, ts: int) -> tuple[int, ...]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.kafka_bootstrap, "group.id": "tidelog-tests",
        "isolation.level": isolation, **CONFLUENT_QUIET,
    })
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition("offsets", 0), timeout=CLIENT_TIMEOUT_S)
        [found] = consumer.offsets_for_times(
            [confluent_kafka.TopicPartition("offsets", 0, ts)], timeout=CLIENT_TIMEOUT_S)
        return low, high, found.offset
    finally:
        consumer.close()


def _aiokafka_offsets(cluster: LocalCluster, isolation: str, ts: int) -> tuple[int, ...]:
    async def ask_offsets() -> tuple[int, ...]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap,
                                             isolation_level=isolation,
                                             enable_auto_commit=False)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition("offsets", 0)
            found = (await consumer.offsets_for_times({tp: ts}))[tp]
            return ((await consumer.beginning_offsets([tp]))[tp],
                    (await consumer.end_offsets([tp]))[tp], found.offset, found.timestamp)
        finally:
            await consumer.stop()

    return asyncio.run(ask_offsets())


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_kafka_clients_list_the_offsets_tidelog_lists(
    cluster: LocalCluster, open_transaction: tuple[int, Producer], isolation: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, _ = open_transaction
    earliest, latest, at = (_tidelog_offsets(cluster, capsys, time_spec, isolation)
                            for time_spec in ("earliest", "latest", str(base + 2)))
    assert (earliest, latest, at) == (0, 7 if isolation == "read_uncommitted" else 5, 2)
    assert _kafka_python_offsets(cluster, isolation, base + 2) == (earliest, latest, at, base + 2)
    assert _aiokafka_offsets(cluster, isolation, base + 2) == (earliest, latest, at, base + 2)
    assert _confluent_offsets(cluster, isolation, base + 2) == (earliest, latest, at)


def test_list_offsets_max_timestamp_as_tidelog(
    cluster: LocalCluster, client: Client, open_transaction: tuple[int, Producer],
) -> None:
    """ListOffsets v7's max timestamp (-3) is Tidelog's (the open transaction's last record);
    a lookup past every record finds nothing (-1, -1), as Kafka answers it."""
    base, _ = open_transaction
    tp = TopicPartition("offsets", 0)
    expected = client.list_offsets({tp: OffsetSpec.max_timestamp()}).pop(tp)
    assert (expected.offset, expected.timestamp) == (6, base + 11)
    for timestamp, want in ((-3, (6, base + 11)), (base + 10**6, (-1, -1))):
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            ListOffsetsTopic(name="offsets", partitions=(ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=timestamp),)),
        ))
        [answer] = ask(cluster.kafka_address_of(1), request).topics[0].partitions
        assert answer.error_code == ErrorCode.none
        assert (answer.offset, answer.timestamp) == want


def _fetch(offset: int, session_epoch: int = -1) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
        isolation_level=0,
        session_id=0, session_epoch=session_epoch, forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(topic="one-batch", partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20,
        ),)),),
    )


@pytest.fixture(scope="module")
def one_batch(cluster: LocalCluster, client: Client) -> list[Rec]:
    """Ten records in one lz4 batch of confluent-kafka's, at offsets 0-9."""
    client.create_topic("one-batch", partitions=1, replication_factor=1)
    records = records_for("confluent-kafka", "lz4", 10, _now_ms())
    WRITERS["confluent-kafka"](cluster.kafka_bootstrap, "one-batch", "lz4", records)
    return [r._replace(offset=i) for i, r in enumerate(records)]


def test_a_fetch_inside_a_batch_returns_the_whole_batch(
    cluster: LocalCluster, one_batch: list[Rec]
) -> None:
    whole = ask(cluster.kafka_address_of(1), _fetch(0)).responses[0].partitions[0].records
    answer = ask(cluster.kafka_address_of(1), _fetch(4))
    assert (answer.error_code, answer.session_id) == (ErrorCode.none, 0)
    [part] = answer.responses[0].partitions
    assert part.error_code == ErrorCode.none and part.high_watermark == 10
    # The batch comes from its base offset (as stored), and the clients skip to their offset.
    assert part.records == whole and read_header(part.records).base_offset == 0
    for reader in ALL_READERS:
        assert _read(cluster, reader, "one-batch", 4, 6) == one_batch[4:], reader


def test_fetch_sessions_are_answered_as_by_a_broker_that_keeps_none(
    cluster: LocalCluster, one_batch: list[Rec]
) -> None:
    """Epoch 0 asks for a session: served in full, with session id 0 (none was made); an
    incremental fetch names a session that cannot exist."""
    created = ask(cluster.kafka_address_of(1), _fetch(0, session_epoch=0))
    assert (created.error_code, created.session_id) == (ErrorCode.none, 0)
    assert created.responses[0].partitions[0].error_code == ErrorCode.none
    incremental = ask(cluster.kafka_address_of(1), _fetch(0, session_epoch=1))
    assert incremental.error_code == ErrorCode.fetch_session_id_not_found
    assert incremental.responses == ()


def test_offset_for_leader_epoch_answers_as_a_kafka_leader(
    cluster: LocalCluster, one_batch: list[Rec]
) -> None:
    """The current epoch ends at the log end; a later epoch, or none, is (-1, -1); the epoch
    the caller believes current is checked first; an unknown partition is named."""
    address = cluster.kafka_address_of(1)
    [topic] = ask(address, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="one-batch"),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )).topics
    epoch = topic.partitions[0].leader_epoch
    asked = [(0, -1, epoch), (0, epoch, epoch + 1), (0, epoch + 1, epoch), (0, -1, -1), (7, -1, 0)]
    answers = []
    for partition, current, leader_epoch in asked:
        [result] = ask(address, OffsetForLeaderEpochRequest(replica_id=-1, topics=(
            OffsetForLeaderTopic(topic="one-batch", partitions=(OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=current, leader_epoch=leader_epoch,
            ),)),
        ))).topics
        [part] = result.partitions
        answers.append((part.error_code, part.leader_epoch, part.end_offset))
    assert answers == [
        (ErrorCode.none, epoch, len(one_batch)),
        (ErrorCode.none, -1, -1),
        (ErrorCode.unknown_leader_epoch, -1, -1),
        (ErrorCode.none, -1, -1),
        (ErrorCode.unknown_topic_or_partition, -1, -1),
    ]


def test_produce_with_acks_0_gets_no_answer(cluster: LocalCluster, client: Client) -> None:
    """The batch is written, and the next answer on the connection is the next request's."""
    client.create_topic("acks-0", partitions=1, replication_factor=1)
    batch = build_batch([RecordInput(b"fire and forget", b"k", _now_ms())])
    produce = ProduceRequest(
        transactional_id=None, acks=0, timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name="acks-0", partition_data=(
            PartitionProduceData(index=0, records=batch),)),),
    )
    metadata = MetadataRequest(topics=(), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    with connect(cluster.kafka_address_of(1)) as sock:
        sock.sendall(frame_of(produce, 1) + frame_of(metadata, 2))
        correlation_id, _ = read_answer(sock, 3, 12)
    assert correlation_id == 2
    assert [r.value for r in read_tidelog(cluster.bootstrap, "acks-0", 0, 1)] == [
        b"fire and forget"]


@pytest.fixture(scope="module")
def aborted_then_committed(cluster: LocalCluster, client: Client) -> list[Rec]:
    """A transaction of two records aborted (offsets 0-1, its marker at 2), then one of two
    records committed (3-4, its marker at 5), through Tidelog's transactional producer; the
    committed records once read_committed readers can see them."""
    client.create_topic("aborted", partitions=1, replication_factor=1)
    base = _now_ms()
    records = records_for("txn", "none", 4, base)
    producer = client.producer(transactional_id="aborted-then-committed")
    try:
        producer.init_transactions()
        for records_in, end in ((records[:2], producer.abort_transaction),
                                (records[2:], producer.commit_transaction)):
            producer.begin_transaction()
            for r in records_in:
                producer.send("aborted", value=r.value, key=r.key, partition=0,
                              timestamp_ms=r.timestamp, headers=list(r.headers))
            producer.flush(timeout=CLIENT_TIMEOUT_S)
            end()
    finally:
        producer.close(timeout=CLIENT_TIMEOUT_S)
    tp = TopicPartition("aborted", 0)
    wait_for(lambda: client.list_offsets({tp: OffsetSpec.latest()},
                                         IsolationLevel.READ_COMMITTED)[tp].offset == 6,
             CLIENT_TIMEOUT_S, "the committed transaction's marker below the LSO")
    return [r._replace(offset=offset) for r, offset in zip(records, (0, 1, 3, 4), strict=True)]


@pytest.mark.parametrize("reader", ALL_READERS)
def test_read_committed_skips_aborted_records(
    cluster: LocalCluster, aborted_then_committed: list[Rec], reader: str
) -> None:
    """Fetch gives read_committed readers the aborted transactions of what they read, so
    they skip those records (and every reader skips the markers)."""
    assert _read(cluster, reader, "aborted", 0, 2, "read_committed") == (
        aborted_then_committed[2:])
    assert _read(cluster, reader, "aborted", 0, 4) == aborted_then_committed


def test_a_produce_of_no_batch_or_a_bad_one_is_refused_with_its_code(
    cluster: LocalCluster, client: Client
) -> None:
    """No records, two batches, a truncated or foreign one: the leader's validation refuses
    each with CORRUPT_MESSAGE and writes nothing."""
    client.create_topic("bad-batches", partitions=1, replication_factor=1)
    batch = build_batch([RecordInput(b"v", b"k", _now_ms())])
    for records in (None, b"", batch + batch, batch[:30], b"\0" * len(batch)):
        answer = ask(cluster.kafka_address_of(1), ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(TopicProduceData(name="bad-batches", partition_data=(
                PartitionProduceData(index=0, records=records),)),),
        ))
        [part] = answer.responses[0].partition_responses
        assert (part.error_code, part.base_offset) == (ErrorCode.corrupt_message, -1)
        assert part.error_message
    tp = TopicPartition("bad-batches", 0)
    assert client.list_offsets({tp: OffsetSpec.latest()})[tp].offset == 0


def _versions(key: int) -> list[int]:
    low, high = served_table()[key]
    return list(range(low, high + 1))


def _request(key: int, version: int, **values: Any) -> Any:
    """`key`'s request at `version` from `values` (a nested entity: a callable given its
    version's request class), each version keeping the fields it has."""
    entity = request_type(key, version)
    return build(entity, **{
        name: value(entity) if callable(value) else value for name, value in values.items()
    })


def _nested(entity_name: str, /, **values: Any) -> Any:
    """A tuple of one nested entity `entity_name` of the request's version, for `_request`."""
    return lambda entity: (build(entity_of(entity, entity_name), **{
        field: value(entity) if callable(value) else value for field, value in values.items()
    }),)


@pytest.mark.parametrize("version", _versions(PRODUCE_KEY))
def test_every_produce_version_writes(cluster: LocalCluster, client: Client,
                                      version: int) -> None:
    topic = f"produce-v{version}"
    client.create_topic(topic, partitions=1, replication_factor=1)
    batch = build_batch([RecordInput(b"v", b"k", _now_ms()), RecordInput(b"w", b"k", _now_ms())])
    asked = _request(PRODUCE_KEY, version, transactional_id=None, acks=-1,
                     timeout=datetime.timedelta(seconds=10), topic_data=_nested(
                         "TopicProduceData", name=topic, partition_data=_nested(
                             "PartitionProduceData", index=0, records=batch)))
    for base_offset in (0, 2):
        [part] = ask(cluster.kafka_address_of(1), asked).responses[0].partition_responses
        assert (part.error_code, part.base_offset) == (ErrorCode.none, base_offset)


@pytest.mark.parametrize("version", _versions(FETCH_KEY))
def test_every_fetch_version_reads_the_batch(
    cluster: LocalCluster, one_batch: list[Rec], version: int
) -> None:
    whole = ask(cluster.kafka_address_of(1), _fetch(0)).responses[0].partitions[0].records
    asked = _request(
        FETCH_KEY, version, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
        max_bytes=1 << 20, isolation_level=1, session_id=0, session_epoch=-1,
        forgotten_topics_data=(), rack_id="", topics=_nested(
            "FetchTopic", topic="one-batch", partitions=_nested(
                "FetchPartition", partition=0, current_leader_epoch=-1, fetch_offset=5,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)))
    [part] = ask(cluster.kafka_address_of(1), asked).responses[0].partitions
    assert (part.error_code, part.high_watermark, part.records) == (ErrorCode.none, 10, whole)
    assert part.last_stable_offset == 10 and part.aborted_transactions == ()


@pytest.mark.parametrize("version", _versions(LIST_OFFSETS_KEY))
def test_every_list_offsets_version_finds_the_latest(
    cluster: LocalCluster, one_batch: list[Rec], version: int
) -> None:
    asked = _request(LIST_OFFSETS_KEY, version, replica_id=-1, isolation_level=0,
                     timeout=datetime.timedelta(seconds=5),
                     topics=_nested("ListOffsetsTopic", name="one-batch", partitions=_nested(
                         "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1,
                         timestamp=-1)))
    [part] = ask(cluster.kafka_address_of(1), asked).topics[0].partitions
    assert (part.error_code, part.offset) == (ErrorCode.none, 10)


@pytest.mark.parametrize("version", _versions(INIT_PRODUCER_ID_KEY))
def test_every_init_producer_id_version_gives_an_idempotent_producer_its_id(
    cluster: LocalCluster, version: int
) -> None:
    asked = _request(INIT_PRODUCER_ID_KEY, version, transactional_id=None,
                     transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                     producer_epoch=-1)
    answer = ask(cluster.kafka_address_of(1), asked)
    assert (answer.error_code, answer.producer_epoch) == (ErrorCode.none, 0)
    assert answer.producer_id >= 0
