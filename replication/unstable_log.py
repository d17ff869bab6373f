"""The core's logical log (etcd's raftLog): the replica's stored log (a `ReplicaLog`) plus the
*unstable* tail of writes not yet handed to the driver.

The core decides writes (appends, a truncation after a conflict, a reset below the leader's log
start) while it steps messages, but only the driver touches storage, one ``Ready`` at a time.
Until a ``Ready`` is advanced, its writes live here as the *unstable* tail (etcd's design), so
every read the core makes sees its own decisions. Reads of the storage log only touch offsets
below every pending write, so a driver may apply a ``Ready`` while the core keeps stepping.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from tidelog.replication.replica_log import NO_EPOCH, Entry, ReplicaLog, take_within


def _base(e: Entry) -> int:
    return e.base_offset


class RaftLog:
    """Logical log = ``stable[log_start, offset)`` followed by ``unstable``.

    ``offset`` is also the end of the durable prefix: everything below it was applied and
    synced by the driver, which is what a leader may count as its own replica.
    """

    def __init__(self, stable: ReplicaLog) -> None:
        self.stable = stable
        self.offset = stable.log_end_offset
        self.unstable: list[Entry] = []
        self.pending_reset: int | None = None
        self._reset_gen = 0
        # What the Ready in flight carries: (offset when handed out, its entries, reset gen).
        self._handed: tuple[int, tuple[Entry, ...], int | None] | None = None

    @property
    def log_start(self) -> int:
        return self.stable.log_start_offset if self.pending_reset is None else self.pending_reset

    @property
    def end(self) -> int:
        return self.unstable[-1].end_offset if self.unstable else self.offset

    @property
    def last_epoch(self) -> int:
        if self.unstable:
            return self.unstable[-1].epoch
        epoch = self.epoch_at(self.offset - 1)
        return NO_EPOCH if epoch is None else epoch

    def epoch_at(self, offset: int) -> int | None:
        if offset >= self.offset:
            i = bisect.bisect_right(self.unstable, offset, key=_base) - 1
            if i < 0 or offset > self.unstable[i].last_offset:
                return None
            return self.unstable[i].epoch
        if self.pending_reset is not None:
            return None
        return self.stable.epoch_at(offset)

    def find_conflict_by_epoch(self, offset: int, epoch: int) -> tuple[int, int]:
        """The largest offset <= ``offset`` whose epoch is <= ``epoch``, and that epoch; or
        ``(log_start - 1, NO_EPOCH)``. One call skips a whole epoch of divergent entries."""
        offset = min(offset, self.end - 1)
        for e in reversed(self.unstable):
            if e.base_offset <= offset and e.epoch <= epoch:
                return min(offset, e.last_offset), e.epoch
        offset = min(offset, self.offset - 1)
        start = self.log_start
        if self.pending_reset is not None or offset < start:
            return start - 1, NO_EPOCH
        found, end = self.stable.end_offset_for_epoch(epoch)
        if found == NO_EPOCH:
            return start - 1, NO_EPOCH
        x = min(offset, end - 1)
        at = self.stable.epoch_at(x)
        return (x, at) if at is not None else (start - 1, NO_EPOCH)

    def read(self, from_offset: int, max_bytes: int) -> list[Entry]:
        if from_offset < self.offset:
            out = self.stable.read(from_offset, max_bytes)
            for i, e in enumerate(out):
                if e.base_offset >= self.offset:
                    return out[:i]
            return out
        i = bisect.bisect_right(self.unstable, from_offset, key=_base) - 1
        if i < 0:
            return []
        return take_within(self.unstable, i, max_bytes)

    def append(self, entries: Sequence[Entry]) -> None:
        self.unstable.extend(entries)

    def truncate_and_append(self, entries: Sequence[Entry]) -> None:
        """Replace everything from ``entries[0].base_offset`` on (a batch boundary)."""
        at = entries[0].base_offset
        if at >= self.offset:
            del self.unstable[bisect.bisect_left(self.unstable, at, key=_base) :]
            self.unstable.extend(entries)
        else:
            self.offset = at
            self.unstable = list(entries)

    def reset(self, start: int) -> None:
        self.pending_reset = start
        self._reset_gen += 1
        self.offset = start
        self.unstable = []

    def has_writes(self) -> bool:
        return (
            bool(self.unstable)
            or self.pending_reset is not None
            or self.stable.log_end_offset > self.offset
        )

    def take_writes(self) -> tuple[int | None, int | None, tuple[Entry, ...]]:
        """Hand the pending writes to a Ready: (reset_to, truncate_to, entries to append)."""
        reset_to = self.pending_reset
        truncate_to = None
        if reset_to is None and self.stable.log_end_offset > self.offset:
            truncate_to = self.offset
        entries = tuple(self.unstable)
        self._handed = (self.offset, entries, None if reset_to is None else self._reset_gen)
        return reset_to, truncate_to, entries

    def stable_to_handed(self) -> None:
        """The Ready in flight is durable: drop from the unstable tail what it wrote, unless the
        core has since replaced it (then the next Ready truncates storage again)."""
        assert self._handed is not None
        base, entries, gen = self._handed
        self._handed = None
        if gen is not None and gen == self._reset_gen:
            self.pending_reset = None
        if self.offset != base:
            return
        k = 0
        limit = min(len(entries), len(self.unstable))
        while k < limit and self.unstable[k] is entries[k]:
            k += 1
        if k:
            self.offset = entries[k - 1].end_offset
            del self.unstable[:k]
