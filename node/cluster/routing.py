"""What a node knows of where partitions are led, so that any node answers Metadata.

A hosted replica knows its leader from its own core; for the others, the leaders' periodic
announcements (see `Housekeeping`) are remembered here, the newest epoch winning. A stale
answer costs a client one NOT_LEADER_OR_FOLLOWER with a hint, never a wrong write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from tidelog.coordinator.controller import NodeImage
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb


class Routing:
    def __init__(
        self,
        config: NodeConfig,
        partitions: Mapping[TopicPartition, PartitionReplica],
        controller_tp: TopicPartition,
    ) -> None:
        self.config = config
        self._partitions = partitions
        self._controller_tp = controller_tp
        #: What this node knows of partitions it does not host: tp -> (leader, epoch, isr).
        self.leaders: dict[TopicPartition, tuple[int, int, tuple[int, ...]]] = {}
        #: The registration of a node in the metadata (set by the controller's driver): the
        #: addresses of nodes that no static peers list names.
        self.registered: Callable[[int], NodeImage | None] = lambda node_id: None

    def learn(self, src: int, announcements: Iterable[rpb.LeaderAnnouncement]) -> None:
        """Leadership announcements received from node `src`; an older epoch never wins."""
        for announcement in announcements:
            tp = TopicPartition(announcement.group.topic, announcement.group.partition)
            known = self.leaders.get(tp)
            if known is None or announcement.epoch >= known[1]:
                self.leaders[tp] = (src, announcement.epoch, tuple(announcement.isr))

    def forget(self, tp: TopicPartition) -> None:
        """The partition's topic was deleted."""
        self.leaders.pop(tp, None)

    def leader_of(self, tp: TopicPartition) -> tuple[int, int]:
        """(leader id, epoch) of the newest epoch this node knows, from its own replica's core
        or from announcements, whichever is newer; (-1, epoch) while that epoch's leader is
        unknown (an election is under way: naming the previous epoch's leader would send
        clients to a node that no longer leads, perhaps a dead one); (-1, -1) when nothing
        is known."""
        leader, epoch = -1, -1
        replica = self._partitions.get(tp)
        if replica is not None:
            core = replica.core
            leader, epoch = (-1 if core.leader_id is None else core.leader_id), core.term
        known = self.leaders.get(tp)
        if known is not None and (known[1] > epoch or (known[1] == epoch and leader < 0)):
            leader, epoch = known[0], known[1]
        return leader, epoch

    def isr_of(self, tp: TopicPartition) -> list[int]:
        replica = self._partitions.get(tp)
        if replica is not None and replica.is_leader:
            return replica.in_sync_replicas(self.config.replica_lag_max_ms)
        known = self.leaders.get(tp)
        return list(known[2]) if known is not None else []

    def address_of(self, node_id: int) -> str:
        """The address a client should use for `node_id` (Metadata, leader hints): the
        configured one, else the one it registered."""
        address = self.config.client_address_of(node_id)
        if not address and (node := self.registered(node_id)) is not None:
            address = node.client_address
        return address

    def kafka_address_of(self, node_id: int) -> str:
        """Where a Kafka client reaches `node_id` (its Kafka listener, as it registered it;
        this node's own from its config): "" when it has none or is not known."""
        if node_id == self.config.node_id:
            return self.config.kafka_advertised_address
        node = self.registered(node_id)
        return node.kafka_address if node is not None else ""

    def internal_address_of(self, node_id: int) -> str:
        """Where this node dials `node_id`'s node-to-node listener ("" when unknown)."""
        address = self.config.peers.get(node_id, "")
        if not address and (node := self.registered(node_id)) is not None:
            address = node.internal_address
        return address

    @property
    def controller_id(self) -> int:
        return self.leader_of(self._controller_tp)[0]
