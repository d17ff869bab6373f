"""``tidelog delete-records``: delete the records of partitions below an offset, as
kafka-delete-records does (its ``--offset-json-file``), or of one topic's partitions given by
flags. Each partition's leader moves its log start offset there; consumers positioned below it
get OFFSET_OUT_OF_RANGE and reset as their ``auto.offset.reset`` says."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tidelog.commands._common import add_bootstrap, client_for, print_table
from tidelog.errors import ConfigurationError
from tidelog.types import TopicPartition


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--offset-json-file", type=Path, metavar="FILE",
        help='kafka-delete-records\' file: {"partitions": [{"topic": "t", "partition": 0, '
             '"offset": 10}], "version": 1}')
    parser.add_argument("--topic", metavar="TOPIC", help="the topic (instead of a file)")
    parser.add_argument("--partition", type=int, action="append", metavar="P",
                        help="a partition of --topic (repeatable; default: every partition)")
    parser.add_argument("--offset", type=int, metavar="N",
                        help="with --topic: delete the records below offset N (-1: every "
                             "record up to the high watermark)")
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    wanted = _checked(args)
    client = client_for(args)
    try:
        if wanted is None:  # every partition of --topic
            count = len(client.describe_topics([args.topic])[args.topic].partitions)
            wanted = {TopicPartition(args.topic, p): args.offset for p in range(count)}
        low_watermarks = client.admin.delete_records(wanted)
    finally:
        client.close()
    print_table(["TOPIC", "PARTITION", "LOW-WATERMARK"],
                [[tp.topic, str(tp.partition), str(low)] for tp, low in low_watermarks.items()])
    return 0


def _checked(args: argparse.Namespace) -> dict[TopicPartition, int] | None:
    """The offsets asked for, checked before anything is sent: those of the file, or of
    --topic's partitions (None: every partition of --topic, which the cluster knows)."""
    if (args.offset_json_file is None) == (args.topic is None):
        raise ConfigurationError("give --offset-json-file FILE, or --topic TOPIC with --offset")
    if args.offset_json_file is not None:
        if args.partition or args.offset is not None:
            raise ConfigurationError("--partition and --offset go with --topic, not with "
                                     "--offset-json-file")
        return read_offset_json(args.offset_json_file)
    if args.offset is None:
        raise ConfigurationError("--topic needs --offset N (-1: up to the high watermark)")
    if args.offset < -1:
        raise ConfigurationError(f"--offset {args.offset}: an offset is >= 0, or -1 for the "
                                 "high watermark")
    for partition in args.partition or ():
        if partition < 0:
            raise ConfigurationError(f"--partition {partition}: a partition is >= 0")
    if not args.partition:
        return None
    return {TopicPartition(args.topic, p): args.offset for p in args.partition}


def read_offset_json(path: Path) -> dict[TopicPartition, int]:
    """kafka-delete-records' --offset-json-file, each entry checked; a partition named twice
    is an error, as kafka-delete-records says."""
    where = f"--offset-json-file {path}"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{where}: not JSON ({exc})") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigurationError(f'{where}: expected {{"partitions": [{{"topic": ..., '
                                 '"partition": ..., "offset": ...}, ...]}')
    out: dict[TopicPartition, int] = {}
    for index, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and entry["topic"] and _whole(entry.get("partition"), 0)
                and _whole(entry.get("offset"), -1)):
            raise ConfigurationError(
                f"{where}: partitions[{index}] is not {{\"topic\": NAME, \"partition\": N >= 0, "
                f"\"offset\": N >= -1}}: {entry!r}")
        tp = TopicPartition(entry["topic"], entry["partition"])
        if tp in out:
            raise ConfigurationError(f"{where}: {tp} is named more than once")
        out[tp] = entry["offset"]
    return out


def _whole(value: object, lowest: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= lowest
