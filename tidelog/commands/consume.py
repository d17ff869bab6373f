"""``tidelog consume TOPIC``: print records from a position (like kafka-console-consumer).

With ``--group G`` it consumes as a member of the consumer group G (``subscribe``): the group's
coordinator assigns it partitions, it starts from the group's committed offsets (else from
``--from`` earliest or latest), commits as it goes, and leaves the group when it stops.

What a record prints as: by default ``partition TAB offset TAB timestamp TAB key TAB value``;
with kafka-console-consumer's ``--property print.key=true`` (``print.timestamp``,
``print.partition``, ``print.offset``, ``print.headers``, ``print.value``, ``key.separator``,
``headers.separator``, ``line.separator``, ``null.literal``) the line Kafka's default formatter
prints; with ``--format`` a kcat-like format string.

It starts at the earliest offset and stops after ``--idle-ms`` without records, as kcat with
``-e`` does, rather than at the latest offset following for ever as kafka-console-consumer
does: the command is mostly run to see what a topic holds. ``--from latest --idle-ms 0`` is
Kafka's behaviour (docs/operations/kafka-tools.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidelog.commands._common import (
    add_bootstrap,
    add_topic,
    client_for,
    parse_time,
    status,
    status_done,
)
from tidelog.errors import ConfigurationError, UnknownTopicOrPartitionError
from tidelog.types import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    from tidelog.consumer import Consumer

#: kafka-console-consumer's formatter properties and their defaults.
_PROPERTIES = {
    "print.timestamp": "false", "print.partition": "false", "print.offset": "false",
    "print.headers": "false", "print.key": "false", "print.value": "true",
    "key.separator": "\t", "headers.separator": ",", "line.separator": "\n",
    "null.literal": "null",
}
_FLAGS = ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key",
          "print.value")
#: kcat's format tokens this command knows.
_FORMAT_TOKEN = re.compile(r"%[tpoTkKsSh%]|\\[ntr\\]")

Formatter = Callable[[ConsumerRecord], str]


def configure(parser: argparse.ArgumentParser) -> None:
    add_topic(parser)
    parser.add_argument("--partition", type=int, action="append", default=None,
                        help="partition to read (repeatable; default: all)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from", dest="start", default="earliest",
                       help="earliest (default), latest, an offset (offset:N), epoch ms or "
                            "ISO-8601 time")
    start.add_argument("--from-beginning", dest="start", action="store_const",
                       const="earliest", help="the same as --from earliest (Kafka's flag)")
    parser.add_argument("--max-records", "--max-messages", dest="max_records", type=int,
                        default=None, help="stop after this many records")
    parser.add_argument("--idle-ms", type=int, default=2000,
                        help="stop after this long without new records (0: follow forever)")
    parser.add_argument("--isolation", choices=["read_uncommitted", "read_committed"],
                        default="read_uncommitted")
    parser.add_argument("--group", default=None,
                        help="consume as a member of this consumer group (no --partition)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                        help="kafka-console-consumer's formatter properties: print.key=true, "
                             "print.timestamp, print.partition, print.offset, print.headers, "
                             "print.value, key.separator, headers.separator, line.separator, "
                             "null.literal (repeatable)")
    output.add_argument("--format", default=None, metavar="FMT",
                        help="kcat's format string: %%t topic, %%p partition, %%o offset, %%T "
                             "timestamp, %%k key, %%K key length, %%s value, %%S value length, "
                             "%%h headers, \\n \\t; e.g. '%%k=%%s\\n'")
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    if args.group is not None and (args.partition or args.start not in ("earliest", "latest")):
        raise ConfigurationError("--group takes partitions from the group: no --partition, "
                                 "and --from is earliest or latest (for partitions without "
                                 "a committed offset)")
    for flag, value in (("--max-records", args.max_records), ("--idle-ms", args.idle_ms)):
        if value is not None and value < 0:
            raise ConfigurationError(f"{flag} must be >= 0, got {value}")
    show = _formatter(args)
    client = client_for(args)
    consumer = client.consumer(
        isolation_level=args.isolation, group_id=args.group,
        auto_offset_reset=args.start if args.group is not None else "latest",
    )
    try:
        info = client.describe_topics([args.topic])[args.topic]
        if args.group is not None:
            consumer.subscribe([args.topic])
        else:
            count = len(info.partitions)
            missing = [p for p in args.partition or () if not 0 <= p < count]
            if missing:  # else the consumer would wait for it in silence
                raise UnknownTopicOrPartitionError(
                    f"topic {args.topic!r} has no partition {missing[0]} "
                    f"(partitions 0..{count - 1})"
                )
            tps = [TopicPartition(args.topic, p) for p in (args.partition or range(count))]
            consumer.assign(tps)
            _seek(consumer, tps, args.start)
        timestamp_type = info.configs.get("message.timestamp.type", "CreateTime")
        format_record = None if show is None else show(timestamp_type)
        shown = 0
        last_record = time.monotonic()
        waiting = f"waiting for records of {args.topic} (Ctrl-C to stop)..."
        status(waiting)
        while args.max_records is None or shown < args.max_records:
            records = consumer.poll(timeout_ms=500)
            if records:
                status_done()
            for record in records:
                line = (f"{record.partition}\t{record.offset}\t{record.timestamp}\t"
                        f"{_text(record.key, '')}\t{_text(record.value, 'null')}\n"
                        if format_record is None else format_record(record))
                sys.stdout.write(line)
                shown += 1
                if args.max_records is not None and shown >= args.max_records:
                    break
            if records:
                sys.stdout.flush()  # a reader (`| head -1`) has each record as it comes
                status(waiting)
            if records or not consumer.assignment():  # a member idles once it has partitions
                last_record = time.monotonic()
            elif args.idle_ms and (time.monotonic() - last_record) * 1000 >= args.idle_ms:
                break
        status_done()
        print(f"{shown} record(s)", file=sys.stderr)
    finally:
        try:
            consumer.close()  # a member commits and leaves the group
        finally:
            client.close()
    return 0


def _text(data: bytes | None, null: str) -> str:
    return null if data is None else data.decode(errors="replace")


def _formatter(args: argparse.Namespace) -> Callable[[str], Formatter] | None:
    """The output chosen by --property or --format (given the topic's timestamp type, known
    once the topic is described), checked before anything is asked of the cluster; None for
    the default columns."""
    if args.format is not None:
        kcat = _kcat_formatter(args.format)
        return lambda _timestamp_type: kcat
    if not args.property:
        return None
    props = dict(_PROPERTIES)
    for item in args.property:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in _PROPERTIES:
            raise ConfigurationError(
                f"--property {item!r}: expected NAME=VALUE, NAME one of {', '.join(_PROPERTIES)}"
            )
        if name in _FLAGS and value.strip().lower() not in ("true", "false"):
            raise ConfigurationError(f"--property {item!r}: {name} is true or false")
        props[name] = value.strip().lower() if name in _FLAGS else _unescape(value)
    return lambda timestamp_type: _kafka_formatter(props, timestamp_type)


def _unescape(text: str) -> str:
    return text.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


def _kafka_formatter(props: dict[str, str], timestamp_type: str) -> Formatter:
    """kafka-console-consumer's default formatter: the chosen fields in its order (timestamp
    as TYPE:MS, Partition:N, Offset:N, headers as k:v pairs or NO_HEADERS, key, value), joined
    by key.separator, ended by line.separator."""
    wanted = {flag for flag in _FLAGS if props[flag] == "true"}
    null = props["null.literal"]

    def format_record(record: ConsumerRecord) -> str:
        fields = []
        if "print.timestamp" in wanted:
            fields.append(f"{timestamp_type}:{record.timestamp}" if record.timestamp >= 0
                          else "NO_TIMESTAMP")
        if "print.partition" in wanted:
            fields.append(f"Partition:{record.partition}")
        if "print.offset" in wanted:
            fields.append(f"Offset:{record.offset}")
        if "print.headers" in wanted:
            fields.append(props["headers.separator"].join(
                f"{k}:{_text(v, null)}" for k, v in record.headers) or "NO_HEADERS")
        if "print.key" in wanted:
            fields.append(_text(record.key, null))
        if "print.value" in wanted:
            fields.append(_text(record.value, null))
        return props["key.separator"].join(fields) + props["line.separator"]

    return format_record


def _kcat_formatter(fmt: str) -> Formatter:
    """kcat's -f: each token replaced by the record's field, everything else printed as is."""
    if "%" in _FORMAT_TOKEN.sub("", fmt):
        raise ConfigurationError(f"--format {fmt!r}: a % starts none of %t %p %o %T %k %K %s "
                                 "%S %h %% (%% prints a %)")

    def format_record(record: ConsumerRecord) -> str:
        fields = {
            "%t": record.topic, "%p": str(record.partition), "%o": str(record.offset),
            "%T": str(record.timestamp), "%k": _text(record.key, ""),
            "%K": str(-1 if record.key is None else len(record.key)),
            "%s": _text(record.value, ""),
            "%S": str(-1 if record.value is None else len(record.value)),
            "%h": ",".join(f"{k}={_text(v, '')}" for k, v in record.headers),
            "%%": "%", "\\n": "\n", "\\t": "\t", "\\r": "\r", "\\\\": "\\",
        }
        return _FORMAT_TOKEN.sub(lambda m: fields[m.group(0)], fmt)

    return format_record


def _seek(consumer: Consumer, tps: list[TopicPartition], start: str) -> None:
    if start.startswith("offset:"):
        for tp in tps:
            consumer.seek(tp, int(start.removeprefix("offset:")))
        return
    spec = parse_time(start)
    if spec == -2:
        consumer.seek_to_beginning(*tps)
    elif spec in (-1, -3):
        consumer.seek_to_end(*tps)
    else:
        found = consumer.offsets_for_times({tp: spec for tp in tps})
        for tp in tps:
            hit = found.get(tp)
            if hit is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, hit.offset)
