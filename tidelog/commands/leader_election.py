"""``tidelog leader-election``: make each partition's preferred replica its leader, with
kafka-leader-election's flags (``--election-type PREFERRED|UNCLEAN``, or ``--preferred`` /
``--unclean``; ``--topic`` and ``--partition``, ``--all-topic-partitions`` or
``--path-to-json-file``) and its report. Raft never elects a replica outside a majority, so an
unclean election only says which partitions have a leader (see `AdminClient.elect_leaders`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tidelog.commands._common import add_bootstrap, client_for
from tidelog.errors import ConfigurationError, ElectionNotNeededError
from tidelog.types import TopicPartition


def configure(parser: argparse.ArgumentParser) -> None:
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--election-type", type=str.upper, choices=["PREFERRED", "UNCLEAN"],
                      help="kafka-leader-election's flag")
    kind.add_argument("--preferred", dest="election_type", action="store_const",
                      const="PREFERRED", help="the same as --election-type PREFERRED")
    kind.add_argument("--unclean", dest="election_type", action="store_const",
                      const="UNCLEAN", help="the same as --election-type UNCLEAN")
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", metavar="TOPIC",
                       help="a topic: its --partition, or every partition of it")
    scope.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of the cluster")
    scope.add_argument("--path-to-json-file", type=Path, metavar="FILE",
                       help='{"partitions": [{"topic": "t", "partition": 0}, ...]}')
    parser.add_argument("--partition", type=int, metavar="P", help="a partition of --topic")
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    wanted = _partitions(args)
    client = client_for(args)
    try:
        if wanted is None and args.topic is not None:
            count = len(client.describe_topics([args.topic])[args.topic].partitions)
            wanted = [TopicPartition(args.topic, p) for p in range(count)]
        outcomes = client.admin.elect_leaders(args.election_type, wanted)
    finally:
        client.close()
    elected = [tp for tp, error in outcomes.items() if error is None]
    already = [tp for tp, error in outcomes.items() if isinstance(error, ElectionNotNeededError)]
    failed = {tp: error for tp, error in outcomes.items()
              if error is not None and tp not in already}
    if elected:
        print(f"Successfully completed leader election ({args.election_type}) for partitions "
              + ", ".join(map(str, elected)))
    if already:
        print("Valid replica already elected for partitions " + ", ".join(map(str, already)))
    for tp, error in failed.items():
        print(f"Error completing leader election ({args.election_type}) for partition: {tp}: "
              f"{error}", file=sys.stderr)
    if failed:
        print(f"tidelog leader-election: {len(failed)} replica(s) could not be elected",
              file=sys.stderr)
        return 2
    return 0


def _partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The partitions named, checked before anything is sent; None: every partition of
    --topic, or of the cluster (--all-topic-partitions)."""
    if args.partition is not None:
        if args.topic is None:
            raise ConfigurationError("--partition goes with --topic")
        if args.partition < 0:
            raise ConfigurationError(f"--partition {args.partition}: a partition is >= 0")
        return [TopicPartition(args.topic, args.partition)]
    if args.path_to_json_file is None:
        return None
    where = f"--path-to-json-file {args.path_to_json_file}"
    try:
        document = json.loads(args.path_to_json_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{where}: not JSON ({exc})") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigurationError(f'{where}: expected {{"partitions": [{{"topic": ..., '
                                 '"partition": ...}, ...]}')
    out: list[TopicPartition] = []
    for index, entry in enumerate(entries):
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and entry["topic"] and isinstance(partition, int)
                and not isinstance(partition, bool) and partition >= 0):
            raise ConfigurationError(f"{where}: partitions[{index}] is not "
                                     f'{{"topic": NAME, "partition": N >= 0}}: {entry!r}')
        tp = TopicPartition(entry["topic"], partition)
        if tp in out:
            raise ConfigurationError(f"{where}: {tp} is named more than once")
        out.append(tp)
    return out
