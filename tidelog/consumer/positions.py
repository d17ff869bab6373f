"""Where a consumer stands in each assigned partition (aiokafka's ``SubscriptionState``): the
next offset to return, the pending ``seek_to_beginning``/``seek_to_end``, the leader epoch a
commit carries, and the paused partitions. As in Kafka, a position is resolved lazily, when it
is next needed: a pending seek, else the group's committed offset, else ``auto_offset_reset``.

Not thread-safe on its own: the consumer's lock guards it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tidelog.consumer.config import RESETS, ConsumerConfig
from tidelog.errors import ConfigurationError, OffsetOutOfRangeError
from tidelog.lookups import list_offsets
from tidelog.retry import Deadline
from tidelog.types import IsolationLevel, TopicPartition, checked_partition

if TYPE_CHECKING:
    from tidelog.connections import Connections


class Positions:
    """The assigned partitions and their positions."""

    def __init__(
        self, connections: Connections, config: ConsumerConfig, isolation_level: IsolationLevel
    ) -> None:
        self.connections = connections
        self.config = config
        self.isolation_level = isolation_level
        #: Assigned partitions -> next offset to return; None until resolved.
        self.offsets: dict[TopicPartition, int | None] = {}
        #: Pending seek_to_beginning/seek_to_end, by ListOffsets spec.
        self.resets: dict[TopicPartition, int] = {}
        #: The leader epoch of the record before each position (the last one consumed, or
        #: the committed one), committed with it; absent when unknown.
        self.epochs: dict[TopicPartition, int] = {}
        #: Partitions the application paused: kept assigned with their positions, not fetched.
        self.paused: set[TopicPartition] = set()
        #: What a partition without a position (or out of range) resets to; None: raise.
        self.reset_spec = RESETS[config.auto_offset_reset]
        #: A read_committed consumer waits for pending transactional commits, as Kafka's does.
        self.require_stable = isolation_level is IsolationLevel.READ_COMMITTED

    def assign(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Replace the assignment, partitions kept keeping their positions; the partitions
        dropped."""
        kept = {tp: self.offsets.get(tp) for tp in partitions}
        dropped = self.offsets.keys() - kept.keys()
        self.offsets = kept
        self.resets = {tp: s for tp, s in self.resets.items() if tp in self.offsets}
        self.epochs = {tp: e for tp, e in self.epochs.items() if tp in self.offsets}
        self.paused &= self.offsets.keys()
        return dropped

    def assigned(self, tp: TopicPartition) -> TopicPartition:
        """`tp` as a TopicPartition, which must be assigned."""
        tp = checked_partition(tp)
        if tp not in self.offsets:
            raise ConfigurationError(f"{tp} is not assigned to this consumer")
        return tp

    def seek(self, tp: TopicPartition, offset: int | None, reset: int | None = None) -> None:
        """Move the position to `offset`, or (None) to `reset`'s ListOffsets spec once it is
        next needed; the epoch of the old position goes with it."""
        self.offsets[tp] = offset
        if reset is None:
            self.resets.pop(tp, None)
        else:
            self.resets[tp] = reset
        self.epochs.pop(tp, None)

    def resolve(
        self, deadline: Deadline, member: Callable[[], tuple[str, int] | None]
    ) -> None:
        """Positions for the partitions without one: a pending seek_to_*, else the group's
        committed offset (read as `member()`, the joined member or none), else
        auto_offset_reset."""
        missing = [tp for tp, pos in self.offsets.items() if pos is None]
        group_id = self.config.group_id
        unreset = [tp for tp in missing if tp not in self.resets]
        if group_id is not None and unreset:
            committed = self.connections.run(self.connections.coordinators.fetch(
                group_id, unreset, deadline, require_stable=self.require_stable,
                member=member(),
            ))
            for tp, value in committed.items():
                if value is not None and tp in self.offsets:
                    self.offsets[tp] = value.offset
                    if value.leader_epoch is not None:
                        self.epochs[tp] = value.leader_epoch
            missing = [tp for tp in missing if self.offsets[tp] is None]
        if not missing:
            return
        specs: dict[TopicPartition, int] = {}
        for tp in missing:
            spec = self.resets.get(tp, self.reset_spec)
            if spec is None:
                raise OffsetOutOfRangeError(
                    f"{tp}: no position and auto_offset_reset is 'none'; seek() first"
                )
            specs[tp] = spec
        found = list_offsets(self.connections, specs, self.isolation_level, deadline)
        for tp, result in found.items():
            self.offsets[tp] = result.offset
            self.resets.pop(tp, None)
