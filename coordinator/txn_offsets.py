"""Offsets committed inside a transaction (TxnOffsetCommit, kafka-mapping §8.5): what a group
coordinator's state keeps of them between the transactional batch and its marker.

The records are ordinary offset records in a transactional batch of the producer. Replay parks
them here per producer id instead of applying them; the producer's COMMIT marker on the same
partition hands them to the table, its ABORT drops them (Kafka's
`pendingTransactionalOffsets` and `replayEndTransactionMarker`). Of two commits of one key the
one later in the log wins, whenever its transaction commits: Kafka's COMMIT applies a parked
offset only if the table holds none with a later record offset. So a plain OffsetCommit
appended after a parked offset outranks it (`outranked`), and so does another producer's
parked offset of a later record once its COMMIT applies it. While a group has parked
offsets for a partition, OffsetFetch with `require_stable` answers that partition
UNSTABLE_OFFSET_COMMIT (88). A tombstone of a key (OffsetDelete, group deletion) also removes
the key's parked offsets. Deterministic: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection

from tidelog.coordinator.offsets_records import OffsetKey, OffsetValue
from tidelog.types import TopicPartition


class PendingTxnOffsets:
    def __init__(self) -> None:
        #: Per producer id, each parked key's value and its record's log offset; the value is
        #: None once a later commit of the key outranks it (the key stays pending until the
        #: producer's marker all the same, as in Kafka).
        self._by_producer: dict[int, dict[OffsetKey, tuple[OffsetValue | None, int]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def park(self, producer_id: int, entries: list[tuple[OffsetKey, OffsetValue, int]]) -> None:
        """A transactional batch's offset records with their log offsets, in log order (a
        later one for the same key replaces the earlier)."""
        parked = self._by_producer.setdefault(producer_id, {})
        for key, value, offset in entries:
            parked[key] = (value, offset)

    def end(self, producer_id: int, commit: bool) -> list[tuple[OffsetKey, OffsetValue]]:
        """The producer's marker: what to apply (COMMIT: its offsets no later commit
        outranks), nothing for ABORT; either way the producer has nothing parked afterwards.
        Other producers' parked offsets of the same keys from earlier records are outranked
        by those applied."""
        parked = self._by_producer.pop(producer_id, {})
        if not commit:
            return []
        applied = [(key, value) for key, (value, _) in parked.items() if value is not None]
        for other in self._by_producer.values():
            for key, (value, offset) in parked.items():
                theirs = other.get(key)
                if value is not None and theirs is not None and theirs[1] < offset:
                    other[key] = (None, theirs[1])
        return applied

    def outranked(self, keys: Collection[OffsetKey]) -> None:
        """Plain commits of `keys` were applied: later in the log than every parked offset,
        they win over the parked offsets of the same keys."""
        for parked in self._by_producer.values():
            for key in keys:
                entry = parked.get(key)
                if entry is not None:
                    parked[key] = (None, entry[1])

    def discard(self, key: OffsetKey) -> None:
        for parked in self._by_producer.values():
            parked.pop(key, None)

    def partitions(self, group: str) -> set[TopicPartition]:
        """The partitions `group` has offsets parked for, by any producer."""
        return {
            TopicPartition(key.topic, key.partition)
            for parked in self._by_producer.values() for key in parked if key.group == group
        }
