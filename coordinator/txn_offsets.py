"""Offsets committed inside a transaction (TxnOffsetCommit, kafka-reference §8.5): what a group
coordinator's state keeps of them between the transactional batch and its marker.

The records are ordinary offset records in a transactional batch of the producer. Replay parks
them here per producer id instead of applying them; the producer's COMMIT marker on the same
partition hands them to the table, its ABORT drops them (Kafka's
`pendingTransactionalOffsets` and `replayEndTransactionMarker`). While a group has parked
offsets for a partition, OffsetFetch with `require_stable` answers that partition
UNSTABLE_OFFSET_COMMIT (88). A tombstone of a key (OffsetDelete, group deletion) also removes
the key's parked offsets. Deterministic: no I/O, no clock.
"""

from __future__ import annotations

from tidelog.coordinator.offsets_records import OffsetKey, OffsetValue
from tidelog.types import TopicPartition


class PendingTxnOffsets:
    def __init__(self) -> None:
        self._by_producer: dict[int, dict[OffsetKey, OffsetValue]] = {}

    def park(self, producer_id: int, entries: list[tuple[OffsetKey, OffsetValue]]) -> None:
        """A transactional batch's offset records, in log order (a later one for the same
        key replaces the earlier)."""
        self._by_producer.setdefault(producer_id, {}).update(entries)

    def end(self, producer_id: int, commit: bool) -> list[tuple[OffsetKey, OffsetValue]]:
        """The producer's marker: what to apply (COMMIT), nothing for ABORT; either way the
        producer has nothing parked afterwards."""
        parked = self._by_producer.pop(producer_id, {})
        return list(parked.items()) if commit else []

    def discard(self, key: OffsetKey) -> None:
        for parked in self._by_producer.values():
            parked.pop(key, None)

    def partitions(self, group: str) -> set[TopicPartition]:
        """The partitions `group` has offsets parked for, by any producer."""
        return {
            TopicPartition(key.topic, key.partition)
            for parked in self._by_producer.values() for key in parked if key.group == group
        }
