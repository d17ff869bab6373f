"""Kafka's admin APIs about replicas, logs and the controller's quorum: AlterReplicaLogDirs (key
34) v1-2, DescribeLogDirs (35) v1-4, ElectLeaders (43) v0-2, DescribeQuorum (55) v0-2 and
DescribeTopicPartitions (75) v0, the versions a Kafka 4.0 broker serves.

Each goes to a Tidelog handler, which authorizes it as Kafka does: DESCRIBE on the cluster for
DescribeLogDirs and DescribeQuorum, ALTER on the cluster for AlterReplicaLogDirs and
ElectLeaders (node/api/records.py, node/api/quorum.py, node/api/elections.py), DESCRIBE on each
topic for DescribeTopicPartitions (Tidelog's Metadata handler, node/api/topics.py).

- Log directories: a node has one, its data.dir. DescribeLogDirs names it with the file
  system's size and each replica's bytes and offset lag (no replica is a future one: nothing
  ever moves between directories); AlterReplicaLogDirs into that directory is NONE for a
  replica the node holds, as Kafka answers a replica already in place, and another path
  LOG_DIR_NOT_FOUND. A refused request is CLUSTER_AUTHORIZATION_FAILED as Kafka answers it: at
  the top of DescribeLogDirs (v3 on; before, no results), for each partition of
  AlterReplicaLogDirs.
- ElectLeaders goes to any node, as to Kafka's controller. Here each partition's own Raft group
  elects its leader, and only that leader can hand leadership to the preferred replica: the
  node sends each partition's election to its leader (itself, or another node through the
  node-to-node Forward, with the client's principal) and gathers the answers. A request naming
  no partitions (null) elects every partition of the cluster and, as Kafka, leaves out those
  whose preferred replica leads already. An unclean election is answered as Tidelog's Raft can
  (node/api/elections.py). This node's view of the leaders may lag a handover: a partition
  whose election is answered "not the leader" or "no leader now" is sent again to the leader
  this node knows then, for up to ``_REROUTE_FOR_S`` within the request's timeout, as Kafka's
  controller answers from its own state and a client does not retry a partition's error.
- DescribeQuorum describes the controller's quorum as the partition ``__cluster_metadata-0``,
  the name Kafka's clients ask for (another name is INVALID_REQUEST, as Kafka answers it); the
  answer comes from the controller leader. The nodes (v2) are the voters with their Kafka
  listeners.
- DescribeTopicPartitions is Metadata's paged twin: the topics asked for (none: every topic
  the caller may describe) by name, their partitions from the cursor on, at most
  ``response_partition_limit`` partitions (capped at Kafka's default of 2000) per answer;
  ``next_cursor`` says where the next page starts. Eligible leader replicas (KIP-966) do not
  exist in Raft: those fields are null.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections import defaultdict
from typing import Any

import grpc
from kio.schema.errors import ErrorCode

from tidelog import errors
from tidelog.coordinator.controller import METADATA_TP
from tidelog.coordinator.metadata_records import split_address
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.kafka.call import KafkaCall
from tidelog.node.kafka.changes import change_timeout_ms, error_message
from tidelog.node.kafka.codec import response_type
from tidelog.node.kafka.fields import build, entity_if, entity_of, error_code
from tidelog.node.kafka.metadata import known_leader_epoch, topic_uuid
from tidelog.node.kafka.registry import ApiRegistry
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

ALTER_REPLICA_LOG_DIRS_KEY, DESCRIBE_LOG_DIRS_KEY, ELECT_LEADERS_KEY = 34, 35, 43
DESCRIBE_QUORUM_KEY, DESCRIBE_TOPIC_PARTITIONS_KEY = 55, 75
_NO_THROTTLE = datetime.timedelta(0)
#: How long an election answered by a node that no longer leads (or while none does) is sent
#: again to the leader this node knows by then, and how often.
_REROUTE_FOR_S = 5.0
_REROUTE_EVERY_S = 0.1
#: The answers of a node that does not lead the partition (this node's view lagged).
_NOT_THERE = (errors.NotLeaderOrFollowerError.code, errors.LeaderNotAvailableError.code)
#: The most partitions one DescribeTopicPartitions answer carries (Kafka's default of
#: max.request.partition.size.limit): a larger response_partition_limit is capped to it.
MAX_PAGE_PARTITIONS = 2000
#: Kafka's authorized operations when they were not asked for (or are not computed).
_NOT_REQUESTED = -(2**31)
#: Kafka's directory id of a replica whose directory is not told.
_NO_DIRECTORY = uuid.UUID(int=0)


class ClusterAdminAdapter:
    def __init__(
        self, config: NodeConfig, servicer: Any, controller: ControllerDriver, routing: Routing
    ) -> None:
        self._config = config
        self._servicer = servicer
        self._controller = controller
        self._routing = routing

    # ---- log directories ---------------------------------------------------------------------

    async def describe_log_dirs(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_LOG_DIRS_KEY, call.api_version)
        result_type = entity_of(response, "DescribeLogDirsResult")
        topic_type = entity_of(response, "DescribeLogDirsTopic")
        partition_type = entity_of(response, "DescribeLogDirsPartition")
        # Null is every replica; a topic with no partitions (or an empty list) names none.
        named = [pb.TopicPartitions(topic=t.topic, partitions=t.partitions)
                 for t in request.topics or () if t.partitions]
        answer: pb.DescribeLogDirsResponse = await self._servicer.DescribeLogDirs(
            pb.DescribeLogDirsRequest(topics=named), call)
        none_named = request.topics is not None and not named
        results = tuple(
            build(
                result_type, error_code=error_code(r.error_code), log_dir=r.log_dir,
                total_bytes=r.total_bytes, usable_bytes=r.usable_bytes,
                topics=() if none_named else tuple(
                    build(topic_type, name=t.name, partitions=tuple(
                        build(partition_type, partition_index=p.partition,
                              partition_size=p.size, offset_lag=p.offset_lag,
                              is_future_key=False)
                        for p in t.partitions))
                    for t in r.topics),
            )
            for r in answer.results
        )
        return build(response, throttle_time=_NO_THROTTLE,
                     error_code=error_code(answer.error_code), results=results)

    async def alter_replica_log_dirs(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(ALTER_REPLICA_LOG_DIRS_KEY, call.api_version)
        topic_type = entity_of(response, "AlterReplicaLogDirTopicResult")
        partition_type = entity_of(response, "AlterReplicaLogDirPartitionResult")
        answer: pb.AlterReplicaLogDirsResponse = await self._servicer.AlterReplicaLogDirs(
            pb.AlterReplicaLogDirsRequest(dirs=[
                pb.AlterReplicaLogDir(path=d.path, topics=[
                    pb.TopicPartitions(topic=t.name, partitions=t.partitions) for t in d.topics])
                for d in request.dirs
            ]),
            call,
        )
        if answer.error_code:  # refused whole: every partition asked carries the error
            codes = {(t.name, p): answer.error_code
                     for d in request.dirs for t in d.topics for p in t.partitions}
        else:
            codes = {(t.name, p.partition): p.error_code
                     for t in answer.topics for p in t.partitions}
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for (topic, partition), code in codes.items():
            by_topic[topic].append(build(partition_type, partition_index=partition,
                                         error_code=error_code(code)))
        return build(response, throttle_time=_NO_THROTTLE, results=tuple(
            build(topic_type, topic_name=topic, partitions=tuple(partitions))
            for topic, partitions in by_topic.items()))

    # ---- ElectLeaders ------------------------------------------------------------------------

    async def elect_leaders(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(ELECT_LEADERS_KEY, call.api_version)
        timeout_ms = change_timeout_ms(call, request.timeout)
        every = request.topic_partitions is None
        if every:
            asked = [TopicPartition(name, p) for name, topic in
                     sorted(self._controller.image.topics.items())
                     for p in range(topic.partition_count)]
        else:
            asked = [TopicPartition(t.topic, p) for t in request.topic_partitions
                     for p in t.partitions]
        outcomes: dict[TopicPartition, tuple[int, str]] = {}
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        reroute_until = started + min(_REROUTE_FOR_S, timeout_ms / 1000)
        pending = asked
        while True:
            # A pass sent again waits for what is left of the request's timeout, not all of it.
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            # Each partition's election goes to its leader; one not led now is answered here.
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in pending:
                leader = self._routing.leader_of(tp)[0]
                by_leader[leader if leader >= 0 else self._config.node_id].append(tp)
            if not by_leader:  # nothing to elect: still authorized (and answered) here
                by_leader[self._config.node_id] = []
            answers = await asyncio.gather(*(
                self._elect_at(node, tps, request.election_type, left_ms, call)
                for node, tps in by_leader.items()))
            refused = next((a for a in answers if a.error_code), None)
            if refused is not None:  # not allowed: the error at the top and for every partition
                return self._election_response(
                    response, refused.error_code, refused.error_message,
                    {tp: (refused.error_code, refused.error_message) for tp in asked})
            outcomes.update({
                TopicPartition(t.topic, p.partition_id): (p.error_code, p.error_message)
                for a in answers for t in a.replica_election_results for p in t.partition_result
            })
            pending = [tp for tp in pending if outcomes.get(tp, (0, ""))[0] in _NOT_THERE]
            if not pending or time.monotonic() + _REROUTE_EVERY_S > reroute_until:
                break
            await asyncio.sleep(_REROUTE_EVERY_S)
        if every:  # as Kafka: leaders already preferred are not listed then
            outcomes = {tp: outcome for tp, outcome in outcomes.items()
                        if outcome[0] != errors.ElectionNotNeededError.code}
        return self._election_response(response, 0, "", outcomes)

    async def _elect_at(
        self, node: int, tps: list[TopicPartition], election_type: int, timeout_ms: int,
        call: KafkaCall,
    ) -> pb.ElectLeadersResponse:
        """The election of `tps` by `node` (their leader), answered here when it is this
        node; NOT_LEADER_OR_FOLLOWER for each when `node` cannot be reached."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        sub = pb.ElectLeadersRequest(election_type=election_type, timeout_ms=timeout_ms,
                                     topic_partitions=[pb.TopicPartitions(topic=t, partitions=ps)
                                                       for t, ps in by_topic.items()])
        if node == self._config.node_id:
            answer: pb.ElectLeadersResponse = await self._servicer.ElectLeaders(sub, call)
            return answer
        try:
            forwarded: pb.ElectLeadersResponse = await self._servicer.forwarder.call(
                node, "ElectLeaders", sub, max(call.time_remaining(), 1.0), call.principal)
            return forwarded
        except grpc.aio.AioRpcError as exc:
            unreachable = errors.NotLeaderOrFollowerError(
                f"node {node}, the leader, was not reached: {exc.code()}")
            failed = pb.ElectLeadersResponse()
            for topic, partitions in by_topic.items():
                entry = failed.replica_election_results.add(topic=topic)
                for p in partitions:
                    entry.partition_result.add(partition_id=p, error_code=unreachable.code,
                                               error_message=str(unreachable))
            return failed

    @staticmethod
    def _election_response(
        response: type[Any], top_code: int, top_message: str,
        outcomes: dict[TopicPartition, tuple[int, str]],
    ) -> Any:
        topic_type = entity_of(response, "ReplicaElectionResult")
        partition_type = entity_of(response, "PartitionResult")
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for tp, (code, message) in outcomes.items():
            by_topic[tp.topic].append(build(
                partition_type, partition_id=tp.partition, error_code=error_code(code),
                error_message=error_message(message)))
        return build(
            response, throttle_time=_NO_THROTTLE, error_code=error_code(top_code),
            error_message=error_message(top_message),
            replica_election_results=tuple(
                build(topic_type, topic=topic, partition_result=tuple(partitions))
                for topic, partitions in by_topic.items()),
        )

    # ---- DescribeQuorum ----------------------------------------------------------------------

    async def describe_quorum(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_QUORUM_KEY, call.api_version)
        asked = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
        if asked != [(METADATA_TP.topic, METADATA_TP.partition)]:
            return build(
                response, error_code=ErrorCode.invalid_request, topics=(), nodes=(),
                error_message=f"only the controller's quorum is described: "
                              f"{METADATA_TP.topic} partition {METADATA_TP.partition}")
        answer: pb.DescribeQuorumResponse = await self._servicer.DescribeQuorum(
            pb.DescribeQuorumRequest(), call)
        if answer.error_code == errors.ClusterAuthorizationFailedError.code:
            return build(response, error_code=ErrorCode.cluster_authorization_failed,
                         error_message=error_message(answer.error_message), topics=(),
                         nodes=())
        partition_type = entity_of(response, "PartitionData")
        replica_type = entity_of(response, "ReplicaState")

        def replicas(described: Any) -> tuple[Any, ...]:
            return tuple(
                build(replica_type, replica_id=r.node_id, replica_directory_id=_NO_DIRECTORY,
                      log_end_offset=r.log_end_offset,
                      last_fetch_timestamp=r.last_heard_timestamp_ms,
                      last_caught_up_timestamp=r.last_caught_up_timestamp_ms)
                for r in described)

        if answer.error_code:  # the controller could not be asked, or moved: ask again
            partition = build(
                partition_type, partition_index=METADATA_TP.partition,
                error_code=ErrorCode.not_leader_or_follower,
                error_message=error_message(answer.error_message), leader_id=-1,
                leader_epoch=-1, high_watermark=-1, current_voters=(), observers=())
        else:
            partition = build(
                partition_type, partition_index=METADATA_TP.partition,
                error_code=ErrorCode.none, error_message=None, leader_id=answer.leader_id,
                leader_epoch=answer.leader_epoch, high_watermark=answer.high_watermark,
                current_voters=replicas(answer.voters), observers=replicas(answer.observers))
        return build(
            response, error_code=ErrorCode.none, error_message=None,
            topics=(build(entity_of(response, "TopicData"), topic_name=METADATA_TP.topic,
                          partitions=(partition,)),),
            nodes=self._quorum_nodes(response, [r.node_id for r in answer.voters]),
        )

    def _quorum_nodes(self, response: type[Any], voters: list[int]) -> tuple[Any, ...]:
        """v2's nodes: each voter with its Kafka listener (none for a node without one)."""
        node_type, listener_type = entity_if(response, "Node"), entity_if(response, "Listener")
        if node_type is None or listener_type is None:
            return ()
        nodes = []
        for node_id in voters:
            parts = split_address(self._routing.kafka_address_of(node_id))
            listeners = () if parts is None else (build(
                listener_type, name=self._config.kafka_protocol, host=parts[0],
                port=parts[1]),)
            nodes.append(build(node_type, node_id=node_id, listeners=listeners))
        return tuple(nodes)

    # ---- DescribeTopicPartitions -------------------------------------------------------------

    async def describe_topic_partitions(self, request: Any, call: KafkaCall) -> Any:
        response = response_type(DESCRIBE_TOPIC_PARTITIONS_KEY, call.api_version)
        topic_type = entity_of(response, "DescribeTopicPartitionsResponseTopic")
        names = sorted({t.name for t in request.topics})
        cursor = request.cursor
        invalid = None
        if cursor is not None and cursor.partition_index < 0:
            invalid = f"the cursor's partition index {cursor.partition_index} is negative"
        elif cursor is not None and names and cursor.topic_name not in names:
            invalid = f"the cursor's topic {cursor.topic_name!r} is not one of the topics asked"
        if invalid is not None:  # as Kafka: the error for every topic asked
            return build(response, throttle_time=_NO_THROTTLE, next_cursor=None, topics=tuple(
                build(topic_type, error_code=ErrorCode.invalid_request, name=name,
                      topic_id=uuid.UUID(int=0), partitions=())
                for name in names))
        answer: pb.MetadataResponse = await self._servicer.Metadata(
            pb.MetadataRequest(topics=names), call)
        alive = {node.node_id for node in answer.nodes if not node.is_fenced}
        image = self._controller.image
        limit = min(request.response_partition_limit, MAX_PAGE_PARTITIONS)
        topics: list[Any] = []
        next_cursor = None
        for entry in sorted(answer.topics, key=lambda t: t.name):
            if cursor is not None and entry.name < cursor.topic_name:
                continue
            if limit <= 0:  # the page is full: the next one starts at this topic
                next_cursor = (entry.name, 0)
                break
            if entry.error_code:  # unknown or not allowed: said, and no partitions counted
                topics.append(build(topic_type, error_code=error_code(entry.error_code),
                                    name=entry.name, topic_id=uuid.UUID(int=0), partitions=()))
                continue
            first = (cursor.partition_index
                     if cursor is not None and entry.name == cursor.topic_name else 0)
            partitions = [p for p in entry.partitions if p.partition >= first]
            page, rest = partitions[:limit], partitions[limit:]
            limit -= len(page)
            known = image.topics.get(entry.name)
            topics.append(build(
                topic_type, error_code=ErrorCode.none, name=entry.name,
                topic_id=topic_uuid(known.topic_id) if known else uuid.UUID(int=0),
                is_internal=entry.is_internal,
                partitions=tuple(self._partition(response, p, alive) for p in page),
                topic_authorized_operations=_NOT_REQUESTED,
            ))
            if rest:
                next_cursor = (entry.name, rest[0].partition)
                break
        return build(
            response, throttle_time=_NO_THROTTLE, topics=tuple(topics),
            next_cursor=None if next_cursor is None else build(
                entity_of(response, "Cursor"), topic_name=next_cursor[0],
                partition_index=next_cursor[1]),
        )

    @staticmethod
    def _partition(response: type[Any], p: pb.PartitionMetadata, alive: set[int]) -> Any:
        return build(
            entity_of(response, "DescribeTopicPartitionsResponsePartition"),
            error_code=error_code(p.error_code), partition_index=p.partition,
            leader_id=p.leader_id, leader_epoch=known_leader_epoch(p.leader_epoch),
            replica_nodes=tuple(p.replicas), isr_nodes=tuple(p.isr),
            eligible_leader_replicas=None, last_known_elr=None,
            offline_replicas=tuple(r for r in p.replicas if r not in alive),
        )


def add_cluster_admin(
    registry: ApiRegistry, config: NodeConfig, servicer: Any, controller: ControllerDriver,
    routing: Routing,
) -> None:
    adapter = ClusterAdminAdapter(config, servicer, controller, routing)
    registry.add(ALTER_REPLICA_LOG_DIRS_KEY, 1, 2, adapter.alter_replica_log_dirs)
    registry.add(DESCRIBE_LOG_DIRS_KEY, 1, 4, adapter.describe_log_dirs)
    registry.add(ELECT_LEADERS_KEY, 0, 2, adapter.elect_leaders)
    registry.add(DESCRIBE_QUORUM_KEY, 0, 2, adapter.describe_quorum)
    registry.add(DESCRIBE_TOPIC_PARTITIONS_KEY, 0, 0, adapter.describe_topic_partitions)
