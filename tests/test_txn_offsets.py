"""TxnOffsetCommit in the group coordinator's state (kafka-reference §8.5), without processes:
offsets in a transactional batch stay pending until their producer's COMMIT marker, an ABORT
drops them, a tombstone removes a key's pending offsets, and what is pending is what OffsetFetch
with require_stable answers UNSTABLE_OFFSET_COMMIT for. Before, the state logged "transactional
offset commits are not supported" and dropped the batch, so a committed transaction's offsets
were never applied."""

from __future__ import annotations

from storage_helpers import T0

from tidelog.coordinator.group_coordinator import GroupCoordinatorState, OffsetsConfig
from tidelog.coordinator.offset_table import CommittedOffset
from tidelog.coordinator.offsets_records import OffsetKey, OffsetValue, encode_key, encode_value
from tidelog.records import (
    RecordInput,
    assign_offsets,
    build_batch,
    build_txn_marker,
    read_header,
)
from tidelog.types import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


class Offsets:
    """A `__consumer_offsets` partition's batches, stamped in order, fed to a state."""

    def __init__(self) -> None:
        self.state = GroupCoordinatorState(OffsetsConfig())
        self.end = 0

    def _apply(self, batch: bytes) -> None:
        stamped = assign_offsets(batch, self.end, 0)
        self.end += 1 + read_header(batch).last_offset_delta
        self.state.apply(stamped)

    def txn(self, pid: int, group: str, **offsets: int) -> None:
        records = [
            RecordInput(encode_value(OffsetValue(o, -1, "", T0, 0, len(offsets))),
                        encode_key(OffsetKey(group, "t", int(p[1:]))), T0)
            for p, o in offsets.items()
        ]
        self._apply(build_batch(records, producer_id=pid, producer_epoch=0, transactional=True))

    def marker(self, pid: int, commit: bool) -> None:
        self._apply(build_txn_marker(commit, producer_id=pid, producer_epoch=0,
                                     coordinator_epoch=0))

    def tombstone(self, group: str, partition: int) -> None:
        self._apply(build_batch([RecordInput(None, encode_key(OffsetKey(group, "t", partition)),
                                             T0)]))


def test_pending_until_commit_dropped_on_abort() -> None:
    log = Offsets()
    log.txn(7, "g", p0=10, p1=11)
    log.txn(8, "g", p0=99)
    assert log.state.fetch("g", [TP0, TP1]) == {TP0: None, TP1: None}
    assert log.state.txn_offsets.partitions("g") == {TP0, TP1}
    assert log.state.txn_offsets.partitions("other") == set()
    log.marker(7, commit=True)
    assert log.state.fetch("g", [TP0, TP1]) == {
        TP0: CommittedOffset(10, -1, ""), TP1: CommittedOffset(11, -1, "")
    }
    assert log.state.txn_offsets.partitions("g") == {TP0}  # producer 8's is still pending
    log.marker(8, commit=False)
    assert log.state.fetch("g", [TP0]) == {TP0: CommittedOffset(10, -1, "")}
    assert log.state.txn_offsets.partitions("g") == set()
    log.marker(8, commit=True)  # a marker with nothing pending changes nothing
    assert log.state.fetch("g", [TP0]) == {TP0: CommittedOffset(10, -1, "")}


def test_a_tombstone_removes_the_pending_offsets_of_its_key() -> None:
    log = Offsets()
    log.txn(7, "g", p0=10, p1=11)
    log.tombstone("g", 0)
    assert log.state.txn_offsets.partitions("g") == {TP1}
    log.marker(7, commit=True)
    assert log.state.fetch("g", [TP0, TP1]) == {TP0: None, TP1: CommittedOffset(11, -1, "")}


def test_expiration_skips_a_partition_with_pending_offsets() -> None:
    log = Offsets()
    log.txn(7, "g", p0=10, p1=11)
    log.marker(7, commit=True)
    log.txn(8, "g", p0=12)
    retention = log.state.config.retention_ms
    expired = log.state.plan_expiration(T0 + retention + 1)
    assert [r.key for r in expired] == [encode_key(OffsetKey("g", "t", 1))]
