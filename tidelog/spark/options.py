"""The options of the ``tidelog`` source and sink, with the names, defaults, precedence and error
messages of Spark's Kafka source (KafkaSourceProvider), so a job switches by changing the format.

Spark hands a data source its options as strings under lower-cased keys; everything here looks
names up lower-cased. Options Spark's Kafka source passes through to the Kafka client with the
``kafka.`` prefix are ``tidelog.``-prefixed here and mapped onto the client's own config
dataclasses by name (``tidelog.request.timeout.ms`` -> ``ClientConfig.request_timeout_ms``), so a
typo is an error instead of a silently ignored setting. ``kafka.bootstrap.servers`` and
``kafka.isolation.level`` are accepted as aliases of ``tidelog.bootstrap.servers`` and
``tidelog.isolation.level``, the pass-throughs every Kafka job carries.

TLS is set the same way, under the names of a client's properties file:
``tidelog.security.protocol`` (PLAINTEXT or SSL), ``tidelog.ssl.cafile``, ``tidelog.ssl.certfile``
and ``tidelog.ssl.keyfile`` (PEM files, paths as the executors see them: each executor builds its
own clients from the pickled ``ClientConfig``, which carries them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from tidelog.connections import ClientConfig
from tidelog.consumer import ConsumerConfig
from tidelog.errors import ConfigurationError
from tidelog.producer import ProducerConfig
from tidelog.transport import SECURITY_SETTINGS, Security
from tidelog.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, IsolationLevel, TopicPartition

PREFIX = "tidelog."
BOOTSTRAP = "tidelog.bootstrap.servers"
ISOLATION = "tidelog.isolation.level"
_ISOLATION_ALIAS = "kafka.isolation.level"
_BOOTSTRAP_ALIAS = "kafka.bootstrap.servers"

#: Kafka-client settings that make no sense under Spark's control, as Spark's Kafka source
#: rejects them, with the reason given to the user.
_REJECTED = {
    "auto.offset.reset": "Instead set the source option 'startingoffsets' to 'earliest' or "
    "'latest' to specify where to start.",
    "group.id": "The source keeps its positions in Spark's checkpoint, not in a group.",
    "acks": "The sink always produces with acks=all.",
    "idempotent": "The sink always produces with the idempotent producer.",
}

#: The offset JSON's sentinels (Spark's KafkaOffsetRangeLimit), equal to ListOffsets' specs.

_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'


# ---- offset bounds (Spark's KafkaOffsetRangeLimit) --------------------------------------------


@dataclass(frozen=True)
class EarliestBound:
    pass


@dataclass(frozen=True)
class LatestBound:
    pass


@dataclass(frozen=True)
class SpecificOffsets:
    """Per partition: an offset, or EARLIEST (-2) / LATEST (-1)."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class SpecificTimestamps:
    timestamps: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class GlobalTimestamp:
    timestamp: int


OffsetBound = EarliestBound | LatestBound | SpecificOffsets | SpecificTimestamps | GlobalTimestamp


# ---- subscriptions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of assign, subscribe or subscribePattern."""

    kind: Literal["assign", "subscribe", "subscribepattern"]
    partitions: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    pattern: str = ""

    def resolve(self, partition_counts: Mapping[str, int]) -> list[TopicPartition]:
        """The partitions this subscription covers, given the cluster's (non-internal) topics
        and their partition counts. Assigned partitions are taken as given, as Kafka's assign()
        does; a missing one fails the offset lookup that follows."""
        if self.kind == "assign":
            return sorted(self.partitions)
        if self.kind == "subscribe":
            names = [t for t in self.topics if t in partition_counts]
        else:
            regex = re.compile(self.pattern)
            names = [t for t in partition_counts if regex.fullmatch(t)]
        return sorted(TopicPartition(t, p) for t in names for p in range(partition_counts[t]))


# ---- what the source and the sink are configured with ---------------------------------------


@dataclass(frozen=True)
class SourceOptions:
    """A parsed, validated source configuration; picklable, so executors get it with the
    reader and build their own client from ``client``."""

    client: ClientConfig
    consumer: ConsumerConfig
    subscription: Subscription
    starting: OffsetBound | None
    ending: OffsetBound | None
    #: startingOffsetsByTimestampStrategy == "latest": an unmatched starting timestamp starts at
    #: latest instead of failing.
    starting_timestamp_latest: bool
    fail_on_data_loss: bool
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    include_headers: bool
    fetch_retries: int
    fetch_retry_interval_ms: int
    poll_timeout_ms: int

    @property
    def isolation_level(self) -> IsolationLevel:
        return IsolationLevel.parse(self.consumer.isolation_level)

    def batch_bounds(self) -> tuple[OffsetBound, OffsetBound]:
        """(start, end) of a batch query: defaults earliest..latest; a start at latest or an end
        at earliest is refused, as by Spark's validateBatchOptions."""
        start = self.starting or EarliestBound()
        end = self.ending or LatestBound()
        if isinstance(start, LatestBound):
            raise ConfigurationError("starting offset can't be latest for batch queries")
        if isinstance(start, SpecificOffsets):
            for tp, offset in sorted(start.offsets.items()):
                if offset == LATEST_TIMESTAMP:
                    raise ConfigurationError(
                        f"startingOffsets for {tp} can't be latest for batch queries"
                    )
        if isinstance(end, EarliestBound):
            raise ConfigurationError("ending offset can't be earliest for batch queries")
        if isinstance(end, SpecificOffsets):
            for tp, offset in sorted(end.offsets.items()):
                if offset == EARLIEST_TIMESTAMP:
                    raise ConfigurationError(
                        f"ending offset for {tp} can't be earliest for batch queries"
                    )
        return start, end

    def stream_start(self) -> OffsetBound:
        """Where a new streaming query starts (default latest); ending options are refused."""
        if self.ending is not None:
            raise ConfigurationError(
                "ending offset not valid in streaming queries "
                "(endingOffsets, endingOffsetsByTimestamp, endingTimestamp)"
            )
        return self.starting or LatestBound()


@dataclass(frozen=True)
class SinkOptions:
    client: ClientConfig
    producer: ProducerConfig
    #: The ``topic`` option; it wins over a topic column, as in Spark's Kafka sink.
    topic: str | None
    #: ``exactlyOnce``: a streaming query writes each micro-batch's task in one transaction,
    #: and a batch re-run after a restart from the checkpoint is not written again.
    exactly_once: bool = False


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Parse and validate everything that does not depend on batch vs streaming (Spark calls
    ``DataSource.schema()`` before it knows, and only errors raised there fail ``load()``)."""
    opts = {k.lower(): v for k, v in options.items()}
    client, passthrough = _client_config(opts, ConsumerConfig)
    if ISOLATION in opts and _ISOLATION_ALIAS in opts:
        raise ConfigurationError(f"set only one of {ISOLATION} and {_ISOLATION_ALIAS}")
    isolation = opts.get(ISOLATION, opts.get(_ISOLATION_ALIAS, "read_uncommitted"))
    IsolationLevel.parse(isolation)
    consumer = ConsumerConfig(
        isolation_level=isolation.strip().lower(), auto_offset_reset="none", **passthrough
    )
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigurationError(
            f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', got {strategy!r}"
        )
    max_per_trigger = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    return SourceOptions(
        client=client,
        consumer=consumer,
        subscription=_subscription(opts),
        starting=_bound(opts, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets"),
        ending=_bound(opts, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets"),
        starting_timestamp_latest=strategy == "latest",
        fail_on_data_loss=_boolean(opts, "failondataloss", True),
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        max_offsets_per_trigger=max_per_trigger,
        include_headers=_boolean(opts, "includeheaders", False),
        fetch_retries=_integer(opts, "fetchoffset.numretries", 3, minimum=0),
        fetch_retry_interval_ms=_integer(opts, "fetchoffset.retryintervalms", 1000, minimum=0),
        poll_timeout_ms=_integer(opts, "kafkaconsumer.polltimeoutms", 120_000, minimum=1),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = {k.lower(): v for k, v in options.items()}
    client, passthrough = _client_config(opts, ProducerConfig)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigurationError("the topic option must not be empty")
    producer = ProducerConfig(acks="all", idempotent=True, **passthrough)
    return SinkOptions(
        client=client, producer=producer, topic=topic,
        exactly_once=_boolean(opts, "exactlyonce", False),
    )


# ---- offsets as JSON ---------------------------------------------------------------------------


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's KafkaSourceOffset shape, ``{"topic": {"partition": next_offset}}``: string keys
    only, because the streaming runner round-trips offsets through ``json.dumps``/``loads``."""
    out: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return out


def offsets_from_json(value: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(partition)): int(offset)
        for topic, partitions in value.items()
        for partition, offset in partitions.items()
    }


def _partition_map(text: str, example: str) -> dict[TopicPartition, int]:
    """Parse ``{"topic":{"0":23}}`` (offsets or timestamps), with Spark's error message."""
    try:
        value = json.loads(text)
        if not isinstance(value, dict) or not all(
            isinstance(parts, dict)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in parts.values())
            for parts in value.values()
        ):
            raise ValueError
        return offsets_from_json(value)
    except ValueError:
        raise ConfigurationError(f"Expected e.g. {example}, got {text}") from None


# ---- parsing helpers -----------------------------------------------------------------------------


def _bound(
    opts: Mapping[str, str], global_ts: str, by_timestamp: str, by_offset: str
) -> OffsetBound | None:
    """Spark's getKafkaOffsetRangeLimit: a single timestamp wins over per-partition timestamps,
    which win over offsets; None when none is set (the caller applies the query's default)."""
    if global_ts in opts:
        text = opts[global_ts].strip()
        if not re.fullmatch(r"-?\d+", text):
            raise ConfigurationError(f"Expected a single long value, got {opts[global_ts]}")
        return GlobalTimestamp(_non_negative_timestamp(int(text), global_ts))
    if by_timestamp in opts:
        stamps = _partition_map(opts[by_timestamp], _TIMESTAMPS_EXAMPLE)
        for ts in stamps.values():
            _non_negative_timestamp(ts, by_timestamp)
        return SpecificTimestamps(stamps)
    if by_offset in opts:
        text = opts[by_offset].strip()
        if text.lower() == "earliest":
            return EarliestBound()
        if text.lower() == "latest":
            return LatestBound()
        offsets = _partition_map(text, _OFFSETS_EXAMPLE)
        for tp, offset in sorted(offsets.items()):
            if offset < EARLIEST_TIMESTAMP:
                raise ConfigurationError(
                    f"{by_offset}: offset {offset} for {tp} is invalid "
                    "(use -2 for earliest, -1 for latest, or an offset >= 0)"
                )
        return SpecificOffsets(offsets)
    return None


def _non_negative_timestamp(ts: int, option: str) -> int:
    if ts < 0:
        raise ConfigurationError(f"{option}: a timestamp must be >= 0 (ms since epoch), got {ts}")
    return ts


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("assign", "subscribe", "subscribepattern") if name in opts]
    if len(given) != 1:
        which = "Only one" if given else "One"
        raise ConfigurationError(
            f"{which} of the following options must be specified for the tidelog source: "
            "assign, subscribe, subscribePattern. See the docstring of tidelog.spark."
        )
    kind = given[0]
    value = opts[kind]
    if kind == "assign":
        try:
            parsed = json.loads(value)
            if not isinstance(parsed, dict) or not all(
                isinstance(ps, list) and all(isinstance(p, int) for p in ps)
                for ps in parsed.values()
            ):
                raise ValueError
        except ValueError:
            raise ConfigurationError(
                f"Expected e.g. {_ASSIGN_EXAMPLE} for option 'assign', got {value}"
            ) from None
        partitions = tuple(TopicPartition(t, p) for t, ps in parsed.items() for p in ps)
        if not partitions:
            raise ConfigurationError(
                f"No topicpartitions to assign as specified value for option 'assign' is "
                f"'{value}'"
            )
        return Subscription("assign", partitions=partitions)
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigurationError(
                f"No topics to subscribe to as specified value for option 'subscribe' is "
                f"'{value}'"
            )
        return Subscription("subscribe", topics=topics)
    if not value.strip():
        raise ConfigurationError(
            f"Pattern to subscribe is empty as specified value for option 'subscribePattern' "
            f"is '{value}'"
        )
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigurationError(f"subscribePattern {value!r} is not a regex: {exc}") from None
    return Subscription("subscribepattern", pattern=value)


def _client_config(
    opts: Mapping[str, str], role: type[Any]
) -> tuple[ClientConfig, dict[str, Any]]:
    """The client's config from ``tidelog.*`` options (its TLS settings among them), plus the
    integer settings of `role` (ConsumerConfig or ProducerConfig) given the same way; anything
    else under the prefix is an error naming what is accepted."""
    if BOOTSTRAP in opts and _BOOTSTRAP_ALIAS in opts:
        raise ConfigurationError(f"set only one of {BOOTSTRAP} and {_BOOTSTRAP_ALIAS}")
    bootstrap = opts.get(BOOTSTRAP, opts.get(_BOOTSTRAP_ALIAS, "")).strip()
    if not bootstrap:
        raise ConfigurationError(f"Option '{BOOTSTRAP}' (or '{_BOOTSTRAP_ALIAS}') must be "
                                 "specified (HOST:PORT,...)")
    client_names = _int_settings(ClientConfig)
    role_names = _int_settings(role)
    client_kwargs: dict[str, Any] = {}
    role_kwargs: dict[str, Any] = {}
    security_kwargs: dict[str, str] = {}
    for key, value in sorted(opts.items()):
        if not key.startswith(PREFIX) or key in (BOOTSTRAP, ISOLATION):
            continue
        setting = key[len(PREFIX):]
        if setting in _REJECTED:
            raise ConfigurationError(f"option '{key}' is not supported. {_REJECTED[setting]}")
        name = setting.replace(".", "_")
        if setting in SECURITY_SETTINGS:
            security_kwargs[SECURITY_SETTINGS[setting]] = value.strip()
        elif name in client_names:
            client_kwargs[name] = _to_int(key, value)
        elif name in role_names:
            role_kwargs[name] = _to_int(key, value)
        else:
            known = ", ".join(sorted(
                [PREFIX + n.replace("_", ".") for n in (*client_names, *role_names)]
                + [PREFIX + n for n in SECURITY_SETTINGS]
            ))
            raise ConfigurationError(
                f"unknown option '{key}'; besides {BOOTSTRAP} and {ISOLATION} the "
                f"accepted {PREFIX}* options are: {known}"
            )
    addresses = tuple(a.strip() for a in bootstrap.split(",") if a.strip())
    return ClientConfig(
        bootstrap=addresses, security=Security(**security_kwargs), **client_kwargs
    ), role_kwargs


def _int_settings(config: type[Any]) -> set[str]:
    """The integer fields of a config dataclass: the ones a string option can set."""
    return {
        f.name
        for f in fields(config)
        if isinstance(f.default, int) and not isinstance(f.default, bool)
    }


def _to_int(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigurationError(f"option '{key}' must be an integer, got {value!r}") from None


def _integer(opts: Mapping[str, str], key: str, default: int, *, minimum: int) -> int:
    if key not in opts:
        return default
    number = _to_int(key, opts[key])
    if number < minimum:
        raise ConfigurationError(f"option '{key}' must be >= {minimum}, got {number}")
    return number


def _positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    text = opts[key].strip()
    if not re.fullmatch(r"\d+", text) or int(text) <= 0:
        raise ConfigurationError(
            f"Invalid value '{opts[key]}' for option '{name}', must be a positive integer"
        )
    return int(text)


def _boolean(opts: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    text = opts[key].strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"option '{key}' must be true or false, got {opts[key]!r}")
    return text == "true"
