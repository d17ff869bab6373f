"""What runs on Spark executors: reading one offset range into Arrow batches, and producing
Arrow batches to topics. Every call builds its own client from the pickled config (a gRPC
channel must not be pickled, nor cross the fork Spark's Python workers come from), and closes it.

Reading follows Spark's KafkaDataConsumer: records are read until the consumer's position
reaches the range's end, so gaps (transaction markers, aborted records under read_committed)
count as progress; offsets below the log start are data loss, fatal or skipped to the earliest
offset still there.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass

import pyarrow as pa

from tidelog.client import Client
from tidelog.consumer import Consumer
from tidelog.errors import OffsetOutOfRangeError, RequestTimedOutError, TidelogError
from tidelog.producer import Producer, RecordFuture
from tidelog.spark.options import SinkOptions, SourceOptions
from tidelog.spark.planning import OffsetRange, report_data_loss
from tidelog.types import ConsumerRecord, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

HEADERS_TYPE = pa.list_(
    pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))
)
_BASE_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
]
#: One poll's wait: short, so that a range ending in records the consumer skips (markers,
#: aborted batches) is noticed as finished without waiting for data past its end.
_POLL_SLICE_MS = 500


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The source's schema as Arrow; Spark accepts batches only if it equals its own
    conversion of the Spark schema (checked in the tests)."""
    return pa.schema(_BASE_FIELDS + ([("headers", HEADERS_TYPE)] if include_headers else []))


def to_arrow(
    records: Sequence[ConsumerRecord], timestamp_type: int, schema: pa.Schema
) -> pa.RecordBatch:
    count = len(records)
    first = records[0]
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([first.topic] * count, pa.string()),
        pa.array([first.partition] * count, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.timestamp("us", tz="UTC")),
        pa.array([timestamp_type] * count, pa.int32()),
    ]
    if len(schema) > len(columns):
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records], HEADERS_TYPE
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(
    offset_range: OffsetRange, timestamp_type: int, options: SourceOptions
) -> Iterator[pa.RecordBatch]:
    """The records of [start, end) of one partition, one Arrow batch per poll."""
    schema = arrow_schema(options.include_headers)
    tp, end = offset_range.tp, offset_range.end
    with Client.from_config(options.client) as client:
        consumer = Consumer(client.connections, options.consumer)
        consumer.assign([tp])
        position = offset_range.start
        consumer.seek(tp, position)
        last_progress = time.monotonic()
        while position < end:
            try:
                records = consumer.poll(timeout_ms=min(_POLL_SLICE_MS, options.poll_timeout_ms))
            except OffsetOutOfRangeError:
                position = _after_lost_offsets(consumer, tp, position, end, options)
                if position < end:
                    consumer.seek(tp, position)
                continue
            wanted = [r for r in records if r.offset < end]
            if wanted:
                yield to_arrow(wanted, timestamp_type, schema)
            moved = consumer.position(tp)
            if moved > position:
                position, last_progress = moved, time.monotonic()
            elif time.monotonic() - last_progress > options.poll_timeout_ms / 1000:
                raise RequestTimedOutError(
                    f"Cannot fetch record for offset {position} of {tp} in "
                    f"{options.poll_timeout_ms} milliseconds (kafkaConsumer.pollTimeoutMs)"
                )


def _after_lost_offsets(
    consumer: Consumer, tp: TopicPartition, position: int, end: int, options: SourceOptions
) -> int:
    """Where to go on after `position` turned out to be gone: the earliest offset still in the
    log when it falls inside the range, else the range's end (skip it)."""
    earliest = consumer.beginning_offsets([tp])[tp]
    resume = earliest if position < earliest < end else end
    report_data_loss(
        f"Cannot fetch offset {position} of {tp}: the earliest offset available is {earliest}, "
        + ("skipping to it" if resume < end else "skipping the rest of the range"),
        options.fail_on_data_loss,
    )
    return resume


class SinkWriteError(TidelogError):
    name = "SINK_WRITE_FAILED"
    description = "Writing rows to a topic failed."


def write_batches(batches: Iterable[pa.RecordBatch], options: SinkOptions) -> int:
    """Produce every row (acks=all, idempotent) and wait for all acknowledgements; the number
    of records written. The first failed record fails the task, naming its topic."""
    with Client.from_config(options.client) as client:
        producer = client.producer(**asdict(options.producer))
        try:
            return _produce(producer, batches, options)
        finally:
            producer.close()


@dataclass(frozen=True)
class MicroBatchTask:
    """One writer task of a streaming query's micro-batch, named from Spark's task-local
    properties. The query id is kept in the checkpoint, so a restarted query's task of the same
    Spark partition has the same transactional id (fencing the killed run's producer) and
    finds the batch ids its predecessors committed."""

    query_id: str
    batch_id: int
    partition: int

    @property
    def transactional_id(self) -> str:
        return f"spark-{self.query_id}-{self.partition}"

    @property
    def group(self) -> str:
        """The task's own group: its committed offset is the next batch id to write."""
        return f"spark-sink-{self.query_id}-{self.partition}"

    @property
    def marker(self) -> TopicPartition:
        """The key the batch id is committed under: offsets are only taken for partitions that
        exist, and this internal one always does."""
        return TopicPartition("__consumer_offsets", 0)


def write_batch_once(
    batches: Iterable[pa.RecordBatch], options: SinkOptions, task: MicroBatchTask
) -> int:
    """Write the task's rows and its batch id in one transaction, unless a previous run of the
    query already committed this batch for this task (re-run after a restart that happened
    after the write but before Spark's checkpoint commit): then nothing is written and 0 is
    returned. ``init_transactions`` first fences and aborts a killed run's open transaction, and
    the check reads the group's offsets with require_stable, so it sees the outcome of every
    earlier attempt."""
    with Client.from_config(options.client) as client:
        producer = client.producer(
            **{**asdict(options.producer), "transactional_id": task.transactional_id}
        )
        try:
            producer.init_transactions()
            checker = client.consumer(group_id=task.group, isolation_level="read_committed")
            try:
                done = checker.committed([task.marker])[task.marker]
            finally:
                checker.close(autocommit=False)
            if done is not None and done.offset > task.batch_id:
                log.info("batch %d of task %d was committed before; not written again",
                         task.batch_id, task.partition)
                return 0
            producer.begin_transaction()
            written = _produce(producer, batches, options)
            producer.send_offsets_to_transaction(
                {task.marker: OffsetAndMetadata(task.batch_id + 1, "")}, task.group
            )
            producer.commit_transaction()
            return written
        finally:
            producer.close()


def _produce(producer: Producer, batches: Iterable[pa.RecordBatch], options: SinkOptions) -> int:
    written = 0
    pending: deque[tuple[str, RecordFuture]] = deque()
    for batch in batches:
        for topic, value, key, partition, headers in _rows(batch, options.topic):
            try:
                future = producer.send(topic, value, key=key, partition=partition, headers=headers)
            except TidelogError as exc:
                raise SinkWriteError(f"writing to topic {topic!r} failed: {exc}") from exc
            pending.append((topic, future))
        while pending and pending[0][1].done():
            written += _acknowledged(*pending.popleft())
    producer.flush()
    while pending:
        written += _acknowledged(*pending.popleft())
    return written


def _acknowledged(topic: str, future: RecordFuture) -> int:
    try:
        future.result()
    except TidelogError as exc:
        raise SinkWriteError(f"writing to topic {topic!r} failed: {exc}") from exc
    return 1


_Row = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]


def _rows(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[_Row]:
    """(topic, value, key, partition, headers) per row; strings are sent as UTF-8, as Spark's
    Kafka sink does with string columns."""
    count = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> list[object]:
        return batch.column(name).to_pylist() if name in names else [None] * count

    topics = [topic_option] * count if topic_option is not None else column("topic")
    for topic, value, key, partition, headers in zip(
        topics, column("value"), column("key"), column("partition"), column("headers"),
        strict=True,
    ):
        if topic is None:
            raise SinkWriteError(
                "null topic present in the data. Use the topic option for setting a topic."
            )
        yield (
            str(topic),
            _bytes(value),
            _bytes(key),
            None if partition is None else int(partition),  # type: ignore[call-overload]
            [(h["key"], _bytes(h["value"])) for h in headers or ()],  # type: ignore[attr-defined]
        )


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise SinkWriteError(f"expected a string or binary value, got {type(value).__name__}")
