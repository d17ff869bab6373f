"""The logs' own admin requests: DeleteRecords, answered by each partition's leader here, and
DescribeLogDirs, answered by every node for the replicas it holds.

DeleteRecords (Kafka's api 21, kafka-mapping §5.9) moves the leader's log start offset up to
the offset asked (-1: the high watermark), never above the high watermark and never back.
The new start is written to the log's checkpoint before the answer, so a restart of the leader
keeps it, and the segments wholly below it go with the next retention pass. The followers take
it from the leader's leadership announcements (`housekeeping`), each up to its own high
watermark, within an announcement round; a follower that was away takes it from the first
full announcement it hears, and one that is behind the new start is restarted there by Raft.

Unlike Kafka's, the answer does not wait until every follower has moved (Kafka's leader waits
for the lowest log start offset of its replicas, its low watermark, which needs the followers to
report theirs): if the leader fails after its answer and before its next announcement reaches
the follower elected next, that new leader still serves the deleted records, until retention
removes them. The answer's low watermark is the leader's log start offset.

DescribeLogDirs (Kafka's api 35) names the node's one log directory, its data.dir, with the
size of the file system under it and the bytes of each replica's segment files, read on the
disk thread, which is the only writer of every log. AlterReplicaLogDirs (Kafka's api 34) moves
replicas between a node's log directories; with one directory there is nowhere to move them:
a replica the node holds asked into its directory is there already (NONE, as Kafka answers a
replica already in place), another path is LOG_DIR_NOT_FOUND (Kafka's answer for a path that
is not one of its log.dirs), and a partition the node holds no replica of
REPLICA_NOT_AVAILABLE, as Kafka answers it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.coordinator.controller import INTERNAL_TOPICS
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.rules import Answers, each_once, error_answer, partitions_of
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

#: DeleteRecords' offset that means the high watermark, as in Kafka.
_TO_HIGH_WATERMARK = -1


class RecordsApi:
    def __init__(
        self,
        config: NodeConfig,
        replicas: ReplicaSet,
        authorization: Authorization,
        resolve_leader: Callable[[TopicPartition], PartitionReplica | errors.TidelogError],
    ) -> None:
        """`resolve_leader` is the data plane's: the replica here that leads a partition, or
        the error that says why none here may answer (NOT_LEADER_OR_FOLLOWER, ...)."""
        self.config = config
        self.replicas = replicas
        self.authorization = authorization
        self._resolve_leader = resolve_leader

    async def delete_records(
        self, request: pb.DeleteRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteRecordsResponse:
        """Each partition's records below its offset deleted at its leader here (DELETE on the
        topic, else TOPIC_AUTHORIZATION_FAILED per partition); per partition the new log start
        offset, or the error."""
        response = pb.DeleteRecordsResponse()
        answers = Answers(response)
        parts, twice = each_once(partitions_of(request.topics))
        refused = self.authorization.refusals(
            self.authorization.principal(context), Operation.DELETE, ResourceType.TOPIC,
            (tp.topic for tp in parts),
        )
        for tp, part in parts.items():
            result = answers.add(tp)
            try:
                if (error := refused.get(tp.topic)) is not None:
                    raise error
                if tp in twice:
                    raise errors.InvalidRequestError(f"{tp} appears more than once")
                result.low_watermark = await self._delete(tp, part.offset)
            except errors.TidelogError as exc:
                result.error_code = exc.code
                result.error_message = str(exc)
                result.low_watermark = -1
        return response

    async def _delete(self, tp: TopicPartition, offset: int) -> int:
        """Move the log start offset of the replica leading `tp` here; the new log start."""
        replica = self._resolve_leader(tp)
        if isinstance(replica, errors.TidelogError):
            raise replica
        if tp.topic in INTERNAL_TOPICS:
            raise errors.InvalidTopicError(f"the records of internal topic {tp.topic!r} cannot "
                                           "be deleted")
        if offset < _TO_HIGH_WATERMARK:
            raise errors.OffsetOutOfRangeError(
                f"{tp}: offset {offset} is below 0 (-1 means the high watermark)")
        if not replica.log.config.delete_enabled:
            raise errors.PolicyViolationError(
                f"the records of {tp} cannot be deleted: the topic's cleanup.policy does not "
                "include delete")

        def move() -> int:
            if replica.closed:  # its topic was deleted meanwhile
                raise errors.UnknownTopicOrPartitionError(f"{tp} does not exist")
            log = replica.log
            target = log.high_watermark if offset == _TO_HIGH_WATERMARK else offset
            if log.maybe_increment_log_start_offset(target):
                log.checkpoint()
            return log.log_start_offset

        try:
            start = await asyncio.get_running_loop().run_in_executor(self.replicas.disk, move)
        except OSError as exc:
            self.replicas.storage_failed(replica, exc)
            raise errors.KafkaStorageError(f"{tp}: the disk refused the new log start "
                                           f"offset ({exc})") from None
        self.replicas.restated.add(replica)  # its followers follow (`Housekeeping`)
        return start

    async def describe_log_dirs(
        self, request: pb.DescribeLogDirsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeLogDirsResponse:
        """This node's log directory and the replicas it holds there, those the request names
        (all when it names none), each with its size; DESCRIBE on the cluster, else
        CLUSTER_AUTHORIZATION_FAILED for the whole request."""
        refused = self.authorization.caller_cluster_refused(context, Operation.DESCRIBE)
        if refused is not None:
            return error_answer(pb.DescribeLogDirsResponse, refused)
        named = {t.topic: set(t.partitions) for t in request.topics}
        # The registry is the loop's: the disk thread gets a snapshot of the replicas.
        hosted = sorted(
            (tp, replica) for tp, replica in self.replicas.partitions.items()
            if not named or (tp.topic in named
                             and (not named[tp.topic] or tp.partition in named[tp.topic])))
        directory = self.config.data_dir.resolve()

        def describe() -> pb.LogDirResult:
            result = pb.LogDirResult(log_dir=str(directory), total_bytes=-1, usable_bytes=-1)
            try:
                usage = shutil.disk_usage(directory)
            except OSError:
                result.error_code = errors.KafkaStorageError.code
                return result
            result.total_bytes, result.usable_bytes = usage.total, usage.free
            answers = Answers(result)
            for tp, replica in hosted:
                if replica.closed:
                    continue
                log = replica.log
                answer = answers.add(tp)
                answer.size = log.size
                answer.offset_lag = max(log.high_watermark - log.log_end_offset, 0)
            return result

        result = await asyncio.get_running_loop().run_in_executor(self.replicas.disk, describe)
        return pb.DescribeLogDirsResponse(results=[result])

    async def alter_replica_log_dirs(
        self, request: pb.AlterReplicaLogDirsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterReplicaLogDirsResponse:
        """Each replica's answer to its move into the directory asked (module docstring);
        ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the whole request."""
        refused = self.authorization.caller_cluster_refused(context, Operation.ALTER)
        if refused is not None:
            return error_answer(pb.AlterReplicaLogDirsResponse, refused)
        directory = self.config.data_dir.resolve()  # the path DescribeLogDirs names
        moves, twice = each_once(
            (TopicPartition(t.topic, p), d.path)
            for d in request.dirs for t in d.topics for p in t.partitions)
        response = pb.AlterReplicaLogDirsResponse()
        answers = Answers(response)
        for tp, path in moves.items():
            answer = answers.add(tp)
            error: errors.TidelogError | None = None
            if tp in twice:
                error = errors.InvalidRequestError(f"{tp} appears more than once")
            elif not (os.path.isabs(path) and os.path.normpath(path) == str(directory)):
                error = errors.LogDirNotFoundError(
                    f"{path[:200]!r} is not a log directory of node {self.config.node_id}: "
                    f"its one log directory is {directory}")
            elif tp not in self.replicas.partitions:
                error = errors.ReplicaNotAvailableError(
                    f"node {self.config.node_id} holds no replica of {tp}")
            if error is not None:
                answer.error_code, answer.error_message = error.code, str(error)
        return response
