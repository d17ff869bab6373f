"""The storage log seen through the Raft core's `ReplicaLog` protocol.

The core reasons in entries (one record batch each, with offsets and an epoch); storage keeps the
same batches as bytes in segments. This adapter only splits read bytes at batch boundaries
(views, not copies) and joins appended entries back into bytes, so a batch is never decoded or
re-encoded on its way from the leader's disk to a follower's.

Appends take one of two storage entry points. Entries of the epoch this replica leads were
validated and stamped here (only the leader of an epoch creates entries of that epoch), so they
go to `Log.append_stamped`; everything else came from another node and goes to
`Log.append_as_follower`, which checks each batch's CRC before writing it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from tidelog.records import iter_batches
from tidelog.replication import NO_EPOCH, Entry
from tidelog.storage import Log


class StorageReplicaLog:
    """A `replication.ReplicaLog` over a `storage.Log`."""

    def __init__(self, log: Log) -> None:
        self.log = log
        #: The epoch this replica leads in the Ready being written (set by the writer before
        #: it applies the Ready), or None when it does not lead.
        self.leading_epoch: int | None = None

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def epoch_at(self, offset: int) -> int | None:
        if not self.log.log_start_offset <= offset < self.log.log_end_offset:
            return None
        epoch = self.log.leader_epoch_cache.epoch_for_offset(offset)
        return None if epoch < 0 else epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        entries = self.log.leader_epoch_cache.entries
        i = bisect.bisect_right([e.epoch for e in entries], epoch) - 1
        if i < 0:
            return NO_EPOCH, self.log.log_start_offset
        end = entries[i + 1].start_offset if i + 1 < len(entries) else self.log.log_end_offset
        return entries[i].epoch, end

    def read(self, from_offset: int, max_bytes: int) -> list[Entry]:
        if not self.log.log_start_offset <= from_offset < self.log.log_end_offset:
            return []
        data = memoryview(self.log.read(from_offset, max_bytes))
        return [
            Entry(
                header.base_offset,
                header.last_offset,
                header.partition_leader_epoch,
                data[pos : pos + header.size],
            )
            for pos, header in iter_batches(data)
        ]

    def append(self, entries: Sequence[Entry]) -> None:
        # Epochs never decrease along a log: entries received while following come first.
        own = len(entries)
        while own > 0 and entries[own - 1].epoch == self.leading_epoch:
            own -= 1
        if own > 0:
            self.log.append_as_follower(_joined(entries[:own]))
        if own < len(entries):
            self.log.append_stamped(_joined(entries[own:]))

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)


def _joined(entries: Sequence[Entry]) -> bytes | memoryview:
    # One entry (the usual append) is written straight from the message or the stamped batch.
    return entries[0].data if len(entries) == 1 else b"".join(e.data for e in entries)
