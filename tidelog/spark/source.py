"""The PySpark data source classes: ``TidelogSource`` (format ``tidelog``, registered as
``tidelog.spark.TidelogDataSource``) and its batch and streaming readers and writers.
Everything with real logic lives in modules without pyspark
(options, planning, lookup, io); this one binds them to Spark's Python Data Source API.

Where each call runs decides what an object may hold: Spark pickles the data source, readers,
writers and input partitions into other Python processes, so none keeps a gRPC client across
a pickle. The long-lived driver-side stream reader caches one (dropped by ``__getstate__``);
everything else builds a client for the call and closes it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidelog.client import Client
from tidelog.errors import ConfigurationError
from tidelog.spark.io import MicroBatchTask, read_range, write_batch_once, write_batches
from tidelog.spark.lookup import ClusterLookup
from tidelog.spark.options import (
    SinkOptions,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from tidelog.spark.planning import (
    OffsetRange,
    batch_ranges,
    rate_limit,
    resolve_bound,
    stream_ranges,
)
from tidelog.types import TopicPartition

log = logging.getLogger(__name__)

HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (KafkaRecordToRowConverter), every column nullable."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS))
    return StructType(fields)


class TidelogSource(DataSource):
    """Read topics (batch or streaming) and write rows to topics, with Spark's Kafka-source
    options; see ``tidelog.spark``. Jobs register ``tidelog.spark.TidelogDataSource``
    (``tidelog.spark.shipped``), which Spark ships by value and which hands its calls here."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> StructType:
        # Spark fails load() only for errors raised here; later ones surface at the first action.
        options = parse_source_options(self.options)
        return source_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = self._source_options(schema)
        return TidelogBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._source_options(schema)
        return TidelogStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        options = self._sink_options(schema, overwrite)
        if options.exactly_once:
            raise ConfigurationError(
                "exactlyOnce applies to streaming queries (it needs their micro-batch ids); "
                "a batch write is at-least-once"
            )
        return TidelogBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return TidelogStreamWriter(self._sink_options(schema, overwrite))

    def _source_options(self, schema: StructType) -> SourceOptions:
        options = parse_source_options(self.options)
        if schema != source_schema(options.include_headers):
            raise ConfigurationError(
                "the tidelog source has a fixed schema and cannot be set with a custom one"
            )
        return options

    def _sink_options(self, schema: StructType, overwrite: bool) -> SinkOptions:
        if overwrite:
            raise ConfigurationError(
                "Save mode Overwrite not allowed for tidelog: a topic is append-only. "
                "Use mode('append')."
            )
        options = parse_sink_options(self.options)
        check_sink_schema(schema, has_topic_option=options.topic is not None)
        return options


def check_sink_schema(schema: StructType, *, has_topic_option: bool) -> None:
    """The columns Spark's Kafka sink accepts (KafkaWriter.validateQuery); others are ignored."""
    columns: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    text_or_binary = (StringType, BinaryType)
    if "value" not in columns:
        raise ConfigurationError("Required attribute 'value' not found")
    if not isinstance(columns["value"], text_or_binary):
        raise ConfigurationError("value attribute type must be a string or binary")
    if "key" in columns and not isinstance(columns["key"], text_or_binary):
        raise ConfigurationError("key attribute type must be a string or binary")
    if "topic" in columns:
        if not isinstance(columns["topic"], StringType):
            raise ConfigurationError("topic attribute type must be a string")
    elif not has_topic_option:
        raise ConfigurationError(
            "topic option required when no 'topic' attribute is present. "
            "Use the topic option for setting a topic."
        )
    if "partition" in columns and not isinstance(columns["partition"], IntegerType):
        raise ConfigurationError("partition attribute type must be an int")
    if "headers" in columns and columns["headers"].simpleString() != HEADERS.simpleString():
        raise ConfigurationError(
            f"headers attribute type must be {HEADERS.simpleString()}, "
            f"got {columns['headers'].simpleString()}"
        )


# ---- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic-partition."""

    offset_range: OffsetRange
    timestamp_type: int


def _read(partition: InputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    # Spark replaces an empty partition list by one InputPartition(None).
    if not isinstance(partition, RangePartition):
        return iter(())
    return read_range(partition.offset_range, partition.timestamp_type, options)


def _range_partitions(ranges: list[OffsetRange], lookup: ClusterLookup) -> list[InputPartition]:
    return [RangePartition(r, lookup.timestamp_type(r.tp.topic)) for r in ranges]


class TidelogBatchReader(DataSourceReader):
    """Offsets are resolved once, when Spark plans the query (on the driver)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.bounds = options.batch_bounds()
        if options.max_offsets_per_trigger is not None:
            log.warning("maxOffsetsPerTrigger option ignored in batch queries")

    def partitions(self) -> list[InputPartition]:
        options = self.options
        with Client.from_config(options.client) as client:
            lookup = ClusterLookup(client, options)
            partitions = lookup.partitions()
            if not partitions:
                return []
            start = resolve_bound(
                self.bounds[0], lookup, partitions,
                starting=True, timestamp_latest=options.starting_timestamp_latest,
            )
            end = resolve_bound(self.bounds[1], lookup, partitions, starting=False)
            return _range_partitions(batch_ranges(start, end, options.min_partitions), lookup)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between offsets ``{"topic": {"partition": next_offset}}`` that Spark logs
    in its checkpoint, so a restarted query continues where it stopped."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.start_bound = options.stream_start()
        self._client: Client | None = None
        self._initial: dict[str, dict[str, int]] | None = None
        self._available_now: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    def _lookup(self) -> ClusterLookup:
        if self._client is None:
            self._client = Client.from_config(self.options.client)
        return ClusterLookup(self._client, self.options)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        # Spark asks twice; a start at latest or by time must not move in between.
        if self._initial is None:
            lookup = self._lookup()
            start = resolve_bound(
                self.start_bound, lookup, lookup.partitions(),
                starting=True, timestamp_latest=self.options.starting_timestamp_latest,
            )
            self._initial = offsets_to_json(start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._lookup().latest({})

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, Any]:
        lookup = self._lookup()
        begin = offsets_from_json(start)
        latest = self._available_now if self._available_now is not None else lookup.latest(begin)
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest, lookup.earliest)
        return offsets_to_json(latest)

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> list[InputPartition]:
        lookup = self._lookup()
        lookup.partitions()  # learns the topics' timestamp types
        ranges = stream_ranges(
            offsets_from_json(start), offsets_from_json(end), lookup.earliest,
            fail_on_data_loss=self.options.fail_on_data_loss,
            min_partitions=self.options.min_partitions,
        )
        return _range_partitions(ranges, lookup)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to do: positions live in Spark's checkpoint, as with the Kafka source."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# ---- writing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    records: int


class TidelogBatchWriter(DataSourceArrowWriter):
    """At-least-once, like Spark's Kafka sink: a retried task produces its rows again."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return Written(write_batches(iterator, self.options))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("tidelog sink wrote %d records", _total(messages))


class TidelogStreamWriter(DataSourceStreamArrowWriter):
    """At-least-once by default; with ``exactlyOnce`` each task of a micro-batch writes in one
    transaction with the batch id (io.write_batch_once), so read_committed readers of the
    output see every row once even when a restarted query runs a batch again."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if not self.options.exactly_once:
            return Written(write_batches(iterator, self.options))
        return Written(write_batch_once(iterator, self.options, _current_task()))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("tidelog sink wrote %d records in batch %d", _total(messages), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "tidelog sink: batch %d failed after %d records were written (%s)", batchId,
            _total(messages),
            "committed tasks are not written again when the batch is re-run"
            if self.options.exactly_once else "at-least-once: they stay in the topic",
        )


#: Local properties Spark sets on every task of a micro-batch (StreamExecution.QUERY_ID_KEY,
#: MicroBatchExecution.BATCH_ID_KEY); the query id is the one stored in the checkpoint.
_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"


def _current_task() -> MicroBatchTask:
    context = TaskContext.get()
    query_id = context.getLocalProperty(_QUERY_ID) if context is not None else None
    batch_id = context.getLocalProperty(_BATCH_ID) if context is not None else None
    if context is None or query_id is None or batch_id is None:
        raise ConfigurationError(
            "exactlyOnce: this task carries no streaming query or micro-batch id"
        )
    return MicroBatchTask(query_id, int(batch_id), context.partitionId())


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, Written))
