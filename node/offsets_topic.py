"""The internal topic of committed consumer offsets (`__consumer_offsets`): its creation and
where each group lives in it (SPEC §8, kafka-reference §7.3).

The topic is created through the controller the first time a client looks for a coordinator,
as Kafka does: the controller leader proposes it (users cannot, CreateTopics refuses internal
topics), and FindCoordinator answers COORDINATOR_NOT_AVAILABLE (15) until the group's partition
has a leader. A group's coordinator is the leader of partition
`abs(java_string_hash(group)) % partitions`; the count is the topic's own once it exists, so
every node places a group alike whatever its `offsets.topic.num.partitions` says.
"""

from __future__ import annotations

import asyncio
import logging

from tidelog import errors
from tidelog.coordinator.controller import CONSUMER_OFFSETS_TOPIC
from tidelog.hashing import group_partition
from tidelog.node.config import NodeConfig
from tidelog.node.controller_driver import ControllerDriver
from tidelog.node.routing import Routing
from tidelog.types import TopicPartition

#: `segment.bytes` of the topic, unless the node's segments are smaller. Kafka's
#: `offsets.topic.segment.bytes` is 100 MiB, but the cleaner compacts closed segments only and
#: a new leader replays what is not compacted: 100 MiB of commits (~1.2 million records) would
#: take it 10-20 s of Python. 4 MiB keeps the uncompacted part to ~50,000 records (about a
#: second at worst), and the segments the cleaner merges stay as small as the live offsets.
_SEGMENT_BYTES = 4 * 1024 * 1024
#: How long the controller leader waits for the topic's record to commit.
_CREATE_TIMEOUT_S = 30.0

log = logging.getLogger("tidelog.node")


class OffsetsTopic:
    def __init__(self, config: NodeConfig, controller: ControllerDriver, routing: Routing) -> None:
        self.config = config
        self.controller = controller
        self.routing = routing
        self._creating: asyncio.Task[None] | None = None

    @property
    def exists(self) -> bool:
        return CONSUMER_OFFSETS_TOPIC in self.controller.image.topics

    def partition_of(self, group: str) -> TopicPartition | None:
        """The group's partition, or None while the topic does not exist."""
        topic = self.controller.image.topics.get(CONSUMER_OFFSETS_TOPIC)
        if topic is None:
            return None
        return TopicPartition(CONSUMER_OFFSETS_TOPIC, group_partition(group, topic.partition_count))

    def coordinator_of(self, group: str) -> tuple[TopicPartition, int]:
        """The group's partition and the node that leads it, as this node knows them.
        Raises COORDINATOR_NOT_AVAILABLE while the topic does not exist or the partition has
        no leader."""
        tp = self.partition_of(group)
        if tp is None:
            raise errors.CoordinatorNotAvailableError(
                f"the {CONSUMER_OFFSETS_TOPIC} topic does not exist yet"
            )
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
        nodes = sorted(config.peers)
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(min(_SEGMENT_BYTES, config.segment_bytes)),
        }
        factor = min(config.offsets_topic_replication_factor, len(nodes))
        try:
            await self.controller.propose_metadata(
                lambda: self.controller.image.plan_create(
                    CONSUMER_OFFSETS_TOPIC, config.offsets_topic_num_partitions, factor, configs,
                    nodes, allow_internal=True,
                ),
                _CREATE_TIMEOUT_S,
            )
        except errors.TopicAlreadyExistsError:
            return
        except errors.TidelogError as exc:  # the next FindCoordinator tries again
            log.warning("node %d: %s not created: %s", config.node_id, CONSUMER_OFFSETS_TOPIC, exc)
            return
        log.info("node %d: created %s (%d partitions, replication factor %d)", config.node_id,
                 CONSUMER_OFFSETS_TOPIC, config.offsets_topic_num_partitions, factor)
