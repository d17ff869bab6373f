"""A partition log's configuration, under Kafka's topic-config names (kafka-mapping §5.1).

Topic configs arrive as strings (CreateTopics, `tidelog topic create --config`); they are parsed
and checked once here, so the log never meets a value it cannot honour. A key this module does not
know is an error rather than silently ignored: a typo such as ``retention.m`` would otherwise keep
data forever without anyone noticing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import NamedTuple

from tidelog.compression import TOPIC_CODECS, TOPIC_KEEPS_PRODUCER_CODEC, Codec
from tidelog.errors import InvalidConfigError
from tidelog.records import TimestampType

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"

_TIMESTAMP_TYPES = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's defaults (kafka-mapping §5.1, the snapshot's values) unless a topic overrides."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    cleanup_policy: frozenset[str] = frozenset({CLEANUP_DELETE})
    delete_retention_ms: int = 24 * 3600 * 1000
    max_message_bytes: int = 1024 * 1024 + 12
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    #: Kafka's topic compression.type: "producer" keeps each batch's codec, any other value
    #: (uncompressed, gzip, snappy, lz4, zstd) is the codec the leader writes.
    compression_type: str = TOPIC_KEEPS_PRODUCER_CODEC
    #: Not the log's: carried here, as Kafka's LogConfig carries it, so that it is validated,
    #: layered and described with the other topic configs. The partition's leader reads it
    #: (acks=all needs this many replicas in sync and holding the write; `node.partition`).
    min_insync_replicas: int = 1

    @property
    def codec(self) -> Codec | None:
        """The codec the leader writes batches with; None keeps the producer's."""
        return TOPIC_CODECS.get(self.compression_type)

    @property
    def delete_enabled(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @classmethod
    def property_names(cls) -> frozenset[str]:
        """The Kafka names this class understands, for callers that split a topic's configs."""
        return frozenset(_PROPS)

    @classmethod
    def from_kafka_props(cls, props: Mapping[str, str]) -> LogConfig:
        """Parse Kafka-named string properties; anything invalid raises InvalidConfigError."""
        values: dict[str, object] = {}
        for name, raw in props.items():
            prop = _PROPS.get(name)
            if prop is None:
                raise InvalidConfigError(f"unknown topic config {name!r}")
            values[prop.field] = prop.parse(name, raw)
        return cls(**values)  # type: ignore[arg-type]

    def to_kafka_props(self) -> dict[str, str]:
        """The inverse of from_kafka_props (for describe-topic and for round-trip tests)."""
        out: dict[str, str] = {}
        for name, prop in _PROPS.items():
            value = getattr(self, prop.field)
            if isinstance(value, TimestampType):
                out[name] = next(k for k, v in _TIMESTAMP_TYPES.items() if v is value)
            elif isinstance(value, frozenset):
                out[name] = ",".join(sorted(value))
            else:
                out[name] = str(value)
        return out


class _Prop(NamedTuple):
    field: str
    #: Parses and checks a value; its docstring says which values it takes.
    parse: Callable[[str, str], object]
    #: What the config does, for the generated configuration reference.
    doc: str


class TopicConfigDoc(NamedTuple):
    """One topic config as the configuration reference lists it."""

    name: str
    default: str
    values: str
    doc: str


def topic_config_docs() -> list[TopicConfigDoc]:
    """Every topic config, its default, the values it takes and what it does, by name."""
    defaults = LogConfig().to_kafka_props()
    return [
        TopicConfigDoc(name, defaults[name], (prop.parse.__doc__ or "").strip(), prop.doc)
        for name, prop in sorted(_PROPS.items())
    ]


def _integer(minimum: int, maximum: int) -> Callable[[str, str], object]:
    def parse(name: str, raw: str) -> object:
        try:
            value = int(raw.strip())
        except ValueError:
            raise InvalidConfigError(f"{name}={raw!r} is not an integer") from None
        if not minimum <= value <= maximum:
            raise InvalidConfigError(f"{name}={value} must be in [{minimum}, {maximum}]")
        return value

    parse.__doc__ = f"an integer from {minimum} to {maximum}"
    return parse


def _timestamp_type(name: str, raw: str) -> object:
    """CreateTime or LogAppendTime"""
    try:
        return _TIMESTAMP_TYPES[raw.strip()]
    except KeyError:
        raise InvalidConfigError(
            f"{name}={raw!r} must be one of {', '.join(_TIMESTAMP_TYPES)}"
        ) from None


def _compression_type(name: str, raw: str) -> object:
    value = raw.strip().lower()
    if value != TOPIC_KEEPS_PRODUCER_CODEC and value not in TOPIC_CODECS:
        raise InvalidConfigError(
            f"{name}={raw!r} must be one of {TOPIC_KEEPS_PRODUCER_CODEC}, "
            f"{', '.join(TOPIC_CODECS)}"
        )
    return value


_compression_type.__doc__ = f"{TOPIC_KEEPS_PRODUCER_CODEC}, {', '.join(TOPIC_CODECS)}"


def _cleanup_policy(name: str, raw: str) -> object:
    """delete, compact, or both (comma-separated)"""
    policies = frozenset(p.strip() for p in raw.split(",") if p.strip())
    if not policies or not policies <= {CLEANUP_DELETE, CLEANUP_COMPACT}:
        raise InvalidConfigError(f"{name}={raw!r} must be a list of 'delete' and/or 'compact'")
    return policies


# Lower bounds are Kafka's (LogConfig.java); ints that Kafka declares as INT stop at INT_MAX.
_PROPS: dict[str, _Prop] = {
    "segment.bytes": _Prop(
        "segment_bytes", _integer(14, INT_MAX),
        "A segment rolls once the next batch would take it past this many bytes."),
    "segment.ms": _Prop(
        "segment_ms", _integer(1, LONG_MAX),
        "A non-empty segment rolls once its records' timestamps span this long (ms)."),
    "segment.index.bytes": _Prop(
        "segment_index_bytes", _integer(4, INT_MAX),
        "The size of a segment's offset index and time index; a full index rolls the "
        "segment."),
    "index.interval.bytes": _Prop(
        "index_interval_bytes", _integer(0, INT_MAX),
        "A segment adds an offset and a time index entry every this many bytes of batches."),
    "retention.ms": _Prop(
        "retention_ms", _integer(-1, LONG_MAX),
        "Segments whose newest record is older than this (ms) are deleted; -1 keeps them."),
    "retention.bytes": _Prop(
        "retention_bytes", _integer(-1, LONG_MAX),
        "The oldest segments are deleted while the log without them would still hold at "
        "least this many bytes; -1: no limit."),
    "message.timestamp.type": _Prop(
        "message_timestamp_type", _timestamp_type,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the "
        "leader's clock."),
    "message.timestamp.before.max.ms": _Prop(
        "message_timestamp_before_max_ms", _integer(0, LONG_MAX),
        "Under CreateTime, a record older than this (ms, against the leader's clock) is "
        "refused with INVALID_TIMESTAMP."),
    "message.timestamp.after.max.ms": _Prop(
        "message_timestamp_after_max_ms", _integer(0, LONG_MAX),
        "Under CreateTime, a record further in the future than this (ms) is refused with "
        "INVALID_TIMESTAMP."),
    "cleanup.policy": _Prop(
        "cleanup_policy", _cleanup_policy,
        "delete: retention deletes old segments; compact: the cleaner keeps each key's newest "
        "record (and records must have keys)."),
    "delete.retention.ms": _Prop(
        "delete_retention_ms", _integer(0, LONG_MAX),
        "How long compaction keeps a tombstone (a null value) before removing it (ms)."),
    "max.message.bytes": _Prop(
        "max_message_bytes", _integer(0, INT_MAX),
        "The largest batch a producer may write (after compression); larger is "
        "MESSAGE_TOO_LARGE."),
    "flush.messages": _Prop(
        "flush_messages", _integer(1, LONG_MAX),
        "The log is fsynced after this many appended records (by default never on count: "
        "the node fsyncs each write before it commits, log.flush.policy)."),
    "flush.ms": _Prop(
        "flush_ms", _integer(0, LONG_MAX),
        "The log is fsynced once this long (ms) has passed since its last flush (by default "
        "never on time, as flush.messages)."),
    "compression.type": _Prop(
        "compression_type", _compression_type,
        "producer keeps each batch's codec; a codec name makes the leader write every batch in "
        "that codec."),
    "min.insync.replicas": _Prop(
        "min_insync_replicas", _integer(1, INT_MAX),
        "acks=all needs this many replicas in sync and holding the write, else "
        "NOT_ENOUGH_REPLICAS."),
}

assert {p.field for p in _PROPS.values()} == {f.name for f in fields(LogConfig)}
