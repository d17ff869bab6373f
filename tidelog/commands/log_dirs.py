"""``tidelog log-dirs --describe``: each node's log directory and the size of every replica in
it, as kafka-log-dirs prints them (its JSON, with ``--broker-list`` and ``--topic-list``), or
as a table."""

from __future__ import annotations

import argparse
import json

from tidelog.commands._common import add_bootstrap, client_for, print_table, status, status_done
from tidelog.errors import ConfigurationError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--describe", action="store_true", required=True,
                        help="describe the log directories (kafka-log-dirs' one action)")
    parser.add_argument("--broker-list", metavar="ID[,ID...]",
                        help="the nodes to ask (default: every node)")
    parser.add_argument("--topic-list", metavar="TOPIC[,TOPIC...]",
                        help="only these topics' replicas (default: every replica)")
    parser.add_argument("--table", action="store_true",
                        help="a table of NODE LOG-DIR TOPIC PARTITION SIZE OFFSET-LAG instead "
                             "of kafka-log-dirs' JSON")
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    nodes = None if args.broker_list is None else _node_ids(args.broker_list)
    topics = (None if args.topic_list is None
              else [t.strip() for t in args.topic_list.split(",") if t.strip()])
    client = client_for(args)
    try:
        status("querying the nodes for their log directories...")
        described = client.admin.describe_log_dirs(nodes, topics)
    finally:
        status_done()
        client.close()
    if args.table:
        print_table(["NODE", "LOG-DIR", "TOPIC", "PARTITION", "SIZE", "OFFSET-LAG"], [
            [str(node), path, tp.topic, str(tp.partition), str(info.size), str(info.offset_lag)]
            for node, dirs in described.items() for path, d in dirs.items()
            for tp, info in sorted(d.replica_infos.items())])
        return 0
    print(json.dumps({"brokers": [
        {"broker": node, "logDirs": [
            {"partitions": [
                {"partition": f"{tp.topic}-{tp.partition}", "size": info.size,
                 "offsetLag": info.offset_lag, "isFuture": False}
                for tp, info in sorted(d.replica_infos.items())],
             "error": None if d.error is None else type(d.error).__name__,
             "logDir": path}
            for path, d in dirs.items()]}
        for node, dirs in described.items()], "version": 1}))
    return 0


def _node_ids(text: str) -> list[int]:
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if not ids or not all(part.isdigit() for part in ids):
        raise ConfigurationError(f"--broker-list {text!r}: expected node ids such as 1,2,3")
    return [int(part) for part in ids]
