"""Idempotent producing: which batches each producer already wrote to a partition.

A producer numbers its records per partition; the leader remembers, per producer id, its epoch
and the last few batches (first and last sequence, offsets), as Kafka's ProducerStateManager
does. A retried batch that matches one of them is a duplicate: it is acknowledged with the
original offsets and not written again. The state is derived from the log alone (the batch
headers carry producer id, epoch and base sequence), so a new leader rebuilds it from its own
log, which holds every committed batch: deduplication survives leader changes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tidelog import errors
from tidelog.records import NO_PRODUCER_ID, BatchHeader
from tidelog.storage import Log

#: Kafka keeps the metadata of the last five batches per producer (max.in.flight = 5).
BATCHES_TO_RETAIN = 5
_SEQUENCE_WRAP = 1 << 31


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    leader_epoch: int


@dataclass
class ProducerEntry:
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _last_seq(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % _SEQUENCE_WRAP


class ProducerStateManager:
    """Per-partition producer state. `check` before proposing, `update` after."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    @classmethod
    def from_log(cls, log: Log) -> ProducerStateManager:
        """Rebuild from the batch headers of the whole log (headers only, no records)."""
        state = cls()
        for header in _headers(log):
            state.update(header)
        return state

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """The original of a duplicate batch, None for a new one; raises when the batch is
        fenced (INVALID_PRODUCER_EPOCH) or leaves a gap (OUT_OF_ORDER_SEQUENCE_NUMBER)."""
        if header.producer_id == NO_PRODUCER_ID or header.is_control:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.producer_epoch:
            if header.base_sequence != 0:
                raise errors.OutOfOrderSequenceNumberError(
                    f"producer {header.producer_id} epoch {header.producer_epoch} must start at "
                    f"sequence 0, got {header.base_sequence}"
                )
            return None
        if header.producer_epoch < entry.producer_epoch:
            raise errors.InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"{entry.producer_epoch}"
            )
        last_seq = _last_seq(header)
        for batch in entry.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                return batch
        expected = (entry.last_seq + 1) % _SEQUENCE_WRAP
        if header.base_sequence != expected:
            raise errors.OutOfOrderSequenceNumberError(
                f"producer {header.producer_id}: expected sequence {expected}, "
                f"got {header.base_sequence}"
            )
        return None

    def update(self, header: BatchHeader) -> None:
        """Record a batch written at its (assigned) offsets."""
        if header.producer_id == NO_PRODUCER_ID or header.is_control:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.producer_epoch:
            entry = self._producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                _last_seq(header),
                header.base_offset,
                header.last_offset,
                header.partition_leader_epoch,
            )
        )


def _headers(log: Log) -> Iterable[BatchHeader]:
    start = log.log_start_offset
    for segment in log.segments:
        for scanned in segment.batches_from(0):
            if scanned.header.last_offset >= start:
                yield scanned.header
