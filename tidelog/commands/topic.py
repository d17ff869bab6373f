"""``tidelog topic create|list|describe|alter|delete``: topic administration over the client."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tidelog.commands._common import add_bootstrap, add_topic, client_for, parse_configs
from tidelog.errors import ConfigurationError

if TYPE_CHECKING:
    from tidelog.client import Client


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    create = sub.add_parser("create", help="create a topic")
    add_topic(create, "name")
    create.add_argument("--partitions", type=int, default=None,
                        help="at least 1 (default: the nodes' num.partitions)")
    create.add_argument("--replication-factor", type=int, default=None,
                        help="at least 1 (default: min(3, number of nodes))")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config such as segment.bytes=1048576 (repeatable)")
    add_bootstrap(create)
    listing = sub.add_parser("list", help="list topics")
    add_bootstrap(listing)
    describe = sub.add_parser("describe", help="partitions, leaders, replicas and configs")
    add_topic(describe, "names", many=True, help="topics to describe (default: all)")
    only = describe.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only the partitions whose in-sync replicas are fewer than their "
                           "replicas (kafka-topics' flag)")
    only.add_argument("--unavailable-partitions", action="store_true",
                      help="only the partitions without a leader, or whose leader is not a "
                           "live node (kafka-topics' flag)")
    add_bootstrap(describe)
    alter = sub.add_parser("alter", help="add partitions to a topic")
    add_topic(alter, "name")
    alter.add_argument("--partitions", type=int, required=True,
                       help="the new total number of partitions (more than now)")
    alter.add_argument("--replica-assignment", metavar="1:2,2:3",
                       help="the replicas of each new partition, preferred leader first "
                            "(kafka-topics' form; default: placed as a new topic's)")
    add_bootstrap(alter)
    delete = sub.add_parser("delete", help="delete a topic and its data")
    add_topic(delete, "name")
    add_bootstrap(delete)


def run(args: argparse.Namespace) -> int:
    if args.action == "create":  # checked before the client connects
        # As kafka-topics: a count given must be positive; -1 (the node's default) is what
        # leaving it out sends.
        for flag, value in (("--partitions", args.partitions),
                            ("--replication-factor", args.replication_factor)):
            if value is not None and value < 1:
                raise ConfigurationError(f"{flag} must be at least 1, got {value} (leave "
                                         "it out for the cluster's default)")
        new_configs = parse_configs(args.config)
    client = client_for(args)
    try:
        if args.action == "create":
            client.create_topic(
                args.name,
                partitions=-1 if args.partitions is None else args.partitions,
                replication_factor=args.replication_factor,
                config=new_configs,
            )
            count = client.metadata.partition_count(args.name)
            print(f"created topic {args.name} with {count} partition(s)")
        elif args.action == "list":
            for name in client.admin.list_topics():
                print(name)
        elif args.action == "describe" and (args.under_replicated_partitions
                                            or args.unavailable_partitions):
            _describe_troubled(client, args)
        elif args.action == "describe":
            topics = client.describe_topics(args.names or None)
            for name, info in topics.items():
                configs = ", ".join(f"{k}={v}" for k, v in sorted(info.configs.items()))
                print(f"{name}  partitions={len(info.partitions)}  {configs}".rstrip())
                for index, p in enumerate(info.partitions):
                    print(
                        f"  partition {index}: leader {p.leader} epoch {p.leader_epoch}"
                        f"  replicas {_ids(p.replicas)}  isr {_ids(p.isr)}"
                    )
        elif args.action == "alter":
            from tidelog.configs import NewPartitions

            client.admin.create_partitions(
                {args.name: NewPartitions(args.partitions,
                                          _assignment(args.replica_assignment))})
            print(f"topic {args.name} now has {args.partitions} partition(s)")
        else:
            client.admin.delete_topic(args.name)
            print(f"deleted topic {args.name}")
    finally:
        client.close()
    return 0


def _describe_troubled(client: Client, args: argparse.Namespace) -> None:
    """kafka-topics' --describe --under-replicated-partitions / --unavailable-partitions: only
    the partitions in trouble, one line each naming its topic; nothing when none is."""
    topics = client.describe_topics(args.names or None)
    live = _live_nodes(client) if args.unavailable_partitions else set()
    for name, info in topics.items():
        for index, p in enumerate(info.partitions):
            troubled = (len(p.isr) < len(p.replicas) if args.under_replicated_partitions
                        else p.leader < 0 or p.leader not in live)
            if troubled:
                print(f"{name} partition {index}: leader {p.leader} epoch {p.leader_epoch}"
                      f"  replicas {_ids(p.replicas)}  isr {_ids(p.isr)}")


def _live_nodes(client: Client) -> set[int]:
    """The nodes the controller has not fenced (Kafka's live brokers). Metadata lists a fenced
    node while Raft still names it a leader, so that clients can reach it; only a request for
    fenced nodes too says which those are."""
    from tidelog.errors import NodeUnavailableError, TidelogError
    from tidelog.v1 import tidelog_pb2 as pb

    request = pb.MetadataRequest(include_fenced_nodes=True)
    failures: list[str] = []
    for node_id in sorted(client.admin.describe_cluster().nodes):
        try:
            answer = client.connections.call(node_id, "Metadata", request,
                                             client.connections.config.request_timeout_ms / 1000)
        except TidelogError as exc:
            failures.append(str(exc))
            continue
        return {n.node_id for n in answer.nodes if not n.is_fenced and n.registered}
    raise NodeUnavailableError("no node answered Metadata: " + "; ".join(failures))


def _assignment(text: str | None) -> list[list[int]] | None:
    if text is None:
        return None
    try:
        return [[int(node) for node in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise ConfigurationError(
            f"--replica-assignment {text!r}: expected node ids, a partition's joined by ':' and "
            "partitions by ',' (1:2,2:3)"
        ) from None


def _ids(ids: tuple[int, ...] | list[int]) -> str:
    return ",".join(map(str, ids))
