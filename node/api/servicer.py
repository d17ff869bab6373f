"""The client-facing gRPC service (tidelog.v1.Tidelog) of a node.

Per-partition problems are Kafka error codes inside the response; a gRPC status is only for a
request that is malformed as a whole (INVALID_ARGUMENT) or an API not built yet (UNIMPLEMENTED).
A non-leader answers NOT_LEADER_OR_FOLLOWER with what it knows of the leader (KIP-951).

Three rules hold for every request, so that no handler can forget them:

* an ``optional`` field left unset means what the proto comment says (a consumer, no epoch
  check, acks=all), read through :func:`or_unset`: proto3 reads an unset field as 0, which for
  these fields is a different, meaningful value;
* a partition (or topic) named twice in one request gets INVALID_REQUEST (42) and one result,
  and nothing is done for it (:func:`each_once`);
* a per-partition error answer says -1 for every offset it cannot vouch for, and carries the
  leader hint exactly with NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (:meth:`_fail`).

Authorization comes first in every handler, as in Kafka's: the node that answers a request asks
`node.authorization` which of the topics (groups, ...) it names the caller may act on, answers
the others with their AUTHORIZATION_FAILED code, and serves the rest as if they were alone.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.coordinator.controller import INTERNAL_TOPICS
from tidelog.node.api.acls import AclApi
from tidelog.node.api.acls import all_failed as acls_failed
from tidelog.node.api.admin import AdminApi
from tidelog.node.api.admin import all_failed as admin_failed
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.consumer_groups import ConsumerGroupApi
from tidelog.node.api.decommission import DecommissionApi
from tidelog.node.api.decommission import all_failed as decommission_failed
from tidelog.node.api.forwarding import (
    FORWARD_TIMEOUT_S,
    Forwarder,
    at_controller,
    change_timeout_s,
    was_forwarded,
)
from tidelog.node.api.groups import GroupApi
from tidelog.node.api.reassignment import ReassignmentApi
from tidelog.node.api.reassignment import all_failed as reassignment_failed
from tidelog.node.api.rules import (
    Answers,
    each_once,
    invalid,
    or_unset,
    partitions_of,
)
from tidelog.node.api.transactions import TxnApi
from tidelog.node.api.txn_admin import TxnAdminApi
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.consumer_group_driver import ConsumerGroupDriver
from tidelog.node.coordinators.group_driver import GroupCoordinatorDriver
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.coordinators.txn_driver import TxnCoordinatorDriver
from tidelog.node.coordinators.txn_verification import PendingVerification, TxnVerification
from tidelog.node.replicas.partition import PartitionReplica, is_debug_or_leader
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    LATEST_TIERED_TIMESTAMP,
    IsolationLevel,
    ListOffsetsResult,
    TopicPartition,
)
from tidelog.v1 import tidelog_pb2 as pb
from tidelog.v1 import tidelog_pb2_grpc

log = logging.getLogger("tidelog.api")

#: The most a Fetch returns whatever its max_bytes (but one batch, see below).
MAX_FETCH_BYTES = 64 * 1024 * 1024
#: What a Fetch that sets no max_bytes returns at most, counting the protobuf fields around
#: the records too: gRPC's default receive limit (4 MiB), so that a client built without
#: options can read the answer (Kafka's fetch.max.bytes default, 50 MiB, would make every
#: gRPC client raise its limit first). As in Kafka, the first batch comes whole even when it
#: is larger, so reading a topic whose max.message.bytes is above ~4 MiB takes a client that
#: raised its receive limit (tidelog's accepts records.MAX_MESSAGE_BYTES); and a request
#: naming so many partitions that their answers alone exceed it gets them all.
DEFAULT_FETCH_BYTES = 4 * 1024 * 1024
#: Upper bound of the bytes around a partition's answer that its ByteSize() leaves out: the
#: tag and length of its entry in the topic's list, and of its records field.
_ENTRY_ROOM = 12
#: What an unset ProduceRequest.acks means: all, the Kafka producer's default.
_DEFAULT_ACKS = -1
#: The current_leader_epoch that skips the epoch check (Kafka's -1), what unset means.
_NO_EPOCH_CHECK = -1
#: The errors whose answers carry the leader hint (KIP-951).
_HINTED_CODES = frozenset(
    {errors.NotLeaderOrFollowerError.code, errors.FencedLeaderEpochError.code}
)
#: The fields of each per-partition answer that say -1 ("unknown") whenever it carries an error,
#: as in Kafka's error answers.
_UNKNOWN_ON_ERROR: dict[type, tuple[str, ...]] = {
    pb.PartitionProduceResponse: ("base_offset", "log_append_time_ms", "log_start_offset"),
    pb.FetchPartitionData: ("high_watermark", "last_stable_offset", "log_start_offset"),
    pb.ListOffsetsPartitionResponse: ("timestamp", "offset", "leader_epoch"),
}
#: The RPC of each per-partition answer that `_fail` fills: their errors are counted there,
#: as they happen, rather than found again by walking every answer (node/metrics.py).
PARTITION_ERROR_RPCS: dict[type, str] = {
    pb.PartitionProduceResponse: "Produce",
    pb.FetchPartitionData: "Fetch",
    pb.ListOffsetsPartitionResponse: "ListOffsets",
}
#: FindCoordinator key types (Kafka's CoordinatorType).
_GROUP_KEY = 0
_TRANSACTION_KEY = 1


class TidelogServicer(tidelog_pb2_grpc.TidelogServicer):
    def __init__(
        self,
        config: NodeConfig,
        replicas: ReplicaSet,
        routing: Routing,
        controller: ControllerDriver,
        offsets_topic: CoordinatorTopic,
        groups: GroupCoordinatorDriver,
        txn_topic: CoordinatorTopic,
        txns: TxnCoordinatorDriver,
        partition_error: Callable[[str, int], None],
        consumer_groups: ConsumerGroupDriver | None = None,
        txn_verification: TxnVerification | None = None,
    ) -> None:
        """`partition_error(rpc, code)` counts each per-partition error of Produce, Fetch and
        ListOffsets answers (the node's metrics); `txn_verification` asks transaction
        coordinators about the transactional batches Produce appends (KIP-890 part 1)."""
        self.config = config
        self._partition_error = partition_error
        self.replicas = replicas
        self.routing = routing
        self.controller = controller
        self.offsets_topic = offsets_topic
        self.forwarder = Forwarder(config, routing)
        self.authorization = Authorization(config, controller.image.acls)
        self.group_api = GroupApi(
            config, controller, offsets_topic, groups, self.forwarder, self.authorization,
            partition_error, consumer_groups,
        )
        self.consumer_group_api = (
            ConsumerGroupApi(self.group_api, consumer_groups) if consumer_groups else None
        )
        self.txn_topic = txn_topic
        self.txn_verification = txn_verification
        self.txn_api = TxnApi(controller, txn_topic, txns, self.forwarder, self.authorization)
        self.txn_admin_api = TxnAdminApi(
            txns, self.authorization,
            lambda tp: self._resolve(tp, _NO_EPOCH_CHECK, CONSUMER_REPLICA_ID),
        )
        self.acl_api = AclApi(controller, self.authorization, self.forward_to_controller)
        self.admin_api = AdminApi(
            config, controller, replicas, self.authorization, self.forward_to_controller
        )
        self.reassignment_api = ReassignmentApi(
            controller, self.authorization, self.forward_to_controller
        )
        self.decommission_api = DecommissionApi(
            config, controller, self.authorization, self.forward_to_controller
        )
        #: Tests only: draws for the test hooks, seeded so that a failing run replays.
        self._test_rng = random.Random(hash((config.test_seed, config.node_id)))

    # ---- shared checks ---------------------------------------------------------------------

    def _hint(self, tp: TopicPartition) -> pb.LeaderHint:
        leader, epoch = self.routing.leader_of(tp)
        return pb.LeaderHint(
            leader_id=leader, leader_epoch=epoch, leader_address=self.routing.address_of(leader)
        )

    def _fail(self, result: Any, tp: TopicPartition, exc: errors.TidelogError) -> None:
        """Turn one partition's answer into an error answer: the code and its explanation,
        -1 for the offsets it carried, and the leader hint with the errors that call for one."""
        code = result.error_code = exc.code
        self._partition_error(PARTITION_ERROR_RPCS[type(result)], code)
        result.error_message = str(exc)
        for name in _UNKNOWN_ON_ERROR[type(result)]:
            setattr(result, name, -1)
        if code in _HINTED_CODES:
            result.current_leader.CopyFrom(self._hint(tp))
        else:
            result.ClearField("current_leader")

    def _resolve(
        self, tp: TopicPartition, current_leader_epoch: int, replica_id: int
    ) -> PartitionReplica | errors.TidelogError:
        """The replica that may answer for `tp`, or the error that says why none here may:
        unknown partition, not a replica here, its log offline (KAFKA_STORAGE_ERROR, as
        Kafka's offline log directory), a mismatched epoch (checked before leadership, contract
        §5), or not the leader (debug requests excepted)."""
        topic = self.controller.image.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < topic.partition_count:
            return errors.UnknownTopicOrPartitionError(f"{tp} does not exist")
        replica = self.replicas.partitions.get(tp)
        if replica is None:
            return errors.NotLeaderOrFollowerError(
                f"node {self.config.node_id} hosts no replica of {tp}"
            )
        if replica.offline:
            return errors.KafkaStorageError(
                f"the log of {tp} on node {self.config.node_id} is offline"
            )
        fenced = replica.check_epoch(current_leader_epoch)
        if fenced is not None:
            return fenced
        if not is_debug_or_leader(replica, replica_id):
            return errors.NotLeaderOrFollowerError(
                f"node {self.config.node_id} does not lead {tp}"
            )
        return replica

    # ---- Metadata --------------------------------------------------------------------------

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        routing = self.routing
        response = pb.MetadataResponse(controller_id=routing.controller_id)
        leaders: set[int] = set()
        names = list(dict.fromkeys(request.topics) or sorted(self.controller.image.topics))
        refused = self.authorization.refusals(
            self.authorization.principal(context), Operation.DESCRIBE, ResourceType.TOPIC, names
        )
        for name in names:
            if (error := refused.get(name)) is not None:
                if request.topics:  # a topic asked for by name says why; the others hide
                    response.topics.add(name=name, error_code=error.code)
                continue
            topic = self.controller.image.topics.get(name)
            if topic is None:
                response.topics.add(name=name, error_code=errors.UnknownTopicOrPartitionError.code)
                continue
            entry = response.topics.add(
                name=name, configs=dict(topic.configs), is_internal=name in INTERNAL_TOPICS
            )
            for p, replicas in enumerate(topic.assignment):
                tp = TopicPartition(name, p)
                leader, epoch = routing.leader_of(tp)
                leaders.add(leader)
                entry.partitions.add(
                    error_code=0 if leader >= 0 else errors.LeaderNotAvailableError.code,
                    partition=p,
                    leader_id=leader,
                    leader_epoch=epoch,
                    replicas=replicas,
                    isr=routing.isr_of(tp),
                )
        # Fenced nodes are left out, as Kafka's Metadata leaves them, unless asked for (an
        # operator's view, Kafka's DescribeCluster) or a partition here is led there: Raft,
        # not the controller, elects leaders, so a fenced node may lead until its groups
        # elect another, and clients must reach it meanwhile.
        voters = self.controller.voters
        for node in self.controller.known_nodes():
            if node.fenced and not request.include_fenced_nodes and node.node_id not in leaders:
                continue
            response.nodes.add(
                node_id=node.node_id, address=routing.address_of(node.node_id),
                is_fenced=node.fenced, registered=node.registered,
                internal_address=node.internal_address if request.include_fenced_nodes else "",
                controller_voter=node.node_id in voters,
            )
        return response

    # ---- topics ----------------------------------------------------------------------------

    @at_controller("CreateTopics")
    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicsResponse:
        timeout_s = change_timeout_s(request)
        response = pb.CreateTopicsResponse()
        topics, twice = each_once((topic.name, topic) for topic in request.topics)
        refused = self._refused_unless_cluster(context, Operation.CREATE, topics)
        config = self.config
        for topic in topics.values():
            # Kafka: -1 (and, here, unset) takes the node's default; 0 is refused by the plan.
            partitions = or_unset(topic, "num_partitions", -1)
            factor = or_unset(topic, "replication_factor", -1)
            result = response.topics.add(
                name=topic.name,
                num_partitions=config.num_partitions if partitions == -1 else partitions,
                replication_factor=(
                    config.default_replication_factor if factor == -1 else factor
                ),
            )
            configs = dict(topic.configs)

            def plan(
                result: Any = result, name: str = topic.name, configs: dict[str, str] = configs
            ) -> Any:
                if name in twice:
                    raise errors.InvalidRequestError(f"topic {name!r} appears more than once")
                if name in refused:
                    raise refused[name]
                self.replicas.validate_topic_configs(configs)
                return self.controller.image.plan_create(
                    name,
                    result.num_partitions,
                    result.replication_factor,
                    configs,
                    self.controller.placement_node_ids(),
                )

            await self._run_metadata_change(result, plan, request.validate_only, timeout_s)
            if result.error_code:
                result.num_partitions = result.replication_factor = -1
        return response

    @at_controller("DeleteTopics")
    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        timeout_s = change_timeout_s(request)
        response = pb.DeleteTopicsResponse()
        names, twice = each_once((name, name) for name in request.topic_names)
        refused = self._refused_unless_cluster(context, Operation.DELETE, names)
        for name in names:
            result = response.topics.add(name=name)

            def plan(name: str = name) -> Any:
                if name in twice:
                    raise errors.InvalidRequestError(f"topic {name!r} appears more than once")
                if name in refused:
                    raise refused[name]
                return self.controller.image.plan_delete(name)

            await self._run_metadata_change(result, plan, False, timeout_s)
        return response

    def _refused_unless_cluster(
        self, context: grpc.aio.ServicerContext, operation: Operation, names: Iterable[str]
    ) -> dict[str, errors.AuthorizationError]:
        """CreateTopics and DeleteTopics: the operation on the cluster allows every topic,
        else each topic needs it (kafka-mapping §11.3)."""
        principal = self.authorization.principal(context)
        if self.authorization.cluster_refused(principal, operation) is None:
            return {}
        return self.authorization.refusals(principal, operation, ResourceType.TOPIC, names)

    async def _run_metadata_change(
        self, result: Any, plan: Callable[[], Any], validate_only: bool, timeout_s: float
    ) -> None:
        try:
            if validate_only:
                plan()
            else:
                await self.controller.propose_metadata(plan, timeout_s)
        except errors.TidelogError as exc:
            result.error_code = exc.code
            result.error_message = str(exc)

    async def forward_to_controller(
        self, method: str, request: Any, context: grpc.aio.ServicerContext
    ) -> Any | None:
        """Admin changes go through the controller leader; any node accepts and forwards them.
        Returns None when this node should handle the request itself: it is the controller,
        or the request was forwarded here already (then the controller's own checks answer
        NOT_CONTROLLER rather than the request bouncing between nodes that disagree)."""
        controller = self.routing.controller_id
        if controller == self.config.node_id or was_forwarded(context):
            return None
        if controller < 0 or not self.routing.internal_address_of(controller):
            return _all_failed(method, request, errors.NotControllerError("no controller known"))
        try:
            return await self.forwarder.call(
                controller, method, request, change_timeout_s(request),
                self.authorization.principal(context),
            )
        except grpc.aio.AioRpcError as exc:
            return _all_failed(method, request, _forward_failure(exc))

    # ---- Produce ---------------------------------------------------------------------------

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        principal = self.authorization.principal(context)
        parts, twice = each_once(partitions_of(request.topics))
        txn_refused = None
        if request.HasField("transactional_id"):
            # A transactional producer's: Kafka refuses the whole request (53) before anything
            # else; the batches' producer ids, epochs and transactional flags go to the
            # partitions' producer state like any other.
            txn_refused = self.authorization.refused(
                principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                request.transactional_id,
            )
        if txn_refused is not None:
            refused = dict.fromkeys((tp.topic for tp in parts), txn_refused)
        else:
            refused = self.authorization.refusals(
                principal, Operation.WRITE, ResourceType.TOPIC, (tp.topic for tp in parts)
            )
        acks = or_unset(request, "acks", _DEFAULT_ACKS)
        if acks == -1 and self.config.test_ack_before_commit:
            acks = 1  # the planted bug of the chaos suite's self-test (tests only)
        response = pb.ProduceResponse()
        answers = Answers(response)
        pending: list[tuple[Any, PartitionReplica, asyncio.Future[None] | None]] = []
        resolved_parts: list[tuple[Any, TopicPartition, Any, PartitionReplica]] = []
        to_verify: list[PendingVerification] = []
        for tp, part in parts.items():
            result = answers.add(tp)
            if (error := refused.get(tp.topic)) is not None:
                self._fail(result, tp, error)
                continue
            if tp in twice:
                self._fail(result, tp, errors.InvalidRequestError(
                    f"{tp} appears more than once; none of its batches was written"
                ))
                continue
            if acks not in (0, 1, -1):
                self._fail(result, tp, errors.InvalidRequiredAcksError(f"acks={acks}"))
                continue
            resolved = self._resolve(tp, _NO_EPOCH_CHECK, CONSUMER_REPLICA_ID)
            if isinstance(resolved, errors.TidelogError):
                self._fail(result, tp, resolved)
                continue
            resolved_parts.append((result, tp, part, resolved))
            if (guard := resolved.verification_guard(part.records)) is not None:
                to_verify.append(PendingVerification(tp, guard))
        timeout_s = max(request.timeout_ms, 0) / 1000 or 30.0
        unverified: dict[TopicPartition, errors.TidelogError] = {}
        if to_verify and self.txn_verification is not None:
            # Each transaction's first batch on a partition: asked of its coordinator first.
            unverified = await self.txn_verification.refusals(
                request.transactional_id if request.HasField("transactional_id") else None,
                to_verify, timeout_s,
            )
        for result, tp, part, resolved in resolved_parts:
            if (refusal := unverified.get(tp)) is not None:
                self._fail(result, tp, refusal)
                continue
            try:
                produced = resolved.propose(part.records, acks)
            except errors.TidelogError as exc:
                self._fail(result, tp, exc)
                continue
            result.base_offset = produced.base_offset
            result.log_append_time_ms = produced.log_append_time_ms
            result.log_start_offset = resolved.log.log_start_offset
            pending.append((result, resolved, produced.done))
        self.replicas.wake_touched()
        waits = [f for _, _, f in pending if f is not None]
        if waits:
            await asyncio.wait(waits, timeout=timeout_s)
        for result, replica, future in pending:
            if future is None:
                continue
            if not future.done():
                future.cancel()
                timed_out = errors.RequestTimedOutError(f"not committed in {timeout_s}s")
                self._fail(result, replica.tp, timed_out)
            elif future.exception() is not None:
                failure = future.exception()
                assert isinstance(failure, errors.TidelogError)
                self._fail(result, replica.tp, failure)
            else:
                result.log_start_offset = replica.log.log_start_offset
        drop_rate = self.config.test_drop_produce_response_rate
        if drop_rate and pending and self._test_rng.random() < drop_rate:
            # Tests only: the writes are done, the client never hears so and must retry.
            await context.abort(grpc.StatusCode.UNAVAILABLE, "test: produce response dropped")
        return response

    # ---- Fetch -----------------------------------------------------------------------------

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        replica_id = or_unset(request, "replica_id", CONSUMER_REPLICA_ID)
        if replica_id not in (CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID):
            await invalid(context, "replica_id must be -1 (consumer) or -2 (debug)")
        if request.max_bytes < 0 or request.min_bytes < 0 or request.max_wait_ms < 0:
            await invalid(context, "max_bytes, min_bytes and max_wait_ms must be >= 0")
        try:
            isolation = IsolationLevel(request.isolation_level)
        except ValueError:
            await invalid(context, f"unknown isolation level {request.isolation_level}")
        refused = self.authorization.refusals(
            self.authorization.principal(context), Operation.READ, ResourceType.TOPIC,
            (topic.name for topic in request.topics),
        )
        deadline = asyncio.get_running_loop().time() + request.max_wait_ms / 1000
        while True:
            response, size, replicas = self._read_fetch(request, replica_id, isolation, refused)
            remaining = deadline - asyncio.get_running_loop().time()
            # Kafka answers at once when what it has reaches min_bytes, so min_bytes 0 never
            # waits.
            if size >= request.min_bytes or remaining <= 0 or not replicas:
                return response
            waits = [r.wait_for_data() for r in replicas]
            await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waits:
                waiter.cancel()

    def _read_fetch(
        self,
        request: pb.FetchRequest,
        replica_id: int,
        isolation: IsolationLevel,
        refused: dict[str, errors.AuthorizationError],
    ) -> tuple[pb.FetchResponse, int, list[PartitionReplica]]:
        """The answer, its records' total size, and the replicas it read. `budget` bounds the
        whole answer, records and the fields around them (exactly, up to varint widths)."""
        response = pb.FetchResponse()
        answers = Answers(response)
        if request.max_bytes:
            budget = min(request.max_bytes, MAX_FETCH_BYTES)
        else:
            budget = DEFAULT_FETCH_BYTES
        used = total = 0
        topics: set[str] = set()
        served: list[PartitionReplica] = []
        parts, twice = each_once(partitions_of(request.topics))
        for tp, part in parts.items():
            result = answers.add(tp)
            if tp.topic not in topics:
                topics.add(tp.topic)
                used += len(tp.topic.encode()) + _ENTRY_ROOM
            failure: errors.TidelogError | None = refused.get(tp.topic)
            if failure is None and tp in twice:
                failure = errors.InvalidRequestError(f"{tp} appears more than once")
            if failure is not None:
                self._fail(result, tp, failure)
                used += result.ByteSize() + _ENTRY_ROOM
                continue
            epoch = or_unset(part, "current_leader_epoch", _NO_EPOCH_CHECK)
            resolved = self._resolve(tp, epoch, replica_id)
            if isinstance(resolved, errors.TidelogError):
                self._fail(result, tp, resolved)
                used += result.ByteSize() + _ENTRY_ROOM
                continue
            replica = resolved
            bound = replica.fetch_bound(replica_id, isolation)
            part_max = part.partition_max_bytes if part.partition_max_bytes > 0 else budget
            log_ = replica.log
            result.high_watermark = replica.high_watermark
            result.last_stable_offset = replica.last_stable_offset
            result.log_start_offset = log_.log_start_offset
            around = result.ByteSize() + _ENTRY_ROOM
            try:
                if not log_.log_start_offset <= part.fetch_offset <= log_.log_end_offset:
                    raise errors.OffsetOutOfRangeError(
                        f"offset {part.fetch_offset} is outside the log "
                        f"[{log_.log_start_offset}, {log_.log_end_offset}]"
                    )
                data = b""
                if part.fetch_offset < bound:
                    data = log_.read(
                        part.fetch_offset,
                        min(part_max, max(budget - used - around, 0)),
                        upper_bound=bound,
                        min_one_batch=total == 0,
                    )
            except errors.TidelogError as exc:
                self._fail(result, tp, exc)
                used += result.ByteSize() + _ENTRY_ROOM
                continue
            if data and isolation is IsolationLevel.READ_COMMITTED and replica_id < 0:
                for txn in replica.aborted_in(part.fetch_offset, data):
                    result.aborted_transactions.add(
                        producer_id=txn.producer_id, first_offset=txn.first_offset
                    )
            result.records = data
            total += len(data)
            used += around + len(data)
            served.append(replica)
        return response, total, served

    # ---- ListOffsets -----------------------------------------------------------------------

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOffsetsResponse:
        try:
            isolation = IsolationLevel(request.isolation_level)
        except ValueError:
            await invalid(context, f"unknown isolation level {request.isolation_level}")
        replica_id = or_unset(request, "replica_id", CONSUMER_REPLICA_ID)
        response = pb.ListOffsetsResponse()
        answers = Answers(response)
        parts, twice = each_once(partitions_of(request.topics))
        refused = self.authorization.refusals(
            self.authorization.principal(context), Operation.DESCRIBE, ResourceType.TOPIC,
            (tp.topic for tp in parts),
        )
        for tp, part in parts.items():
            result = answers.add(tp)
            if (error := refused.get(tp.topic)) is not None:
                self._fail(result, tp, error)
                continue
            try:
                answer = self._list_offset(tp, part, replica_id, isolation, tp in twice)
            except errors.TidelogError as exc:
                self._fail(result, tp, exc)
                continue
            result.timestamp = answer.timestamp
            result.offset = answer.offset
            result.leader_epoch = answer.leader_epoch
            result.old_style_offsets.extend(answer.old_style_offsets)
        return response

    def _list_offset(
        self,
        tp: TopicPartition,
        part: pb.ListOffsetsPartition,
        replica_id: int,
        isolation: IsolationLevel,
        duplicated: bool,
    ) -> ListOffsetsResult:
        """kafka-mapping §2.1-2.2 in order: duplicates, unsupported specials, partition,
        epoch, leadership; then the replica's own answer. Raises the partition's error."""
        if duplicated:
            raise errors.InvalidRequestError(f"{tp} appears more than once")
        legacy = part.max_num_offsets >= 1
        lowest_special = -2 if legacy else LATEST_TIERED_TIMESTAMP
        if part.timestamp < lowest_special:
            raise errors.UnsupportedVersionError(f"timestamp {part.timestamp} is not supported")
        epoch = _NO_EPOCH_CHECK if legacy else or_unset(
            part, "current_leader_epoch", _NO_EPOCH_CHECK
        )
        resolved = self._resolve(tp, epoch, replica_id)
        if isinstance(resolved, errors.TidelogError):
            raise resolved
        return resolved.list_offset(part.timestamp, replica_id, isolation, part.max_num_offsets)

    # ---- consumer groups -------------------------------------------------------------------

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        """The leader of the group's `__consumer_offsets` partition, or of the transactional
        id's `__transaction_state` partition; the topic is created on the first call (through
        the controller: a node that is not the controller forwards the call there)."""
        if request.key_type not in (_GROUP_KEY, _TRANSACTION_KEY):
            await invalid(context, f"unknown key_type {request.key_type} (0: consumer group, "
                                   f"1: transaction)")
        resource = ResourceType.GROUP if request.key_type == _GROUP_KEY else (
            ResourceType.TRANSACTIONAL_ID
        )
        refused = self.authorization.refused(
            self.authorization.principal(context), Operation.DESCRIBE, resource, request.key
        )
        if refused is not None:
            return pb.FindCoordinatorResponse(
                error_code=refused.code, error_message=str(refused), node_id=-1
            )
        topic = self.offsets_topic if request.key_type == _GROUP_KEY else self.txn_topic
        if not topic.exists:
            forwarded = await self.forward_to_controller("FindCoordinator", request, context)
            if forwarded is not None:
                return forwarded  # type: ignore[no-any-return]
            if self.routing.controller_id == self.config.node_id:
                topic.create()
        try:
            _, leader = topic.coordinator_of(request.key)
        except errors.TidelogError as exc:
            return pb.FindCoordinatorResponse(
                error_code=exc.code, error_message=str(exc), node_id=-1
            )
        return pb.FindCoordinatorResponse(node_id=leader, address=self.routing.address_of(leader))

    async def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetCommitResponse:
        return await self.group_api.offset_commit(request, context)

    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.TxnOffsetCommitResponse:
        return await self.group_api.txn_offset_commit(request, context)

    async def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetFetchResponse:
        return await self.group_api.offset_fetch(request, context)

    async def OffsetDelete(
        self, request: pb.OffsetDeleteRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetDeleteResponse:
        return await self.group_api.offset_delete(request, context)

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        return self.group_api.list_groups(request, context)

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupsResponse:
        return await self.group_api.delete_groups(request, context)

    async def ConsumerGroupHeartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupHeartbeatResponse:
        assert self.consumer_group_api is not None
        return await self.consumer_group_api.heartbeat(request, context)

    async def ConsumerGroupDescribe(
        self, request: pb.ConsumerGroupDescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupDescribeResponse:
        assert self.consumer_group_api is not None
        return await self.consumer_group_api.describe(request, context)

    # ---- producer ids and transactions -------------------------------------------------------


    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> pb.InitProducerIdResponse:
        """Idempotent producers get a fresh id at epoch 0 from the controller's blocks. Kafka's
        check: IDEMPOTENT_WRITE on the cluster or WRITE on some topic (31 otherwise); with a
        transactional id, WRITE on it (53)."""
        principal = self.authorization.principal(context)
        if request.HasField("transactional_id"):
            refused = self.authorization.refused(
                principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                request.transactional_id,
            )
            if refused is not None:
                return pb.InitProducerIdResponse(
                    error_code=refused.code, error_message=str(refused), producer_id=-1,
                    producer_epoch=-1,
                )
            return await self.txn_api.init_producer_id(request, context, self._new_producer_id)
        refused = self.authorization.cluster_refused(principal, Operation.IDEMPOTENT_WRITE)
        if refused is not None and not self.authorization.allowed_any(
            principal, Operation.WRITE, ResourceType.TOPIC
        ):
            return pb.InitProducerIdResponse(
                error_code=refused.code, producer_id=-1, producer_epoch=-1
            )
        forwarded = await self.forward_to_controller("InitProducerId", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        try:
            producer_id = await self.controller.allocate_producer_id(FORWARD_TIMEOUT_S)
        except errors.TidelogError as exc:
            return pb.InitProducerIdResponse(error_code=exc.code, producer_id=-1, producer_epoch=-1)
        return pb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    async def _new_producer_id(self, timeout_s: float, principal: str) -> int:
        """A producer id from the controller's blocks, for a transaction coordinator: asked
        of the controller leader, for the client whose InitProducerId needs it."""
        controller = self.routing.controller_id
        if controller == self.config.node_id:
            return await self.controller.allocate_producer_id(timeout_s)
        if controller < 0 or not self.routing.internal_address_of(controller):
            raise errors.CoordinatorNotAvailableError("no controller known to allocate an id")
        try:
            response = await self.forwarder.call(
                controller, "InitProducerId", pb.InitProducerIdRequest(), timeout_s, principal
            )
        except grpc.aio.AioRpcError as exc:
            raise errors.CoordinatorNotAvailableError(
                f"controller unreachable for a producer id: {exc.code()}"
            ) from None
        if response.error_code:
            error = errors.for_code(response.error_code)(response.error_message)
            if isinstance(error, errors.NotControllerError | errors.RequestTimedOutError):
                raise errors.CoordinatorNotAvailableError(f"no producer id yet: {error}")
            raise error
        return int(response.producer_id)

    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddPartitionsToTxnResponse:
        return await self.txn_api.add_partitions_to_txn(request, context)

    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddOffsetsToTxnResponse:
        return await self.txn_api.add_offsets_to_txn(request, context)

    async def EndTxn(
        self, request: pb.EndTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndTxnResponse:
        return await self.txn_api.end_txn(request, context)

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTransactionsResponse:
        return self.txn_admin_api.list_transactions(request, context)

    async def DescribeTransactions(
        self, request: pb.DescribeTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeTransactionsResponse:
        return self.txn_admin_api.describe_transactions(request, context)

    async def DescribeProducers(
        self, request: pb.DescribeProducersRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeProducersResponse:
        return self.txn_admin_api.describe_producers(request, context)

    async def AbortTransaction(
        self, request: pb.AbortTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortTransactionResponse:
        return await self.txn_admin_api.abort_transaction(request, context)

    # ---- ACLs ------------------------------------------------------------------------------

    async def CreateAcls(
        self, request: pb.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateAclsResponse:
        if (disabled := self.authorization.disabled()) is not None:
            return acls_failed("CreateAcls", request, disabled)  # type: ignore[no-any-return]
        return await self.acl_api.create_acls(request, context)

    async def DescribeAcls(
        self, request: pb.DescribeAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeAclsResponse:
        if (disabled := self.authorization.disabled()) is not None:
            return pb.DescribeAclsResponse(error_code=disabled.code, error_message=str(disabled))
        return self.acl_api.describe_acls(request, context)

    async def DeleteAcls(
        self, request: pb.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteAclsResponse:
        if (disabled := self.authorization.disabled()) is not None:
            return acls_failed("DeleteAcls", request, disabled)  # type: ignore[no-any-return]
        return await self.acl_api.delete_acls(request, context)

    # ---- partitions and configs ------------------------------------------------------------

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePartitionsResponse:
        return await self.admin_api.create_partitions(request, context)

    async def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        return self.admin_api.describe_configs(request, context)

    async def IncrementalAlterConfigs(
        self, request: pb.IncrementalAlterConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.IncrementalAlterConfigsResponse:
        return await self.admin_api.incremental_alter_configs(request, context)

    async def AlterPartitionReassignments(
        self, request: pb.AlterPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterPartitionReassignmentsResponse:
        return await self.reassignment_api.alter(request, context)

    async def ListPartitionReassignments(
        self, request: pb.ListPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPartitionReassignmentsResponse:
        return await self.reassignment_api.list(request, context)

    async def DecommissionNode(
        self, request: pb.DecommissionNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DecommissionNodeResponse:
        return await self.decommission_api.decommission_node(request, context)


def _forward_failure(exc: grpc.aio.AioRpcError) -> errors.TidelogError:
    """NOT_CONTROLLER when the controller did not get the request (retry it there), but
    REQUEST_TIMED_OUT when it may have: the change may commit, and a client must not take a
    retry's TOPIC_ALREADY_EXISTS or UNKNOWN_TOPIC_OR_PARTITION for the first answer (Kafka's
    ForwardingManager answers a timed-out envelope with a TimeoutException: 7 too)."""
    if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.RequestTimedOutError(f"the controller did not answer in time: {exc.code()}")
    return errors.NotControllerError(f"controller unreachable: {exc.code()}")


def _all_failed(method: str, request: Any, exc: errors.TidelogError) -> Any:
    if method in ("CreateAcls", "DeleteAcls"):
        return acls_failed(method, request, exc)
    if method in ("CreatePartitions", "IncrementalAlterConfigs"):
        return admin_failed(method, request, exc)
    if method in ("AlterPartitionReassignments", "ListPartitionReassignments"):
        return reassignment_failed(method, request, exc)
    if method == "DecommissionNode":
        return decommission_failed(method, request, exc)
    if method == "InitProducerId":
        return pb.InitProducerIdResponse(error_code=exc.code, producer_id=-1, producer_epoch=-1)
    if method == "FindCoordinator":
        unavailable = errors.CoordinatorNotAvailableError(str(exc))
        return pb.FindCoordinatorResponse(
            error_code=unavailable.code, error_message=str(unavailable), node_id=-1
        )
    if method == "CreateTopics":
        response = pb.CreateTopicsResponse()
        for name in dict.fromkeys(topic.name for topic in request.topics):
            response.topics.add(
                name=name,
                error_code=exc.code,
                error_message=str(exc),
                num_partitions=-1,
                replication_factor=-1,
            )
        return response
    response_d = pb.DeleteTopicsResponse()
    for name in dict.fromkeys(request.topic_names):
        response_d.topics.add(name=name, error_code=exc.code, error_message=str(exc))
    return response_d
