"""The client's picture of the cluster: nodes, topics, and each partition's leader and epoch.

``ClusterMetadata`` does no I/O, so that everything that learns about the cluster (a Metadata
answer, a leader hint carried by an error, a node that stopped answering) updates one place and
every reader sees the same picture. Epochs only move forward: an answer from a node that missed
an election (an older epoch) never replaces a newer leader, as Kafka's ``Metadata`` does.

``MetadataSource`` is what the client's engines (partitioned requests, the producer's sender,
the consumer, the coordinators) and the admin client may ask of the metadata manager that keeps
the picture fresh (``tidelog.metadata_manager``): the picture, a refresh, the wait for new
leaders after a failure, the check that a missing topic is not an authorization failure.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from tidelog.types import TopicPartition

if TYPE_CHECKING:
    from tidelog.retry import Deadline

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as last learned; ``leader`` is NO_LEADER while unknown or suspect."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic: its partitions in index order, its config overrides, and its error code
    (UNKNOWN_TOPIC_OR_PARTITION when the answering node did not know it)."""

    name: str
    partitions: tuple[PartitionInfo, ...] = ()
    configs: Mapping[str, str] = field(default_factory=dict)
    is_internal: bool = False
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """What one Metadata answer says, already out of protobuf (see ``tidelog.wire``)."""

    nodes: Mapping[int, str]
    controller_id: int
    topics: Mapping[str, TopicInfo]


def merge_snapshots(snapshots: Sequence[MetadataSnapshot]) -> MetadataSnapshot:
    """What several nodes' answers say together, each partition as the answer with the highest
    leader epoch has it (at equal epochs, one that names the leader: a node still electing
    does not hide the winner another already knows). A node that missed an election, or has
    not heard of a topic yet, is outvoted by the one that did; the controller is the one most
    answers name, the first answer's on a tie."""
    if len(snapshots) == 1:
        return snapshots[0]
    nodes: dict[int, str] = {}
    topics: dict[str, TopicInfo] = {}
    for snapshot in snapshots:
        nodes.update(snapshot.nodes)
        for name, fresh in snapshot.topics.items():
            known = topics.get(name)
            if known is None or (known.error_code != 0 and fresh.error_code == 0):
                topics[name] = fresh
            elif fresh.error_code == 0 and len(known.partitions) == len(fresh.partitions):
                topics[name] = replace(known, partitions=tuple(
                    new if _newer(new, old) else old
                    for old, new in zip(known.partitions, fresh.partitions, strict=True)
                ))
    named = Counter(s.controller_id for s in snapshots if s.controller_id != NO_LEADER)
    controller = named.most_common(1)[0][0] if named else NO_LEADER
    return MetadataSnapshot(nodes=nodes, controller_id=controller, topics=topics)


def _newer(new: PartitionInfo, old: PartitionInfo) -> bool:
    if new.leader_epoch != old.leader_epoch:
        return new.leader_epoch > old.leader_epoch
    return old.leader == NO_LEADER and new.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class LeaderHint:
    """Where a partition's leader is, as an error answer reported it (KIP-951)."""

    leader_id: int
    leader_epoch: int
    address: str


class ClusterMetadata:
    """Thread-safe, I/O-free cluster view. ``version`` grows with every update that came from a
    full Metadata answer, so a waiter can tell whether a refresh happened since it looked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[int, str] = {}
        self._controller_id = NO_LEADER
        self._topics: dict[str, TopicInfo] = {}
        self._version = 0

    # ---- reading ---------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    @property
    def controller_id(self) -> int:
        return self._controller_id

    def nodes(self) -> dict[int, str]:
        with self._lock:
            return dict(self._nodes)

    def address_of(self, node_id: int) -> str | None:
        return self._nodes.get(node_id)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topics(self) -> dict[str, TopicInfo]:
        with self._lock:
            return dict(self._topics)

    def partition_count(self, topic: str) -> int | None:
        """None when the topic is not known (or known not to exist)."""
        info = self._topics.get(topic)
        if info is None or info.error_code != 0 or not info.partitions:
            return None
        return len(info.partitions)

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        info = self._topics.get(tp.topic)
        if info is None or not 0 <= tp.partition < len(info.partitions):
            return None
        return info.partitions[tp.partition]

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The leader's node id when known and reachable by address, else None."""
        part = self.partition(tp)
        if part is None or part.leader == NO_LEADER or part.leader not in self._nodes:
            return None
        return part.leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        part = self.partition(tp)
        return -1 if part is None else part.leader_epoch

    def moved(self, tp: TopicPartition, failed: tuple[int, int]) -> bool:
        """Whether the metadata names a leader of `tp` other than `failed`, the (leader, epoch)
        a request just failed against, in that epoch or a newer one: news worth retrying at
        once, where the same leader again means the cluster has not moved yet."""
        part = self.partition(tp)
        if part is None or self.leader_for(tp) is None or part.leader_epoch < failed[1]:
            return False
        return (part.leader, part.leader_epoch) != failed

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of `topic` with a known leader (the sticky partitioner prefers them)."""
        info = self._topics.get(topic)
        if info is None:
            return []
        return [i for i, p in enumerate(info.partitions) if p.leader != NO_LEADER]

    # ---- learning --------------------------------------------------------------------------

    def update(self, snapshot: MetadataSnapshot) -> None:
        """Take a full answer; per partition, keep what we know when it has a newer epoch."""
        with self._lock:
            topics: dict[str, TopicInfo] = {}
            for name, fresh in snapshot.topics.items():
                known = self._topics.get(name)
                if known is None or len(known.partitions) != len(fresh.partitions):
                    topics[name] = fresh
                    continue
                merged = tuple(
                    old if old.leader_epoch > new.leader_epoch else new
                    for old, new in zip(known.partitions, fresh.partitions, strict=True)
                )
                topics[name] = replace(fresh, partitions=merged)
            self._topics = topics
            self._nodes = dict(snapshot.nodes)
            self._controller_id = snapshot.controller_id
            self._version += 1

    def apply_hint(self, tp: TopicPartition, hint: LeaderHint) -> bool:
        """Adopt a leader hint when it is newer than what we know; True when it moved the
        leader, meaning a retry can go straight to it without a refresh."""
        if hint.leader_id < 0 or hint.leader_epoch < 0:
            return False
        with self._lock:
            info = self._topics.get(tp.topic)
            if info is None or not 0 <= tp.partition < len(info.partitions):
                return False
            old = info.partitions[tp.partition]
            if hint.leader_epoch < old.leader_epoch or (
                hint.leader_epoch == old.leader_epoch and old.leader == hint.leader_id
            ):
                return False
            if hint.address:
                self._nodes[hint.leader_id] = hint.address
            elif hint.leader_id not in self._nodes:
                return False
            parts = list(info.partitions)
            parts[tp.partition] = replace(
                old, leader=hint.leader_id, leader_epoch=hint.leader_epoch, error_code=0
            )
            self._topics[tp.topic] = replace(info, partitions=tuple(parts))
            return True

    def invalidate_node(self, node_id: int) -> None:
        """A node stopped answering: forget it as a leader until a refresh says otherwise."""
        with self._lock:
            for name, info in list(self._topics.items()):
                if any(p.leader == node_id for p in info.partitions):
                    parts = tuple(
                        replace(p, leader=NO_LEADER) if p.leader == node_id else p
                        for p in info.partitions
                    )
                    self._topics[name] = replace(info, partitions=parts)


class MetadataSource(Protocol):
    """The metadata manager as the engines see it (``tidelog.metadata_manager`` implements it);
    every call bounds its time by the `deadline` it is given."""

    @property
    def cluster(self) -> ClusterMetadata:
        """The picture of the cluster, as last learned."""
        ...

    @property
    def refreshes(self) -> int:
        """How many refreshes were made (concurrent callers share one)."""
        ...

    @property
    def answers(self) -> Sequence[MetadataSnapshot]:
        """Each node's answer of the last refresh, before they were merged."""
        ...

    def refresh(self, deadline: Deadline, seen_version: int | None = None) -> None:
        """Ask the nodes for metadata, unless a refresh since `seen_version` already did."""
        ...

    def ensure(self, deadline: Deadline) -> None:
        """Have metadata at all (the first refresh, retried)."""
        ...

    def await_new_leaders(
        self, failed: Mapping[TopicPartition, tuple[int, int]], window_s: float,
        deadline: Deadline,
    ) -> None:
        """Spend a retry's backoff watching for leaders other than the (leader, epoch) that
        failed each partition."""
        ...

    def check_described(self, topics: Iterable[str], deadline: Deadline) -> None:
        """Raise the authorization error of a topic missing because it may not be described."""
        ...

    def partitions_for(
        self, topic: str, deadline: Deadline, *, partition: int | None = None
    ) -> int:
        """The topic's partition count (with `partition`: once it has that partition)."""
        ...
