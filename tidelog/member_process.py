"""A consumer-group member as a process of its own, for the cluster tests, the chaos workload and
bench/groups.py: ``python -m tidelog.member_process BOOTSTRAP GROUP TOPIC [options]``.

It subscribes, polls in a loop and writes its history to stdout, one JSON object a line,
flushed at once, so that a SIGKILL loses nothing it reported: ``{"ev": "assigned" | "revoked" |
"lost", "p": [partitions], "t": time}`` from its listener, ``{"ev": "recs", "r": [[partition,
offset], ...], "t": time}`` for the records each poll returned, ``{"ev": "ready"}`` once
connected and ``{"ev": "closed"}``. A line ``close`` on stdin makes it close the consumer
(commit, revoke, leave the group) and exit; with ``--wait-for-go`` it subscribes only once a
line ``go`` comes.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from tidelog.client import Client
from tidelog.membership import ConsumerRebalanceListener
from tidelog.types import TopicPartition


def _emit(event: dict[str, Any]) -> None:
    event["t"] = time.time()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class _Reporter(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        _emit({"ev": "revoked", "p": sorted(tp.partition for tp in revoked)})

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        _emit({"ev": "assigned", "p": sorted(tp.partition for tp in assigned)})

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        _emit({"ev": "lost", "p": sorted(tp.partition for tp in lost)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.member_process")
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--assignor", default=None)
    parser.add_argument("--auto-commit-interval-ms", type=int, default=200)
    parser.add_argument("--quiet", action="store_true", help="report record counts only")
    parser.add_argument("--partition-fetch-bytes", type=int, default=1024 * 1024,
                        help="max.partition.fetch.bytes (smaller: more, finer-timed polls)")
    parser.add_argument("--assign", action="store_true",
                        help="no group membership: assign every partition (a baseline)")
    parser.add_argument("--wait-for-go", action="store_true",
                        help="subscribe only once a line `go` comes on stdin (a restart that "
                             "must not include the interpreter's start)")
    args = parser.parse_args(argv)
    client = Client(args.bootstrap)
    consumer = client.consumer(
        group_id=None if args.assign else args.group, auto_offset_reset="earliest",
        auto_commit_interval_ms=args.auto_commit_interval_ms,
        group_instance_id=args.instance_id, group_remote_assignor=args.assignor,
        max_partition_fetch_bytes=args.partition_fetch_bytes,
    )
    closing = threading.Event()
    go = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
            elif line.strip() == "close":
                break
        closing.set()
        go.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    client.admin.describe_cluster()  # connected before anything is timed
    _emit({"ev": "ready"})
    if args.wait_for_go:
        go.wait()
    if args.assign:
        count = len(client.describe_topics([args.topic])[args.topic].partitions)
        consumer.assign([TopicPartition(args.topic, p) for p in range(count)])
        consumer.seek_to_beginning()
    else:
        consumer.subscribe([args.topic], listener=_Reporter())
    while not closing.is_set():
        records = consumer.poll(timeout_ms=200)
        if records and args.quiet:
            _emit({"ev": "count", "n": len(records)})
        elif records:
            _emit({"ev": "recs", "r": [[r.partition, r.offset] for r in records]})
    consumer.close()
    client.close()
    _emit({"ev": "closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
