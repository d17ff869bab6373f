"""The internal topics of the coordinators, `__consumer_offsets` (contract §8, kafka-mapping
§7.3) and `__transaction_state` (contract §9, §8.1): their creation and where each key (a group, a
transactional id) lives in them.

A topic is created through the controller the first time a client looks for a coordinator, as
Kafka does: the controller leader proposes it (users cannot, CreateTopics refuses internal
topics), and FindCoordinator answers COORDINATOR_NOT_AVAILABLE (15) until the key's partition
has a leader. A key's coordinator is the leader of partition
`abs(java_string_hash(key)) % partitions`; the count is the topic's own once it exists, so
every node places a key alike whatever its node options say.
"""

from __future__ import annotations

import asyncio
import logging

from tidelog import errors
from tidelog.coordinator.controller import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tidelog.hashing import group_partition
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.types import TopicPartition

#: `segment.bytes` of the topics, unless the node's segments are smaller. Kafka's
#: `offsets.topic.segment.bytes` (and `transaction.state.log.segment.bytes`) is 100 MiB, but
#: the cleaner compacts closed segments only and a new leader replays what is not compacted:
#: 100 MiB of commits (~1 million records) would take it 10-20 s of Python. 1 MiB keeps the
#: uncompacted part to ~10,000 records (~0.1 s), and a cleaner pass, which holds the node's disk
#: thread (every fsync waits for it), to ~0.1 s of CPU: 4 MiB segments (~40,000 records) made
#: passes of 0.4 s of CPU, seconds of wall time on a loaded host, in which commits timed out.
#: Cleaning merges the small segments again.
_SEGMENT_BYTES = 1024 * 1024
#: How long the controller leader waits for the topic's record to commit.
_CREATE_TIMEOUT_S = 30.0

log = logging.getLogger("tidelog.node")


class CoordinatorTopic:
    def __init__(
        self, config: NodeConfig, controller: ControllerDriver, routing: Routing, name: str,
        num_partitions: int, replication_factor: int,
    ) -> None:
        self.config = config
        self.controller = controller
        self.routing = routing
        self.name = name
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self._creating: asyncio.Task[None] | None = None

    @classmethod
    def offsets(
        cls, config: NodeConfig, controller: ControllerDriver, routing: Routing
    ) -> CoordinatorTopic:
        """`__consumer_offsets`: groups' committed offsets."""
        return cls(config, controller, routing, CONSUMER_OFFSETS_TOPIC,
                   config.offsets_topic_num_partitions, config.offsets_topic_replication_factor)

    @classmethod
    def transactions(
        cls, config: NodeConfig, controller: ControllerDriver, routing: Routing
    ) -> CoordinatorTopic:
        """`__transaction_state`: transactional ids' transactions."""
        return cls(config, controller, routing, TRANSACTION_STATE_TOPIC,
                   config.transaction_state_log_num_partitions,
                   config.transaction_state_log_replication_factor)

    @property
    def exists(self) -> bool:
        return self.name in self.controller.image.topics

    def partition_of(self, key: str) -> TopicPartition | None:
        """The key's partition, or None while the topic does not exist."""
        topic = self.controller.image.topics.get(self.name)
        if topic is None:
            return None
        return TopicPartition(self.name, group_partition(key, topic.partition_count))

    def coordinator_of(self, key: str) -> tuple[TopicPartition, int]:
        """The key's partition and the node that leads it, as this node knows them.
        Raises COORDINATOR_NOT_AVAILABLE while the topic does not exist or the partition has
        no leader."""
        tp = self.partition_of(key)
        if tp is None:
            raise errors.CoordinatorNotAvailableError(f"the {self.name} topic does not exist yet")
        leader = self.routing.leader_of(tp)[0]
        if leader < 0:
            raise errors.CoordinatorNotAvailableError(f"{tp} has no leader at the moment")
        return tp, leader

    def create(self) -> None:
        """On the controller leader: propose the topic, once at a time, without waiting; the
        caller answers COORDINATOR_NOT_AVAILABLE meanwhile and the client asks again."""
        if self.exists or (self._creating is not None and not self._creating.done()):
            return
        self._creating = asyncio.create_task(self._create())

    async def _create(self) -> None:
        config = self.config
        nodes = self.controller.placement_node_ids()
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(min(_SEGMENT_BYTES, config.segment_bytes)),
        }
        factor = min(self.replication_factor, len(nodes))
        try:
            await self.controller.propose_metadata(
                lambda: self.controller.image.plan_create(
                    self.name, self.num_partitions, factor, configs, nodes, allow_internal=True,
                ),
                _CREATE_TIMEOUT_S,
            )
        except errors.TopicAlreadyExistsError:
            return
        except errors.TidelogError as exc:  # the next FindCoordinator tries again
            log.warning("node %d: %s not created: %s", config.node_id, self.name, exc)
            return
        log.info("node %d: created %s (%d partitions, replication factor %d)", config.node_id,
                 self.name, self.num_partitions, factor)
