"""The ACLs of the cluster and the decision made on them (kafka-mapping §11.2, Kafka's
``StandardAuthorizerData``).

Every node applies the ACL records of the metadata log to an `AclIndex` (part of its
`MetadataImage`), and its request handlers ask an `Authorizer` over that index. The index is
built for the question a request asks per partition, "may this principal do this to the
resource of this type and name": bindings sit in dicts by resource type and name, literal and
prefixed apart, then by principal, where what they allow and deny is kept as two bitmasks of
operations (ALL and the implied operations expanded); the prefixed ones are looked up by the
prefix lengths that exist. A decision costs a few dict probes and bit tests however many ACLs
there are, and however many principals share a resource.

The decision, in Kafka's order:

1. a super user is allowed, even over DENY bindings;
2. the bindings that apply are those on the exact LITERAL name, on LITERAL ``*``, and on each
   PREFIXED pattern that is a prefix of the name, for the principal or ``User:*``;
3. a DENY of the operation (or ALL) denies; DENY is never widened;
4. otherwise an ALLOW of the operation or ALL allows; an ALLOW of READ, WRITE, DELETE or ALTER
   also allows DESCRIBE, and an ALLOW of ALTER_CONFIGS allows DESCRIBE_CONFIGS;
5. when no binding at all exists on the resource (whoever it names), ``allow.everyone.if.no.
   acl.found`` decides: Tidelog's default is true, so a cluster without ACLs behaves as before.

Deterministic: no I/O, no clock; the same records give every node the same answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tidelog.acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from tidelog.errors import InvalidRequestError

#: The operations an ALLOW of the key also grants (DENY grants and widens nothing).
IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.READ: frozenset({Operation.DESCRIBE}),
    Operation.WRITE: frozenset({Operation.DESCRIBE}),
    Operation.DELETE: frozenset({Operation.DESCRIBE}),
    Operation.ALTER: frozenset({Operation.DESCRIBE}),
    Operation.ALTER_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS}),
}
_NO_IMPLIED: frozenset[Operation] = frozenset()
#: The concrete values a stored binding may hold (ANY, MATCH and UNKNOWN are for filters).
STORED_TYPES = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)
STORED_PATTERNS = frozenset({PatternType.LITERAL, PatternType.PREFIXED})
STORED_OPERATIONS = frozenset(op for op in Operation if op > Operation.ANY)
STORED_PERMISSIONS = frozenset({Permission.ALLOW, Permission.DENY})


def check_binding(binding: AclBinding) -> None:
    """What CreateAcls refuses with INVALID_REQUEST (kafka-mapping §11.4, and AclApis'
    rule for the cluster's name); also what every stored record must satisfy."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type not in STORED_TYPES:
        raise InvalidRequestError(f"resource type {pattern.resource_type.name} cannot be stored")
    if pattern.pattern_type not in STORED_PATTERNS:
        raise InvalidRequestError(
            f"pattern type {pattern.pattern_type.name} cannot be stored (LITERAL or PREFIXED)"
        )
    if entry.operation not in STORED_OPERATIONS:
        raise InvalidRequestError(f"operation {entry.operation.name} cannot be stored")
    if entry.permission not in STORED_PERMISSIONS:
        raise InvalidRequestError(f"permission {entry.permission.name} cannot be stored")
    if not pattern.name:
        raise InvalidRequestError("the resource name is empty")
    if pattern.resource_type == ResourceType.CLUSTER and (
        pattern.name != CLUSTER_NAME or pattern.pattern_type != PatternType.LITERAL
    ):
        raise InvalidRequestError(
            f"the only valid name for the CLUSTER resource is the literal {CLUSTER_NAME!r}"
        )
    kind, sep, name = entry.principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidRequestError(
            f"principal {entry.principal!r} is not of the form Type:name (e.g. User:alice)"
        )
    if entry.host != WILDCARD:
        raise InvalidRequestError(
            f"host {entry.host!r}: Tidelog's ACLs apply to every host; use {WILDCARD!r}"
        )


def check_filter(acl_filter: AclBindingFilter) -> None:
    """DescribeAcls and DeleteAcls refuse a filter with an UNKNOWN field (INVALID_REQUEST)."""
    unknown = [
        what for what, value in (
            ("resource type", acl_filter.pattern.resource_type),
            ("pattern type", acl_filter.pattern.pattern_type),
            ("operation", acl_filter.entry.operation),
            ("permission", acl_filter.entry.permission),
        ) if value == 0
    ]
    if unknown:
        raise InvalidRequestError(f"the filter's {' and '.join(unknown)} is UNKNOWN")


_ALL_OPERATIONS = sum(1 << op for op in STORED_OPERATIONS)


def _bits(entry: AccessControlEntry) -> int:
    """The operations an entry covers, as a bitmask of operation codes: ALL is every one, and
    an ALLOW also covers what its operation implies (a DENY never does)."""
    if entry.operation == Operation.ALL:
        return _ALL_OPERATIONS
    bits = 1 << entry.operation
    if entry.permission == Permission.ALLOW:
        for implied in IMPLIED.get(entry.operation, _NO_IMPLIED):
            bits |= 1 << implied
    return bits


@dataclass
class _Grants:
    """The entries of one principal on one resource pattern, and what they allow and deny."""

    entries: list[AccessControlEntry] = field(default_factory=list)
    allow: int = 0
    deny: int = 0

    def recompute(self) -> None:
        self.allow = self.deny = 0
        for entry in self.entries:
            if entry.permission == Permission.DENY:
                self.deny |= _bits(entry)
            else:
                self.allow |= _bits(entry)


@dataclass
class _ByName:
    """The entries of one resource type and pattern type, by resource name and principal."""

    entries: dict[str, dict[str, _Grants]] = field(default_factory=dict)
    #: How many names of each length exist, for the lookup by prefix.
    lengths: dict[int, int] = field(default_factory=dict)
    sorted_lengths: tuple[int, ...] = ()

    def add(self, name: str, entry: AccessControlEntry) -> None:
        by_principal = self.entries.get(name)
        if by_principal is None:
            by_principal = self.entries[name] = {}
            self.lengths[len(name)] = self.lengths.get(len(name), 0) + 1
            self.sorted_lengths = tuple(sorted(self.lengths))
        grants = by_principal.setdefault(entry.principal, _Grants())
        grants.entries.append(entry)
        grants.recompute()

    def remove(self, name: str, entry: AccessControlEntry) -> None:
        by_principal = self.entries[name]
        grants = by_principal[entry.principal]
        grants.entries.remove(entry)
        grants.recompute()
        if not grants.entries:
            del by_principal[entry.principal]
        if not by_principal:
            del self.entries[name]
            left = self.lengths[len(name)] - 1
            if left:
                self.lengths[len(name)] = left
            else:
                del self.lengths[len(name)]
                self.sorted_lengths = tuple(sorted(self.lengths))


class AclIndex:
    """The cluster's ACLs by id (as the metadata records name them), and indexed for the
    decision. Mutated only by applying records, so every node holds the same one."""

    def __init__(self) -> None:
        self._by_id: dict[int, AclBinding] = {}
        self._ids: dict[AclBinding, int] = {}
        self._literal: dict[ResourceType, _ByName] = {t: _ByName() for t in STORED_TYPES}
        self._prefixed: dict[ResourceType, _ByName] = {t: _ByName() for t in STORED_TYPES}

    def __len__(self) -> int:
        return len(self._by_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AclIndex) and self._by_id == other._by_id

    def items(self) -> list[tuple[int, AclBinding]]:
        """Every ACL with its id, in id order (the order they were created)."""
        return sorted(self._by_id.items())

    def id_of(self, binding: AclBinding) -> int | None:
        return self._ids.get(binding)

    def add(self, acl_id: int, binding: AclBinding) -> None:
        """Store a binding; a second id for an identical binding, or an id in use, is
        ignored (the controller never plans either; a replay must not double an entry)."""
        if acl_id in self._by_id or binding in self._ids:
            return
        self._by_id[acl_id] = binding
        self._ids[binding] = acl_id
        self._table(binding.pattern).add(binding.pattern.name, binding.entry)

    def remove(self, acl_id: int) -> None:
        binding = self._by_id.pop(acl_id, None)
        if binding is None:
            return
        del self._ids[binding]
        self._table(binding.pattern).remove(binding.pattern.name, binding.entry)

    def matching(self, acl_filter: AclBindingFilter) -> list[tuple[int, AclBinding]]:
        return [(i, b) for i, b in self.items() if acl_filter.matches(b)]

    def _table(self, pattern: ResourcePattern) -> _ByName:
        by_type = self._literal if pattern.pattern_type == PatternType.LITERAL else self._prefixed
        return by_type[pattern.resource_type]

    def applying_to(
        self, resource_type: ResourceType, name: str
    ) -> Iterator[dict[str, _Grants]]:
        """The entries on every pattern that applies to the resource: its exact literal name,
        the literal wildcard, and each prefix of its name that has prefixed entries."""
        literal = self._literal.get(resource_type)
        if literal is None:
            return
        entries = literal.entries
        if (exact := entries.get(name)) is not None:
            yield exact
        if name != WILDCARD and (wildcard := entries.get(WILDCARD)) is not None:
            yield wildcard
        prefixed = self._prefixed[resource_type]
        for length in prefixed.sorted_lengths:
            if length > len(name):
                break
            if (found := prefixed.entries.get(name[:length])) is not None:
                yield found

    def entries_of(
        self, resource_type: ResourceType, pattern_type: PatternType
    ) -> Iterator[tuple[str, AccessControlEntry]]:
        """Every entry on a pattern of the type, with the pattern's name."""
        table = self._literal if pattern_type == PatternType.LITERAL else self._prefixed
        for name, by_principal in table[resource_type].entries.items():
            for grants in by_principal.values():
                for entry in grants.entries:
                    yield name, entry


class Authorizer:
    """Answers, for one node, whether a principal may do an operation on a resource.

    `super_users` and `allow_everyone_if_no_acl_found` are the node's settings
    (``super.users``, ``allow.everyone.if.no.acl.found``); `acls` is the index the node's
    metadata image keeps current, read at every decision."""

    def __init__(
        self,
        acls: AclIndex,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = True,
    ) -> None:
        self.acls = acls
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def authorize(
        self, principal: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        bit = 1 << operation
        found = allowed = False
        for by_principal in self.acls.applying_to(resource_type, name):
            found = True
            for who in (principal, WILDCARD_PRINCIPAL):
                grants = by_principal.get(who)
                if grants is not None:
                    if grants.deny & bit:
                        return False
                    allowed = allowed or bool(grants.allow & bit)
        return allowed if found else self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(
        self, principal: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether the principal may do `operation` on some resource of the type (Kafka's
        ``Authorizer.authorizeByResourceType``, e.g. InitProducerId's "WRITE on any topic"):
        the decision for a name no ACL mentions first (so super users and a cluster without
        ACLs pass), then some ALLOW for the principal that no DENY of it covers. Implied
        operations do not count here, as in Kafka."""
        if self.authorize(principal, operation, resource_type, "\0no resource has this name"):
            return True
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        allowed: list[tuple[str, PatternType]] = []
        for pattern_type in STORED_PATTERNS:
            for name, entry in self.acls.entries_of(resource_type, pattern_type):
                if entry.principal not in (principal, WILDCARD_PRINCIPAL):
                    continue
                if entry.operation not in (operation, Operation.ALL):
                    continue
                if entry.permission == Permission.ALLOW:
                    allowed.append((name, pattern_type))
                elif pattern_type == PatternType.LITERAL:
                    denied_literal.add(name)
                else:
                    denied_prefixes.append(name)
        if WILDCARD in denied_literal:
            return False
        return any(
            not (pattern_type == PatternType.LITERAL and name in denied_literal)
            and not any(name.startswith(prefix) for prefix in denied_prefixes)
            for name, pattern_type in allowed
        )
