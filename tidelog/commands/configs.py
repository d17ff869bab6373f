"""``tidelog configs``: describe and alter the dynamic configs of topics and nodes, with
kafka-configs' flags (``--entity-type topics|nodes``, ``--entity-name``, ``--entity-default``,
``--add-config k=v,k2=[a,b]``, ``--delete-config k,k2``), and users' SCRAM credentials as
kafka-configs sets them (``--entity-type users --entity-name alice --add-config
'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'``, ``--delete-config SCRAM-SHA-512``):
the password is salted here and never sent."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from tidelog.commands._common import add_bootstrap, client_for
from tidelog.errors import ConfigurationError

if TYPE_CHECKING:
    from tidelog.configs import ConfigResource

#: kafka-configs' entity types (and "brokers", its name for nodes).
_ENTITY_TYPES = {"topics": "topic", "nodes": "node", "brokers": "node", "users": "user"}
#: The sources a plain --describe shows: the dynamic ones, as kafka-configs does.
_DYNAMIC = ("DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG")


def configure(parser: argparse.ArgumentParser) -> None:
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the entity's configs")
    action.add_argument("--alter", action="store_true", help="change the entity's configs")
    parser.add_argument("--entity-type", required=True, choices=sorted(_ENTITY_TYPES),
                        help="topics, nodes (brokers), or users (SCRAM credentials)")
    entity = parser.add_mutually_exclusive_group()
    entity.add_argument("--entity-name",
                        help="the topic's name, the node's id, or the user's name")
    entity.add_argument("--entity-default", action="store_true",
                        help="the default of every node (nodes only)")
    parser.add_argument("--add-config", metavar="K=V,...",
                        help="configs to set, e.g. retention.ms=60000,cleanup.policy=[delete,"
                             "compact]")
    parser.add_argument("--delete-config", metavar="K,...",
                        help="configs to remove (back to the default below them)")
    parser.add_argument("--all", action="store_true",
                        help="with --describe: every config, not only the dynamic ones")
    parser.add_argument("--validate-only", action="store_true",
                        help="with --alter: check the change, change nothing")
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    from tidelog.configs import AlterConfigOp, AlterConfigOpType

    if args.describe and (args.add_config or args.delete_config):
        raise ConfigurationError("--add-config and --delete-config go with --alter")
    if _ENTITY_TYPES[args.entity_type] == "user":
        return _run_users(args)
    resource = _resource(args)
    ops = [AlterConfigOp(k, v) for k, v in parse_add_config(args.add_config or "").items()]
    ops += [AlterConfigOp(key, None, AlterConfigOpType.DELETE)
            for key in _names(args.delete_config or "")]
    if args.alter and not ops:
        raise ConfigurationError("--alter needs --add-config and/or --delete-config")
    client = client_for(args)
    try:
        if args.alter:
            client.admin.incremental_alter_configs({resource: ops},
                                                   validate_only=args.validate_only)
            done = "validated" if args.validate_only else "completed"
            print(f"{done} updating config for {_describe(resource)}.")
            return 0
        entries = client.admin.describe_configs([resource])[resource]
        shown = [e for e in entries.values() if args.all or e.source.name in _DYNAMIC]
        kind = "All" if args.all else "Dynamic"
        print(f"{kind} configs for {_describe(resource)} are:")
        for entry in shown:
            value = "null" if entry.value is None else entry.value
            extra = "  read-only" if entry.is_read_only else ""
            print(f"  {entry.name}={value} source={entry.source.name}"
                  f" sensitive={str(entry.is_sensitive).lower()}{extra}")
    finally:
        client.close()
    return 0


def _run_users(args: argparse.Namespace) -> int:
    """Users' SCRAM credentials: ``--add-config 'SCRAM-SHA-256=[iterations=N,password=P]'``
    sets one (iterations default to 4096, Kafka's), ``--delete-config SCRAM-SHA-256`` deletes
    one, ``--describe`` shows each user's mechanisms and iterations (every user without
    --entity-name)."""
    from tidelog.scram import UserScramCredentialDeletion, UserScramCredentialUpsertion

    if args.entity_default or args.validate_only or args.all:
        raise ConfigurationError(
            "--entity-type users takes neither --entity-default, --validate-only nor --all")
    user = args.entity_name
    if args.alter and not user:
        raise ConfigurationError("--entity-type users --alter needs --entity-name USER")
    changes: list[UserScramCredentialUpsertion | UserScramCredentialDeletion] = []
    for mechanism, value in parse_add_config(args.add_config or "").items():
        fields = dict(item.partition("=")[::2] for item in value.split(","))
        if "password" not in fields or set(fields) - {"password", "iterations"}:
            raise ConfigurationError(
                f"--add-config {mechanism}: expected [iterations=N,password=P], got [{value}]")
        iterations = fields.get("iterations", "4096")
        if not iterations.isdigit():
            raise ConfigurationError(f"--add-config {mechanism}: iterations must be a number")
        changes.append(UserScramCredentialUpsertion(
            user, mechanism, fields["password"], int(iterations)))
    changes += [UserScramCredentialDeletion(user, mechanism)
                for mechanism in _names(args.delete_config or "")]
    if args.alter and not changes:
        raise ConfigurationError("--alter needs --add-config and/or --delete-config")
    client = client_for(args)
    try:
        if args.alter:
            client.admin.alter_user_scram_credentials(changes)
            print(f"Completed updating config for user {user}.")
            return 0
        described = client.admin.describe_user_scram_credentials([user] if user else None)
        for name, infos in described.items():
            shown = ", ".join(f"{i.mechanism}=iterations={i.iterations}" for i in infos)
            print(f"SCRAM credential configs for user-principal '{name}' are {shown}")
    finally:
        client.close()
    return 0


def _resource(args: argparse.Namespace) -> ConfigResource:
    from tidelog.configs import ConfigResource, ConfigResourceType

    kind = _ENTITY_TYPES[args.entity_type]
    if kind == "topic":
        if args.entity_default or not args.entity_name:
            raise ConfigurationError("--entity-type topics needs --entity-name TOPIC")
        return ConfigResource(ConfigResourceType.TOPIC, args.entity_name)
    if args.entity_default:
        return ConfigResource(ConfigResourceType.BROKER, "")
    if args.entity_name is None or not re.fullmatch(r"[0-9]+", args.entity_name):
        raise ConfigurationError(
            f"--entity-type {args.entity_type} needs --entity-name NODE_ID (a number) or "
            "--entity-default"
        )
    return ConfigResource(ConfigResourceType.BROKER, args.entity_name)


def _describe(resource: ConfigResource) -> str:
    if resource.resource_type == 2:
        return f"topic {resource.name}"
    return f"node {resource.name}" if resource.name else "the default of every node"


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' --add-config: ``k=v,k2=v2``, a list value in brackets
    (``cleanup.policy=[delete,compact]``)."""
    parts: list[str] = []
    depth, current = 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    out: dict[str, str] = {}
    for part in filter(str.strip, parts):
        key, sep, value = (item.strip() for item in part.partition("="))
        if not sep or not key or depth != 0:
            raise ConfigurationError(
                f"--add-config {text!r}: {part.strip()!r} is not KEY=VALUE (several are joined "
                "by ',', a list value goes in brackets: cleanup.policy=[delete,compact])"
            )
        out[key] = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    return out


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]
