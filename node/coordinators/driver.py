"""The node side of a coordinator: drives the deterministic state machine of each partition of
an internal topic that this node leads (`__consumer_offsets`: the group coordinator;
`__transaction_state`: the transaction coordinator) over that partition's Raft log.

As `controller_driver` does for the metadata log, this module holds the I/O and the waiting;
the state machine holds the rules. Per partition, for one leader epoch:

* Loading. When the node becomes the partition's leader, the log is replayed into a new state,
  from the log start to the high watermark, on the event loop in slices of a few milliseconds
  that yield between them; requests for its keys answer COORDINATOR_LOAD_IN_PROGRESS (14)
  meanwhile. Not on the disk thread: the replay is Python holding the GIL, and there it held up
  every fsync of the node (its one disk thread) and starved the loop through the GIL for as long
  as it ran (264,000 records: 3-6 s, in which the node's other partitions lost elections).
  Loading ends once the state has applied everything below the start of this leader's epoch
  (waiting for the high watermark to get there): only then does it hold every change an
  earlier leader acknowledged. The records the state's `finish_loading` returns are then the
  first this leader appends.
* Leading. Committed records are applied as the high watermark moves (the `on_published` hook,
  as the controller applies its log). A request's records are appended with acks=all
  semantics and answered only once committed and applied, so the state changes only through
  the log: a failed append changes nothing. Records arriving while a round of the Ready loop is
  on disk wait for the next round and go to the log as one batch (group commit: one replicated
  write per round, however many callers), each set whole inside it.
* Losing leadership (or the replica going offline) drops the state: requests answer
  NOT_COORDINATOR (16), and what waited on it fails.

Subclasses add the requests and react to the state (`_after_apply`, `_dropped`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.records import RecordInput, RecordSource, build_batch_of, read_header
from tidelog.types import TopicPartition

#: How much of the log one read of loading takes (Kafka's offsets.load.buffer.size is 5 MiB;
#: less here, as the read is on the event loop).
_LOAD_CHUNK_BYTES = 1024 * 1024
#: How long loading runs before it lets the event loop serve others (Raft ticks and heartbeats,
#: other partitions' requests). A batch is applied whole, so a slice can run over by one batch.
_LOAD_SLICE_S = 0.005

log = logging.getLogger("tidelog.node")


class CoordinatorState(Protocol):
    """What the driver needs of a coordinator's state machine."""

    applied_offset: int

    def apply(self, data: bytes | memoryview) -> None: ...

    def finish_loading(self, now_ms: int) -> list[RecordInput]: ...


S = TypeVar("S", bound=CoordinatorState)


@dataclass
class Append:
    """Records to append as one set (all inside one batch), and who waits for them."""

    #: `RecordInput`s, or a set that encodes itself into the batch (a planned commit set).
    records: list[RecordInput] | RecordSource
    #: Set once proposed: (the batch's acks=all waiter, its last offset); None when nobody waits.
    proposed: asyncio.Future[tuple[asyncio.Future[None], int]] | None
    #: What the state machine planned the records from, when it can apply that rather than
    #: decode them (`CoordinatorDriver._proposed`).
    planned: Any = None
    #: (producer id, epoch) of a set that is a transactional batch of that producer, alone in
    #: its batch (TxnOffsetCommit).
    producer: tuple[int, int] | None = None


@dataclass(eq=False)
class Led(Generic[S]):
    """One partition this node leads, for one leader epoch."""

    replica: PartitionReplica
    epoch: int
    #: Offsets below it were written by earlier leaders: loading ends once all are applied.
    epoch_start: int
    state: S
    #: The sliced part of loading is done: committed records are applied as they commit.
    replayed: bool = False
    loading: bool = True
    dropped: bool = False
    pending: list[Append] = field(default_factory=list)
    #: Set when the high watermark may have moved or the state was dropped: loading waits on it
    #: for the records of earlier leaders to commit.
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    applied_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    loaded_in_s: float = 0.0

    @property
    def tp(self) -> TopicPartition:
        return self.replica.tp


class CoordinatorDriver(Generic[S]):
    """Leadership, loading, applying and appending for the partitions of `topic`."""

    #: What the coordinated keys are called in answers ("group", "transactional id").
    key_name = "key"

    def __init__(
        self, config: NodeConfig, replicas: ReplicaSet, topic: CoordinatorTopic,
        timeout_ms: int,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.replicas = replicas
        self.topic = topic
        self._timeout_ms = timeout_ms
        self._led: dict[TopicPartition, Led[S]] = {}
        self._loads: set[asyncio.Task[None]] = set()
        #: Partitions whose log failed to load, with the leader epoch that tried: not loaded
        #: again in that epoch (a damaged batch would fail every try).
        self._unloadable: dict[TopicPartition, int] = {}
        replicas.on_published_topic(topic.name, self._published)
        replicas.before_round(self._append_pending)

    # ---- what subclasses define ---------------------------------------------------------------

    def _new_state(self) -> S:
        raise NotImplementedError

    def _new_led(self, replica: PartitionReplica, epoch: int, start: int) -> Led[S]:
        return Led(replica, epoch, start, self._new_state())

    def _after_apply(self, led: Led[S]) -> None:
        """Committed records were applied (after loading)."""

    def _dropped(self, led: Led[S]) -> None:
        """This node no longer leads the partition in that epoch."""

    def _apply(self, led: Led[S], data: bytes | memoryview) -> None:
        """Committed batches into the state (after loading)."""
        led.state.apply(data)

    def _proposed(self, led: Led[S], base_offset: int, count: int, chunk: list[Append]) -> None:
        """`chunk` went to the log as one batch of `count` records at `base_offset`."""

    def close(self) -> None:
        """The node is stopping: loads under way end (their replicas close)."""
        for task in list(self._loads):
            task.cancel()

    @property
    def _timeout_s(self) -> float:
        return self._timeout_ms / 1000

    # ---- leadership, loading, applying --------------------------------------------------------

    def _published(self, replica: PartitionReplica) -> None:
        """A Ready of one of the topic's partitions was published: follow its leadership,
        then apply what committed."""
        led = self._led.get(replica.tp)
        if led is not None and not self._still_leads(led):
            self._drop(led, "leadership moved")
            led = None
        if led is None:
            start = replica.leader_epoch_start_offset
            failed_epoch = self._unloadable.get(replica.tp)
            if replica.is_leader and start is not None and failed_epoch != replica.leader_epoch:
                led = self._led[replica.tp] = self._new_led(
                    replica, replica.leader_epoch, start
                )
                task = asyncio.get_running_loop().create_task(self._load(led))
                self._loads.add(task)
                task.add_done_callback(self._loads.discard)
            return
        led.progress.set()
        self._apply_committed(led)

    def _still_leads(self, led: Led[S]) -> bool:
        replica = led.replica
        return (
            not led.dropped
            and self.replicas.partitions.get(led.tp) is replica
            and replica.is_leader
            and replica.leader_epoch == led.epoch
            and replica.leader_epoch_start_offset is not None
        )

    def _drop(self, led: Led[S], why: str) -> None:
        if self._led.get(led.tp) is led:
            del self._led[led.tp]
        already = led.dropped
        led.dropped = True
        led.progress.set()
        exc = errors.NotCoordinatorError(f"node {self.node_id} no longer leads {led.tp}: {why}")
        for append in led.pending:
            if append.proposed is not None and not append.proposed.done():
                append.proposed.set_exception(exc)
        led.pending.clear()
        for _, waiter in led.applied_waiters:
            if not waiter.done():
                waiter.set_exception(exc)
        led.applied_waiters.clear()
        if not already:
            self._dropped(led)

    async def _load(self, led: Led[S]) -> None:
        started = time.monotonic()
        try:
            await _replay(led)
        except (OSError, ValueError, errors.TidelogError) as exc:  # a closed or failing log
            log.error("%s: not loaded (%s); this node does not coordinate its keys in epoch "
                      "%d", led.tp, exc, led.epoch)
            self._unloadable[led.tp] = led.epoch
            self._drop(led, f"loading failed: {exc}")
            return
        led.loaded_in_s = time.monotonic() - started
        if self._still_leads(led):
            led.replayed = True
            self._apply_committed(led)
        elif not led.dropped:
            self._drop(led, "leadership moved while loading")

    def _apply_committed(self, led: Led[S]) -> None:
        """Apply the records below the high watermark; finish loading once everything earlier
        leaders wrote is in; wake who waited for an offset to be applied."""
        if not led.replayed:
            return
        state = led.state
        replica = led.replica
        hw = replica.high_watermark
        while (start := max(state.applied_offset + 1, replica.log.log_start_offset)) < hw:
            before = state.applied_offset
            self._apply(led, replica.log.read(start, _LOAD_CHUNK_BYTES, upper_bound=hw))
            if state.applied_offset == before:
                log.error("%s: the batch at offset %d does not parse; applying stops here",
                          led.tp, start)
                break
        if led.loading and state.applied_offset >= led.epoch_start - 1:
            self._finish_loading(led)
        if led.applied_waiters:
            done = [(o, f) for o, f in led.applied_waiters if o <= state.applied_offset]
            for item in done:
                led.applied_waiters.remove(item)
                if not item[1].done():
                    item[1].set_result(None)
        if not led.loading:
            self._after_apply(led)

    def _finish_loading(self, led: Led[S]) -> None:
        repairs = led.state.finish_loading(wall_clock_ms())
        led.loading = False
        if repairs:
            led.pending.insert(0, Append(repairs, None))
            self.replicas.wake_touched()
        log.info("%s: loaded in %.2fs (%s, up to offset %d)%s", led.tp, led.loaded_in_s,
                 self._describe(led), led.state.applied_offset,
                 f"; {len(repairs)} records to write again" if repairs else "")

    def _describe(self, led: Led[S]) -> str:
        """What the loaded state holds, for the log line."""
        return "loaded"

    async def _applied(self, led: Led[S], offset: int) -> None:
        """Wait until the state has applied the record at `offset`."""
        if offset <= led.state.applied_offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        led.applied_waiters.append((offset, waiter))
        await waiter

    # ---- appending (group commit) ---------------------------------------------------------------

    def _append_pending(self) -> None:
        """Before each round of the Ready loop: every set waiting goes to its partition's log,
        as few batches as fit max.message.bytes (one, unless they are large), each set whole
        inside one batch."""
        for led in list(self._led.values()):
            if not led.pending:
                continue
            appends, led.pending = led.pending, []
            if not self._still_leads(led):
                led.pending = appends
                self._drop(led, "leadership moved")
                continue
            limit = led.replica.log.config.max_message_bytes
            plain = [append for append in appends if append.producer is None]
            for append in appends:
                if append.producer is not None:
                    pid, epoch = append.producer
                    batch, count = build_batch_of([append.records], producer_id=pid,
                                                  producer_epoch=epoch, transactional=True)
                    self._propose(led, batch, count, [append])
            if plain:
                for batch, count, chunk in _batches(plain, limit):
                    self._propose(led, batch, count, chunk)

    def _propose(self, led: Led[S], batch: bytes, count: int, chunk: list[Append]) -> None:
        """Propose one batch of `count` records holding the sets of `chunk`, and tell them."""
        try:
            produced = led.replica.propose(batch, acks=-1, from_client=False)
        except errors.TidelogError as exc:
            _settle(chunk, exc)
            return
        assert produced.done is not None
        result = (produced.done, produced.base_offset + count - 1)
        self._proposed(led, produced.base_offset, count, chunk)
        for append in chunk:
            if append.proposed is not None and not append.proposed.done():
                append.proposed.set_result(result)

    def _append_unwaited(self, led: Led[S], records: list[RecordInput]) -> None:
        """Append `records` as one set with the next round; nobody waits for them."""
        led.pending.append(Append(records, None))
        self.replicas.wake_touched()

    async def _append(
        self, led: Led[S], records: list[RecordInput] | RecordSource, *, planned: Any = None,
        producer: tuple[int, int] | None = None, ack_before_commit: bool = False,
    ) -> None:
        """Append `records` as one set with the next round, and return once they are committed
        and applied. Raises the append's error as the coordinators map it (kafka-mapping
        §7.5, §8.1). `planned`: what the state planned them from (`_proposed`). With
        `producer` (id, epoch), the set is a transactional batch of that producer.
        `ack_before_commit` is a planted bug of the chaos suite (tests only)."""
        loop = asyncio.get_running_loop()
        proposed: asyncio.Future[tuple[asyncio.Future[None], int]] = loop.create_future()
        led.pending.append(Append(records, proposed, planned, producer))
        self.replicas.wake_touched()
        try:
            async with asyncio.timeout(self._timeout_s):
                committed, last_offset = await proposed
                if ack_before_commit:
                    return
                await asyncio.shield(committed)
                await self._applied(led, last_offset)
        except TimeoutError:
            raise coordinator_error(errors.RequestTimedOutError(
                f"not committed within {self._timeout_s:g}s"
            )) from None
        except errors.TidelogError as exc:
            raise coordinator_error(exc) from None

    # ---- requests --------------------------------------------------------------------------------

    def _coordinating(self, key: str) -> Led[S]:
        """The led partition of `key`, loaded; raises what the request answers otherwise."""
        tp = self.topic.partition_of(key)
        if tp is None:
            raise errors.CoordinatorNotAvailableError(
                f"the {self.topic.name} topic does not exist yet"
            )
        led = self._led.get(tp)
        if led is not None and not self._still_leads(led):
            self._drop(led, "leadership moved")
            led = None
        if led is None:
            raise errors.NotCoordinatorError(
                f"node {self.node_id} is not the coordinator of {self.key_name} {key!r} ({tp})"
            )
        if led.loading:
            raise errors.CoordinatorLoadInProgressError(f"{tp} is loading on node {self.node_id}")
        return led

    def _loaded_leds(self) -> Iterator[Led[S]]:
        """The partitions this node leads and has loaded."""
        for led in list(self._led.values()):
            if not self._still_leads(led):
                self._drop(led, "leadership moved")
            elif not led.loading:
                yield led


def coordinator_error(exc: errors.TidelogError) -> errors.TidelogError:
    """An append's (or a read index's) error as the coordinator answers it, kafka-mapping
    §7.5 (the new coordinator's `CoordinatorOperationExceptionHelper`) and §8.1."""
    if isinstance(exc, errors.UnknownTopicOrPartitionError | errors.NotEnoughReplicasError
                  | errors.NotEnoughReplicasAfterAppendError | errors.RequestTimedOutError):
        return errors.CoordinatorNotAvailableError(str(exc))
    if isinstance(exc, errors.NotLeaderOrFollowerError | errors.KafkaStorageError):
        return errors.NotCoordinatorError(str(exc))
    if isinstance(exc, errors.MessageTooLargeError | errors.RecordListTooLargeError
                  | errors.InvalidFetchSizeError):
        return errors.UnknownServerError(f"the records are too large to append: {exc}")
    if isinstance(exc, errors.NetworkExceptionError):
        return errors.CoordinatorLoadInProgressError(str(exc))
    return exc


async def _replay(led: Led[S]) -> None:
    """The partition's log into the state up to the start of this leader's epoch (at least),
    a slice of about `_LOAD_SLICE_S` at a time, yielding to the event loop between slices, and
    waiting for the high watermark to pass what earlier leaders wrote; stops early once the
    replica no longer leads (`Led.dropped`). Raises CorruptMessageError when a chunk of the
    log applies nothing (a batch that does not parse would stop the load there for good)."""
    replica = led.replica
    state = led.state
    slice_end = time.monotonic() + _LOAD_SLICE_S
    while not led.dropped:
        led.progress.clear()
        hw = replica.high_watermark
        start = max(state.applied_offset + 1, replica.log.log_start_offset)
        if start >= hw:
            if state.applied_offset >= led.epoch_start - 1:
                return
            await led.progress.wait()
            slice_end = time.monotonic() + _LOAD_SLICE_S
            continue
        before = state.applied_offset
        data = memoryview(replica.log.read(start, _LOAD_CHUNK_BYTES, upper_bound=hw))
        pos = 0
        while pos < len(data):
            try:
                end = pos + read_header(data, pos).size
            except errors.CorruptMessageError:
                end = len(data)  # `apply` logs why and applies nothing of it
            state.apply(data[pos:end])
            pos = end
            if time.monotonic() >= slice_end:
                await asyncio.sleep(0)
                if led.dropped:
                    return
                slice_end = time.monotonic() + _LOAD_SLICE_S
        if state.applied_offset == before:
            raise errors.CorruptMessageError(f"the batch at offset {start} does not parse")


def _settle(appends: Iterable[Append], exc: errors.TidelogError) -> None:
    for append in appends:
        if append.proposed is not None and not append.proposed.done():
            append.proposed.set_exception(exc)
        elif append.proposed is None:
            log.warning("coordinator records not appended: %s", exc)


def _batches(appends: list[Append], limit: int) -> Iterator[tuple[bytes, int, list[Append]]]:
    """The sets as batches of at most `limit` bytes where they fit (a set alone over it goes
    alone, and its append fails with the log's error): (batch, records in it, its sets).
    Each set is encoded straight into the batch (`build_batch_of`); sets split off are encoded
    again, at their new offset deltas, which happens only past max.message.bytes."""
    batch, count = build_batch_of([append.records for append in appends])
    if len(batch) <= limit or len(appends) == 1:
        yield batch, count, appends
        return
    half = len(appends) // 2
    yield from _batches(appends[:half], limit)
    yield from _batches(appends[half:], limit)
