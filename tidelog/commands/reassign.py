"""``tidelog reassign``: move partition replicas between nodes, with kafka-reassign-partitions'
flow, flags and JSON files.

1. ``--generate --topics-to-move-json-file F --broker-list 1,2,3`` prints the current
   assignment of the topics F names (``{"topics": [{"topic": "events"}], "version": 1}``) and a
   proposed one over the given nodes, placed as a new topic's partitions are; nothing changes.
2. ``--execute --reassignment-json-file F`` starts the reassignments of F
   (``{"version": 1, "partitions": [{"topic": "events", "partition": 0, "replicas": [2, 3]}]}``,
   the first replica the preferred leader) and prints the current assignment first: save it,
   it is the file that moves the partitions back.
3. ``--verify --reassignment-json-file F`` says, per partition, whether its reassignment is
   complete or still in progress, and exits 1 unless every partition of F has F's replicas;
   ``--cancel --reassignment-json-file F`` cancels those in progress (back to the replicas
   before); ``--list`` shows every reassignment in progress.

Continuous balancing leaves every partition an operator reassigned (or cancelled) where the
operator put it for the cluster's balancer.operator.hold.ms (an hour by default);
``--release --reassignment-json-file F`` gives F's partitions back to the balancer sooner.

``--wait`` (with ``--execute`` or ``--verify``) waits until every partition of F is complete,
printing progress as partitions finish. Each partition's leader carries its move out as Raft
membership changes (the new replicas join as learners and are promoted once caught up; the
leaving ones are removed, and their files deleted, once the group no longer counts them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.commands._common import add_bootstrap, client_for
from tidelog.errors import ConfigurationError
from tidelog.types import TopicPartition

if TYPE_CHECKING:
    from tidelog.client import Client

_WAIT_POLL_S = 0.5


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--generate", action="store_true",
                         help="propose an assignment of the topics of --topics-to-move-json-file "
                              "over the nodes of --broker-list (changes nothing)")
    actions.add_argument("--execute", action="store_true",
                         help="start the reassignments of --reassignment-json-file")
    actions.add_argument("--verify", action="store_true",
                         help="whether the reassignments of --reassignment-json-file are done "
                              "(exit code 1 while one is in progress, or when a partition's "
                              "replicas are not the file's)")
    actions.add_argument("--cancel", action="store_true",
                         help="cancel the reassignments of --reassignment-json-file in progress")
    actions.add_argument("--release", action="store_true",
                         help="let continuous balancing move the partitions of "
                              "--reassignment-json-file again (their replica lists are not used)")
    actions.add_argument("--list", action="store_true",
                         help="every reassignment in progress")
    parser.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE")
    parser.add_argument("--broker-list", metavar="1,2,3",
                        help="the node ids to place replicas on (--generate)")
    parser.add_argument("--reassignment-json-file", type=Path, metavar="FILE")
    parser.add_argument("--wait", action="store_true",
                        help="with --execute or --verify: wait until every partition is done, "
                             "printing progress")
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    needs_file = args.execute or args.verify or args.cancel or args.release
    if needs_file and args.reassignment_json_file is None:
        raise ConfigurationError(
            "--execute, --verify, --cancel and --release need --reassignment-json-file"
        )
    if args.generate and (args.topics_to_move_json_file is None or args.broker_list is None):
        raise ConfigurationError("--generate needs --topics-to-move-json-file and --broker-list")
    if args.wait and not (args.execute or args.verify):
        raise ConfigurationError("--wait goes with --execute or --verify")
    targets = read_reassignment(args.reassignment_json_file) if needs_file else {}
    brokers = _broker_list(args.broker_list) if args.generate else []
    topics = read_topics_to_move(args.topics_to_move_json_file) if args.generate else []
    client = client_for(args)
    try:
        if args.generate:
            return _generate(client, topics, brokers)
        if args.list:
            return _list(client)
        if args.cancel:
            return _cancel(client, list(targets))
        if args.release:
            return _release(client, list(targets))
        if args.execute:
            _execute(client, targets)
            if not args.wait:
                return 0
        return _verify(client, targets, args.wait)
    finally:
        client.close()


# ---- the JSON files ---------------------------------------------------------------------------


def read_reassignment(path: Path) -> dict[TopicPartition, list[int]]:
    """kafka-reassign-partitions' reassignment file: each partition once, its replicas a
    non-empty list of distinct node ids (``log_dirs`` may be given, as "any" only)."""
    document = _load(path)
    partitions = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(partitions, list) or not partitions:
        raise ConfigurationError(f"{path}: expected {{\"version\": 1, \"partitions\": [...]}} "
                                 "with at least one partition")
    out: dict[TopicPartition, list[int]] = {}
    for entry in partitions:
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{path}: a partition entry is not an object: {entry!r}")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if (not isinstance(topic, str) or not topic or not isinstance(partition, int)
                or isinstance(partition, bool) or partition < 0):
            raise ConfigurationError(f"{path}: {entry!r} lacks a topic name or a partition "
                                     "index >= 0")
        if (not isinstance(replicas, list) or not replicas
                or not all(_is_int(r) and r >= 0 for r in replicas)
                or len(set(replicas)) != len(replicas)):
            raise ConfigurationError(f"{path}: {topic}-{partition}: replicas must be a non-empty "
                                     f"list of distinct node ids, not {replicas!r}")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (not isinstance(log_dirs, list)
                                     or any(d != "any" for d in log_dirs)):
            raise ConfigurationError(f"{path}: {topic}-{partition}: log_dirs other than \"any\" "
                                     "are not supported (a node has one data directory)")
        tp = TopicPartition(topic, partition)
        if tp in out:
            raise ConfigurationError(f"{path}: {topic}-{partition} is listed twice")
        out[tp] = list(replicas)
    return out


def read_topics_to_move(path: Path) -> list[str]:
    document = _load(path)
    topics = document.get("topics") if isinstance(document, dict) else None
    if (not isinstance(topics, list) or not topics
            or not all(isinstance(t, dict) and isinstance(t.get("topic"), str) for t in topics)):
        raise ConfigurationError(f"{path}: expected {{\"topics\": [{{\"topic\": NAME}}, ...], "
                                 "\"version\": 1}")
    return list(dict.fromkeys(t["topic"] for t in topics))


def assignment_json(assignment: dict[TopicPartition, tuple[int, ...] | list[int]]) -> str:
    """An assignment in the reassignment file's format, as kafka-reassign-partitions prints it."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
         "log_dirs": ["any"] * len(replicas)}
        for tp, replicas in sorted(assignment.items())
    ]})


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ConfigurationError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"{path}: not JSON: {exc}") from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _broker_list(text: str) -> list[int]:
    try:
        nodes = [int(n) for n in text.split(",")]
    except ValueError:
        raise ConfigurationError(f"--broker-list {text!r}: expected node ids joined by ','") \
            from None
    if any(n < 0 for n in nodes) or len(set(nodes)) != len(nodes):
        raise ConfigurationError(f"--broker-list {text!r}: distinct node ids >= 0")
    return nodes


# ---- the actions ------------------------------------------------------------------------------


def _current(client: Client, topics: list[str]) -> dict[TopicPartition, tuple[int, ...]]:
    """The replicas of every partition of the topics as the metadata lists them now;
    UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist."""
    described = client.describe_topics(list(dict.fromkeys(topics)))
    return {TopicPartition(name, index): partition.replicas
            for name, info in described.items()
            for index, partition in enumerate(info.partitions)}


def _topics(partitions: dict[TopicPartition, list[int]]) -> list[str]:
    return list(dict.fromkeys(tp.topic for tp in partitions))


def _generate(client: Client, topics: list[str], brokers: list[int]) -> int:
    from tidelog.coordinator.controller import assign_replicas

    current = _current(client, topics)
    proposed: dict[TopicPartition, tuple[int, ...] | list[int]] = {}
    for name in topics:
        partitions = sorted(tp for tp in current if tp.topic == name)
        factor = len(current[partitions[0]])
        if factor > len(brokers):
            raise ConfigurationError(f"topic {name} has {factor} replicas per partition, more "
                                     f"than the {len(brokers)} node(s) of --broker-list")
        placed = assign_replicas(len(partitions), factor, sorted(brokers), {})
        proposed.update(zip(partitions, placed, strict=True))
    print("Current partition replica assignment")
    print(assignment_json(dict(current)))
    print()
    print("Proposed partition reassignment configuration")
    print(assignment_json(proposed))
    return 0


def _execute(client: Client, targets: dict[TopicPartition, list[int]]) -> None:
    every = _current(client, _topics(targets))
    current = {tp: replicas for tp, replicas in every.items() if tp in targets}
    unknown = sorted(tp for tp in targets if tp not in current)
    if unknown:
        raise ConfigurationError(f"partition(s) {_names(unknown)} do not exist")
    print("Current partition replica assignment")
    print()
    print(assignment_json(dict(current)))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    failed = client.admin.alter_partition_reassignments(dict(targets))
    for tp, error in sorted(failed.items()):
        print(f"Error reassigning partition {tp.topic}-{tp.partition}: {error}", file=sys.stderr)
    started = sorted(tp for tp in targets if tp not in failed)
    if started:
        print(f"Successfully started partition reassignment(s) for {_names(started)}")
    if failed:
        raise ConfigurationError(f"{len(failed)} partition reassignment(s) failed to start")


def _verify(client: Client, targets: dict[TopicPartition, list[int]], wait: bool) -> int:
    print("Status of partition reassignment:")
    reported: set[TopicPartition] = set()
    while True:
        moving = client.admin.list_partition_reassignments(list(targets))
        current = _current(client, _topics(targets))
        pending = []
        elsewhere = []
        for tp in sorted(targets):
            if tp in moving:
                pending.append(tp)
                if not wait:
                    print(f"Reassignment of partition {tp.topic}-{tp.partition} is still in "
                          "progress.")
            elif list(current.get(tp, ())) == targets[tp]:
                if tp not in reported:
                    reported.add(tp)
                    print(f"Reassignment of partition {tp.topic}-{tp.partition} is completed.")
            else:
                elsewhere.append(tp)
                reported.add(tp)
                print(f"There is no active reassignment of partition {tp.topic}-{tp.partition}, "
                      f"but its replicas are {list(current.get(tp, ()))}, not {targets[tp]}.")
        if not pending or not wait:
            if elsewhere:
                print(f"The plan is not in effect for {len(elsewhere)} partition(s): "
                      f"{_names(elsewhere)}", file=sys.stderr)
            return 0 if not pending and not elsewhere else 1
        print(f"  waiting for {len(pending)} partition(s): "
              + ", ".join(_progress(tp, moving[tp]) for tp in pending[:5])
              + (" ..." if len(pending) > 5 else ""), flush=True)
        time.sleep(_WAIT_POLL_S)


def _progress(tp: TopicPartition, moving: Any) -> str:
    parts = [f"{tp.topic}-{tp.partition} replicas {list(moving.replicas)}"]
    if moving.adding_replicas:
        parts.append(f"adding {list(moving.adding_replicas)}")
    if moving.removing_replicas:
        parts.append(f"removing {list(moving.removing_replicas)}")
    return " ".join(parts)


def _cancel(client: Client, partitions: list[TopicPartition]) -> int:
    failed = client.admin.alter_partition_reassignments(dict.fromkeys(partitions))
    for tp, error in sorted(failed.items()):
        print(f"Error cancelling the reassignment of {tp.topic}-{tp.partition}: {error}",
              file=sys.stderr)
    cancelled = sorted(tp for tp in partitions if tp not in failed)
    if cancelled:
        print(f"Successfully cancelled partition reassignment(s) for: {_names(cancelled)}")
    return 1 if failed else 0


def _release(client: Client, partitions: list[TopicPartition]) -> int:
    failed = client.admin.alter_partition_reassignments(dict.fromkeys(partitions), release=True)
    for tp, error in sorted(failed.items()):
        print(f"Error releasing partition {tp.topic}-{tp.partition}: {error}", file=sys.stderr)
    released = sorted(tp for tp in partitions if tp not in failed)
    if released:
        print(f"Balancing may move partition(s) {_names(released)} again")
    return 1 if failed else 0


def _list(client: Client) -> int:
    moving = client.admin.list_partition_reassignments()
    if not moving:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, reassignment in sorted(moving.items()):
        print(f"{tp.topic}-{tp.partition}: replicas: {_ids(reassignment.replicas)}. adding: "
              f"{_ids(reassignment.adding_replicas)}. removing: "
              f"{_ids(reassignment.removing_replicas)}.")
    return 0


def _names(partitions: list[TopicPartition]) -> str:
    return ",".join(f"{tp.topic}-{tp.partition}" for tp in partitions)


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids))
