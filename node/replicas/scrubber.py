"""The node's scrubber: segments re-verified at a bounded rate, damaged replicas repaired.

A clean shutdown lets the next start skip every CRC check, and recovery after a crash checks
only what lies above the recovery point, so damage to an older batch (a bit flip, a bad sector)
would otherwise wait for a reader, or be replicated if this node leads. Every `_TICK_S` the
scrub thread (its own, neither the event loop nor the disk thread, so produce never waits for
it) verifies ``log.scrub.bytes.per.second`` x `_TICK_S` bytes of the hosted logs' segments
(`storage.scrubber.LogScrubber`), one log after another. As HDFS's block scanner
does, each log is verified once per ``log.scrub.interval.ms`` (from the start of one pass to the
start of the next), the first time when the node starts: a restart is when damage that a clean
shutdown hid matters.

Repair follows Protocol-Aware Recovery (FAST'18). Once another replica leads (it holds
everything committed, and refills what the cut removes), a follower's log is cut where the
damage starts (`Log.truncate_damaged`, on the disk thread, the logs' only writer) and its core
is built again from what storage holds: below its remembered end it is a damaged replica, which
never campaigns, votes as if it still held what it lost, and is refilled by the leader. A leader
does not cut what it may be alone in holding: it hands leadership to an in-sync follower and is
repaired as a follower once it no longer leads; while no other replica is in sync it logs an
error and keeps serving what it can read, losing nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.replication import NotLeaderError
from tidelog.storage import Log
from tidelog.storage.scrubber import Damage, LogScrubber
from tidelog.types import TopicPartition

log = logging.getLogger(__name__)

_TICK_S = 0.5

#: A damage found in the log of a partition (the log object: a reopened log is another one).
Found = tuple[TopicPartition, Log, Damage]


class Scrubber:
    """The scrub loop (on the event loop: what it decides about replicas) and its thread (the
    reads); the counters are what its log lines report."""

    def __init__(self, config: NodeConfig, replicas: ReplicaSet) -> None:
        self.config = config
        self.replicas = replicas
        self._thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"scrub-{config.node_id}"
        )
        # Used on the scrub thread only.
        self._walkers: dict[TopicPartition, LogScrubber] = {}
        self._order: deque[TopicPartition] = deque()
        self._pass_started: dict[TopicPartition, float] = {}
        self._rest_until: dict[TopicPartition, float] = {}
        #: Damage found and not cut yet: a leader's, until it has handed leadership over, and
        #: a follower's, until it knows a leader to refill it.
        self._pending: dict[TopicPartition, Damage] = {}
        self._alone: set[TopicPartition] = set()
        self.bytes_verified = 0
        self.corrupt_batches = 0
        self.repairs = 0
        self._passed: set[TopicPartition] = set()
        self._round_started = time.monotonic()
        self._round_bytes = 0

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        budget = max(1, int(self.config.log_scrub_bytes_per_second * _TICK_S))
        next_tick = time.monotonic()
        # What the last scan saw (`ReplicaSet.changes`, damage pending) and when a log it
        # saw is next due: while every log rests and nothing changed, a tick scans nothing.
        # Each tick built the map of every log and walked them all on the scrub thread, a
        # tenth of a node's idle CPU at 5,000 partitions.
        seen: tuple[int, bool] | None = None
        due_at = 0.0
        try:
            while True:
                next_tick = max(next_tick + _TICK_S, time.monotonic())
                await asyncio.sleep(next_tick - time.monotonic())
                await self._resolve_pending()
                now_seen = (self.replicas.changes, bool(self._pending))
                if now_seen == seen and not self._pending and time.monotonic() < due_at:
                    continue
                seen = now_seen
                logs = {
                    tp: r.log
                    for tp, r in self.replicas.partitions.items()
                    if not (r.closed or r.offline or tp in self._pending)
                }
                found, due_at = await loop.run_in_executor(
                    self._thread, self._scan, logs, budget)
                for tp, log_, damage in found:
                    await self._on_damage(tp, log_, damage)
        finally:
            self._thread.shutdown(wait=False, cancel_futures=True)

    # ---- on the scrub thread ---------------------------------------------------------------

    def _scan(
        self, logs: dict[TopicPartition, Log], budget: int
    ) -> tuple[list[Found], float]:
        """Verify about `budget` bytes, continuing with the log the last scan stopped in; each
        log whose pass ends hands over to the next and rests until ``log.scrub.interval.ms``
        after its pass began, and no log is read twice in one scan. Returns the damage found,
        and when (`time.monotonic`) the first of `logs` is due again: now while one has not
        finished its pass, else the end of the shortest rest."""
        now = time.monotonic()
        gone = [tp for tp, w in self._walkers.items() if logs.get(tp) is not w.log]
        for tp in gone:
            del self._walkers[tp]
            self._pass_started.pop(tp, None)
            self._rest_until.pop(tp, None)
        for tp, log_ in logs.items():
            if tp not in self._walkers:
                self._walkers[tp] = LogScrubber(log_)
                self._order.append(tp)
        if gone:
            self._order = deque(tp for tp in self._order if tp in self._walkers)
        found: list[Found] = []
        remaining = budget
        for _ in range(len(self._order)):
            tp = self._order[0]
            if self._rest_until.get(tp, now) <= now:
                started = self._pass_started.setdefault(tp, now)
                step = self._walkers[tp].step(remaining)
                remaining -= step.bytes_read
                self.bytes_verified += step.bytes_read
                self._round_bytes += step.bytes_read
                if step.damage is not None:
                    found.append((tp, self._walkers[tp].log, step.damage))
                elif not step.pass_complete:
                    break  # the budget is spent; this log goes on next time
                else:
                    del self._pass_started[tp]
                    self._rest_until[tp] = started + self.config.log_scrub_interval_ms / 1000
                    self._passed.add(tp)
            self._order.rotate(-1)  # O(1): a list's pop(0) moved 5,000 names each time
            if remaining <= 0:
                break
        if self._walkers and self._passed >= self._walkers.keys():
            elapsed = time.monotonic() - self._round_started
            log.info(
                "scrub: every log verified: %d bytes of segments in %.1fs (%.1f MiB/s); "
                "%d corrupt batches found, %d replicas repaired since start",
                self._round_bytes, elapsed, self._round_bytes / max(elapsed, 1e-9) / 2**20,
                self.corrupt_batches, self.repairs,
            )
            self._passed.clear()
            self._round_bytes = 0
            self._round_started = time.monotonic()
        if len(self._rest_until) < len(self._walkers):
            return found, now
        return found, min(self._rest_until.values(), default=now)

    # ---- on the loop -----------------------------------------------------------------------

    async def _on_damage(self, tp: TopicPartition, log_: Log, damage: Damage) -> None:
        replica = self.replicas.partitions.get(tp)
        if replica is None or replica.closed or replica.log is not log_:
            return
        self.corrupt_batches += 1
        log.error(
            "scrub: %s: corrupt batch at offset %d (%s, position %d): %s",
            tp, damage.offset, damage.segment.log_path.name, damage.position, damage.reason,
        )
        self._pending[tp] = damage
        await self._resolve(tp)

    async def _resolve_pending(self) -> None:
        for tp in list(self._pending):
            await self._resolve(tp)

    async def _resolve(self, tp: TopicPartition) -> None:
        """Cut a damaged log once another replica leads, which holds everything committed
        (Leader Completeness) and refills it; a damaged leader first hands leadership over."""
        damage = self._pending[tp]
        replica = self.replicas.partitions.get(tp)
        if replica is None or replica.closed:
            del self._pending[tp]
            self._alone.discard(tp)
        elif replica.offline:
            return
        elif replica.is_leader:
            self._hand_over(replica, damage)
        elif replica.core.leader_id not in (None, self.config.node_id):
            del self._pending[tp]
            self._alone.discard(tp)
            await self._repair(replica, damage)

    def _hand_over(self, replica: PartitionReplica, damage: Damage) -> None:
        if replica.core.transferring_to is not None:
            return
        tp = replica.tp
        others = [
            r for r in replica.in_sync_replicas(self.config.replica_lag_max_ms)
            if r != self.config.node_id
        ]
        if others:
            target = max(others, key=replica.core.match_of)
            log.warning(
                "scrub: %s: this leader's log is damaged at offset %d; handing leadership to "
                "node %d, then repairing from it", tp, damage.offset, target,
            )
            with contextlib.suppress(NotLeaderError, ValueError):
                replica.core.transfer_leadership(target)
            self.replicas.wake()
        elif tp not in self._alone:
            self._alone.add(tp)
            log.error(
                "scrub: %s: this leader's log is damaged at offset %d and no other replica is "
                "in sync: nothing is cut, what is readable is still served", tp, damage.offset,
            )

    async def _repair(self, replica: PartitionReplica, damage: Damage) -> None:
        """Cut a follower's log at the damage; it is then refilled from the leader."""
        try:
            cut = await self.replicas.rewrite_storage(
                replica,
                lambda: replica.log.truncate_damaged(damage.segment, damage.position,
                                                     damage.offset),
            )
        except OSError:
            return  # offline until its disk takes writes; the next pass finds the damage
        if not cut:
            log.info("scrub: %s: the damage at offset %d is gone (the segment changed)",
                     replica.tp, damage.offset)
            return
        self.repairs += 1
        floor = replica.log.repair_floor
        log.warning(
            "scrub: %s: log cut at offset %d; this replica is damaged until its leader has "
            "sent it back up to offset %s", replica.tp, damage.offset, floor and floor[1],
        )
