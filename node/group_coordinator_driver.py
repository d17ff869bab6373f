"""The node side of the group coordinator: drives the state machine of each `__consumer_offsets`
partition this node leads (`coordinator.group_coordinator`) over that partition's Raft log.

As `controller_driver` does for the metadata log, this module holds the I/O and the waiting;
the state machine holds the rules. Per offsets partition, for one leader epoch:

* Loading. When the node becomes the partition's leader, the log is replayed into a new state,
  from the log start to the high watermark, on the event loop in slices of a few milliseconds
  that yield between them; requests for its groups answer COORDINATOR_LOAD_IN_PROGRESS (14)
  meanwhile. Not on the disk thread: the replay is Python holding the GIL, and there it held up
  every fsync of the node (its one disk thread) and starved the loop through the GIL for as long
  as it ran (264,000 records: 3-6 s, in which the node's other partitions lost elections).
  Loading ends once the state has applied everything below the start of this leader's epoch
  (waiting for the high watermark to get there): only then does it hold every commit an
  earlier leader acknowledged. The records `finish_loading` returns (seed 004: the previous
  values of keys whose commit set was found incomplete) are then the first this leader appends.
* Leading. Committed records are applied as the high watermark moves (the `on_published` hook,
  as the controller applies its log). An OffsetCommit's records are appended with acks=all
  semantics and answered only once committed and applied, so the table changes only through
  the log: a failed append changes nothing. Commits arriving while a round of the Ready loop is
  on disk wait for the next round and go to the log as one batch (group commit: one replicated
  write per round, however many committers), each commit's set whole inside it. OffsetFetch
  answers from the state once a read index confirmed this node still leads and the state has
  applied up to it: a deposed leader never answers from a stale table.
* Losing leadership (or the replica going offline) drops the state: requests answer
  NOT_COORDINATOR (16), and what waited on it fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.consumer_groups import ConsumerGroupConfig
from tidelog.coordinator.controller import CONSUMER_OFFSETS_TOPIC
from tidelog.coordinator.group_coordinator import (
    CommitSet,
    GroupCoordinatorState,
    OffsetsConfig,
    PartitionOffsets,
    PlannedBatch,
)
from tidelog.coordinator.offset_table import CommittedOffset
from tidelog.node.config import NodeConfig
from tidelog.node.offsets_topic import OffsetsTopic
from tidelog.node.partition import PartitionReplica
from tidelog.node.replicas import ReplicaSet
from tidelog.records import RecordInput, build_batch, read_header
from tidelog.types import TopicPartition

#: How much of the log one read of loading takes (Kafka's offsets.load.buffer.size is 5 MiB;
#: less here, as the read is on the event loop).
_LOAD_CHUNK_BYTES = 1024 * 1024
#: How long loading runs before it lets the event loop serve others (Raft ticks and heartbeats,
#: other partitions' requests). A batch is applied whole, so a slice can run over by one batch.
_LOAD_SLICE_S = 0.005
#: Groups one step of expiration looks at before it lets the event loop serve others (a few
#: milliseconds of Python).
_EXPIRE_GROUPS_PER_STEP = 5000

log = logging.getLogger("tidelog.node")


@dataclass
class _Append:
    """Records to append as one set (all inside one batch), and who waits for them."""

    records: list[RecordInput]
    #: Set once proposed: (the batch's acks=all waiter, its last offset); None when nobody waits.
    proposed: asyncio.Future[tuple[asyncio.Future[None], int]] | None
    #: The set as the table takes it, when the records are a planned commit: applied from it,
    #: not decoded, once committed.
    commit_set: CommitSet | None = None
    #: (producer id, epoch) of a TxnOffsetCommit: the set is a transactional batch of its own.
    producer: tuple[int, int] | None = None


@dataclass
class _Led:
    """One offsets partition this node leads, for one leader epoch."""

    replica: PartitionReplica
    epoch: int
    #: Offsets below it were written by earlier leaders: loading ends once all are applied.
    epoch_start: int
    state: GroupCoordinatorState
    #: The sliced part of loading is done: committed records are applied as they commit.
    replayed: bool = False
    loading: bool = True
    dropped: bool = False
    pending: list[_Append] = field(default_factory=list)
    #: Set when the high watermark may have moved or the state was dropped: loading waits on it
    #: for the records of earlier leaders to commit.
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    applied_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    #: The batches this leader appended from planned commit sets, by base offset, until applied.
    planned: dict[int, PlannedBatch] = field(default_factory=dict)
    #: Per group, the commits appended and not yet answered (OffsetFetch's require_stable).
    unstable: dict[str, set[asyncio.Future[None]]] = field(default_factory=dict)
    loaded_in_s: float = 0.0

    @property
    def tp(self) -> TopicPartition:
        return self.replica.tp


class GroupCoordinatorDriver:
    def __init__(
        self, config: NodeConfig, replicas: ReplicaSet, offsets_topic: OffsetsTopic
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.replicas = replicas
        self.offsets_topic = offsets_topic
        self._state_config = OffsetsConfig(
            metadata_max_bytes=config.offset_metadata_max_bytes,
            retention_ms=config.offsets_retention_minutes * 60_000,
        )
        self.groups_config = ConsumerGroupConfig(
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size,
            assignors=config.group_consumer_assignors,
        )
        self._led: dict[TopicPartition, _Led] = {}
        self._loads: set[asyncio.Task[None]] = set()
        #: Partitions whose log failed to load, with the leader epoch that tried: not loaded
        #: again in that epoch (a damaged batch would fail every try).
        self._unloadable: dict[TopicPartition, int] = {}
        replicas.on_published_topic(CONSUMER_OFFSETS_TOPIC, self._published)
        replicas.before_round(self._append_pending)

    def close(self) -> None:
        """The node is stopping: loads under way end (their replicas close)."""
        for task in list(self._loads):
            task.cancel()

    @property
    def _timeout_s(self) -> float:
        return self.config.offsets_commit_timeout_ms / 1000

    # ---- leadership, loading, applying --------------------------------------------------------

    def _published(self, replica: PartitionReplica) -> None:
        """A Ready of an offsets partition was published: follow its leadership, then apply
        what committed."""
        led = self._led.get(replica.tp)
        if led is not None and not self._still_leads(led):
            self._drop(led, "leadership moved")
            led = None
        if led is None:
            start = replica.leader_epoch_start_offset
            failed_epoch = self._unloadable.get(replica.tp)
            if replica.is_leader and start is not None and failed_epoch != replica.leader_epoch:
                led = self._led[replica.tp] = _Led(
                    replica, replica.leader_epoch, start,
                    GroupCoordinatorState(self._state_config, self.groups_config),
                )
                task = asyncio.get_running_loop().create_task(self._load(led))
                self._loads.add(task)
                task.add_done_callback(self._loads.discard)
            return
        led.progress.set()
        self._apply_committed(led)

    def _still_leads(self, led: _Led) -> bool:
        replica = led.replica
        return (
            not led.dropped
            and self.replicas.partitions.get(led.tp) is replica
            and replica.is_leader
            and replica.leader_epoch == led.epoch
            and replica.leader_epoch_start_offset is not None
        )

    def _drop(self, led: _Led, why: str) -> None:
        if self._led.get(led.tp) is led:
            del self._led[led.tp]
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

    async def _load(self, led: _Led) -> None:
        started = time.monotonic()
        try:
            await _replay(led)
        except (OSError, ValueError, errors.TidelogError) as exc:  # a closed or failing log
            log.error("%s: not loaded (%s); this node does not coordinate its groups in epoch "
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

    def _apply_committed(self, led: _Led) -> None:
        """Apply the records below the high watermark; finish loading once everything earlier
        leaders wrote is in; wake who waited for an offset to be applied."""
        if not led.replayed:
            return
        state = led.state
        replica = led.replica
        hw = replica.high_watermark
        while (start := max(state.applied_offset + 1, replica.log.log_start_offset)) < hw:
            before = state.applied_offset
            state.apply(replica.log.read(start, _LOAD_CHUNK_BYTES, upper_bound=hw), led.planned)
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

    def _finish_loading(self, led: _Led) -> None:
        repairs = led.state.finish_loading(wall_clock_ms())
        led.loading = False
        if repairs:
            led.pending.insert(0, _Append(repairs, None))
            self.replicas.wake()
        log.info("%s: loaded in %.2fs (%d groups, up to offset %d)%s", led.tp, led.loaded_in_s,
                 len(led.state.groups()), led.state.applied_offset,
                 f"; {len(repairs)} records of incomplete commits to write again"
                 if repairs else "")

    async def _applied(self, led: _Led, offset: int) -> None:
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
                    batch = build_batch(append.records, producer_id=pid, producer_epoch=epoch,
                                        transactional=True)
                    _propose(led, batch, len(append.records), [append])
            if plain:
                for batch, count, chunk in _batches(plain, limit):
                    _propose(led, batch, count, chunk)

    async def _append(
        self, led: _Led, records: list[RecordInput], group: str | None,
        commit_set: CommitSet | None = None, producer: tuple[int, int] | None = None,
    ) -> None:
        """Append `records` as one set with the next round, and return once they are committed
        and applied. Raises the append's error as kafka-reference §7.5 maps it (new
        coordinator); `group` is marked unstable meanwhile. `commit_set`: the records as the
        table takes them (a planned commit), so that the state need not decode them. With
        `producer` (id, epoch), the set is a transactional batch of that producer
        (TxnOffsetCommit), which the table takes only with its COMMIT marker."""
        loop = asyncio.get_running_loop()
        proposed: asyncio.Future[tuple[asyncio.Future[None], int]] = loop.create_future()
        settled: asyncio.Future[None] = loop.create_future()
        unstable = led.unstable.setdefault(group, set()) if group is not None else set()
        unstable.add(settled)
        led.pending.append(_Append(records, proposed, commit_set, producer))
        self.replicas.wake()
        try:
            async with asyncio.timeout(self._timeout_s):
                committed, last_offset = await proposed
                if self.config.test_offsets_ack_before_commit:
                    return  # the planted bug of the chaos suite's self-test (tests only)
                await asyncio.shield(committed)
                await self._applied(led, last_offset)
        except TimeoutError:
            raise coordinator_error(errors.RequestTimedOutError(
                f"not committed within {self._timeout_s:g}s (offsets.commit.timeout.ms)"
            )) from None
        except errors.TidelogError as exc:
            raise coordinator_error(exc) from None
        finally:
            settled.set_result(None)
            unstable.discard(settled)
            if group is not None and not unstable:
                led.unstable.pop(group, None)

    # ---- requests --------------------------------------------------------------------------------

    def _coordinating(self, group: str) -> _Led:
        """The led partition of `group`, loaded; raises what the request answers otherwise."""
        tp = self.offsets_topic.partition_of(group)
        if tp is None:
            raise errors.CoordinatorNotAvailableError(
                f"the {CONSUMER_OFFSETS_TOPIC} topic does not exist yet"
            )
        led = self._led.get(tp)
        if led is not None and not self._still_leads(led):
            self._drop(led, "leadership moved")
            led = None
        if led is None:
            raise errors.NotCoordinatorError(
                f"node {self.node_id} is not the coordinator of group {group!r} ({tp})"
            )
        if led.loading:
            raise errors.CoordinatorLoadInProgressError(f"{tp} is loading on node {self.node_id}")
        return led

    async def commit(
        self, group: str, generation: int, offsets: Mapping[TopicPartition, PartitionOffsets],
        member_id: str = "",
    ) -> dict[TopicPartition, errors.TidelogError | None]:
        """Commit `offsets` for `group`, all or none (but the partitions the plan refuses);
        the error of each partition, None where committed. Raises a group-level error: for a
        consumer group, that of a member or epoch it does not know (`generation` is the
        member epoch then, as in Kafka's OffsetCommit v9)."""
        led = self._coordinating(group)
        _check_member(led, group, generation, member_id)
        return await self._commit(led, group, offsets, None)

    async def txn_commit(
        self, group: str, producer_id: int, producer_epoch: int, generation: int,
        offsets: Mapping[TopicPartition, PartitionOffsets], member_id: str = "",
    ) -> dict[TopicPartition, errors.TidelogError | None]:
        """TxnOffsetCommit (kafka-reference §8.5): `offsets` as a transactional batch of the
        producer, answered once committed; they stay pending (`txn_offsets`) until the
        transaction's marker lands on the partition. A member epoch the consumer group refuses
        is ILLEGAL_GENERATION here, as in Kafka; an epoch older than the producer's last on the
        partition is INVALID_PRODUCER_EPOCH."""
        led = self._coordinating(group)
        try:
            _check_member(led, group, generation, member_id)
        except errors.StaleMemberEpochError as exc:
            raise errors.IllegalGenerationError(str(exc)) from None
        return await self._commit(led, group, offsets, (producer_id, producer_epoch))

    async def _commit(
        self, led: _Led, group: str, offsets: Mapping[TopicPartition, PartitionOffsets],
        producer: tuple[int, int] | None,
    ) -> dict[TopicPartition, errors.TidelogError | None]:
        plan = led.state.plan_commit(group, offsets, wall_clock_ms())
        results: dict[TopicPartition, errors.TidelogError | None] = {
            tp: plan.refused.get(tp) for tp in offsets
        }
        if plan.records:
            try:
                await self._append(
                    led, plan.records, group, plan.commit_set if producer is None else None,
                    producer,
                )
            except errors.TidelogError as exc:
                return {tp: error or exc for tp, error in results.items()}
        return results

    def pending_txn_partitions(self, group: str) -> set[TopicPartition]:
        """The partitions `group` has TxnOffsetCommit offsets pending for (waiting for their
        transaction's marker): OffsetFetch with require_stable answers them
        UNSTABLE_OFFSET_COMMIT."""
        return self._coordinating(group).state.txn_offsets.partitions(group)

    async def fetch(
        self, group: str, partitions: Iterable[TopicPartition] | None, require_stable: bool
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """The committed offsets of `group` (None: none committed), as of a read index taken
        now: every commit acknowledged before this call is in the answer."""
        led = self._coordinating(group)
        try:
            async with asyncio.timeout(self._timeout_s):
                if require_stable and (unstable := led.unstable.get(group)):
                    await asyncio.wait(list(unstable))
                read = await self.replicas.read_index(led.tp, self._timeout_s)
                await self._applied(led, read - 1)
        except TimeoutError:
            raise coordinator_error(errors.RequestTimedOutError(
                f"no read index within {self._timeout_s:g}s"
            )) from None
        except errors.TidelogError as exc:
            raise coordinator_error(exc) from None
        if not self._still_leads(led):
            raise errors.NotCoordinatorError(f"node {self.node_id} no longer leads {led.tp}")
        return led.state.fetch(group, partitions)

    async def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        """Tombstones for the committed offsets of `partitions`; GROUP_ID_NOT_FOUND (69) for a
        group with none at all."""
        led = self._coordinating(group)
        if not led.state.fetch(group, None):
            raise errors.GroupIdNotFoundError(f"group {group!r} has no committed offsets")
        records = led.state.plan_offset_delete(group, partitions, now_ms=wall_clock_ms())
        if records:
            await self._append(led, records, group)

    async def delete_groups(self, groups: Iterable[str]) -> dict[str, errors.TidelogError | None]:
        """Every offset of each group deleted; per group its error, None once deleted."""
        results: dict[str, errors.TidelogError | None] = {}
        by_partition: dict[TopicPartition, tuple[_Led, list[str]]] = {}
        for group in groups:
            try:
                led = self._coordinating(group)
            except errors.TidelogError as exc:
                results[group] = exc
                continue
            by_partition.setdefault(led.tp, (led, []))[1].append(group)

        async def delete(led: _Led, names: list[str]) -> None:
            records, refused = led.state.plan_delete_groups(names, now_ms=wall_clock_ms())
            results.update({name: refused.get(name) for name in names})
            if records:
                try:
                    await self._append(led, records, None)
                except errors.TidelogError as exc:
                    results.update({name: exc for name in names if name not in refused})

        await asyncio.gather(*(delete(led, names) for led, names in by_partition.values()))
        return results

    def list_groups(self) -> tuple[list[tuple[str, int]], bool]:
        """The groups of the partitions this node coordinates, with this node's id, and
        whether some partition it leads is still loading (its groups are not listed yet)."""
        groups: list[tuple[str, int]] = []
        loading = False
        for led in list(self._led.values()):
            if not self._still_leads(led):
                self._drop(led, "leadership moved")
            elif led.loading:
                loading = True
            else:
                groups += ((group, self.node_id) for group in led.state.groups())
        return groups, loading

    def committed_offsets(self) -> Iterator[tuple[str, TopicPartition, int]]:
        """(group, partition, committed offset) of every group whose partition of the offsets
        topic this node leads and has loaded (its metrics: group lag)."""
        for led in list(self._led.values()):
            if led.loading or not self._still_leads(led):
                continue
            for group in led.state.groups():
                for tp, committed in led.state.fetch(group, None).items():
                    if committed is not None:
                        yield group, tp, committed.offset

    # ---- expiration ------------------------------------------------------------------------------

    async def expiration_loop(self) -> None:
        """Every offsets.retention.check.interval.ms, tombstones for the offsets of groups that
        committed nothing for offsets.retention.minutes, on each partition this node leads;
        `_EXPIRE_GROUPS_PER_STEP` groups at a time, yielding to the loop between steps."""
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            for led in list(self._led.values()):
                await self._expire(led, wall_clock_ms())

    async def _expire(self, led: _Led, now_ms: int) -> None:
        expired = 0
        for records in led.state.expiration_steps(now_ms, _EXPIRE_GROUPS_PER_STEP):
            if led.loading or not self._still_leads(led):
                return
            if records:
                expired += len(records)
                led.pending.append(_Append(records, None))
                self.replicas.wake()
            await asyncio.sleep(0)
        if expired:
            log.info("%s: %d expired offsets deleted", led.tp, expired)


def _check_member(led: _Led, group: str, generation: int, member_id: str) -> None:
    """A commit's member and generation: a consumer group checks its own (raising
    UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH)."""
    if led.state.consumer_groups.validate_offset_commit(group, member_id, generation):
        return
    if generation >= 0:
        # Every other group here is a simple group, with no members and no generation: Kafka's
        # classic coordinator refuses a generation for a group it does not know, and a member
        # it does not know for one it does (kafka-reference §7.5).
        if led.state.fetch(group, None):
            raise errors.UnknownMemberIdError(f"group {group!r} has no members")
        raise errors.IllegalGenerationError(
            f"group {group!r} does not exist, generation {generation} cannot be checked"
        )


def coordinator_error(exc: errors.TidelogError) -> errors.TidelogError:
    """An append's (or a read index's) error as the coordinator answers it, kafka-reference
    §7.5 (the new coordinator's `CoordinatorOperationExceptionHelper`)."""
    if isinstance(exc, errors.UnknownTopicOrPartitionError | errors.NotEnoughReplicasError
                  | errors.NotEnoughReplicasAfterAppendError | errors.RequestTimedOutError):
        return errors.CoordinatorNotAvailableError(str(exc))
    if isinstance(exc, errors.NotLeaderOrFollowerError | errors.KafkaStorageError):
        return errors.NotCoordinatorError(str(exc))
    if isinstance(exc, errors.MessageTooLargeError | errors.RecordListTooLargeError
                  | errors.InvalidFetchSizeError):
        return errors.UnknownServerError(f"the commit is too large to append: {exc}")
    if isinstance(exc, errors.NetworkExceptionError):
        return errors.CoordinatorLoadInProgressError(str(exc))
    return exc


async def _replay(led: _Led) -> None:
    """The partition's log into the state up to the start of this leader's epoch (at least),
    a slice of about `_LOAD_SLICE_S` at a time, yielding to the event loop between slices, and
    waiting for the high watermark to pass what earlier leaders wrote; stops early once the
    replica no longer leads (`_Led.dropped`). Raises CorruptMessageError when a chunk of the
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


def _settle(appends: Iterable[_Append], exc: errors.TidelogError) -> None:
    for append in appends:
        if append.proposed is not None and not append.proposed.done():
            append.proposed.set_exception(exc)
        elif append.proposed is None:
            log.warning("offsets records not appended: %s", exc)


def _propose(led: _Led, batch: bytes, count: int, chunk: list[_Append]) -> None:
    """Propose one batch of `count` records holding the sets of `chunk`, and tell them; the
    planned sets of a batch made of planned commits only are kept for its apply."""
    try:
        produced = led.replica.propose(batch, acks=-1, from_client=False)
    except errors.TidelogError as exc:
        _settle(chunk, exc)
        return
    assert produced.done is not None
    result = (produced.done, produced.base_offset + count - 1)
    sets = [append.commit_set for append in chunk if append.commit_set is not None]
    if len(sets) == len(chunk):
        led.planned[produced.base_offset] = PlannedBatch(led.epoch, count, sets)
    for append in chunk:
        if append.proposed is not None and not append.proposed.done():
            append.proposed.set_result(result)


def _batches(appends: list[_Append], limit: int) -> Iterator[tuple[bytes, int, list[_Append]]]:
    """The sets as batches of at most `limit` bytes where they fit (a set alone over it goes
    alone, and its append fails with the log's error): (batch, records in it, its sets)."""
    records = [r for append in appends for r in append.records]
    batch = build_batch(records)
    if len(batch) <= limit or len(appends) == 1:
        yield batch, len(records), appends
        return
    half = len(appends) // 2
    yield from _batches(appends[:half], limit)
    yield from _batches(appends[half:], limit)
