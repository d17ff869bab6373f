"""``tidelog groups list|describe|reset-offsets|delete|delete-offsets``: consumer groups and
their committed offsets, with kafka-consumer-groups' semantics and flags (groups named as
arguments or by ``--group``, or ``--all-groups``).

``describe`` shows a consumer group's members (KIP-848): each one's id, instance id, epoch,
host, assigned and target partitions, and the group's state and epochs; then, per committed
partition, the committed offset, the log end offset (the
high watermark, what a read_uncommitted consumer can reach), the lag between them and the
member that owns the partition. ``--offsets``, ``--members`` and ``--state`` show one part
each, as kafka-consumer-groups prints them.
``reset-offsets`` computes new offsets for groups (earliest, latest, the committed one, by
time or duration through ListOffsets, an absolute offset, a shift of the committed one, or
a file ``--export`` wrote), clamped to what the log holds as Kafka does, and prints the plan;
only ``--execute`` commits it.
``delete-offsets`` removes a group's committed offsets of some partitions (OffsetDelete).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.commands._common import add_bootstrap, client_for, parse_time, print_table
from tidelog.errors import ConfigurationError, GroupIdNotFoundError
from tidelog.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    GroupListing,
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
    listing.add_argument(
        "--state", nargs="?", const="", metavar="STATE[,STATE...]",
        help="show each group's state; with states, only the groups in them (kafka-consumer-"
             "groups' --list --state; any case)")
    add_bootstrap(listing)
    describe = sub.add_parser(
        "describe", help="members, and committed offset, log end offset and lag per partition"
    )
    _add_groups(describe)
    describe.add_argument("--offsets", action="store_true",
                          help="only the offsets, log end offsets and lags")
    describe.add_argument("--members", action="store_true",
                          help="only the members (with --verbose, their epochs and partitions)")
    describe.add_argument("--state", action="store_true",
                          help="only the state: coordinator, assignor, state, member count")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members: each member's epoch and assignment")
    add_bootstrap(describe)
    reset = sub.add_parser(
        "reset-offsets", help="plan (and with --execute, commit) new offsets for groups"
    )
    _add_groups(reset)
    reset.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions (repeatable)")
    reset.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed an offset for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-current", action="store_true",
                        help="the committed offset (the log end offset where there is none)")
    target.add_argument("--to-datetime", metavar="ISO-8601",
                        help="the first offset at or after this time (no zone: UTC)")
    target.add_argument("--by-duration", metavar="PnDTnHnMnS",
                        help="the first offset at or after this long ago (ISO-8601 duration, "
                             "e.g. PT1H30M or P1D)")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="the committed offset plus N (N may be negative)")
    target.add_argument("--from-file", type=Path, metavar="CSV",
                        help="the offsets of a file as --export writes it: lines of "
                             "TOPIC,PARTITION,OFFSET or GROUP,TOPIC,PARTITION,OFFSET")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true",
                      help="only print the plan (what happens without --execute)")
    reset.add_argument("--export", action="store_true",
                       help="print the plan as CSV, which --from-file reads back")
    add_bootstrap(reset)
    delete = sub.add_parser("delete", help="delete groups and their committed offsets")
    _add_groups(delete)
    add_bootstrap(delete)
    delete_offsets = sub.add_parser(
        "delete-offsets", help="delete a group's committed offsets of some partitions"
    )
    _add_groups(delete_offsets, several=False)
    delete_offsets.add_argument("--topic", action="append", required=True,
                                metavar="TOPIC[:P,P...]",
                                help="a topic, or some of its partitions (repeatable)")
    add_bootstrap(delete_offsets)


def _add_groups(parser: argparse.ArgumentParser, several: bool = True) -> None:
    """The groups a command acts on: as arguments, by kafka-consumer-groups' ``--group``
    (repeatable), or (with `several`) ``--all-groups``."""
    parser.add_argument("groups", nargs="*", metavar="GROUP", help="a group id")
    parser.add_argument("--group", dest="group_flag", action="append", default=[],
                        metavar="GROUP", help="the same as the argument (kafka-consumer-"
                        "groups' flag)" + ("; repeatable" if several else ""))
    if several:
        parser.add_argument("--all-groups", action="store_true",
                            help="every consumer group of the cluster")
    parser.set_defaults(several_groups=several)


def _named_groups(args: argparse.Namespace) -> list[str]:
    """The groups named on the command line, checked before anything is asked of the
    cluster: some, or --all-groups, not both (one only where the command takes one)."""
    named = list(dict.fromkeys([*args.groups, *args.group_flag]))
    every = getattr(args, "all_groups", False)
    if named and every:
        raise ConfigurationError("name groups or give --all-groups, not both")
    if not named and not every:
        raise ConfigurationError("no group: give GROUP, --group GROUP or --all-groups"
                                 if args.several_groups else
                                 "no group: give GROUP or --group GROUP")
    if not args.several_groups and len(named) > 1:
        raise ConfigurationError(f"one group only, got {', '.join(named)}")
    return named


def _group_ids(client: Client, args: argparse.Namespace) -> list[str]:
    """The groups named, or with --all-groups every group of the cluster."""
    return _named_groups(args) or [g.group_id for g in client.admin.list_consumer_groups()]


def run(args: argparse.Namespace) -> int:
    if args.action != "list":
        _named_groups(args)  # a usage mistake is said before the cluster is reached
    if args.action == "reset-offsets":
        _checked_target(args)
        _checked_scope(args)
    client = client_for(args)
    try:
        if args.action == "list":
            _list(client, args.state)
        elif args.action == "describe":
            groups = _group_ids(client, args)
            for index, group in enumerate(groups):
                if index:
                    print()
                _describe(client, group, args)
        elif args.action == "reset-offsets":
            _reset(client, args)
        elif args.action == "delete-offsets":
            return _delete_offsets(client, _named_groups(args)[0], args.topic)
        else:
            for group in _group_ids(client, args):
                client.admin.delete_consumer_groups([group])
                print(f"deleted group {group}")
    finally:
        client.close()
    return 0


def _list(client: Client, states: str | None) -> None:
    """Group ids; with --state, a GROUP STATE table, only of the states named if any."""
    groups = client.admin.list_consumer_groups()
    if states is None:
        for group in groups:
            print(group.group_id)
        return
    wanted = {s.strip().lower() for s in states.split(",") if s.strip()}
    rows = [[g.group_id, g.state] for g in groups if not wanted or g.state.lower() in wanted]
    if rows:
        print_table(["GROUP", "STATE"], rows)


def _describe(client: Client, group: str, args: argparse.Namespace) -> None:
    """Without --offsets, --members or --state: the members' summary, then the offsets."""
    try:
        members: ConsumerGroupDescription | None = client.admin.describe_consumer_group(group)
    except GroupIdNotFoundError:
        members = None  # a group that only commits offsets
    listing = None
    if members is None or args.state:
        listing = {g.group_id: g for g in client.admin.list_consumer_groups()}.get(group)
        if members is None and listing is None:
            raise GroupIdNotFoundError(f"consumer group {group!r} does not exist")
    if args.state:
        _describe_state(client, group, members, listing)
    if args.members:
        _describe_members(group, members, args.verbose)
    if args.offsets or not (args.state or args.members):
        _describe_offsets(client, group, members, summary=not args.offsets)


def _describe_state(
    client: Client, group: str, members: ConsumerGroupDescription | None,
    listing: GroupListing | None,
) -> None:
    """kafka-consumer-groups' --describe --state: the coordinator, assignor, state and member
    count (the listing's state for a group that only commits offsets)."""
    coordinator = client.admin.find_coordinator(group)
    address = client.admin.describe_cluster().nodes.get(coordinator, "-")
    state = members.state if members is not None else listing.state if listing else "-"
    print_table(
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [[group, f"{address} ({coordinator})", members.assignor if members else "-", state,
          str(len(members.members) if members else 0)]],
    )


def _describe_members(
    group: str, members: ConsumerGroupDescription | None, verbose: bool
) -> None:
    """kafka-consumer-groups' --describe --members: one line per member; --verbose adds its
    epoch and its partitions."""
    if members is None or not members.members:
        print(f"consumer group {group!r} has no active members")
        return
    headers = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "#PARTITIONS"]
    if verbose:
        headers += ["EPOCH", "ASSIGNMENT", "TARGET"]
    rows = []
    for member in members.members:
        row = [group, member.member_id, member.instance_id or "-", member.client_host or "-",
               str(len(member.assignment))]
        if verbose:
            row += [str(member.member_epoch), _format_partitions(member.assignment),
                    _format_partitions(member.target_assignment)]
        rows.append(row)
    print_table(headers, rows)


def _describe_offsets(
    client: Client, group: str, members: ConsumerGroupDescription | None, summary: bool
) -> None:
    """Per committed partition: the offset, the log end offset, the lag and its owner; with
    `summary`, the group's state and members before them."""
    owners: dict[TopicPartition, str] = {}
    if members is not None:
        for member in members.members:
            owners.update(dict.fromkeys(member.assignment, member.member_id))
    if members is not None and summary:
        print(f"group {group}: {members.state}, group epoch {members.group_epoch}, "
              f"assignment epoch {members.assignment_epoch}, assignor {members.assignor}")
        rows = [[member.member_id, member.instance_id or "-", str(member.member_epoch),
                 member.client_host or "-", _format_partitions(member.assignment),
                 _format_partitions(member.target_assignment)] for member in members.members]
        if rows:
            print_table(["MEMBER-ID", "INSTANCE-ID", "EPOCH", "HOST", "ASSIGNMENT", "TARGET"],
                        rows)
        else:
            print("no members")
        print()
    committed = client.admin.list_consumer_group_offsets(group)
    if not committed:
        print(f"consumer group {group!r} has no committed offsets")
        return
    ends = _log_ends(client, committed)
    rows = []
    for tp, value in committed.items():
        end = ends.get(tp)
        rows.append([group, tp.topic, str(tp.partition), str(value.offset),
                     "-" if end is None else str(end),
                     "-" if end is None else str(max(end - value.offset, 0)),
                     owners.get(tp, "-")])
    print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID"], rows)


def _log_ends(client: Client, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """The log end offsets of the partitions whose topics still exist."""
    topics = client.describe_topics()
    live = [tp for tp in tps
            if tp.topic in topics and tp.partition < len(topics[tp.topic].partitions)]
    return {tp: r.offset for tp, r in
            client.list_offsets(dict.fromkeys(live, LATEST_TIMESTAMP)).items()}


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


def _checked_scope(args: argparse.Namespace) -> None:
    """Which partitions reset-offsets plans for: --topic or --all-topics (one of them), or
    those of --from-file's lines."""
    if args.from_file is not None:
        if args.topic or args.all_topics:
            raise ConfigurationError("--from-file names its partitions: leave out --topic and "
                                     "--all-topics")
    elif bool(args.topic) == args.all_topics:
        raise ConfigurationError("give the partitions to reset: --topic TOPIC[:P,P...] "
                                 "(repeatable) or --all-topics, one of them")


def _reset(client: Client, args: argparse.Namespace) -> None:
    when = _checked_target(args)
    groups = _group_ids(client, args)
    from_file = None if args.from_file is None else _read_plan(args.from_file, groups)
    plans: dict[str, dict[TopicPartition, int]] = {}
    rows = []
    for group in groups:
        if from_file is not None:
            tps = _existing(client, from_file.get(group, {}))
        elif args.all_topics:
            tps = _existing(client, client.admin.list_consumer_group_offsets(group))
        else:
            tps = _partitions(client, args.topic)
        current, plans[group] = _plan(
            client, group, tps, args, when, None if from_file is None else from_file[group])
        rows += [[group, tp.topic, str(tp.partition),
                  str(current[tp].offset) if tp in current else "-", str(plans[group][tp])]
                 for tp in tps]
    if args.export:
        for group, plan in plans.items():
            for tp, offset in plan.items():
                print(",".join([*([group] if len(groups) > 1 else []), tp.topic,
                                str(tp.partition), str(offset)]))
    elif rows:
        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], rows)
    else:
        print("no partitions to reset")
    note = sys.stderr if args.export else sys.stdout
    if not args.execute:
        print("dry run: nothing was committed; add --execute to commit these offsets", file=note)
        return
    for group, plan in plans.items():
        if plan:
            client.admin.alter_consumer_group_offsets(
                group, {tp: OffsetAndMetadata(offset) for tp, offset in plan.items()})
            print(f"committed the new offsets of {len(plan)} partition(s) for group {group}",
                  file=note)


def _existing(client: Client, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions whose topics still exist (a group may hold offsets of deleted ones)."""
    topics = client.describe_topics()
    return [tp for tp in tps
            if tp.topic in topics and tp.partition < len(topics[tp.topic].partitions)]


def _plan(
    client: Client, group: str, tps: list[TopicPartition], args: argparse.Namespace,
    when: int | None, from_file: dict[TopicPartition, int] | None,
) -> tuple[dict[TopicPartition, OffsetAndMetadata], dict[TopicPartition, int]]:
    """The group's committed offsets of `tps`, and the new offset of each."""
    if not tps:
        return {}, {}
    current = client.admin.list_consumer_group_offsets(group, tps)
    earliest = {tp: r.offset for tp, r in
                client.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP)).items()}
    latest = {tp: r.offset for tp, r in
              client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}
    if from_file is not None:
        wanted = from_file
    elif args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_current:  # no committed offset: the log end, as kafka-consumer-groups
        wanted = {tp: current[tp].offset if tp in current else latest[tp] for tp in tps}
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
                f"--shift-by: no committed offset to shift for {', '.join(missing)} "
                f"(group {group!r})"
            )
        wanted = {tp: current[tp].offset + args.shift_by for tp in tps}
    # Out of the log's range: clamped to its ends, as kafka-consumer-groups does.
    return current, {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in tps}


def _read_plan(path: Path, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
    """--from-file's CSV: TOPIC,PARTITION,OFFSET lines (for the one group named) or
    GROUP,TOPIC,PARTITION,OFFSET lines (only the groups named are reset), as --export writes
    them; each line checked, naming the line that is wrong."""
    plan: dict[str, dict[TopicPartition, int]] = {group: {} for group in groups}
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == 3 and len(groups) == 1:
            cells = [groups[0], *cells]
        if len(cells) != 4 or not cells[0] or not cells[1] \
                or not cells[2].isdigit() or not cells[3].isdigit():
            raise ConfigurationError(
                f"--from-file {path}, line {number}: expected TOPIC,PARTITION,OFFSET"
                + (" (one group named)" if len(groups) == 1 else "")
                + " or GROUP,TOPIC,PARTITION,OFFSET, with numbers >= 0; got " + repr(line))
        if cells[0] in plan:
            plan[cells[0]][TopicPartition(cells[1], int(cells[2]))] = int(cells[3])
    return plan


def _delete_offsets(client: Client, group: str, specs: list[str]) -> int:
    """kafka-consumer-groups' --delete-offsets: a TOPIC PARTITION STATUS line per partition;
    2 when some partition failed."""
    tps = _partitions(client, specs)
    failed = client.admin.delete_consumer_group_offsets(group, tps)
    print_table(["TOPIC", "PARTITION", "STATUS"], [
        [tp.topic, str(tp.partition),
         "Successful" if tp not in failed else f"Error: {failed[tp]}"] for tp in tps])
    if failed:
        print(f"tidelog groups: the offsets of {len(failed)} partition(s) of group {group!r} "
              "were not deleted", file=sys.stderr)
        return 2
    return 0


#: An ISO-8601 duration as kafka-consumer-groups' --by-duration reads it (Java's
#: Duration.parse): days, hours, minutes and seconds, each optional.
_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration such as PT1H30M, P1D or PT0.5S."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groups()) or text.strip().upper().endswith("T"):
        raise ConfigurationError(
            f"--by-duration {text!r}: expected an ISO-8601 duration PnDTnHnMnS such as "
            "PT1H30M, P1D or PT0.5S")
    days, hours, minutes = (int(match[k] or 0) for k in "dhm")
    seconds = float((match["s"] or "0").replace(",", "."))
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _checked_target(args: argparse.Namespace) -> int | None:
    """Check the target before anything is asked of the cluster; the time in milliseconds of
    --to-datetime or --by-duration, if that is the target."""
    if args.to_offset is not None and args.to_offset < 0:
        raise ConfigurationError(f"--to-offset {args.to_offset}: an offset is >= 0")
    if args.by_duration is not None:
        return int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    if args.to_datetime is None:
        return None
    when = parse_time(args.to_datetime, "--to-datetime")
    if when < 0:
        raise ConfigurationError(
            f"--to-datetime {args.to_datetime!r}: expected a time such as "
            "2026-11-22T10:00:00Z; use --to-earliest or --to-latest for the log's ends"
        )
    return when
