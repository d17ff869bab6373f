"""The server-side assignors of consumer groups (kafka-mapping §10.7): `uniform` and `range`.

An assignor maps each member to the partitions it should own (the target assignment) from the
members' subscriptions and the subscribed topics' partition counts. It is a pure function, run
by the coordinator whenever the group epoch moves past the assignment epoch; reconciliation
then moves each member toward its target one revocation at a time.

* `uniform` (the default) is balanced and sticky: a partition stays with its previous owner
  as long as that owner is still subscribed and keeps no more than its fair share, so a member
  joining or leaving moves only the partitions it must. Balanced means no member eligible for a
  partition has two fewer than the member that holds it, which for members with the same
  subscriptions is Kafka's "counts differ by at most one".
* `range` gives each member a contiguous range of each topic it subscribes to, members in
  member-id order, the first `count % members` one partition more (Kafka's range assignor;
  co-partitioned topics of equal size line up). It is not sticky.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tidelog.coordinator.consumer_group_records import Assignment

UNIFORM = "uniform"
RANGE = "range"

#: member -> (its subscribed topics), topic -> partition count, member -> previous target.
Assignor = Callable[
    [Mapping[str, tuple[str, ...]], Mapping[str, int], Mapping[str, Assignment]],
    dict[str, Assignment],
]


def range_assign(
    subscriptions: Mapping[str, tuple[str, ...]],
    topics: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    del previous  # range is not sticky
    out: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    for topic in sorted(topics):
        members = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        if not members:
            continue
        share, extra = divmod(topics[topic], len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            if size:
                out[member][topic] = list(range(start, start + size))
            start += size
    return {m: {t: tuple(ps) for t, ps in a.items()} for m, a in out.items()}


def uniform_assign(
    subscriptions: Mapping[str, tuple[str, ...]],
    topics: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    eligible: dict[tuple[str, int], list[str]] = {}
    for topic in sorted(topics):
        subscribers = [m for m in members if topic in subscriptions[m]]
        if subscribers:
            for p in range(topics[topic]):
                eligible[(topic, p)] = subscribers
    owner: dict[tuple[str, int], str] = {}
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    # Fair share of a member: what it would get if the partitions it may own were spread
    # evenly over everyone eligible for them. Previous owners keep up to the rounded-up share.
    quota = _quotas(members, eligible)
    for member in members:
        for topic, partitions in sorted(previous.get(member, {}).items()):
            for p in partitions:
                tp = (topic, p)
                if tp in eligible and member in eligible[tp] and tp not in owner \
                        and len(owned[member]) < quota[member]:
                    owner[tp] = member
                    owned[member].add(tp)
    for tp, candidates in eligible.items():  # the free partitions, to the least loaded
        if tp not in owner:
            member = min(candidates, key=lambda m: (len(owned[m]), m))
            owner[tp] = member
            owned[member].add(tp)
    _balance(members, eligible, owner, owned)
    return {
        member: _as_assignment(owned[member]) for member in members
    }


def _quotas(members: list[str], eligible: Mapping[tuple[str, int], list[str]]) -> dict[str, int]:
    share = dict.fromkeys(members, 0.0)
    for candidates in eligible.values():
        for member in candidates:
            share[member] += 1 / len(candidates)
    return {member: int(-(-share[member] // 1)) for member in members}


def _balance(
    members: list[str],
    eligible: Mapping[tuple[str, int], list[str]],
    owner: dict[tuple[str, int], str],
    owned: dict[str, set[tuple[str, int]]],
) -> None:
    """Move partitions from a member to an eligible one with at least two fewer, until none
    can move (each move shrinks the sum of squared counts, so this ends)."""
    moved = True
    while moved:
        moved = False
        for member in sorted(members, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[member]):
                target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
                if len(owned[target]) + 1 < len(owned[member]):
                    owned[member].discard(tp)
                    owned[target].add(tp)
                    owner[tp] = target
                    moved = True


def _as_assignment(partitions: set[tuple[str, int]]) -> Assignment:
    out: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        out.setdefault(topic, []).append(p)
    return {t: tuple(ps) for t, ps in out.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
