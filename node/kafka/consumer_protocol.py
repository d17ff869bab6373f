"""The consumer protocol's structs, which classic members carry inside JoinGroup and SyncGroup
as opaque bytes: the subscription a member joins with (its topics, what it owns, its rack) and
the assignment SyncGroup gives back. Both are an int16 version and then that version's struct
(kio's ConsumerProtocolSubscription/Assignment schemas); a version newer than the newest known
is read as the newest, as Kafka reads them (newer versions only add fields at the end).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.schema.types import TopicName
from kio.static.primitive import i32

from tidelog.coordinator.consumer_group_records import Assignment
from tidelog.node.kafka.codec import decode, encode

_SUBSCRIPTIONS: tuple[Any, ...] = (
    subscription_v0.ConsumerProtocolSubscription, subscription_v1.ConsumerProtocolSubscription,
    subscription_v2.ConsumerProtocolSubscription, subscription_v3.ConsumerProtocolSubscription,
)
_VERSION_BYTES = 2


class BadSubscription(ValueError):
    """The JoinGroup protocol metadata is not a consumer protocol subscription."""


class Subscription(NamedTuple):
    topics: tuple[str, ...]
    #: What the member says it owns; {} before version 1 (which has no such field).
    owned: Assignment
    rack_id: str | None


def read_subscription(metadata: bytes) -> Subscription:
    """The subscription in a JoinGroup protocol's metadata; BadSubscription when the bytes are
    not one (the caller answers INCONSISTENT_GROUP_PROTOCOL)."""
    if len(metadata) < _VERSION_BYTES:
        raise BadSubscription(f"{len(metadata)} bytes of subscription")
    version = int.from_bytes(metadata[:_VERSION_BYTES], "big", signed=True)
    if version < 0:
        raise BadSubscription(f"subscription version {version}")
    schema = _SUBSCRIPTIONS[min(version, len(_SUBSCRIPTIONS) - 1)]
    try:
        entity, _ = decode(schema, metadata, _VERSION_BYTES)
    except Exception as exc:  # whatever kio's readers raise, the bytes are at fault
        raise BadSubscription(f"subscription v{version} does not parse: {exc}") from exc
    owned: dict[str, set[int]] = {}
    for entry in getattr(entity, "owned_partitions", ()):
        owned.setdefault(entry.topic, set()).update(int(p) for p in entry.partitions)
    if any(p < 0 for ps in owned.values() for p in ps):
        raise BadSubscription("a negative owned partition")
    topics = tuple(dict.fromkeys(entity.topics))
    return Subscription(
        topics, {t: tuple(sorted(ps)) for t, ps in sorted(owned.items()) if ps},
        getattr(entity, "rack_id", None) or None,
    )


def assignment_bytes(assignment: Assignment) -> bytes:
    """SyncGroup's assignment: version 0 of the consumer protocol's assignment (every later
    version has the same fields, so every client reads it)."""
    entity = assignment_v0.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            assignment_v0.TopicPartition(
                topic=TopicName(topic), partitions=tuple(i32(p) for p in parts)
            )
            for topic, parts in sorted(assignment.items())
        ),
        user_data=None,
    )
    return (0).to_bytes(_VERSION_BYTES, "big") + encode(entity)
