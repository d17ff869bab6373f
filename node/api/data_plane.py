"""The data plane of the client API: Produce, Fetch and ListOffsets, answered by the
partition's leader here.

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
import random
from collections.abc import Callable
from typing import Any

import grpc

from tidelog import errors
from tidelog.acl import Operation, ResourceType
from tidelog.node.api.authorization import Authorization
from tidelog.node.api.forwarding import ListenerCall
from tidelog.node.api.rules import Answers, each_once, invalid, or_unset, partitions_of
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
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


class DataPlaneApi:
    def __init__(
        self,
        config: NodeConfig,
        replicas: ReplicaSet,
        routing: Routing,
        controller: ControllerDriver,
        authorization: Authorization,
        partition_error: Callable[[str, int], None],
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
        self.authorization = authorization
        self.txn_verification = txn_verification
        #: Tests only: draws for the test hooks, seeded so that a failing run replays.
        self._test_rng = random.Random(hash((config.test_seed, config.node_id)))

    def resolve_leader(self, tp: TopicPartition) -> PartitionReplica | errors.TidelogError:
        """The replica here that leads `tp`, asked as a consumer with no epoch check (or the
        error that says why none here may answer)."""
        return self._resolve(tp, _NO_EPOCH_CHECK, CONSUMER_REPLICA_ID)

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

    async def produce(
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
        if isinstance(context, ListenerCall):
            context.appended()
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

    async def fetch(
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

    async def list_offsets(
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

    # ---- OffsetForLeaderEpoch --------------------------------------------------------------

    def offsets_for_leader_epoch(
        self, context: grpc.aio.ServicerContext,
        partitions: list[tuple[TopicPartition, int, int]],
    ) -> list[tuple[TopicPartition, int, int, int]]:
        """Kafka's OffsetForLeaderEpoch (api 23) as a consumer asks it, to check its position
        after a leader change (KIP-320); Tidelog's own consumers do not need it, so it has no
        gRPC method. For each (partition, the epoch the caller believes current, epoch), in
        order and once per partition: (partition, error code, the largest epoch <= epoch that
        the leader's log has, where it ends). As Kafka's leader answers: the current epoch
        ends at the log end; an epoch below every one kept ends where the first kept starts;
        an epoch above the current one, or none (-1), is (-1, -1). Needs DESCRIBE on the
        topic; the epoch and leadership checks are Fetch's."""
        parts, twice = each_once((tp, (current, epoch)) for tp, current, epoch in partitions)
        refused = self.authorization.refusals(
            self.authorization.principal(context), Operation.DESCRIBE, ResourceType.TOPIC,
            (tp.topic for tp in parts),
        )
        answers: list[tuple[TopicPartition, int, int, int]] = []
        for tp, (current_epoch, epoch) in parts.items():
            failure: errors.TidelogError | None = refused.get(tp.topic)
            if failure is None and tp in twice:
                failure = errors.InvalidRequestError(f"{tp} appears more than once")
            resolved = failure or self._resolve(tp, current_epoch, CONSUMER_REPLICA_ID)
            if isinstance(resolved, errors.TidelogError):
                answers.append((tp, resolved.code, -1, -1))
            else:
                answers.append((tp, 0, *_epoch_end(resolved, epoch)))
        return answers


def _epoch_end(replica: PartitionReplica, epoch: int) -> tuple[int, int]:
    """(largest epoch <= `epoch` in the leader's log, where it ends): `offsets_for_leader_epoch`."""
    log_ = replica.log
    if epoch < 0 or epoch > replica.leader_epoch:
        return -1, -1
    if epoch == replica.leader_epoch:
        return epoch, log_.log_end_offset
    cache = log_.leader_epoch_cache
    found, end = cache.end_offset_for(epoch, log_.log_start_offset, log_.log_end_offset)
    first = cache.earliest_entry()
    if found < 0:
        return (epoch, first.start_offset) if first is not None else (-1, -1)
    return found, end
