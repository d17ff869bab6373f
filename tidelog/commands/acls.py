"""``tidelog acls add|list|remove``: ACLs with kafka-acls' flags (kafka-mapping §11).

``add`` creates, for every resource given, an ALLOW binding per ``--allow-principal`` and a DENY
binding per ``--deny-principal``, for each ``--operation`` (default ALL, as kafka-acls).
``list`` prints the ACLs of the resources given (every ACL without one), grouped by resource
pattern. ``remove`` deletes the ACLs of the resources given that match the principals and
operations given (all of the resource's ACLs without them). ``--resource-pattern-type`` is
``literal`` (the default) or ``prefixed`` for ``add``; ``list`` and ``remove`` also take ``any``
(any pattern, the exact name) and ``match`` (every ACL that applies to the name).
Hosts are always ``*``: Tidelog's ACLs apply to every host.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tidelog.commands._common import add_bootstrap, client_for, security_for
from tidelog.errors import ClusterAuthorizationFailedError, ConfigurationError

if TYPE_CHECKING:
    from tidelog.client import Client


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    for name, help_text in (
        ("add", "create ACLs"),
        ("list", "print ACLs (of the resources given, else all)"),
        ("remove", "delete ACLs"),
    ):
        action = sub.add_parser(name, help=help_text, description=help_text)
        _resources(action, "add" if name == "add" else "filter")
        if name != "list":
            action.add_argument("--allow-principal", action="append", default=[],
                                metavar="PRINCIPAL", help="e.g. User:alice (repeatable)")
            action.add_argument("--deny-principal", action="append", default=[],
                                metavar="PRINCIPAL", help="e.g. User:mallory (repeatable)")
            action.add_argument("--operation", action="append", default=[], metavar="OP",
                                help="read, write, create, delete, alter, describe, "
                                "cluster-action, describe-configs, alter-configs, "
                                "idempotent-write or all (repeatable; default: all for add, "
                                "any for remove)")
        else:
            action.add_argument("--principal", action="append", default=[],
                                metavar="PRINCIPAL", help="only the ACLs of these (repeatable)")
        if name != "list":
            action.add_argument("--force", action="store_true",
                                help=f"{name} ACLs on the cluster even if that leaves this "
                                "caller unable to manage ACLs")
        add_bootstrap(action)


def _resources(parser: argparse.ArgumentParser, mode: str) -> None:
    parser.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    parser.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="a transactional id (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    choices = ["literal", "prefixed"] if mode == "add" else ["any", "match", "literal", "prefixed"]
    parser.add_argument("--resource-pattern-type", choices=choices, default="literal",
                        help="how the names match (default: literal)")


def run(args: argparse.Namespace) -> int:
    pattern_type = PatternType.parse(args.resource_pattern_type)
    named = [
        *((ResourceType.TOPIC, n) for n in args.topic),
        *((ResourceType.GROUP, n) for n in args.group),
        *((ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id),
        *([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else []),
    ]
    if args.cluster and pattern_type == PatternType.PREFIXED:
        raise ConfigurationError("--cluster takes no --resource-pattern-type prefixed")
    # What the action asks for is checked before the client connects.
    if args.action == "add":
        bindings = _bindings(args, named, pattern_type)
    elif args.action == "remove":
        filters = _removal_filters(args, named, pattern_type)
    client = client_for(args)
    try:
        if args.action == "add":
            if not args.force:
                _refuse_lockout(client, _caller(args), added=bindings)
            client.admin.create_acls(bindings)
            for binding in bindings:
                print(f"added {binding}")
        elif args.action == "list":
            principals: list[str | None] = list(args.principal) or [None]
            filters = [
                AclBindingFilter(pattern, AccessControlEntryFilter(principal))
                for pattern in _pattern_filters(named, pattern_type)
                for principal in principals
            ]
            found: dict[AclBinding, None] = {}
            for acl_filter in filters:
                found.update(dict.fromkeys(client.admin.describe_acls(acl_filter)))
            _print(list(found))
        else:
            if not args.force:
                _refuse_lockout(client, _caller(args), removed=filters)
            removed = client.admin.delete_acls(filters)
            for binding in removed:
                print(f"removed {binding}")
            if not removed:
                print("no ACL matched")
    except ClusterAuthorizationFailedError as exc:
        raise ClusterAuthorizationFailedError(f"{exc.args[0]}; {_RECOVERY}") from None
    finally:
        client.close()
    return 0


#: The cluster resource, the only one whose ACLs decide who may manage ACLs.
_CLUSTER = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
#: How an operator gets ACL administration back once no principal they can use may alter the
#: cluster: the node settings bypass ACLs, and need only a restart.
_RECOVERY = (
    "to manage ACLs again, restart the nodes with super.users set to your principal (a "
    "plaintext client is User:ANONYMOUS) or with authorizer=none, then remove the ACLs that "
    "shut you out"
)


def _caller(args: argparse.Namespace) -> str:
    """The principal the nodes see this command as: its certificate's subject, as a
    listener that verifies client certificates names it, else User:ANONYMOUS."""
    from tidelog.node.edge.security import ANONYMOUS, principal_of_certificate

    certfile = security_for(args).ssl_certfile
    if certfile is None:
        return ANONYMOUS
    try:
        return principal_of_certificate(Path(certfile).read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"--ssl-certfile {certfile}: {exc}") from None


def _refuse_lockout(
    client: Client, caller: str, *, added: Sequence[AclBinding] = (),
    removed: Sequence[AclBindingFilter] = (),
) -> None:
    """Refuse to add or remove ACLs of the cluster when `caller` could then no longer alter
    the cluster, which creating and deleting ACLs need: with the authorizer on, one such
    command would shut the caller out of ACL administration with no command to undo it.
    The cluster's ACLs after the change decide, as the authorizer reads them: a DENY of ALTER
    (or ALL) to the caller or to everyone wins, else an ALLOW of it is needed. With no ACL
    left on the cluster the nodes' allow.everyone.if.no.acl.found decides, which a client
    cannot see (nor super users): a warning then, not a refusal."""
    adding = [b for b in added if b.pattern == _CLUSTER]
    if not adding and not any(f.pattern.matches(_CLUSTER) for f in removed):
        return
    existing = client.admin.describe_acls(AclBindingFilter(
        ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
    ))
    going = [b for b in existing if any(f.matches(b) for f in removed)]
    if not adding and not going:
        return
    entries = [b.entry for b in [*existing, *adding] if b not in going]
    if not entries:
        print(f"warning: no ACL is left on the cluster: whether {caller} may still manage ACLs "
              "is the nodes' allow.everyone.if.no.acl.found (false unless set). If you are "
              f"shut out: {_RECOVERY}", file=sys.stderr)
        return

    def matches(entry: AccessControlEntry, permission: Permission) -> bool:
        return (entry.permission == permission and entry.principal in (caller, "User:*")
                and entry.operation in (Operation.ALTER, Operation.ALL))

    denied = any(matches(e, Permission.DENY) for e in entries)
    if denied or not any(matches(e, Permission.ALLOW) for e in entries):
        raise ConfigurationError(
            f"after this {caller} (this command's principal) may not alter the cluster, "
            "which managing ACLs needs, so no later acls add or remove of yours would be "
            f"allowed; keep {caller} allowed --operation alter on the --cluster, or pass "
            f"--force. If it happens: {_RECOVERY}"
        )


def _bindings(
    args: argparse.Namespace, named: list[tuple[ResourceType, str]], pattern_type: PatternType
) -> list[AclBinding]:
    if not named:
        raise ConfigurationError("name a resource: --topic, --group, --transactional-id "
                                 "or --cluster")
    if not args.allow_principal and not args.deny_principal:
        raise ConfigurationError("name a principal: --allow-principal or --deny-principal")
    operations = [Operation.parse(op) for op in args.operation] or [Operation.ALL]
    return [
        AclBinding(
            ResourcePattern(kind, name, PatternType.LITERAL if kind == ResourceType.CLUSTER
                            else pattern_type),
            AccessControlEntry(principal, operation, permission),
        )
        for kind, name in named
        for permission, principals in ((Permission.ALLOW, args.allow_principal),
                                       (Permission.DENY, args.deny_principal))
        for principal in principals
        for operation in operations
    ]


def _pattern_filters(
    named: list[tuple[ResourceType, str]], pattern_type: PatternType
) -> list[ResourcePatternFilter]:
    if not named:
        return [ResourcePatternFilter()]
    return [ResourcePatternFilter(kind, name, pattern_type) for kind, name in named]


def _removal_filters(
    args: argparse.Namespace, named: list[tuple[ResourceType, str]], pattern_type: PatternType
) -> list[AclBindingFilter]:
    if not named:
        raise ConfigurationError("name the resources whose ACLs to remove: --topic, --group, "
                                 "--transactional-id or --cluster")
    operations = [Operation.parse(op) for op in args.operation] or [Operation.ANY]
    entries = [
        AccessControlEntryFilter(principal, operation, permission)
        for permission, principals in ((Permission.ALLOW, args.allow_principal),
                                       (Permission.DENY, args.deny_principal))
        for principal in principals
        for operation in operations
    ] or [AccessControlEntryFilter(operation=operation) for operation in operations]
    return [
        AclBindingFilter(pattern, entry)
        for pattern in _pattern_filters(named, pattern_type)
        for entry in entries
    ]


def _print(bindings: list[AclBinding]) -> None:
    """As kafka-acls prints them: per resource pattern, one line per entry."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in bindings:
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    for pattern, entries in by_pattern.items():
        print(f"Current ACLs for resource `ResourcePattern(resourceType="
              f"{pattern.resource_type.name}, name={pattern.name}, "
              f"patternType={pattern.pattern_type.name})`:")
        for entry in entries:
            print(f" \t(principal={entry.principal}, host={entry.host}, "
                  f"operation={entry.operation.name}, permissionType={entry.permission.name})")
        print()
