"""TxnOffsetCommit in the group coordinator's state (kafka-mapping §8.5), without processes:
offsets in a transactional batch stay pending until their producer's COMMIT marker, an ABORT
drops them, a tombstone removes a key's pending offsets, and what is pending is what OffsetFetch
with require_stable answers UNSTABLE_OFFSET_COMMIT for. Before, the state logged "transactional
offset commits are not supported" and dropped the batch, so a committed transaction's offsets
were never applied."""

from __future__ import annotations

import pytest
from storage_helpers import T0

from tidelog.coordinator.group_coordinator import (
    GroupCoordinatorState,
    OffsetsConfig,
    PlannedBatch,
)
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

    def plain(self, group: str, *, planned: bool = False, **offsets: int) -> None:
        """A plain OffsetCommit, as the leader appends it; `planned`: applied from its plan
        (the leader's own batch), else decoded (a follower, a replay)."""
        plan = self.state.plan_commit(
            group, [("t", int(p[1:]), o, -1, "") for p, o in offsets.items()], T0)
        assert plan.commit_set is not None
        batch = assign_offsets(build_batch(plan.records), self.end, 0)
        mine = {self.end: PlannedBatch(0, len(plan.records), [plan.commit_set])}
        self.end += len(plan.records)
        self.state.apply(batch, mine if planned else None)

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


@pytest.mark.parametrize("planned", [False, True], ids=["decoded", "planned"])
def test_of_two_commits_of_a_key_the_later_in_the_log_wins_at_commit(planned: bool) -> None:
    """Kafka's COMMIT applies a pending offset only if the table has none from a later record
    (kafka-mapping §8.5): a plain OffsetCommit appended after the TxnOffsetCommit keeps its
    offset, one appended before is replaced. Before, the transactional offset always won."""
    log = Offsets()
    log.txn(7, "g", p0=10, p1=11)
    log.plain("g", p0=20, planned=planned)  # after the transaction's record
    assert log.state.txn_offsets.partitions("g") == {TP0, TP1}  # pending until the marker
    log.marker(7, commit=True)
    assert log.state.fetch("g", [TP0, TP1]) == {
        TP0: CommittedOffset(20, -1, ""), TP1: CommittedOffset(11, -1, "")
    }
    log.plain("g", p0=30, planned=planned)  # before the next transaction's record
    log.txn(8, "g", p0=40)
    log.marker(8, commit=True)
    assert log.state.fetch("g", [TP0]) == {TP0: CommittedOffset(40, -1, "")}
    # Two producers: the later record wins, whichever transaction commits last.
    log.txn(9, "g", p1=50)
    log.txn(10, "g", p1=60)
    log.marker(10, commit=True)
    log.marker(9, commit=True)
    assert log.state.fetch("g", [TP1]) == {TP1: CommittedOffset(60, -1, "")}
    log.txn(11, "g", p1=70)
    log.txn(12, "g", p1=80)
    log.marker(11, commit=True)
    log.marker(12, commit=True)
    assert log.state.fetch("g", [TP1]) == {TP1: CommittedOffset(80, -1, "")}
    assert log.state.txn_offsets.partitions("g") == set()


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
