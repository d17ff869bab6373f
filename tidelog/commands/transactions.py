"""``tidelog transactions``: list, describe, find hanging and abort transactions (Kafka's
kafka-transactions tool, KIP-664).

A *hanging* transaction is one a partition holds open (its leader's producer state has a first
offset for it) that no coordinator will end: its producer's transactional id has no ongoing
transaction with this partition, or it has been open longer than transaction.max.timeout.ms
(the coordinator would have aborted it by then). It holds the partition's last stable offset,
and so every read_committed consumer, until ``abort`` writes its ABORT marker.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tidelog.commands._common import add_bootstrap, client_for, print_table
from tidelog.errors import ConfigurationError

if TYPE_CHECKING:
    from tidelog.client import Client
    from tidelog.types import TopicPartition

#: Kafka's transaction.max.timeout.ms default.
DEFAULT_MAX_TIMEOUT_MS = 900_000


def configure(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    listing = sub.add_parser("list", help="the transactional ids and their states")
    listing.add_argument("--state", action="append", default=[],
                         help="only ids in this state (Ongoing, CompleteCommit, ...); repeatable")
    describe = sub.add_parser("describe", help="one transactional id at its coordinator")
    describe.add_argument("--transactional-id", required=True)
    hanging = sub.add_parser("find-hanging", help="open transactions no coordinator will end")
    where = hanging.add_mutually_exclusive_group(required=True)
    where.add_argument("--topic", help="look at every partition of this topic")
    where.add_argument("--node", type=int, help="look at every partition this node leads")
    hanging.add_argument("--max-transaction-timeout-ms", type=int,
                         default=DEFAULT_MAX_TIMEOUT_MS,
                         help="the nodes' transaction.max.timeout.ms (default 900000)")
    abort = sub.add_parser("abort", help="write an ABORT marker for a hanging transaction")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--producer-id", type=int, required=True)
    abort.add_argument("--producer-epoch", type=int,
                       help="default: the producer's epoch on the partition")
    abort.add_argument("--coordinator-epoch", type=int,
                       help="default: the last coordinator epoch the partition saw (0 if none)")


def run(args: argparse.Namespace) -> int:
    from tidelog.types import TopicPartition

    with client_for(args) as client:
        if args.action == "list":
            listings = client.admin.list_transactions(states=args.state)
            print_table(["TransactionalId", "ProducerId", "State"],
                        [[t.transactional_id, str(t.producer_id), t.state] for t in listings])
        elif args.action == "describe":
            d = client.admin.describe_transactions([args.transactional_id])[args.transactional_id]
            print_table(
                ["TransactionalId", "ProducerId", "ProducerEpoch", "State", "StartTime",
                 "TimeoutMs", "Partitions"],
                [[d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
                  _time(d.start_time_ms), str(d.timeout_ms),
                  ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-"]],
            )
        elif args.action == "find-hanging":
            print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch",
                         "CoordinatorEpoch", "StartOffset", "StartTime", "AgeMs", "Why"],
                        _hanging(client, args))
        else:
            tp = TopicPartition(args.topic, args.partition)
            epoch, coordinator_epoch = args.producer_epoch, args.coordinator_epoch
            if epoch is None or coordinator_epoch is None:
                known = {p.producer_id: p for p in client.admin.describe_producers([tp])[tp]}
                if args.producer_id not in known:
                    raise ConfigurationError(
                        f"{tp} knows no producer {args.producer_id}: give --producer-epoch "
                        f"and --coordinator-epoch"
                    )
                found = known[args.producer_id]
                epoch = found.producer_epoch if epoch is None else epoch
                if coordinator_epoch is None:
                    coordinator_epoch = max(found.coordinator_epoch, 0)
            client.admin.abort_transaction(tp, args.producer_id, epoch, coordinator_epoch)
            print(f"aborted the transaction of producer {args.producer_id} epoch {epoch} on "
                  f"{tp.topic}-{tp.partition}")
    return 0


def _hanging(client: Client, args: argparse.Namespace) -> list[list[str]]:
    """One row per open transaction of the partitions asked about that no coordinator will
    end."""
    from tidelog.types import TopicPartition

    client.connections.metadata.refresh(client.connections.deadline())
    if args.topic is not None:
        info = client.metadata.topic(args.topic)
        if info is None:
            raise ConfigurationError(f"topic {args.topic!r} does not exist")
        tps = [TopicPartition(args.topic, p) for p in range(len(info.partitions))]
    else:
        tps = []
        for name in client.admin.list_topics():
            info = client.metadata.topic(name)
            parts = info.partitions if info is not None else ()
            tps += [TopicPartition(name, p) for p, part in enumerate(parts)
                    if part.leader == args.node]
    now_ms = int(time.time() * 1000)
    rows = []
    for tp, producers in sorted(client.admin.describe_producers(tps).items()):
        for p in producers:
            if p.txn_start_offset < 0:
                continue
            age = now_ms - p.txn_start_time_ms if p.txn_start_time_ms >= 0 else -1
            why = ""
            if age > args.max_transaction_timeout_ms:
                why = "older than the transaction timeout"
            elif not _coordinator_knows(client, tp, p.producer_id):
                why = "no coordinator's transaction has it"
            if why:
                rows.append([tp.topic, str(tp.partition), str(p.producer_id),
                             str(p.producer_epoch), str(p.coordinator_epoch),
                             str(p.txn_start_offset), _time(p.txn_start_time_ms), str(age), why])
    return rows


def _coordinator_knows(client: Client, tp: TopicPartition, producer_id: int) -> bool:
    """Whether a transactional id of the producer has an ongoing transaction with `tp`."""
    ids = [t.transactional_id for t in client.admin.list_transactions(producer_ids=[producer_id])]
    if not ids:
        return False
    return any(d.state == "Ongoing" and tp in d.partitions
               for d in client.admin.describe_transactions(ids).values())


def _time(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
