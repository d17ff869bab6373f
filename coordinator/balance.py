"""Where replicas should move next: draining nodes being decommissioned, and continuous
balancing of replicas and preferred leaders over the nodes (Redpanda's continuous partition
balancing, counted in partitions rather than bytes).

Deterministic, like the rest of the controller's state machine: no I/O, no clock. The
controller leader calls `plan_moves` periodically with its image and proposes what it returns
through the reassignment path; nothing here is persisted, so a new controller leader simply
plans again from the image it applied (moves in flight are part of that image).

**Bounded.** At most ``max_moves`` partitions move at once, the moves in flight included: each
move adds a learner that copies the whole partition, so the bound is what keeps a join or a
decommission from saturating the disks and links that the producers and consumers use.

**Small moves.** A move changes as few replicas as it can: draining replaces exactly the
replicas on leaving nodes, balancing moves one replica, and evening out leaders only reorders a
replica list (the node's housekeeping then hands leadership to the new first replica). Every
step is a membership change of one replica, learner then voter then removal, so a smaller move
is a shorter time with a fourth voter and a copy in flight.

**Safe to plan.** A move never names one node twice, never places a replica on a node that is
down, being decommissioned or unknown, and never touches a partition whose move is in flight.
Balancing moves only partitions whose replicas are all live (moving one of a degraded
partition's healthy replicas would leave it a single failure from unavailable); a drain moves a
partition whose majority is live (the new replica catches up from its leader, and the four
voters of the change still have a live quorum of three). What cannot be drained now is
reported, with why, instead of being planned.

**Operator plans win.** A partition an operator placed (`MetadataImage.held`: reassigned
within balancer.operator.hold.ms, hold not released) is never moved by balancing, as Cruise
Control leaves its excluded topics alone: an operator's plan undone half a second after it
completed is no plan at all. Its replicas still count in every node's load, so the others are
balanced around it. A drain still moves it: a decommission is the operator's newer word, and a
node being removed cannot keep replicas.

**It converges, and stops.** Draining comes first, then replica counts, then leader counts.
Balancing moves a replica only from a node holding at least two more than the other (which
strictly lowers the sum of squared counts, so moves cannot cycle), and such a move always
exists while the spread is two or more: of the more loaded node's partitions, at most as many
as the other node holds can include it (held partitions aside: with them the fixed point may
be less even, but every move still lowers the sum, so it is reached). Leaders move by the
same rule. At the fixed point every
node being decommissioned is empty (when enough nodes remain), replica counts over the nodes
that take replicas differ by at most one, and no partition's preferred leader leads two more
partitions than another of its replicas does.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tidelog.types import TopicPartition

DRAIN = "decommission"
BALANCE_REPLICAS = "balance replicas"
BALANCE_LEADERS = "balance leaders"


@dataclass(frozen=True, slots=True)
class Move:
    """Reassign ``partition`` to ``replicas`` (preferred leader first); ``reason`` says which
    rule planned it."""

    partition: TopicPartition
    replicas: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The moves to start now, and the partitions on nodes being decommissioned that cannot
    move yet, each with why (no node can take the replica; its majority is down)."""

    moves: tuple[Move, ...]
    stuck: tuple[tuple[TopicPartition, str], ...] = ()


@dataclass(frozen=True, slots=True)
class DrainProgress:
    """How far a node's decommission got: the partitions that still list it as a replica,
    how many of them are moving away from it now, and those that cannot move yet (why)."""

    replicas_left: int
    moving: int
    stuck: tuple[tuple[TopicPartition, str], ...]


def drain_progress(
    assignments: Mapping[TopicPartition, Sequence[int]],
    removing: Mapping[TopicPartition, Collection[int]],
    node: int,
    plan: Plan,
) -> DrainProgress:
    """`node`'s drain as `assignments` (every node that may be a member, during a move),
    the nodes each move under way is `removing` and the current `plan` show it."""
    left = [tp for tp, replicas in assignments.items() if node in replicas]
    return DrainProgress(
        len(left),
        sum(node in removing.get(tp, ()) for tp in left),
        tuple((tp, why) for tp, why in plan.stuck if node in assignments[tp]),
    )


def plan_moves(
    assignments: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    decommissioning: Collection[int],
    in_flight: Mapping[TopicPartition, Sequence[int]],
    max_moves: int,
    *,
    balance: bool = True,
    held: Collection[TopicPartition] = (),
) -> Plan:
    """The next moves. ``assignments``: every partition's replicas, preferred leader first
    (internal topics included); ``live``: the registered nodes that are alive; ``in_flight``:
    the target replicas of the reassignments under way, which count against ``max_moves`` and
    are planned around as if done. ``balance`` off (autobalancing disabled) still drains.
    ``held``: the partitions operators placed, which balancing leaves where they are."""
    planner = _Planner(assignments, live, decommissioning, in_flight, held)
    budget = max_moves - len(in_flight)
    moves: list[Move] = []
    stuck = planner.drain(moves, budget)
    if balance:
        planner.balance_replicas(moves, budget)
        planner.balance_leaders(moves, budget)
    return Plan(tuple(moves), tuple(stuck))


class _Planner:
    def __init__(
        self,
        assignments: Mapping[TopicPartition, Sequence[int]],
        live: Collection[int],
        decommissioning: Collection[int],
        in_flight: Mapping[TopicPartition, Sequence[int]],
        held: Collection[TopicPartition],
    ) -> None:
        self.live = frozenset(live)
        self.held = frozenset(held)
        self.leaving = frozenset(decommissioning)
        #: The nodes that may take replicas.
        self.targets = tuple(sorted(self.live - self.leaving))
        #: The replicas as they will be once the moves in flight and those planned are done.
        self.replicas: dict[TopicPartition, tuple[int, ...]] = {
            tp: tuple(in_flight.get(tp, replicas)) for tp, replicas in assignments.items()
        }
        self.touched: set[TopicPartition] = set(in_flight)
        self.order = sorted(self.replicas)
        self.counts = {node: 0 for node in self.targets}
        self.leaders = {node: 0 for node in self.targets}
        for replicas in self.replicas.values():
            self._count(replicas, 1)

    def _count(self, replicas: Sequence[int], sign: int) -> None:
        for node in replicas:
            if node in self.counts:
                self.counts[node] += sign
        if replicas and replicas[0] in self.leaders:
            self.leaders[replicas[0]] += sign

    def _move(self, moves: list[Move], tp: TopicPartition, replicas: tuple[int, ...],
              reason: str) -> None:
        self._count(self.replicas[tp], -1)
        self._count(replicas, 1)
        self.replicas[tp] = replicas
        self.touched.add(tp)
        moves.append(Move(tp, replicas, reason))

    def _untouched(self) -> Iterator[tuple[TopicPartition, tuple[int, ...]]]:
        for tp in self.order:
            if tp not in self.touched:
                yield tp, self.replicas[tp]

    def _healthy(self, replicas: Sequence[int]) -> bool:
        return all(node in self.live and node not in self.leaving for node in replicas)

    def _balanceable(self) -> Iterator[tuple[TopicPartition, tuple[int, ...]]]:
        """The partitions balancing may move: untouched, not held by an operator, every
        replica live and staying."""
        for tp, replicas in self._untouched():
            if tp not in self.held and self._healthy(replicas):
                yield tp, replicas

    # ---- draining ----------------------------------------------------------------------------

    def drain(self, moves: list[Move], budget: int) -> list[tuple[TopicPartition, str]]:
        """Replace every replica on a leaving node by one on the least loaded target."""
        stuck: list[tuple[TopicPartition, str]] = []
        for tp, replicas in self._untouched():
            leaving = [node for node in replicas if node in self.leaving]
            if not leaving:
                continue
            if sum(node in self.live for node in replicas) * 2 <= len(replicas):
                stuck.append((tp, f"a majority of its replicas {list(replicas)} is down"))
                continue
            room = [node for node in self.targets if node not in replicas]
            if len(room) < len(leaving):
                stuck.append((tp, f"no node can take its replica: {len(self.targets)} node(s) "
                                  f"take replicas, it has {len(replicas)} replicas"))
                continue
            if len(moves) >= budget:
                continue  # reported as draining, not as stuck: its turn comes
            new = list(replicas)
            for node in leaving:
                taker = min(room, key=lambda n: (self.counts[n], self.leaders[n], n))
                room.remove(taker)
                new[new.index(node)] = taker
            if replicas[0] in self.leaving:
                # Leadership leaves that node anyway: give it to whichever replica leads least.
                first = min(new, key=lambda n: (self.leaders.get(n, 0), new.index(n)))
                new.remove(first)
                new.insert(0, first)
            self._move(moves, tp, tuple(new), DRAIN)
        return stuck

    # ---- balancing ---------------------------------------------------------------------------

    def balance_replicas(self, moves: list[Move], budget: int) -> None:
        """Move one replica at a time from a node with two or more above another."""
        while len(moves) < budget and self._balance_one_replica(moves):
            pass

    def _balance_one_replica(self, moves: list[Move]) -> bool:
        by_load = sorted(self.targets, key=lambda n: (self.counts[n], self.leaders[n], n))
        for src in reversed(by_load):
            for dst in by_load:
                if self.counts[src] - self.counts[dst] < 2:
                    break
                # Moving a partition src leads hands its lead to dst: do so when src leads
                # more, otherwise move one it follows.
                want_led = self.leaders[src] > self.leaders[dst] + 1
                best: tuple[bool, TopicPartition, tuple[int, ...]] | None = None
                for tp, replicas in self._balanceable():
                    if src in replicas and dst not in replicas:
                        fits = (replicas[0] == src) == want_led
                        if best is None or (fits and not best[0]):
                            best = (fits, tp, replicas)
                            if fits:
                                break
                if best is not None:
                    _, tp, replicas = best
                    self._move(moves, tp, tuple(dst if n == src else n for n in replicas),
                               BALANCE_REPLICAS)
                    return True
        return False

    def balance_leaders(self, moves: list[Move], budget: int) -> None:
        """Reorder a replica list so that a replica leading two fewer partitions than the
        preferred leader becomes the preferred leader."""
        while len(moves) < budget and self._balance_one_leader(moves):
            pass

    def _balance_one_leader(self, moves: list[Move]) -> bool:
        by_leads = sorted(self.targets, key=lambda n: (self.leaders[n], n))
        for src in reversed(by_leads):
            for dst in by_leads:
                if self.leaders[src] - self.leaders[dst] < 2:
                    break
                for tp, replicas in self._balanceable():
                    if replicas[0] == src and dst in replicas:
                        self._move(moves, tp, (dst, *(n for n in replicas if n != dst)),
                                   BALANCE_LEADERS)
                        return True
        return False
