"""``tidelog offsets TOPIC``: ListOffsets for every partition (like kafka-get-offsets)."""

from __future__ import annotations

import argparse

from tidelog.commands._common import add_bootstrap, add_topic, client_for, parse_time
from tidelog.types import OffsetSpec, TopicPartition


def configure(parser: argparse.ArgumentParser) -> None:
    add_topic(parser)
    parser.add_argument("--time", default="latest",
                        help="earliest, latest, max, epoch milliseconds or an ISO-8601 time")
    parser.add_argument("--isolation", choices=["read_uncommitted", "read_committed"],
                        default="read_uncommitted")
    parser.add_argument("--partition", type=int, action="append", default=None)
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    spec = OffsetSpec(parse_time(args.time))
    client = client_for(args)
    try:
        count = len(client.describe_topics([args.topic])[args.topic].partitions)
        tps = [TopicPartition(args.topic, p) for p in (args.partition or range(count))]
        answers = client.list_offsets({tp: spec for tp in tps}, isolation_level=args.isolation)
    finally:
        client.close()
    for tp in tps:
        answer = answers[tp]
        found = "" if answer.timestamp < 0 else f" (timestamp {answer.timestamp})"
        shown = "none" if answer.offset < 0 else str(answer.offset)
        print(f"{tp.topic}:{tp.partition}:{shown}{found}")
    return 0
