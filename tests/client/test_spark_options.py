"""Option parsing of the tidelog Spark source and sink: Spark Kafka-source names, defaults,
precedence and refusals. Pure Python: no JVM, and pyspark only where a test says so."""

from __future__ import annotations

import pickle

import pytest

from tidelog.errors import ConfigurationError
from tidelog.spark.options import (
    EarliestBound,
    GlobalTimestamp,
    LatestBound,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
    Subscription,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from tidelog.transport import Security
from tidelog.types import IsolationLevel, TopicPartition

BASE = {"tidelog.bootstrap.servers": "127.0.0.1:7420", "subscribe": "events"}


def source(**extra: str) -> SourceOptions:
    return parse_source_options({k.lower(): v for k, v in {**BASE, **extra}.items()})


def test_defaults_follow_spark() -> None:
    opts = source()
    assert opts.client.bootstrap == ("127.0.0.1:7420",)
    assert opts.isolation_level is IsolationLevel.READ_UNCOMMITTED
    assert opts.batch_bounds() == (EarliestBound(), LatestBound())
    assert opts.stream_start() == LatestBound()
    assert opts.fail_on_data_loss is True
    assert opts.include_headers is False
    assert (opts.min_partitions, opts.max_offsets_per_trigger) == (None, None)
    assert (opts.fetch_retries, opts.fetch_retry_interval_ms) == (3, 1000)
    assert opts.consumer.auto_offset_reset == "none"  # lost offsets are seen, never papered over


def test_option_names_are_case_insensitive_as_spark_passes_them_lower_cased() -> None:
    opts = source(startingOffsets="latest", failOnDataLoss="FALSE", includeHeaders="True")
    assert opts.stream_start() == LatestBound()
    assert opts.fail_on_data_loss is False and opts.include_headers is True


def test_isolation_level_and_its_kafka_alias() -> None:
    assert source(**{"tidelog.isolation.level": "read_committed"}).isolation_level is (
        IsolationLevel.READ_COMMITTED
    )
    assert source(**{"kafka.isolation.level": "READ_COMMITTED"}).isolation_level is (
        IsolationLevel.READ_COMMITTED
    )
    with pytest.raises(ConfigurationError, match="read_uncommitted or read_committed"):
        source(**{"tidelog.isolation.level": "serializable"})
    with pytest.raises(ConfigurationError, match="only one"):
        source(**{"tidelog.isolation.level": "read_committed",
                  "kafka.isolation.level": "read_committed"})


def test_bootstrap_servers_by_its_kafka_name() -> None:
    """`kafka.bootstrap.servers`, what a job written for Spark's Kafka source sets, reaches
    the client; with both names set, the job is ambiguous."""
    kafka_named = {"kafka.bootstrap.servers": "h:1,h:2", "subscribe": "events"}
    assert parse_source_options(kafka_named).client.bootstrap == ("h:1", "h:2")
    assert parse_sink_options(kafka_named).client.bootstrap == ("h:1", "h:2")
    with pytest.raises(ConfigurationError, match="only one"):
        source(**{"kafka.bootstrap.servers": "h:1"})


def test_passthrough_settings_map_onto_the_client_configs() -> None:
    opts = source(**{"tidelog.request.timeout.ms": "5000", "tidelog.fetch.max.wait.ms": "50"})
    assert opts.client.request_timeout_ms == 5000
    assert opts.consumer.fetch_max_wait_ms == 50
    sink = parse_sink_options({**BASE, "tidelog.linger.ms": "20", "topic": "out"})
    assert sink.producer.linger_ms == 20 and sink.producer.acks == "all"
    assert sink.producer.idempotence


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("tidelog.auto.offset.reset", "startingoffsets"),
        ("tidelog.requst.timeout.ms", "unknown option 'tidelog.requst.timeout.ms'"),
        ("tidelog.linger.ms", "unknown option"),  # a producer setting on the source
    ],
)
def test_unknown_or_rejected_passthrough_fails(key: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        source(**{key: "1"})


def test_tls_settings_reach_the_clients_of_source_and_sink_and_pickle() -> None:
    """The executors build their clients from the pickled ClientConfig: its Security must
    carry the TLS files there."""
    tls = {"tidelog.security.protocol": "ssl", "tidelog.ssl.cafile": "/certs/ca.pem",
           "tidelog.ssl.certfile": "/certs/client.pem", "tidelog.ssl.keyfile": "/certs/key.pem"}
    expected = Security("SSL", "/certs/ca.pem", "/certs/client.pem", "/certs/key.pem")
    opts = source(**tls)
    assert opts.client.security == expected
    assert pickle.loads(pickle.dumps(opts)).client.security == expected
    assert parse_sink_options({**BASE, **tls, "topic": "out"}).client.security == expected
    assert source().client.security == Security()  # PLAINTEXT unless told
    with pytest.raises(ConfigurationError, match="need security_protocol='SSL'"):
        source(**{"tidelog.ssl.cafile": "/certs/ca.pem"})
    with pytest.raises(ConfigurationError, match=r"tidelog\.ssl\.keyfile"):
        source(**{"tidelog.ssl.key": "/certs/key.pem"})


def test_sink_refuses_weaker_acks() -> None:
    with pytest.raises(ConfigurationError, match="acks=all"):
        parse_sink_options({**BASE, "tidelog.acks": "1"})


def test_bootstrap_is_required() -> None:
    with pytest.raises(ConfigurationError, match=r"tidelog\.bootstrap\.servers"):
        parse_source_options({"subscribe": "events"})


def test_exactly_one_subscription() -> None:
    with pytest.raises(ConfigurationError, match="One of the following"):
        parse_source_options({"tidelog.bootstrap.servers": "h:1"})
    with pytest.raises(ConfigurationError, match="Only one of the following"):
        source(subscribePattern="ev.*")
    with pytest.raises(ConfigurationError, match="No topics to subscribe"):
        source(subscribe=" , ")


def test_subscriptions_resolve_against_the_cluster_topics() -> None:
    counts = {"events": 2, "events-eu": 1, "other": 3}
    assert source().subscription.resolve(counts) == [
        TopicPartition("events", 0), TopicPartition("events", 1)
    ]
    by_pattern = parse_source_options(
        {"tidelog.bootstrap.servers": "h:1", "subscribePattern": "events.*"}
    ).subscription
    assert by_pattern.resolve(counts) == [
        TopicPartition("events", 0), TopicPartition("events", 1), TopicPartition("events-eu", 0)
    ]
    assert Subscription("subscribepattern", pattern="vent").resolve(counts) == []  # full match
    assert Subscription("subscribe", topics=("missing",)).resolve(counts) == []
    assign = parse_source_options(
        {"tidelog.bootstrap.servers": "h:1", "assign": '{"other":[2,0]}'}
    ).subscription
    assert assign.resolve(counts) == [TopicPartition("other", 0), TopicPartition("other", 2)]


@pytest.mark.parametrize("value", ["[1]", '{"t": 0}', '{"t": ["0"]}', "nope", "{}"])
def test_bad_assign_json(value: str) -> None:
    with pytest.raises(ConfigurationError, match="assign"):
        parse_source_options({"tidelog.bootstrap.servers": "h:1", "assign": value})


def test_offsets_json_with_sentinels() -> None:
    opts = source(
        startingOffsets='{"events":{"0":23,"1":-2}}', endingOffsets='{"events":{"0":-1,"1":50}}'
    )
    start, end = opts.batch_bounds()
    p0, p1 = TopicPartition("events", 0), TopicPartition("events", 1)
    assert start == SpecificOffsets({p0: 23, p1: -2})
    assert end == SpecificOffsets({p0: -1, p1: 50})


@pytest.mark.parametrize("text", ['{"events":{"0":"x"}}', '{"events":[1]}', "[]", "late"])
def test_bad_offsets_json_shows_an_example(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"Expected e\.g\."):
        source(startingOffsets=text)


def test_offsets_below_earliest_sentinel_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="-2 for earliest"):
        source(startingOffsets='{"events":{"0":-3}}')


def test_batch_refuses_latest_start_and_earliest_end() -> None:
    with pytest.raises(ConfigurationError, match="starting offset can't be latest"):
        source(startingOffsets="latest").batch_bounds()
    with pytest.raises(ConfigurationError, match=r"startingOffsets for events-0 can't be latest"):
        source(startingOffsets='{"events":{"0":-1}}').batch_bounds()
    with pytest.raises(ConfigurationError, match="ending offset can't be earliest"):
        source(endingOffsets="earliest").batch_bounds()
    with pytest.raises(ConfigurationError, match="ending offset for events-0 can't be earliest"):
        source(endingOffsets='{"events":{"0":-2}}').batch_bounds()


@pytest.mark.parametrize(
    "option", ["endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"]
)
def test_streams_refuse_ending_options(option: str) -> None:
    value = {"endingOffsets": "latest", "endingTimestamp": "5",
             "endingOffsetsByTimestamp": '{"events":{"0":5}}'}[option]
    with pytest.raises(ConfigurationError, match="ending offset not valid in streaming"):
        source(**{option: value}).stream_start()


def test_timestamp_precedence_is_sparks() -> None:
    """startingTimestamp > startingOffsetsByTimestamp > startingOffsets; same for the end."""
    all_three = source(
        startingTimestamp="1000",
        startingOffsetsByTimestamp='{"events":{"0":2000}}',
        startingOffsets="earliest",
        endingTimestamp="9000",
        endingOffsetsByTimestamp='{"events":{"0":8000}}',
        endingOffsets="latest",
    )
    assert all_three.batch_bounds() == (GlobalTimestamp(1000), GlobalTimestamp(9000))
    two = source(startingOffsetsByTimestamp='{"events":{"0":2000}}', startingOffsets="earliest")
    assert two.batch_bounds()[0] == SpecificTimestamps({TopicPartition("events", 0): 2000})


@pytest.mark.parametrize("value", ["1.5", "abc", "1,2", ""])
def test_starting_timestamp_must_be_a_single_long(value: str) -> None:
    with pytest.raises(ConfigurationError, match="Expected a single long value"):
        source(startingTimestamp=value)


def test_negative_timestamps_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="must be >= 0"):
        source(startingTimestamp="-5")
    with pytest.raises(ConfigurationError, match="must be >= 0"):
        source(endingOffsetsByTimestamp='{"events":{"0":-1}}')


def test_strategy_option() -> None:
    assert source(startingOffsetsByTimestampStrategy="LATEST").starting_timestamp_latest
    assert not source().starting_timestamp_latest
    with pytest.raises(ConfigurationError, match="error' or 'latest"):
        source(startingOffsetsByTimestampStrategy="earliest")


@pytest.mark.parametrize("option", ["minPartitions", "maxOffsetsPerTrigger"])
@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_positive_integer_options(option: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"Invalid value '{value}' for option '{option}'"):
        source(**{option: value})


def test_numeric_and_boolean_options() -> None:
    opts = source(minPartitions="8", maxOffsetsPerTrigger="1000",
                  **{"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "10",
                     "kafkaConsumer.pollTimeoutMs": "2000"})
    assert (opts.min_partitions, opts.max_offsets_per_trigger) == (8, 1000)
    assert (opts.fetch_retries, opts.fetch_retry_interval_ms, opts.poll_timeout_ms) == (5, 10, 2000)
    with pytest.raises(ConfigurationError, match="true or false"):
        source(failOnDataLoss="yes")
    with pytest.raises(ConfigurationError, match=">= 0"):
        source(**{"fetchOffset.numRetries": "-1"})


def test_sink_topic_option() -> None:
    assert parse_sink_options({**BASE, "topic": "out"}).topic == "out"
    assert parse_sink_options(BASE).topic is None
    with pytest.raises(ConfigurationError, match="must not be empty"):
        parse_sink_options({**BASE, "topic": " "})


def test_offsets_json_round_trip_has_string_keys_only() -> None:
    offsets = {TopicPartition("b", 10): 7, TopicPartition("a", 2): 0, TopicPartition("b", 9): 3}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"2": 0}, "b": {"10": 7, "9": 3}}
    assert offsets_from_json(as_json) == offsets


def test_options_pickle_for_executors() -> None:
    opts = source(
        startingOffsets='{"events":{"0":1}}', **{"tidelog.isolation.level": "read_committed"}
    )
    assert pickle.loads(pickle.dumps(opts)) == opts


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_batches_match_sparks_conversion_of_the_schema(include_headers: bool) -> None:
    """Spark accepts a read()'s Arrow batches only when their schema equals its own conversion
    of the source's schema; a mismatch would fail every read at run time."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from tidelog.spark.io import arrow_schema
    from tidelog.spark.source import source_schema

    expected = to_arrow_schema(source_schema(include_headers), timezone="UTC")
    assert arrow_schema(include_headers).equals(expected)


@pytest.mark.parametrize(
    ("ddl", "topic_option", "match"),
    [
        ("key binary", True, "Required attribute 'value' not found"),
        ("value int", True, "value attribute type must be a string or binary"),
        ("value binary, key int", True, "key attribute type must be a string or binary"),
        ("value binary", False, "topic option required when no 'topic' attribute"),
        ("value binary, topic binary", False, "topic attribute type must be a string"),
        ("value binary, partition long", True, "partition attribute type must be an int"),
        ("value binary, headers array<string>", True, "headers attribute type must be"),
    ],
)
def test_sink_schema_is_checked_like_sparks_kafka_sink(
    ddl: str, topic_option: bool, match: str
) -> None:
    from pyspark.sql import types as T

    from tidelog.spark.source import check_sink_schema

    fields = []
    for column in ddl.split(", "):
        name, kind = column.split(" ")
        data_type = {
            "binary": T.BinaryType(), "int": T.IntegerType(), "long": T.LongType(),
            "string": T.StringType(), "array<string>": T.ArrayType(T.StringType()),
        }[kind]
        fields.append(T.StructField(name, data_type))
    with pytest.raises(ConfigurationError, match=match):
        check_sink_schema(T.StructType(fields), has_topic_option=topic_option)
