"""The leader-epoch history of a partition: which epoch started at which offset.

Followers use it to find where their log diverges from a new leader's (Kafka's
OffsetsForLeaderEpoch, KIP-101), and ListOffsets EARLIEST reports the epoch of its first entry.
It is kept in the partition directory as Kafka's ``leader-epoch-checkpoint`` and rewritten
(atomically) on every change, which happens once per election, not per append.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path
from typing import NamedTuple

from tidelog.storage.checkpoint import CheckpointFile

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Epochs strictly increase, and so do their start offsets (Kafka's LeaderEpochFileCache)."""

    def __init__(self, directory: Path) -> None:
        self._file = CheckpointFile(directory / LEADER_EPOCH_CHECKPOINT, version=0, width=2)
        rows = self._file.read()
        #: The file is missing or was unusable: the history must be rebuilt from the batches.
        self.needs_rebuild = rows is None
        self._epochs = [int(epoch) for epoch, _ in rows or []]
        self._starts = [int(start) for _, start in rows or []]
        valid = all(e >= 0 for e in self._epochs) and all(s >= 0 for s in self._starts)
        if not valid or not all(
            a.epoch < b.epoch and a.start_offset <= b.start_offset
            for a, b in zip(self.entries, self.entries[1:], strict=False)
        ):
            log.warning("ignoring invalid %s (negative or non-monotonic)", self._file.path)
            self._epochs, self._starts = [], []
            self.needs_rebuild = True

    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts, strict=True)]

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._starts[0]) if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`; entries it contradicts (an equal or
        higher epoch, or a start at or after it) are dropped first, as in Kafka."""
        if epoch < 0 or start_offset < 0:
            return
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return
        keep = len(self._epochs)
        while keep and (self._epochs[keep - 1] >= epoch or self._starts[keep - 1] >= start_offset):
            keep -= 1
        if keep < len(self._epochs):
            log.warning(
                "epoch %d at %d replaces later entries %s", epoch, start_offset, self.entries[keep:]
            )
        del self._epochs[keep:], self._starts[keep:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._write()

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which `offset` was written, or -1 below the first entry."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(
        self, requested_epoch: int, log_start_offset: int, log_end_offset: int
    ) -> tuple[int, int]:
        """The largest epoch <= `requested_epoch` and the end (exclusive) of its offsets: where
        the next epoch starts, or `log_end_offset` for the latest; (UNDEFINED_EPOCH,
        `log_start_offset`) when there is none. This is the question the Raft core asks a log
        to find where a follower diverges (``ReplicaLog.end_offset_for_epoch``)."""
        i = bisect.bisect_right(self._epochs, requested_epoch) - 1
        if i < 0:
            return UNDEFINED_EPOCH, log_start_offset
        end = self._starts[i + 1] if i + 1 < len(self._epochs) else log_end_offset
        return self._epochs[i], end

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget the epochs that start at or after `end_offset` (the log was truncated)."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._epochs):
            del self._epochs[keep:], self._starts[keep:]
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch covering it starts there."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i < 0 or (i == 0 and self._starts[0] == start_offset):
            return
        del self._epochs[:i], self._starts[:i]
        self._starts[0] = start_offset
        self._write()

    def clear(self) -> None:
        if self._epochs:
            self._epochs, self._starts = [], []
            self._write()

    def _write(self) -> None:
        self._file.write(self.entries)
