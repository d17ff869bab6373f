"""The node side of consumer groups (KIP-848): heartbeats and fencing over the group
coordinator's partitions (`group_coordinator_driver`), whose state holds the groups
(`coordinator.consumer_groups`).

A heartbeat plans against the group's committed state, appends the records it plans with the
next round of the partition's Ready loop (acks=all), and is answered once they are committed
and applied, exactly as an offset commit. One group's heartbeats (and its fencing) take turns
under the group's lock, so each plans against what the one before it committed: two members
joining at once make two epochs, not one epoch twice. Heartbeats that change nothing write
nothing and wait for no round.

Classic members (the Kafka listener's JoinGroup, SyncGroup, Heartbeat and LeaveGroup) take
the same turns: a JoinGroup or LeaveGroup plans and appends as a heartbeat does; a SyncGroup or
Heartbeat reads the committed state and writes nothing.

Session and rebalance timeouts run on the coordinator's clock: every tick the loop asks each
partition's state which members expired and fences them (their records removed, the group
epoch bumped), so their partitions go to the others at their next heartbeats.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

from tidelog import errors
from tidelog.clock import wall_clock_ms
from tidelog.coordinator.consumer_group_records import Assignment
from tidelog.coordinator.consumer_groups import (
    ConsumerGroups,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResponse,
)
from tidelog.node.coordinators.group_driver import GroupCoordinatorDriver

# This module is the group coordinator driver's other half: it uses the driver's own
# coordinating check, its appends (group commit) and its view of the partitions it leads.

log = logging.getLogger("tidelog.node")

#: How often session timeouts are checked at most; a fraction of the session timeout when
#: that is shorter (tests run with short ones).
_EXPIRY_TICK_S = 0.5


class ConsumerGroupDriver:
    def __init__(self, groups: GroupCoordinatorDriver) -> None:
        self.config = groups.groups_config
        self.groups = groups
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, group: str) -> asyncio.Lock:
        lock = self._locks.get(group)
        if lock is None:
            lock = self._locks[group] = asyncio.Lock()
        return lock

    def _topics(self) -> dict[str, int]:
        image = self.groups.offsets_topic.controller.image
        return {name: topic.partition_count for name, topic in image.topics.items()}

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """Plan, append, wait until committed, answer; raises the heartbeat's error."""
        return await self._planned(request, classic=False)

    async def classic_join(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """A classic member's JoinGroup (`ConsumerGroups.plan_classic_join`), as a heartbeat:
        the answer's member epoch is the generation."""
        return await self._planned(request, classic=True)

    async def _planned(self, request: HeartbeatRequest, *, classic: bool) -> HeartbeatResponse:
        async with self._lock(request.group_id):
            led = self.groups._coordinating(request.group_id)
            state = led.state.consumer_groups
            now_ms = wall_clock_ms()
            plan = (state.plan_classic_join if classic else state.plan_heartbeat)(
                request, self._topics(), now_ms
            )
            if plan.records:
                await self.groups._append_group(led, plan.records, None)
            state.heartbeat_answered(request.group_id, request.member_id, now_ms)
            return plan.response

    async def classic_sync(self, group: str, member_id: str, generation: int) -> Assignment:
        """A classic member's SyncGroup: its current assignment."""
        async with self._lock(group):
            state = self.groups._coordinating(group).state.consumer_groups
            return state.classic_assignment(group, member_id, generation, wall_clock_ms())

    async def classic_heartbeat(self, group: str, member_id: str, generation: int) -> bool:
        """A classic member's Heartbeat: True when it must join again."""
        async with self._lock(group):
            state = self.groups._coordinating(group).state.consumer_groups
            return state.classic_heartbeat(group, member_id, generation, wall_clock_ms())

    async def classic_leave(self, group: str, member_id: str, instance_id: str | None) -> None:
        """A classic member's LeaveGroup: removed once its records are committed."""
        async with self._lock(group):
            led = self.groups._coordinating(group)
            records = led.state.consumer_groups.plan_classic_leave(
                group, member_id, instance_id, wall_clock_ms()
            )
            await self.groups._append_group(led, records, None)

    def describe(self, group: str) -> GroupDescription:
        led = self.groups._coordinating(group)
        description = led.state.consumer_groups.describe(group)
        if description is None:
            raise errors.GroupIdNotFoundError(f"group {group!r} is not a consumer group")
        return description

    def _loaded(self) -> Iterator[ConsumerGroups]:
        """The groups of each partition this node leads and has loaded."""
        for led in self.groups._loaded_leds():
            yield led.state.consumer_groups

    def group_states(self) -> dict[str, str]:
        """group -> its state, for every consumer group this node coordinates (ListGroups)."""
        return {g.group_id: g.state for state in self._loaded() for g in state.groups.values()}

    async def expiry_loop(self) -> None:
        """Fence the members whose session (or rebalance) timeout ran out, on every partition
        this node coordinates."""
        tick_s = min(_EXPIRY_TICK_S, self.config.session_timeout_ms / 10_000)
        while True:
            await asyncio.sleep(tick_s)
            for state in list(self._loaded()):
                for group, member, why in state.expired(wall_clock_ms()):
                    try:
                        await self._fence(group, member, why)
                    except errors.TidelogError as exc:
                        log.warning("group %s: member %s not fenced yet: %s", group, member, exc)

    async def _fence(self, group: str, member: str, why: str) -> None:
        async with self._lock(group):
            led = self.groups._coordinating(group)
            records = led.state.consumer_groups.plan_fence(group, member, wall_clock_ms())
            if records:
                log.info("group %s: member %s fenced (%s)", group, member, why)
                await self.groups._append_group(led, records, None)
