"""The log a replica keeps, as the Raft core reads it (`ReplicaLog`; on storage it is
`log_store.StorageReplicaLog`), and an in-memory one for tests and simulations (`MemoryLog`).

Entries are record batches: one entry covers the dense offsets ``[base_offset, last_offset]``
and carries the leader epoch it was written in. The core never looks inside ``data``; the bytes
that a producer sent are the bytes that reach every replica's disk.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

#: Epoch of "no entry": an empty log, or an offset whose batch is no longer in the log.
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class Entry:
    """One record batch as the log stores it. ``size`` is what flow control charges for it."""

    base_offset: int
    last_offset: int
    epoch: int
    #: A view when the bytes are part of a larger buffer (a received message, a disk read).
    data: bytes | memoryview

    @property
    def end_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size(self) -> int:
        return len(self.data)


def take_within(entries: Sequence[Entry], first: int, max_bytes: int) -> list[Entry]:
    """`entries[first]`, then the following entries while their sizes fit in `max_bytes`:
    a read always returns at least one batch, so an oversized batch still moves (KIP-74)."""
    out = [entries[first]]
    budget = max_bytes - entries[first].size
    for e in entries[first + 1 :]:
        budget -= e.size
        if budget < 0:
            break
        out.append(e)
    return out


class ReplicaLog(Protocol):
    """What the core reads from a replica's log, and what a driver calls to apply a ``Ready``.

    The core only calls the read methods; the three mutators exist so that
    ``Ready.apply_log_writes`` states the write contract in one place. ``read`` may return
    a batch that starts before ``from_offset`` (the batch containing it), as Kafka's fetch does.
    """

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def epoch_at(self, offset: int) -> int | None:
        """Epoch of the batch holding ``offset``; ``None`` outside ``[start, end)``."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: the largest epoch <= ``epoch`` in the log and the end
        offset (exclusive) of its entries; ``(NO_EPOCH, log_start_offset)`` if there is none."""
        ...

    def read(self, from_offset: int, max_bytes: int) -> list[Entry]:
        """Batches from the one holding ``from_offset``; at least one, then up to ``max_bytes``."""
        ...

    def append(self, entries: Sequence[Entry]) -> None: ...

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= ``offset`` (a batch boundary)."""
        ...

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log; the next append starts at ``offset``, which becomes the log start."""
        ...


class MemoryLog:
    """A ``ReplicaLog`` in memory, with a leader-epoch cache like Kafka's so epoch lookups cost
    O(log epochs) rather than a scan. The scenario tests run cores on it; the simulator's
    oracle keeps in one what each node has synced (the nodes themselves run on storage logs)."""

    def __init__(self, start_offset: int = 0) -> None:
        self._start = start_offset
        self._entries: list[Entry] = []
        self._bases: list[int] = []
        # Parallel lists: epoch i starts at offset _epoch_starts[i]; epochs strictly increase.
        self._epochs: list[int] = []
        self._epoch_starts: list[int] = []

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._entries[-1].end_offset if self._entries else self._start

    @property
    def entries(self) -> Sequence[Entry]:
        return self._entries

    def _index(self, offset: int) -> int | None:
        if not self._entries or offset < self._start or offset >= self.log_end_offset:
            return None
        return bisect.bisect_right(self._bases, offset) - 1

    def entry_at(self, offset: int) -> Entry | None:
        i = self._index(offset)
        return None if i is None else self._entries[i]

    def epoch_at(self, offset: int) -> int | None:
        if not self._entries or offset < self._start or offset >= self.log_end_offset:
            return None
        return self._epochs[bisect.bisect_right(self._epoch_starts, offset) - 1]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return NO_EPOCH, self._start
        end = self._epoch_starts[i + 1] if i + 1 < len(self._epochs) else self.log_end_offset
        return self._epochs[i], end

    def read(self, from_offset: int, max_bytes: int) -> list[Entry]:
        i = self._index(from_offset)
        if i is None:
            return []
        return take_within(self._entries, i, max_bytes)

    def append(self, entries: Sequence[Entry]) -> None:
        for e in entries:
            if e.base_offset != self.log_end_offset or e.last_offset < e.base_offset:
                raise ValueError(f"append of {e.base_offset}..{e.last_offset} would leave a gap "
                                 f"or overlap at log end {self.log_end_offset}")
            if self._epochs and e.epoch < self._epochs[-1]:
                raise ValueError(f"epoch {e.epoch} after epoch {self._epochs[-1]}")
            if not self._epochs or e.epoch > self._epochs[-1]:
                self._epochs.append(e.epoch)
                self._epoch_starts.append(e.base_offset)
            self._entries.append(e)
            self._bases.append(e.base_offset)

    def truncate_to(self, offset: int) -> None:
        i = bisect.bisect_left(self._bases, offset)
        if i > 0 and self._entries[i - 1].last_offset >= offset:
            raise ValueError(f"truncation at {offset} is inside a batch")
        del self._entries[i:]
        del self._bases[i:]
        j = bisect.bisect_left(self._epoch_starts, offset)
        del self._epochs[j:]
        del self._epoch_starts[j:]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._entries.clear()
        self._bases.clear()
        self._epochs.clear()
        self._epoch_starts.clear()
        self._start = offset

    def advance_log_start(self, offset: int) -> None:
        """Retention: drop whole batches below ``offset``, a batch base inside the log."""
        i = self._index(offset)
        if i is None or self._bases[i] != offset:
            raise ValueError(f"log start {offset} is not a batch base in the log")
        del self._entries[:i]
        del self._bases[:i]
        j = bisect.bisect_right(self._epoch_starts, offset) - 1
        del self._epochs[:j]
        del self._epoch_starts[:j]
        self._epoch_starts[0] = offset
        self._start = offset
