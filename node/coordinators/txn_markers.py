"""WriteTxnMarkers (kafka-mapping §8.6): the node-to-node RPC that ends a transaction on its
partitions, both sides of it.

* `TxnMarkers.handle` serves the RPC on a partition's leader: each partition of each marker
  gets one COMMIT or ABORT control batch, proposed through Raft
  (`PartitionReplica.write_txn_marker`), and is answered once that batch is committed.
* `TxnMarkers.send` is what a transaction coordinator's markers sender calls: it finds each
  partition's leader, sends it the marker over the node-to-node listener (or serves it here
  when this node leads), and retries what Kafka's coordinator retries until the deadline.
  Markers of several transactions bound for one leader in the same turn of the event loop go
  in one request, as Kafka's TransactionMarkerChannelManager drains a broker's queue into one
  WriteTxnMarkersRequest: the Prepare records of many producers commit in one coordinator
  write, and their markers then cost each leader one call instead of one a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from tidelog import errors
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.edge.security import PeerDialer
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.transport import (
    CHANNEL_OPTIONS,
    DEFAULT_MARKERS_WAIT_S,
    WRITE_TXN_MARKERS_METHOD,
)
from tidelog.records import MAX_PRODUCER_EPOCH
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

log = logging.getLogger("tidelog.node")

NONE = 0
#: What a coordinator retries (Kafka's TransactionMarkerRequestCompletionHandler): the leader
#: moved or is not known yet, the marker did not commit in time, the disk failed.
RETRIABLE = frozenset({
    errors.UnknownTopicOrPartitionError.code,
    errors.NotLeaderOrFollowerError.code,
    errors.NotEnoughReplicasError.code,
    errors.NotEnoughReplicasAfterAppendError.code,
    errors.RequestTimedOutError.code,
    errors.KafkaStorageError.code,
    errors.NetworkExceptionError.code,
})
_RETRY_BACKOFF_S = 0.05


@dataclass(eq=False)
class _Queued:
    """One transaction's marker waiting for the next request to its leader; `answer` gets the
    leader's result for it (or the call's failure)."""

    marker: rpb.WritableTxnMarker
    deadline: float
    answer: asyncio.Future[rpb.WritableTxnMarkerResult]


class TxnMarkers:
    """Both ends of WriteTxnMarkers on one node."""

    def __init__(
        self,
        config: NodeConfig,
        partitions: Mapping[TopicPartition, PartitionReplica],
        routing: Routing,
        dialer: PeerDialer,
    ) -> None:
        self.config = config
        self._partitions = partitions
        self._routing = routing
        self._dialer = dialer
        #: One channel per peer address, kept (markers go out on every transaction's end).
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: Per peer address, the markers for the request sent at the end of this loop turn.
        self._queued: dict[str, list[_Queued]] = {}
        #: The requests in flight (a reference keeps each task alive; close() ends them).
        self._flushing: set[asyncio.Task[None]] = set()

    # ---- the partition leader's side -----------------------------------------------------

    async def handle(
        self, request: rpb.WriteTxnMarkersRequest, timeout_s: float = DEFAULT_MARKERS_WAIT_S
    ) -> rpb.WriteTxnMarkersResponse:
        """Write every marker of `request` on the partitions this node leads and answer each
        partition once its marker is committed (or with the error that stopped it)."""
        response = rpb.WriteTxnMarkersResponse()
        waits: list[tuple[rpb.WritableTxnMarkerPartitionResult, asyncio.Future[None]]] = []
        for marker in request.markers:
            result = response.markers.add(producer_id=marker.producer_id)
            for topic in marker.topics:
                topic_result = result.topics.add(name=topic.name)
                for index in topic.partition_indexes:
                    answer = topic_result.partitions.add(partition_index=index)
                    try:
                        done = self._write(TopicPartition(topic.name, index), marker)
                    except errors.TidelogError as exc:
                        answer.error_code = exc.code
                        continue
                    waits.append((answer, done))
        if waits:
            await asyncio.wait([done for _, done in waits], timeout=timeout_s)
        for answer, done in waits:
            if not done.done():
                done.cancel()
                answer.error_code = errors.RequestTimedOutError.code
            elif done.cancelled():
                answer.error_code = errors.RequestTimedOutError.code
            else:
                failure = done.exception()
                if failure is None:
                    answer.error_code = NONE
                elif isinstance(failure, errors.TidelogError):
                    answer.error_code = failure.code
                else:
                    answer.error_code = errors.UnknownServerError.code
        return response

    def _write(self, tp: TopicPartition, marker: rpb.WritableTxnMarker) -> asyncio.Future[None]:
        if marker.producer_id < 0 or not 0 <= marker.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise errors.InvalidRequestError(
                f"producer id {marker.producer_id} epoch {marker.producer_epoch}: a marker "
                f"needs an id >= 0 and an epoch in [0, {MAX_PRODUCER_EPOCH}]"
            )
        replica = self._partitions.get(tp)
        if replica is None:
            if self._routing.leader_of(tp) == (-1, -1):
                raise errors.UnknownTopicOrPartitionError(f"{tp} is not known here")
            raise errors.NotLeaderOrFollowerError(f"node {self.config.node_id} hosts no {tp}")
        if not replica.is_leader:
            raise errors.NotLeaderOrFollowerError(f"not the leader of {tp}")
        return replica.write_txn_marker(
            marker.producer_id, marker.producer_epoch, marker.transaction_result,
            marker.coordinator_epoch,
        )

    # ---- the coordinator's side ----------------------------------------------------------

    async def send(
        self, marker: rpb.WritableTxnMarker, timeout_s: float
    ) -> dict[TopicPartition, int]:
        """Write one transaction's marker on every partition it names, each at that
        partition's leader, retrying until each is written or `timeout_s` has passed.

        `marker` is one WritableTxnMarker: producer id and epoch, the result (True: COMMIT),
        the coordinator epoch, and the partitions by topic. Returns the last error code of
        every partition: NONE (0) once its marker is committed; INVALID_PRODUCER_EPOCH (47)
        or TRANSACTION_COORDINATOR_FENCED (52) mean this coordinator must stop (a newer
        epoch or coordinator exists); a code in `RETRIABLE` means the deadline passed first
        and the caller should call again (markers are idempotent: a second COMMIT of a
        decided transaction changes nothing). Leaders are found with the node's routing; the
        partitions this node leads are written here without a call."""
        deadline = time.monotonic() + timeout_s
        codes: dict[TopicPartition, int] = {
            TopicPartition(t.name, p): errors.NotLeaderOrFollowerError.code
            for t in marker.topics for p in t.partition_indexes
        }
        pending = set(codes)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                leader = self._routing.leader_of(tp)[0]
                if leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            calls = [self._send_to(leader, marker, tps, remaining)
                     for leader, tps in by_leader.items()]
            for answers in await asyncio.gather(*calls):
                for tp, code in answers.items():
                    codes[tp] = code
                    if code not in RETRIABLE:
                        pending.discard(tp)
            if pending:
                await asyncio.sleep(min(_RETRY_BACKOFF_S, max(deadline - time.monotonic(), 0)))
        return codes

    async def _send_to(
        self, leader: int, marker: rpb.WritableTxnMarker, tps: list[TopicPartition],
        timeout_s: float,
    ) -> dict[TopicPartition, int]:
        one = rpb.WritableTxnMarker(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            transaction_result=marker.transaction_result,
            coordinator_epoch=marker.coordinator_epoch,
        )
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        for name, indexes in by_topic.items():
            one.topics.add(name=name, partition_indexes=sorted(indexes))
        if leader == self.config.node_id:
            response = await self.handle(rpb.WriteTxnMarkersRequest(markers=[one]), timeout_s)
            results = list(response.markers)
        else:
            address = self._routing.internal_address_of(leader)
            if not address:
                return dict.fromkeys(tps, errors.NotLeaderOrFollowerError.code)
            try:
                results = [await self._queue(address, one, timeout_s)]
            except grpc.aio.AioRpcError as exc:
                log.debug("WriteTxnMarkers to node %d failed: %s", leader, exc.code().name)
                return dict.fromkeys(tps, errors.NetworkExceptionError.code)
        answers = {}
        for result in results:
            for topic in result.topics:
                for part in topic.partitions:
                    answers[TopicPartition(topic.name, part.partition_index)] = part.error_code
        return {tp: answers.get(tp, errors.UnknownServerError.code) for tp in tps}

    def _queue(
        self, address: str, marker: rpb.WritableTxnMarker, timeout_s: float
    ) -> asyncio.Future[rpb.WritableTxnMarkerResult]:
        """`marker`'s result from the leader at `address`, in the one request that carries
        every marker queued for it in this turn of the loop (the markers tasks that a
        coordinator write started together reach here in the same turn)."""
        loop = asyncio.get_running_loop()
        queued = self._queued.setdefault(address, [])
        if not queued:
            loop.call_soon(self._flush, address)
        item = _Queued(marker, time.monotonic() + timeout_s, loop.create_future())
        queued.append(item)
        return item.answer

    def _flush(self, address: str) -> None:
        items = self._queued.pop(address, [])
        if items:
            task = asyncio.get_running_loop().create_task(self._send_queued(address, items))
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)

    async def _send_queued(self, address: str, items: list[_Queued]) -> None:
        """One request with every marker of `items`, within the earliest of their deadlines;
        a leader answers the markers in the order asked (`handle`)."""
        request = rpb.WriteTxnMarkersRequest(markers=[item.marker for item in items])
        timeout_s = max(min(item.deadline for item in items) - time.monotonic(), 0.0)
        try:
            response = await self._call(address, request, timeout_s)
        except grpc.aio.AioRpcError as exc:
            for item in items:
                if not item.answer.done():
                    item.answer.set_exception(exc)
            return
        results = list(response.markers)
        if len(results) != len(items):  # not a leader's answer: every partition unanswered
            results = [rpb.WritableTxnMarkerResult() for _ in items]
        for item, result in zip(items, results, strict=True):
            if not item.answer.done():
                item.answer.set_result(result)

    async def _call(
        self, address: str, request: rpb.WriteTxnMarkersRequest, timeout_s: float
    ) -> rpb.WriteTxnMarkersResponse:
        call = self.channel(address).unary_unary(
            WRITE_TXN_MARKERS_METHOD,
            request_serializer=rpb.WriteTxnMarkersRequest.SerializeToString,
            response_deserializer=rpb.WriteTxnMarkersResponse.FromString,
        )
        response: rpb.WriteTxnMarkersResponse = await call(request, timeout=timeout_s)
        return response

    def channel(self, address: str) -> grpc.aio.Channel:
        """The channel kept to the node-to-node listener at `address` (the other
        node-to-node calls of transactions use it too: `txn_verification`)."""
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._dialer.channel(address, CHANNEL_OPTIONS)
        return channel

    async def close(self) -> None:
        for task in list(self._flushing):
            task.cancel()
        for channel in self._channels.values():
            with contextlib.suppress(Exception):
                await channel.close()
        self._channels.clear()
