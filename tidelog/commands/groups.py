"""``tidelog groups list|describe|reset-offsets|delete``: consumer groups and their committed
offsets, with kafka-consumer-groups' semantics.

``describe`` shows a consumer group's members (KIP-848): each one's id, instance id, epoch,
host, assigned and target partitions, and the group's state and epochs; then, per committed
partition, the committed offset, the log end offset (the
high watermark, what a read_uncommitted consumer can reach), the lag between them and the
member that owns the partition.
``reset-offsets`` computes new offsets for the group (earliest, latest, by time through
ListOffsets, an absolute offset, or a shift of the committed one), clamped to what the log
holds as Kafka does, and prints the plan; only ``--execute`` commits it.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tidelog.commands._common import add_bootstrap, client_for, parse_time, print_table
from tidelog.errors import ConfigurationError, GroupIdNotFoundError
from tidelog.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    OffsetAndMetadata,
    TopicPartition,
)

if TYPE_CHECKING:
    from tidelog.client import Client
    from tidelog.membership import ConsumerGroupDescription


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    listing = sub.add_parser("list", help="the consumer groups of the cluster")
    add_bootstrap(listing)
    describe = sub.add_parser(
        "describe", help="committed offset, log end offset and lag per partition"
    )
    describe.add_argument("group")
    add_bootstrap(describe)
    reset = sub.add_parser(
        "reset-offsets", help="plan (and with --execute, commit) new offsets for a group"
    )
    reset.add_argument("group")
    reset.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions (repeatable)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-datetime", metavar="ISO-8601",
                        help="the first offset at or after this time (no zone: UTC)")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="the committed offset plus N (N may be negative)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true",
                      help="only print the plan (what happens without --execute)")
    add_bootstrap(reset)
    delete = sub.add_parser("delete", help="delete groups and their committed offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    add_bootstrap(delete)


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    try:
        if args.action == "list":
            for group in client.admin.list_consumer_groups():
                print(group.group_id)
        elif args.action == "describe":
            _describe(client, args.group)
        elif args.action == "reset-offsets":
            _reset(client, args)
        else:
            for group in args.groups:
                client.admin.delete_consumer_groups([group])
                print(f"deleted group {group}")
    finally:
        client.close()
    return 0


def _describe(client: Client, group: str) -> None:
    try:
        members: ConsumerGroupDescription | None = client.admin.describe_consumer_group(group)
    except GroupIdNotFoundError:
        members = None  # a group that only commits offsets
    owners: dict[TopicPartition, str] = {}
    if members is not None:
        print(f"group {group}: {members.state}, group epoch {members.group_epoch}, "
              f"assignment epoch {members.assignment_epoch}, assignor {members.assignor}")
        rows = []
        for member in members.members:
            owners.update(dict.fromkeys(member.assignment, member.member_id))
            rows.append([member.member_id, member.instance_id or "-", str(member.member_epoch),
                         member.client_host or "-", _format_partitions(member.assignment),
                         _format_partitions(member.target_assignment)])
        if rows:
            print_table(["MEMBER-ID", "INSTANCE-ID", "EPOCH", "HOST", "ASSIGNMENT", "TARGET"],
                        rows)
        else:
            print("no members")
        print()
    committed = client.admin.list_consumer_group_offsets(group)
    if not committed:
        if members is None and \
                group not in {g.group_id for g in client.admin.list_consumer_groups()}:
            raise GroupIdNotFoundError(f"consumer group {group!r} does not exist")
        print(f"consumer group {group!r} has no committed offsets")
        return
    topics = client.describe_topics()
    live = [tp for tp in committed if tp.topic in topics]
    ends = {tp: r.offset for tp, r in client.list_offsets(
        dict.fromkeys(live, LATEST_TIMESTAMP)
    ).items()}
    rows = []
    for tp, value in committed.items():
        end = ends.get(tp)
        rows.append([group, tp.topic, str(tp.partition), str(value.offset),
                     "-" if end is None else str(end),
                     "-" if end is None else str(max(end - value.offset, 0)),
                     owners.get(tp, "-")])
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID"], rows)


def _format_partitions(partitions: frozenset[TopicPartition]) -> str:
    """t:0,1 u:3 (empty: -)."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


def _partitions(client: Client, specs: list[str]) -> list[TopicPartition]:
    """The partitions named by --topic TOPIC or TOPIC:P,P...; each must exist."""
    out: dict[TopicPartition, None] = {}
    for spec in specs:
        name, sep, numbers = spec.partition(":")
        if not name:
            raise ConfigurationError(f"--topic {spec!r}: expected TOPIC or TOPIC:P,P...")
        count = len(client.describe_topics([name])[name].partitions)
        if not sep:
            out.update(dict.fromkeys(TopicPartition(name, p) for p in range(count)))
            continue
        for number in numbers.split(","):
            if not number.strip().isdigit() or int(number) >= count:
                raise ConfigurationError(
                    f"--topic {spec!r}: {number.strip()!r} is not a partition of {name!r} "
                    f"(it has {count})"
                )
            out[TopicPartition(name, int(number))] = None
    return list(out)


def _reset(client: Client, args: argparse.Namespace) -> None:
    when = _checked_target(args)
    tps = _partitions(client, args.topic)
    current = client.admin.list_consumer_group_offsets(args.group, tps)
    earliest = {tp: r.offset for tp, r in
                client.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP)).items()}
    latest = {tp: r.offset for tp, r in
              client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}
    if args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif when is not None:
        found = client.list_offsets(dict.fromkeys(tps, when))
        # No record at or after the time: the log end, as Kafka does.
        wanted = {tp: latest[tp] if r.offset < 0 else r.offset for tp, r in found.items()}
    elif args.to_offset is not None:
        wanted = dict.fromkeys(tps, args.to_offset)
    else:
        missing = [str(tp) for tp in tps if tp not in current]
        if missing:
            raise ConfigurationError(
                f"--shift-by: no committed offset to shift for {', '.join(missing)}"
            )
        wanted = {tp: current[tp].offset + args.shift_by for tp in tps}
    # Out of the log's range: clamped to its ends, as kafka-consumer-groups does.
    plan = {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in tps}
    print_table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [[args.group, tp.topic, str(tp.partition),
          str(current[tp].offset) if tp in current else "-", str(plan[tp])] for tp in tps],
    )
    if not args.execute:
        print("dry run: nothing was committed; add --execute to commit these offsets")
        return
    client.admin.alter_consumer_group_offsets(
        args.group, {tp: OffsetAndMetadata(offset) for tp, offset in plan.items()}
    )
    print(f"committed the new offsets of {len(plan)} partition(s) for group {args.group}")


def _checked_target(args: argparse.Namespace) -> int | None:
    """Check the target before anything is asked of the cluster; the --to-datetime time in
    milliseconds, if that is the target."""
    if args.to_offset is not None and args.to_offset < 0:
        raise ConfigurationError(f"--to-offset {args.to_offset}: an offset is >= 0")
    if args.to_datetime is None:
        return None
    when = parse_time(args.to_datetime, "--to-datetime")
    if when < 0:
        raise ConfigurationError(
            f"--to-datetime {args.to_datetime!r}: expected a time such as "
            "2026-11-22T10:00:00Z; use --to-earliest or --to-latest for the log's ends"
        )
    return when
