"""The group coordinator's node side: the state machine of each `__consumer_offsets` partition
this node leads (`coordinator.group_coordinator`), driven over that partition's Raft log by
`coordinator_driver.CoordinatorDriver` (loading, applying, group commit, leadership).

An OffsetCommit's records are one set, appended and answered once committed and applied, so the
table changes only through the log. OffsetFetch answers from the state once a read index
confirmed this node still leads and the state has applied up to it: a deposed leader never
answers from a stale table. Per group, the commits appended and not yet answered make the
group unstable for an OffsetFetch with require_stable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.consumer_groups import ConsumerGroupConfig
from tidelog.coordinator.group_coordinator import (
    CommitEntry,
    CommitSet,
    GroupCoordinatorState,
    OffsetsConfig,
    PlannedBatch,
)
from tidelog.coordinator.offset_table import CommittedOffset
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.driver import Append, CoordinatorDriver, Led, coordinator_error
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.records import RecordInput
from tidelog.types import TopicPartition

#: Groups one step of expiration looks at before it lets the event loop serve others (a few
#: milliseconds of Python).
_EXPIRE_GROUPS_PER_STEP = 5000

log = logging.getLogger("tidelog.node")

@dataclass(eq=False)
class _GroupLed(Led[GroupCoordinatorState]):
    #: Per group, the commits appended and not yet answered (OffsetFetch's require_stable).
    unstable: dict[str, set[asyncio.Future[None]]] = field(default_factory=dict)
    #: The batches this leader appended from planned commit sets, by base offset, until applied.
    planned: dict[int, PlannedBatch] = field(default_factory=dict)


class GroupCoordinatorDriver(CoordinatorDriver[GroupCoordinatorState]):
    key_name = "group"

    def __init__(
        self, config: NodeConfig, replicas: ReplicaSet, offsets_topic: CoordinatorTopic
    ) -> None:
        super().__init__(config, replicas, offsets_topic, config.offsets_commit_timeout_ms)
        self.offsets_topic = offsets_topic
        self._state_config = OffsetsConfig(
            metadata_max_bytes=config.offset_metadata_max_bytes,
            retention_ms=round(config.offsets_retention_minutes * 60_000),
        )
        self.groups_config = ConsumerGroupConfig(
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size,
            assignors=config.group_consumer_assignors,
            test_grant_before_revoke=config.test_groups_grant_before_revoke,
        )

    def _new_state(self) -> GroupCoordinatorState:
        return GroupCoordinatorState(self._state_config, self.groups_config)

    def _new_led(
        self, replica: PartitionReplica, epoch: int, start: int
    ) -> Led[GroupCoordinatorState]:
        return _GroupLed(replica, epoch, start, self._new_state())

    def _describe(self, led: Led[GroupCoordinatorState]) -> str:
        return f"{len(led.state.groups())} groups"

    def _apply(self, led: Led[GroupCoordinatorState], data: bytes | memoryview) -> None:
        assert isinstance(led, _GroupLed)
        led.state.apply(data, led.planned)

    def _proposed(
        self, led: Led[GroupCoordinatorState], base_offset: int, count: int,
        chunk: list[Append],
    ) -> None:
        """A batch made of planned commit sets only is applied from them, not decoded."""
        assert isinstance(led, _GroupLed)
        sets = [append.planned for append in chunk if append.planned is not None]
        if len(sets) == len(chunk):
            led.planned[base_offset] = PlannedBatch(led.epoch, count, sets)

    async def _append_group(
        self, led: Led[GroupCoordinatorState], records: list[RecordInput] | CommitSet,
        group: str | None,
        commit_set: CommitSet | None = None, producer: tuple[int, int] | None = None,
    ) -> None:
        """`_append`, with `group` marked unstable until it is answered. `commit_set`: the
        records as the table takes them (a planned commit), so that the state need not decode
        them. With `producer` (id, epoch), the set is a transactional batch of that producer
        (TxnOffsetCommit), which the table takes only with its COMMIT marker."""
        assert isinstance(led, _GroupLed)
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        unstable = led.unstable.setdefault(group, set()) if group is not None else set()
        unstable.add(settled)
        try:
            await self._append(
                led, records, planned=commit_set, producer=producer,
                ack_before_commit=self.config.test_offsets_ack_before_commit,
            )
        finally:
            settled.set_result(None)
            unstable.discard(settled)
            if group is not None and not unstable:
                led.unstable.pop(group, None)

    # ---- requests --------------------------------------------------------------------------------

    async def commit(
        self, group: str, generation: int, offsets: list[CommitEntry], member_id: str = "",
    ) -> dict[TopicPartition, errors.TidelogError]:
        """Commit `offsets` for `group`, all or none (but the partitions the plan refuses);
        the error of each partition not committed (none: all committed; a failed append: every
        partition's). Raises a group-level error: for a
        consumer group, that of a member or epoch it does not know (`generation` is the
        member epoch then, as in Kafka's OffsetCommit v9)."""
        led = self._coordinating(group)
        _check_member(led, group, generation, member_id)
        return await self._commit(led, group, offsets, None)

    async def txn_commit(
        self, group: str, producer_id: int, producer_epoch: int, generation: int,
        offsets: list[CommitEntry], member_id: str = "",
    ) -> dict[TopicPartition, errors.TidelogError]:
        """TxnOffsetCommit (kafka-mapping §8.5): `offsets` as a transactional batch of the
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
        self, led: Led[GroupCoordinatorState], group: str,
        offsets: list[CommitEntry], producer: tuple[int, int] | None,
    ) -> dict[TopicPartition, errors.TidelogError]:
        plan = led.state.plan_commit(group, offsets, wall_clock_ms())
        if plan.commit_set is not None:
            try:
                await self._append_group(
                    led, plan.commit_set, group, plan.commit_set if producer is None else None,
                    producer,
                )
            except errors.TidelogError as exc:
                failed = {TopicPartition(topic, partition): exc
                          for topic, partition, *_ in plan.commit_set.entries}
                return failed | plan.refused
        return plan.refused

    def pending_txn_partitions(self, group: str) -> set[TopicPartition]:
        """The partitions `group` has TxnOffsetCommit offsets pending for (waiting for their
        transaction's marker): OffsetFetch with require_stable answers them
        UNSTABLE_OFFSET_COMMIT."""
        return self._coordinating(group).state.txn_offsets.partitions(group)

    async def fetch(
        self, group: str, partitions: Iterable[TopicPartition] | None, require_stable: bool,
        member_id: str = "", member_epoch: int = -1,
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """The committed offsets of `group` (None: none committed), as of a read index taken
        now: every commit acknowledged before this call is in the answer. A consumer group
        checks the fetching member's id and epoch against that same state (UNKNOWN_MEMBER_ID,
        STALE_MEMBER_EPOCH; not without a member id, as for an admin client)."""
        led = self._coordinating(group)
        try:
            async with asyncio.timeout(self._timeout_s):
                assert isinstance(led, _GroupLed)
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
        led.state.consumer_groups.validate_offset_fetch(group, member_id, member_epoch)
        return led.state.fetch(group, partitions)

    async def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        """Tombstones for the committed offsets of `partitions`; GROUP_ID_NOT_FOUND (69) for a
        group with none at all."""
        led = self._coordinating(group)
        if not led.state.fetch(group, None):
            raise errors.GroupIdNotFoundError(f"group {group!r} has no committed offsets")
        records = led.state.plan_offset_delete(group, partitions, now_ms=wall_clock_ms())
        if records:
            await self._append_group(led, records, group)

    async def delete_groups(self, groups: Iterable[str]) -> dict[str, errors.TidelogError | None]:
        """Every offset of each group deleted; per group its error, None once deleted."""
        results: dict[str, errors.TidelogError | None] = {}
        by_partition: dict[TopicPartition, tuple[Led[GroupCoordinatorState], list[str]]] = {}
        for group in groups:
            try:
                led = self._coordinating(group)
            except errors.TidelogError as exc:
                results[group] = exc
                continue
            by_partition.setdefault(led.tp, (led, []))[1].append(group)

        async def delete(led: Led[GroupCoordinatorState], names: list[str]) -> None:
            records, refused = led.state.plan_delete_groups(names, now_ms=wall_clock_ms())
            results.update({name: refused.get(name) for name in names})
            if records:
                try:
                    await self._append_group(led, records, None)
                except errors.TidelogError as exc:
                    results.update({name: exc for name in names if name not in refused})

        await asyncio.gather(*(delete(led, names) for led, names in by_partition.values()))
        return results

    def list_groups(self) -> tuple[list[tuple[str, int]], bool]:
        """The groups of the partitions this node coordinates, with this node's id, and
        whether some partition it leads is still loading (its groups are not listed yet)."""
        groups = [
            (group, self.node_id) for led in self._loaded_leds() for group in led.state.groups()
        ]
        return groups, any(led.loading for led in self._led.values())

    def committed_offsets(self) -> Iterator[tuple[str, TopicPartition, int]]:
        """(group, partition, committed offset) of every group whose partition of the offsets
        topic this node leads and has loaded (its metrics: group lag)."""
        for led in self._loaded_leds():
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

    async def _expire(self, led: Led[GroupCoordinatorState], now_ms: int) -> None:
        expired = 0
        for records in led.state.expiration_steps(now_ms, _EXPIRE_GROUPS_PER_STEP):
            if led.loading or not self._still_leads(led):
                return
            if records:
                expired += len(records)
                self._append_unwaited(led, records)
            await asyncio.sleep(0)
        if expired:
            log.info("%s: %d expired offsets deleted", led.tp, expired)


def _check_member(
    led: Led[GroupCoordinatorState], group: str, generation: int, member_id: str
) -> None:
    """A commit's member and generation: a consumer group checks its own (raising
    UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH)."""
    if led.state.consumer_groups.validate_offset_commit(group, member_id, generation):
        return
    if generation >= 0:
        # Every other group here is a simple group, with no members and no generation: Kafka's
        # classic coordinator refuses a generation for a group it does not know, and a member
        # it does not know for one it does (kafka-mapping §7.5).
        if led.state.fetch(group, None):
            raise errors.UnknownMemberIdError(f"group {group!r} has no members")
        raise errors.IllegalGenerationError(
            f"group {group!r} does not exist, generation {generation} cannot be checked"
        )
