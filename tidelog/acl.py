"""ACLs as Kafka models them (``org.apache.kafka.common.acl`` and ``...common.resource``,
kafka-mapping §11.1): the value types shared by the client, the CLI and the controller.

A binding is a resource pattern (type, name, literal or prefixed) and an entry (principal,
host, operation, allow or deny). A filter has the same fields, each of which may also say "any"
(the ANY codes, or None for a name, principal or host); filters select bindings to describe or
delete. The enums carry Kafka's wire codes. Tidelog knows the client's principal but not its
address as an ACL subject, so the host of a binding is always ``*``.

The decision (which bindings grant what) is `tidelog.coordinator.acls`; this module is a leaf so
that the client can use it without importing server code.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

from tidelog.errors import ConfigurationError

#: The one name of the CLUSTER resource (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL name that matches every resource of its type, and the host that matches any host.
WILDCARD = "*"
#: The principal that matches every principal.
WILDCARD_PRINCIPAL = "User:*"


class _Parsed(IntEnum):
    @classmethod
    def parse(cls, text: str) -> Self:
        """The member named `text`, in any case and with ``-`` for ``_`` (``describe-configs``,
        as kafka-acls spells them)."""
        try:
            return cls[text.strip().upper().replace("-", "_")]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls if m.value > 1)
            raise ConfigurationError(f"unknown {cls.__name__} {text!r}; one of: {names}") from None


class ResourceType(_Parsed):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(_Parsed):
    UNKNOWN = 0
    #: Filters only: any pattern type, the exact name.
    ANY = 1
    #: Filters only: every binding that applies to the name (exact literal, literal ``*``,
    #: and each prefixed pattern that is a prefix of it).
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(_Parsed):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(_Parsed):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        kind = self.resource_type.name.lower()
        how = "" if self.pattern_type == PatternType.LITERAL else f" ({self.pattern_type.name})"
        return f"{kind} {self.name!r}{how}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    operation: Operation
    permission: Permission
    host: str = WILDCARD

    def __str__(self) -> str:
        return f"{self.permission.name} {self.principal} {self.operation.name} from {self.host}"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: what it covers and what it grants or denies, to whom."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"{self.entry} on {self.pattern}"


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Which resource patterns a filter selects; None as the name is any name."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # MATCH: what applies to self.name
            return pattern.name in (self.name, WILDCARD)
        return self.name.startswith(pattern.name)


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Which entries a filter selects; None (or ANY) is any value."""

    principal: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY
    host: str | None = None

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            self.principal in (None, entry.principal)
            and self.host in (None, entry.host)
            and self.operation in (Operation.ANY, entry.operation)
            and self.permission in (Permission.ANY, entry.permission)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings for DescribeAcls and DeleteAcls; the default selects every one."""

    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


ANY_ACL = AclBindingFilter()
