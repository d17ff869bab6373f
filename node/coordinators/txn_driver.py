"""The transaction coordinator's node side: the state machine of each `__transaction_state`
partition this node leads (`coordinator.txn_coordinator`), driven over that partition's Raft
log by `coordinator_driver.CoordinatorDriver` (loading, applying, group commit, leadership).

A request's record is appended and the request answered once it is committed and applied, so
every answer follows a durable state (kafka-mapping §8.6: the client learns of a commit only
once PrepareCommit is durable). Then, off the request path, the markers sender writes COMMIT or
ABORT to every partition of each prepared transaction (WriteTxnMarkers at each partition's
leader, retried while the leader moves or the marker does not commit in time) and appends the
Complete record once all are acknowledged. It starts from what the state says is prepared, so
a new leader finishes what the old one decided. Markers carry this leader's epoch of the
partition as the coordinator epoch: a partition that saw a newer coordinator refuses the old
one's (TRANSACTION_COORDINATOR_FENCED), and the old one stops.

Transactions past their timeout are fenced and aborted every
transaction.abort.timed.out.transaction.cleanup.interval.ms, and ids idle for
transactional.id.expiration.ms removed every
transaction.remove.expired.transaction.cleanup.interval.ms (kafka-mapping §8.7).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.txn_coordinator import (
    AddPartitions,
    Decision,
    MarkerWork,
    TransactionCoordinatorState,
    TxnConfig,
)
from tidelog.coordinator.txn_records import TxnMetadata
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.driver import CoordinatorDriver, Led
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import TopicPartition
from tidelog.v1 import raft_pb2 as rpb

log = logging.getLogger("tidelog.node")

#: Writes one transaction's marker on the partitions it names, each at its leader, within the
#: timeout; the last error code of each partition (0 once written).
MarkerSender = Callable[[rpb.WritableTxnMarker, float], Awaitable[dict[TopicPartition, int]]]
#: A new producer id from the controller, within the timeout.
ProducerIdSource = Callable[[float], Awaitable[int]]

#: Marker answers after which a partition needs no more tries: written, or a partition that
#: cannot hold markers (Kafka marks those done too).
_DONE = frozenset({0, errors.UnsupportedForMessageFormatError.code,
                   errors.UnsupportedVersionError.code})
#: Marker answers that say this coordinator is no longer the one (a newer coordinator epoch or
#: producer epoch was seen): it stops, and the newer one finishes.
_FENCED = frozenset({errors.InvalidProducerEpochError.code,
                     errors.TransactionCoordinatorFencedError.code})
#: How long one round of marker writes may take before the sender looks again.
_MARKERS_ROUND_S = 5.0
_MARKERS_BACKOFF_S = 0.1


@dataclass(eq=False)
class _Held:
    """An AddPartitionsToTxn held while the id's markers are written. When the markers task
    ends, `taken` is set: True when its partitions were in the Ongoing record committed with
    the Complete record (answered), False otherwise (it goes the usual way then)."""

    request: AddPartitions
    taken: asyncio.Future[bool]


@dataclass(eq=False)
class _TxnLed(Led[TransactionCoordinatorState]):
    #: The markers being written, by transactional id.
    marking: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    #: Per transactional id being marked, the requests held until its markers task ends, in
    #: arrival order; those of the id's producer go into the Complete record's batch.
    held: dict[str, list[_Held]] = field(default_factory=dict)
    #: Per transactional id, the AddPartitionsToTxn whose Ongoing record is being appended
    #: (outside a markers task): another one of the id waits for it (`_after_adding`).
    adding: dict[str, asyncio.Future[None]] = field(default_factory=dict)


class TxnCoordinatorDriver(CoordinatorDriver[TransactionCoordinatorState]):
    key_name = "transactional id"

    def __init__(
        self, config: NodeConfig, replicas: ReplicaSet, txn_topic: CoordinatorTopic,
        offsets_topic: CoordinatorTopic, send_markers: MarkerSender,
    ) -> None:
        super().__init__(config, replicas, txn_topic, config.offsets_commit_timeout_ms)
        self.offsets_topic = offsets_topic
        self._send_markers = send_markers
        self._state_config = TxnConfig(max_timeout_ms=config.transaction_max_timeout_ms,
                                       id_expiration_ms=config.transactional_id_expiration_ms)

    def _new_state(self) -> TransactionCoordinatorState:
        return TransactionCoordinatorState(self._state_config)

    def _new_led(
        self, replica: PartitionReplica, epoch: int, start: int
    ) -> Led[TransactionCoordinatorState]:
        return _TxnLed(replica, epoch, start, self._new_state())

    def _describe(self, led: Led[TransactionCoordinatorState]) -> str:
        return f"{len(led.state.txns)} transactional ids"

    def _after_apply(self, led: Led[TransactionCoordinatorState]) -> None:
        """Start writing the markers of every prepared transaction not being marked yet."""
        assert isinstance(led, _TxnLed)
        for work in led.state.prepared():
            if work.transactional_id not in led.marking:
                task = asyncio.get_running_loop().create_task(self._mark(led, work))
                led.marking[work.transactional_id] = task

    def _dropped(self, led: Led[TransactionCoordinatorState]) -> None:
        assert isinstance(led, _TxnLed)
        for task in led.marking.values():
            task.cancel()

    def close(self) -> None:
        super().close()
        for led in list(self._led.values()):
            self._dropped(led)

    # ---- markers ---------------------------------------------------------------------------------

    async def _mark(self, led: _TxnLed, work: MarkerWork) -> None:
        """Markers on every partition of `work` until each is written, then Complete, with
        the Ongoing record of the AddPartitionsToTxn requests held meanwhile in the same
        batch."""
        txn_id = work.transactional_id
        pending = set(work.partitions)
        taken: list[_Held] = []
        try:
            if self.config.test_txn_markers_delay_ms:
                await asyncio.sleep(self.config.test_txn_markers_delay_ms / 1000)
            while pending and self._still_leads(led):
                codes = await self._send_markers(self._marker(led, work, pending),
                                                 _MARKERS_ROUND_S)
                fenced = {tp: c for tp, c in codes.items() if c in _FENCED}
                if fenced:
                    log.warning("%s: markers of %r refused (%s): a newer coordinator finishes it",
                                led.tp, txn_id, fenced)
                    return
                topics = self.topic.controller.image.topics
                pending = {
                    tp for tp in pending
                    if codes.get(tp, -1) not in _DONE and tp.topic in topics  # deleted: done
                }
                if pending:
                    await asyncio.sleep(_MARKERS_BACKOFF_S)
            if not self._still_leads(led):
                return
            waiting = list(led.held.get(txn_id, ()))
            decision = led.state.plan_complete(work, wall_clock_ms(),
                                               [h.request for h in waiting])
            if decision is not None:
                await self._decide(led, txn_id, decision)
                if decision.then is not None:
                    producer = (work.producer_id, work.producer_epoch)
                    taken = [h for h in waiting
                             if h.request.producer == producer and h.request.partitions]
        except errors.TidelogError as exc:  # the Complete append failed: retried on next apply
            log.info("%s: %r not completed yet: %s", led.tp, txn_id, exc)
        finally:
            if led.marking.get(txn_id) is asyncio.current_task():
                del led.marking[txn_id]
                # Every request held meanwhile, also those that came while the batch was
                # being appended, is let go.
                for held in led.held.pop(txn_id, ()):
                    if not held.taken.done():
                        held.taken.set_result(held in taken)

    @staticmethod
    def _marker(
        led: Led[TransactionCoordinatorState], work: MarkerWork, tps: Iterable[TopicPartition]
    ) -> rpb.WritableTxnMarker:
        marker = rpb.WritableTxnMarker(
            producer_id=work.producer_id, producer_epoch=work.producer_epoch,
            transaction_result=work.commit, coordinator_epoch=led.epoch,
        )
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(tps):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        for name, indexes in by_topic.items():
            marker.topics.add(name=name, partition_indexes=indexes)
        return marker

    # ---- requests --------------------------------------------------------------------------------

    async def _decide(
        self, led: Led[TransactionCoordinatorState], txn_id: str, decision: Decision
    ) -> Decision:
        """Append the decision's records (if any, as one batch) and return it once committed;
        a failed append leaves the id as it was and raises the coordinator's error."""
        if decision.records:
            try:
                await self._append(led, decision.records)
            except errors.TidelogError:
                led.state.abandon(txn_id)
                raise
        return decision

    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, producer_id: int, producer_epoch: int,
        new_producer_id: ProducerIdSource,
    ) -> tuple[int, int]:
        """The id's producer id and new epoch; raises the answer's error. A new id, when one
        is needed, comes from `new_producer_id` (the controller's blocks)."""
        led = self._coordinating(txn_id)
        decision = led.state.init_producer_id(
            txn_id, timeout_ms, producer_id, producer_epoch, wall_clock_ms()
        )
        if decision.needs_producer_id:
            fresh = await new_producer_id(self._timeout_s)
            led = self._coordinating(txn_id)
            decision = led.state.init_producer_id(
                txn_id, timeout_ms, producer_id, producer_epoch, wall_clock_ms(), fresh
            )
        decision = await self._decide(led, txn_id, decision)
        if decision.error is not None:
            raise decision.error
        assert decision.producer is not None
        return decision.producer

    async def add_partitions(
        self, txn_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> None:
        """AddPartitionsToTxn; raises the error every partition is answered with."""
        request = AddPartitions(producer_id, producer_epoch, tuple(partitions))
        if await self._held_for_markers(txn_id, request):
            return
        await self._after_adding(txn_id)
        led = self._coordinating(txn_id)
        assert isinstance(led, _TxnLed)
        decision = led.state.add_partitions(
            txn_id, producer_id, producer_epoch, request.partitions, wall_clock_ms()
        )
        if decision.record is None:
            await self._answer(led, txn_id, decision)
            return
        done = led.adding[txn_id] = asyncio.get_running_loop().create_future()
        try:
            await self._answer(led, txn_id, decision)
        finally:
            if led.adding.get(txn_id) is done:
                del led.adding[txn_id]
            done.set_result(None)

    async def _after_adding(self, txn_id: str) -> None:
        """Wait (up to the commit timeout) while an AddPartitionsToTxn of the id has its
        Ongoing record appended, instead of refusing this one with CONCURRENT_TRANSACTIONS: a
        producer asks for the partitions its sends reach after its first request in a second
        one, sent without waiting for the first (whose answer may be held by the previous
        markers), and a refusal would cost it the client's 20 ms retry. Then it is decided as
        usual, after the first is applied (past the timeout: refused as before)."""
        led = self._coordinating(txn_id)
        assert isinstance(led, _TxnLed)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._timeout_s):
                while (adding := led.adding.get(txn_id)) is not None:
                    await asyncio.shield(adding)

    async def _held_for_markers(self, txn_id: str, request: AddPartitions) -> bool:
        """While the markers of the id's previous transaction are being written, hold the
        request (up to the commit timeout) instead of refusing it with CONCURRENT_TRANSACTIONS
        (whose client retries, 20 ms each, came several times a transaction). Those held of
        the id's producer go into the Complete record's batch together (`plan_complete`):
        True once that batch is committed, the request answered. False: it goes the usual way
        now (no markers were being written, a request that came while the batch was being
        appended, the producer differs, the markers task stopped, or the timeout passed, when
        it is refused as before)."""
        led = self._coordinating(txn_id)
        assert isinstance(led, _TxnLed)
        if txn_id not in led.marking:
            return False
        held = _Held(request, asyncio.get_running_loop().create_future())
        led.held.setdefault(txn_id, []).append(held)
        try:
            async with asyncio.timeout(self._timeout_s):
                return await asyncio.shield(held.taken)
        except TimeoutError:
            return False

    def verify_partitions(
        self, txn_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> frozenset[TopicPartition]:
        """Which of `partitions` are in the ongoing transaction of the producer (a partition
        leader's question before a transaction's first batch, `txn_verification`); raises
        NOT_COORDINATOR and the like when this node does not serve the id, and the state's
        errors (`TransactionCoordinatorState.verify_partitions`)."""
        led = self._coordinating(txn_id)
        verified = led.state.verify_partitions(txn_id, producer_id, producer_epoch, partitions)
        if isinstance(verified, errors.TidelogError):
            raise verified
        return verified

    def listing(self) -> list[tuple[str, TxnMetadata]]:
        """Every transactional id of the partitions this node leads and has loaded, with its
        state (ListTransactions)."""
        return [(txn_id, meta) for led in self._loaded_leds()
                for txn_id, meta in led.state.txns.items()]

    def describe(self, txn_id: str) -> TxnMetadata:
        """The id's state (DescribeTransactions); raises NOT_COORDINATOR and the like when
        this node does not serve it, TRANSACTIONAL_ID_NOT_FOUND when it has no state. Before
        the transaction state topic exists no id has any, so that is answered at once (as
        Kafka's coordinator answers once its FindCoordinator created the topic), not
        COORDINATOR_NOT_AVAILABLE until the caller's deadline."""
        if self.topic.partition_of(txn_id) is None:
            raise errors.TransactionalIdNotFoundError(
                f"no transactional id {txn_id!r}: no transaction has begun in this cluster"
            )
        meta = self._coordinating(txn_id).state.txns.get(txn_id)
        if meta is None:
            raise errors.TransactionalIdNotFoundError(f"no transactional id {txn_id!r}")
        return meta

    async def add_offsets(
        self, txn_id: str, producer_id: int, producer_epoch: int, group: str
    ) -> None:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction."""
        tp = self.offsets_topic.partition_of(group)
        if tp is None:
            raise errors.CoordinatorNotAvailableError(
                f"the {self.offsets_topic.name} topic does not exist yet (FindCoordinator of "
                f"the group creates it)"
            )
        await self.add_partitions(txn_id, producer_id, producer_epoch, [tp])

    async def end_txn(
        self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """EndTxn: answered once PrepareCommit/PrepareAbort is durable (the markers follow)."""
        led = self._coordinating(txn_id)
        decision = led.state.end_txn(txn_id, producer_id, producer_epoch, commit,
                                     wall_clock_ms())
        if self.config.test_txn_markers_before_prepare and decision.record is not None:
            meta = led.state.txns[txn_id]  # Ongoing: its Prepare is only pending
            work = MarkerWork(txn_id, meta.producer_id, meta.producer_epoch, commit,
                              meta.partitions)
            await self._send_markers(self._marker(led, work, work.partitions), _MARKERS_ROUND_S)
        await self._answer(led, txn_id, decision)

    async def _answer(
        self, led: Led[TransactionCoordinatorState], txn_id: str, decision: Decision
    ) -> None:
        decision = await self._decide(led, txn_id, decision)
        if decision.error is not None:
            raise decision.error

    # ---- expiration ------------------------------------------------------------------------------

    async def expiration_loop(self) -> None:
        """Every transaction.abort.timed.out.transaction.cleanup.interval.ms: transactions
        past their timeout fenced and aborted, on each partition this node leads."""
        interval_s = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self.abort_expired()

    async def abort_expired(self) -> None:
        now_ms = wall_clock_ms()
        fences = [
            (led, txn_id, decision) for led in self._loaded_leds()
            for txn_id, decision in led.state.plan_expiration(now_ms)
        ]
        for _, txn_id, _ in fences:
            log.info("transaction of %r timed out: its producer is fenced and it is aborted",
                     txn_id)
        await self._decide_all(fences, "the timed-out transaction of %r is not aborted yet: %s")

    async def id_expiration_loop(self) -> None:
        """Every transaction.remove.expired.transaction.cleanup.interval.ms: transactional ids
        idle for transactional.id.expiration.ms removed, on each partition this node leads."""
        interval_s = self.config.transaction_remove_expired_transaction_cleanup_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self.remove_expired_ids()

    async def remove_expired_ids(self) -> None:
        now_ms = wall_clock_ms()
        tombstones = [
            (led, txn_id, decision) for led in self._loaded_leds()
            for txn_id, decision in led.state.plan_id_expiration(now_ms)
        ]
        if tombstones:
            log.info("%d idle transactional ids expired", len(tombstones))
        await self._decide_all(tombstones, "expired transactional id %r is not removed yet: %s")

    async def _decide_all(
        self, decisions: list[tuple[Led[TransactionCoordinatorState], str, Decision]],
        failure: str,
    ) -> None:
        """Append every decision's record at once (the ready loop batches them); one that
        fails leaves its id as it was, for the next round, and is logged with `failure`."""
        results = await asyncio.gather(
            *(self._decide(led, txn_id, decision) for led, txn_id, decision in decisions),
            return_exceptions=True,
        )
        for (_, txn_id, _), result in zip(decisions, results, strict=True):
            if isinstance(result, errors.TidelogError):
                log.warning(failure, txn_id, result)
