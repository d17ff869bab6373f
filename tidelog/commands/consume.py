"""``tidelog consume TOPIC``: print records from a position (like kafka-console-consumer).

With ``--group G`` it consumes as a member of the consumer group G (``subscribe``): the group's
coordinator assigns it partitions, it starts from the group's committed offsets (else from
``--from`` earliest or latest), commits as it goes, and leaves the group when it stops."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from tidelog.commands._common import add_bootstrap, client_for, parse_time
from tidelog.errors import ConfigurationError, UnknownTopicOrPartitionError
from tidelog.types import TopicPartition

if TYPE_CHECKING:
    from tidelog.consumer import Consumer


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic")
    parser.add_argument("--partition", type=int, action="append", default=None,
                        help="partition to read (repeatable; default: all)")
    parser.add_argument("--from", dest="start", default="earliest",
                        help="earliest, latest, an offset (offset:N), epoch ms or ISO-8601 time")
    parser.add_argument("--max-records", type=int, default=None)
    parser.add_argument("--idle-ms", type=int, default=2000,
                        help="stop after this long without new records (0: follow forever)")
    parser.add_argument("--isolation", choices=["read_uncommitted", "read_committed"],
                        default="read_uncommitted")
    parser.add_argument("--group", default=None,
                        help="consume as a member of this consumer group (no --partition)")
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    if args.group is not None and (args.partition or args.start not in ("earliest", "latest")):
        raise ConfigurationError("--group takes partitions from the group: no --partition, "
                                 "and --from is earliest or latest (for partitions without "
                                 "a committed offset)")
    client = client_for(args)
    consumer = client.consumer(
        isolation_level=args.isolation, group_id=args.group,
        auto_offset_reset=args.start if args.group is not None else "latest",
    )
    try:
        if args.group is not None:
            client.describe_topics([args.topic])  # UNKNOWN_TOPIC_OR_PARTITION, not a wait
            consumer.subscribe([args.topic])
        else:
            count = len(client.describe_topics([args.topic])[args.topic].partitions)
            missing = [p for p in args.partition or () if not 0 <= p < count]
            if missing:  # else the consumer would wait for it in silence
                raise UnknownTopicOrPartitionError(
                    f"topic {args.topic!r} has no partition {missing[0]} "
                    f"(partitions 0..{count - 1})"
                )
            tps = [TopicPartition(args.topic, p) for p in (args.partition or range(count))]
            consumer.assign(tps)
            _seek(consumer, tps, args.start)
        shown = 0
        last_record = time.monotonic()
        while args.max_records is None or shown < args.max_records:
            records = consumer.poll(timeout_ms=500)
            for record in records:
                key = "" if record.key is None else record.key.decode(errors="replace")
                value = "null" if record.value is None else record.value.decode(errors="replace")
                print(f"{record.partition}\t{record.offset}\t{record.timestamp}\t{key}\t{value}")
                shown += 1
                if args.max_records is not None and shown >= args.max_records:
                    break
            if records or not consumer.assignment():  # a member idles once it has partitions
                last_record = time.monotonic()
            elif args.idle_ms and (time.monotonic() - last_record) * 1000 >= args.idle_ms:
                break
        print(f"{shown} record(s)", file=sys.stderr)
    finally:
        try:
            consumer.close()  # a member commits and leaves the group
        finally:
            client.close()
    return 0


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
