"""The group coordinator's state machine alone (no cluster): commit sets planned, appended to a
real compacted partition log and applied; what a fetch sees; incomplete sets ignored and
repaired; compacted batches; tombstones, group deletion, expiration; damaged bytes; and
replaying a log in pieces against replaying it whole."""

from __future__ import annotations

import logging
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path

import crc32c
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, example, given, settings
from storage_helpers import T0, FakeClock, open_log

from tidelog.coordinator.group_coordinator import (
    CommitEntry,
    CommitPlan,
    CommitSet,
    GroupCoordinatorState,
    OffsetsConfig,
    PlannedBatch,
    java_length,
)
from tidelog.coordinator.offset_table import CommittedOffset
from tidelog.coordinator.offsets_records import (
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tidelog.errors import (
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidRequestError,
    OffsetMetadataTooLargeError,
    UnknownTopicOrPartitionError,
)
from tidelog.records import (
    ControlType,
    RecordInput,
    assign_offsets,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)
from tidelog.storage import Log
from tidelog.storage.cleaner import LogCleaner
from tidelog.types import TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TP2 = TopicPartition("u", 0)
COMPACT = frozenset({"compact"})
CONFIG = OffsetsConfig()


class Partition:
    """One `__consumer_offsets` partition: a real compacted log, each append committed at once
    (the HW moves past it), as the node's Raft driver hands committed batches on."""

    def __init__(self, directory: Path) -> None:
        self.clock = FakeClock()
        self.log: Log = open_log(directory, self.clock, cleanup_policy=COMPACT)

    def append(self, records: Sequence[RecordInput]) -> None:
        self.log.append_as_leader(build_batch(records), 0)
        self.log.update_high_watermark(self.log.log_end_offset)

    def read(self, from_offset: int = 0) -> bytes:
        return self.log.read(max(from_offset, self.log.log_start_offset), 1 << 30)

    def load(self, config: OffsetsConfig = CONFIG) -> GroupCoordinatorState:
        """A new leader's state: the whole partition replayed."""
        state = GroupCoordinatorState(config)
        state.apply(self.read())
        return state

    def catch_up(self, state: GroupCoordinatorState) -> None:
        state.apply(self.read(state.applied_offset + 1))


@pytest.fixture
def part(tmp_path: Path) -> Partition:
    return Partition(tmp_path)


def offsets(*pairs: tuple[TopicPartition, int], metadata: str = "") -> list[CommitEntry]:
    return [(tp.topic, tp.partition, offset, -1, metadata) for tp, offset in pairs]


def commit(
    state: GroupCoordinatorState, part: Partition, group: str,
    request: list[CommitEntry], now_ms: int = T0,
) -> CommitPlan:
    """Plan, append as one batch, apply what came back committed."""
    plan = state.plan_commit(group, request, now_ms)
    if plan.records:
        part.append(plan.records)
    part.catch_up(state)
    return plan


def table(state: GroupCoordinatorState) -> dict[tuple[str, TopicPartition], int]:
    return {
        (group, tp): value.offset
        for group in state.groups()
        for tp, value in state.fetch(group, None).items()
        if value is not None
    }


def set_of(records: Sequence[RecordInput]) -> list[tuple[OffsetKey, OffsetValue | None]]:
    return [
        (decode_key(r.key or b""), None if r.value is None else decode_value(r.value))
        for r in records
    ]


# ---- commit, apply, fetch ----------------------------------------------------------------------


def test_a_commit_is_one_set_and_visible_only_once_applied(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    request = [("t", 0, 5, 2, "m0"), ("t", 1, 7, -1, ""), ("u", 0, 9, 0, "ü")]
    plan = state.plan_commit("g", request, T0)
    assert plan.refused == {}
    decoded = set_of(plan.records)
    assert [key for key, _ in decoded] == [
        OffsetKey("g", "t", 0), OffsetKey("g", "t", 1), OffsetKey("g", "u", 0)
    ]
    values = [value for _, value in decoded]
    assert all(v is not None for v in values)
    assert {(v.commit_id, v.commit_size, v.commit_timestamp_ms) for v in values if v} == {
        (0, 3, T0)
    }
    assert {r.timestamp for r in plan.records} == {T0}  # CreateTime = coordinator time
    # Planned, not committed: nothing to see.
    assert state.fetch("g", [TP0]) == {TP0: None}
    assert state.groups() == []
    part.append(plan.records)
    part.catch_up(state)
    assert state.applied_offset == 2
    assert state.fetch("g", [TP0, TP1, TP2, TopicPartition("t", 9)]) == {
        TP0: CommittedOffset(5, 2, "m0"),
        TP1: CommittedOffset(7, -1, ""),
        TP2: CommittedOffset(9, 0, "ü"),
        TopicPartition("t", 9): None,
    }
    assert state.fetch("g", None) == {
        TP0: CommittedOffset(5, 2, "m0"),
        TP1: CommittedOffset(7, -1, ""),
        TP2: CommittedOffset(9, 0, "ü"),
    }
    assert state.fetch("other", None) == {}
    assert state.fetch("other", [TP0]) == {TP0: None}
    assert state.groups() == ["g"]


def test_the_last_writer_wins_by_log_order(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "g", offsets((TP0, 42)))
    commit(state, part, "g", offsets((TP0, 10)))  # lower, later: it wins (Kafka's replay)
    assert state.fetch("g", [TP0]) == {TP0: CommittedOffset(10, -1, "")}
    assert part.load().fetch("g", [TP0]) == {TP0: CommittedOffset(10, -1, "")}


def test_negative_offsets_are_stored_as_kafka_does_and_negative_epochs_are_unknown(
    part: Partition,
) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "g", [("t", 0, -3, -7, "")])
    assert state.fetch("g", [TP0]) == {TP0: CommittedOffset(-3, -1, "")}


def test_metadata_too_large_beside_a_good_partition(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    emoji = "🚀" * 2049  # 2049 characters, 4098 Java chars (surrogate pairs)
    assert java_length(emoji) == 4098
    request = [
        ("t", 0, 1, -1, "x" * 4096),  # exactly the limit: accepted
        ("t", 1, 2, -1, "x" * 4097),
        ("u", 0, 3, -1, emoji),
        ("u", 1, 4, -1, "🚀" * 2048),  # 4096 Java chars
    ]
    plan = commit(state, part, "g", request)
    assert set(plan.refused) == {TP1, TP2}
    assert all(isinstance(e, OffsetMetadataTooLargeError) for e in plan.refused.values())
    assert plan.refused[TP1].code == 12
    assert "4097" in str(plan.refused[TP1])
    assert [value.commit_size for _, value in set_of(plan.records) if value] == [2, 2]
    assert state.fetch("g", None) == {
        TP0: CommittedOffset(1, -1, "x" * 4096),
        TopicPartition("u", 1): CommittedOffset(4, -1, "🚀" * 2048),
    }


def test_metadata_limit_is_the_configured_one() -> None:
    state = GroupCoordinatorState(OffsetsConfig(metadata_max_bytes=3))
    plan = state.plan_commit("g", offsets((TP0, 1), metadata="abcd") + offsets((TP1, 1)), T0)
    assert list(plan.refused) == [TP0] and len(plan.records) == 1


def test_a_request_with_nothing_to_write_plans_no_records() -> None:
    state = GroupCoordinatorState(OffsetsConfig(metadata_max_bytes=0))
    plan = state.plan_commit("g", offsets((TP0, 1), metadata="m"), T0)
    assert plan.records == [] and list(plan.refused) == [TP0]
    assert state.plan_commit("g", [], T0) == CommitPlan({})


def test_names_a_key_cannot_hold_are_refused() -> None:
    state = GroupCoordinatorState(CONFIG)
    plan = state.plan_commit("g" * 0x8000, offsets((TP0, 1), (TP1, 2)), T0)
    assert plan.records == []
    assert all(isinstance(e, InvalidGroupIdError) for e in plan.refused.values())
    assert set(plan.refused) == {TP0, TP1}
    plan = state.plan_commit("g", offsets((TopicPartition("t", -1), 1), (TP0, 1)), T0)
    assert isinstance(plan.refused[TopicPartition("t", -1)], UnknownTopicOrPartitionError)
    assert len(plan.records) == 1


def test_offsets_and_epochs_no_record_field_holds_are_refused() -> None:
    """Not from the wire (int64 and int32 fields there), but the state machine stands alone:
    such an entry is INVALID_REQUEST, not a set its batch could not encode."""
    state = GroupCoordinatorState(CONFIG)
    plan = state.plan_commit("g", [("t", 0, 2**63, -1, ""), ("t", 1, 1, 2**31, "m"),
                                   ("t", 2, -(2**63), 2**31 - 1, "")], T0)
    assert {tp: type(e) for tp, e in plan.refused.items()} == {
        TP0: InvalidRequestError, TP1: InvalidRequestError,
    }
    assert plan.commit_set is not None
    assert plan.commit_set.entries == [("t", 2, -(2**63), 2**31 - 1, "")]


def test_a_failed_append_changes_nothing(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "g", offsets((TP0, 1)))
    failed = state.plan_commit("g", offsets((TP0, 2), (TP1, 2)), T0)  # never appended
    assert state.fetch("g", None) == {TP0: CommittedOffset(1, -1, "")}
    assert state.finish_loading(T0) == []
    # The next commit gets its own id: the failed one's is never reused.
    plan = commit(state, part, "g", offsets((TP1, 3)))
    ids = [value.commit_id for _, value in set_of(failed.records + plan.records) if value]
    assert ids == [1, 1, 2]
    assert state.fetch("g", None) == {
        TP0: CommittedOffset(1, -1, ""), TP1: CommittedOffset(3, -1, "")
    }


def test_sets_of_many_requests_in_one_batch_apply_each(part: Partition) -> None:
    """Group commit: the node appends several requests' sets as one batch per round."""
    state = GroupCoordinatorState(CONFIG)
    a = state.plan_commit("a", offsets((TP0, 1), (TP1, 1)), T0)
    b = state.plan_commit("b", offsets((TP0, 2), (TP1, 2), (TP2, 2)), T0)
    c = state.plan_commit("a", offsets((TP0, 3)), T0)
    part.append(a.records + b.records + c.records)
    part.catch_up(state)
    assert table(state) == {
        ("a", TP0): 3, ("a", TP1): 1, ("b", TP0): 2, ("b", TP1): 2, ("b", TP2): 2,
    }
    assert state.finish_loading(T0) == []


def test_commit_ids_continue_past_the_highest_in_the_log(part: Partition) -> None:
    old = GroupCoordinatorState(CONFIG)
    for offset in range(3):
        commit(old, part, "g", offsets((TP0, offset)))
    old.plan_commit("g", offsets((TP0, 99)), T0)  # planned, lost with the old leader
    new = part.load()
    plan = new.plan_commit("g", offsets((TP1, 1)), T0)
    assert [value.commit_id for _, value in set_of(plan.records) if value] == [3]


def test_apply_skips_what_it_applied_already(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "g", offsets((TP0, 1), (TP1, 1)))
    commit(state, part, "g", offsets((TP0, 2)))
    applied = state.applied_offset
    state.apply(part.read())  # the whole log again, e.g. a retried read
    assert state.applied_offset == applied
    assert table(state) == {("g", TP0): 2, ("g", TP1): 1}
    fresh = GroupCoordinatorState(CONFIG)
    fresh.apply(memoryview(part.read()))  # as a zero-copy read hands it over
    assert table(fresh) == table(state)


def test_control_batches_move_the_applied_offset() -> None:
    state = GroupCoordinatorState(CONFIG)
    state.apply(assign_offsets(build_control_batch(ControlType.LEADER_CHANGE), 0, 1))
    assert state.applied_offset == 0 and state.groups() == []


# ---- incomplete sets and compaction ------------------------------------------------------------


def test_an_incomplete_set_is_ignored_and_its_keys_written_again(part: Partition) -> None:
    leader = GroupCoordinatorState(CONFIG)
    commit(leader, part, "g", offsets((TP0, 10), (TP1, 10)), now_ms=T0)
    commit(leader, part, "h", offsets((TP0, 1)), now_ms=T0 + 5)
    # A set of 3 of which only 2 records reached the log: TP0 had a value, TP2 had none.
    torn = leader.plan_commit("g", offsets((TP0, 20), (TP1, 20), (TP2, 20)), T0 + 9)
    part.append([torn.records[0], torn.records[2]])

    new = part.load()
    assert new.fetch("g", None) == {
        TP0: CommittedOffset(10, -1, ""), TP1: CommittedOffset(10, -1, "")
    }
    repairs = new.finish_loading(T0 + 100)
    decoded = set_of(repairs)
    # The previous value of TP0, as a set of its own (commit time: the group's newest), then a
    # tombstone for TP2, which had no value before the torn set.
    assert decoded == [
        (OffsetKey("g", "t", 0), OffsetValue(10, -1, "", T0, 3, 1)),
        (OffsetKey("g", "u", 0), None),
    ]
    assert {r.timestamp for r in repairs} == {T0 + 100}
    # Planning changed nothing: until the repair is applied it is still due.
    assert set_of(new.finish_loading(T0 + 100))[0][0] == OffsetKey("g", "t", 0)
    part.append(repairs)
    part.catch_up(new)
    assert new.finish_loading(T0 + 200) == []
    assert table(new) == {("g", TP0): 10, ("g", TP1): 10, ("h", TP0): 1}
    # Every key of the torn set now has a newer record: keeping only each key's newest record
    # (what the cleaner does) loses nothing, and the torn records go entirely.
    part.log.roll()
    LogCleaner(part.log).clean(part.clock.now)
    data = part.read()
    remaining = [
        decode_key(r.key or b"") for pos, h in iter_batches(data)
        for r in decode_records(data, pos, h)
    ]
    assert remaining.count(OffsetKey("g", "t", 0)) == 1
    reloaded = part.load()
    assert table(reloaded) == table(new)
    assert reloaded.finish_loading(T0) == []


def test_a_set_cut_short_at_the_end_of_the_log_keeps_the_values_before_it(
    part: Partition,
) -> None:
    """The torn set is the last thing in the log: the values before it are what it repairs."""
    leader = GroupCoordinatorState(CONFIG)
    commit(leader, part, "g", offsets((TP0, 1), (TP1, 1)))
    commit(leader, part, "g", offsets((TP0, 2)))
    torn = leader.plan_commit("g", offsets((TP0, 3), (TP1, 3)), T0)
    part.append(torn.records[1:])
    new = part.load()
    assert table(new) == {("g", TP0): 2, ("g", TP1): 1}
    assert [(k.partition, v and v.offset) for k, v in set_of(new.finish_loading(T0))] == [(1, 1)]


def test_a_later_commit_of_a_torn_key_needs_no_repair(part: Partition) -> None:
    leader = GroupCoordinatorState(CONFIG)
    commit(leader, part, "g", offsets((TP0, 1), (TP1, 1)))
    torn = leader.plan_commit("g", offsets((TP0, 2), (TP1, 2)), T0)
    part.append(torn.records[:1])
    commit(leader, part, "g", offsets((TP0, 5)))
    new = part.load()
    assert table(new) == {("g", TP0): 5, ("g", TP1): 1}
    assert new.finish_loading(T0) == []


def test_a_compacted_batch_is_not_judged_incomplete(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "g", offsets((TP0, 1), (TP1, 1), (TP2, 1)))
    part.log.roll()
    commit(state, part, "g", offsets((TP0, 2)))
    part.log.roll()
    commit(state, part, "g", offsets((TP1, 3)))  # in the active segment
    before = table(state)
    stats = LogCleaner(part.log).clean(part.clock.now)
    assert stats.segments_written
    data = part.read()
    first = next(h for _, h in iter_batches(data))
    # The first batch lost 2 of its 3 records and still spans 3 offsets.
    assert (first.base_offset, first.records_count, first.last_offset_delta) == (0, 1, 2)
    reloaded = part.load()
    assert table(reloaded) == before == {("g", TP0): 2, ("g", TP1): 3, ("g", TP2): 1}
    assert reloaded.finish_loading(T0) == []


def test_a_compacted_batch_keeps_the_survivors_of_its_sets(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "g", offsets((TP0, 1), (TP1, 1), (TP2, 1)))
    part.log.roll()
    commit(state, part, "g", offsets((TP0, 2)))  # supersedes one record of the first set
    part.log.roll()
    LogCleaner(part.log).clean(part.clock.now)
    data = part.read()
    first = next(h for _, h in iter_batches(data))
    assert (first.records_count, first.last_offset_delta) == (2, 2)
    reloaded = part.load()
    assert table(reloaded) == {("g", TP0): 2, ("g", TP1): 1, ("g", TP2): 1}
    assert reloaded.finish_loading(T0) == []


def test_the_same_two_records_uncompacted_are_an_incomplete_set() -> None:
    """The contrast of the test above: a dense batch with 2 records of a set of 3."""
    leader = GroupCoordinatorState(CONFIG)
    plan = leader.plan_commit("g", offsets((TP1, 1), (TP2, 1), (TP0, 1)), T0)
    state = GroupCoordinatorState(CONFIG)
    state.apply(assign_offsets(build_batch(plan.records[:2]), 0, 0))
    assert state.groups() == []
    assert len(state.finish_loading(T0)) == 2  # two tombstones: no previous values


def test_the_leaders_own_batch_is_applied_from_its_sets_and_equals_decoding_it(
    part: Partition,
) -> None:
    """A batch the leader built from planned sets is applied from the sets (no decoding); the
    table is the one decoding gives. A plan that does not match the batch's leader epoch or
    record count is not trusted: the batch is decoded."""
    leader = GroupCoordinatorState(CONFIG)
    plans = [leader.plan_commit("a", offsets((TP0, 5), (TP1, 6), metadata="m"), T0),
             leader.plan_commit("b", offsets((TP2, 7)), T0 + 1)]
    part.append([r for plan in plans for r in plan.records])  # one batch, as a Ready round
    sets = [plan.commit_set for plan in plans]
    assert all(s is not None for s in sets)
    header = next(iter_batches(part.read()))[1]
    planned = {0: PlannedBatch(header.partition_leader_epoch, 3, [s for s in sets if s])}
    leader.apply(part.read(), planned)
    assert planned == {}
    decoded = part.load()
    assert table(leader) == table(decoded) == {("a", TP0): 5, ("a", TP1): 6, ("b", TP2): 7}
    assert leader.fetch("a", None) == decoded.fetch("a", None)
    assert leader.table.last_commit_ms("b") == decoded.table.last_commit_ms("b") == T0 + 1

    # The sets are what is applied: a (made up) plan that differs from the bytes shows it.
    made_up = [CommitSet("a", T0, [("t", 0, 99, -1, "")], 0)]
    fast = GroupCoordinatorState(CONFIG)
    epoch = header.partition_leader_epoch
    fast.apply(part.read(), {0: PlannedBatch(epoch, 3, made_up)})
    assert table(fast) == {("a", TP0): 99}
    for wrong in [PlannedBatch(epoch + 1, 3, made_up), PlannedBatch(epoch, 2, made_up)]:
        state = GroupCoordinatorState(CONFIG)
        state.apply(part.read(), {0: wrong})
        assert table(state) == table(decoded)


# ---- tombstones, group deletion, expiration ----------------------------------------------------


def test_offset_delete_writes_tombstones_for_committed_partitions_only(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "g", offsets((TP0, 1), (TP1, 1)))
    records = state.plan_offset_delete("g", [TP0, TP2, TP0])
    assert set_of(records) == [(OffsetKey("g", "t", 0), None)]
    assert state.fetch("g", [TP0]) == {TP0: CommittedOffset(1, -1, "")}  # until applied
    part.append(records)
    part.catch_up(state)
    assert state.fetch("g", None) == {TP1: CommittedOffset(1, -1, "")}
    assert state.plan_offset_delete("g", [TP0]) == []
    assert state.plan_offset_delete("nobody", [TP0]) == []
    assert table(part.load()) == {("g", TP1): 1}


def test_delete_groups(part: Partition) -> None:
    state = GroupCoordinatorState(CONFIG)
    commit(state, part, "a", offsets((TP0, 1), (TP1, 1)))
    commit(state, part, "b", offsets((TP0, 2)))
    records, errors = state.plan_delete_groups(["a", "missing", "a"], now_ms=T0)
    assert sorted(k.partition for k, v in set_of(records) if v is None) == [0, 1]
    assert len(records) == 2
    assert list(errors) == ["missing"]
    assert isinstance(errors["missing"], GroupIdNotFoundError) and errors["missing"].code == 69
    assert state.groups() == ["a", "b"]
    part.append(records)
    part.catch_up(state)
    assert state.groups() == ["b"]
    assert state.fetch("a", None) == {}
    _, errors = state.plan_delete_groups(["a"])
    assert list(errors) == ["a"]
    assert part.load().groups() == ["b"]


def test_expiration_tombstones_groups_without_a_commit_for_the_retention(part: Partition) -> None:
    retention = 1000
    state = GroupCoordinatorState(OffsetsConfig(retention_ms=retention))
    commit(state, part, "old", offsets((TP0, 1), (TP1, 1)), now_ms=T0)
    commit(state, part, "fresh", offsets((TP0, 1)), now_ms=T0)
    commit(state, part, "fresh", offsets((TP1, 2)), now_ms=T0 + 500)  # refreshes the group
    assert state.plan_expiration(T0 + retention - 1) == []
    records = state.plan_expiration(T0 + retention)
    assert all(v is None for _, v in set_of(records))
    assert sorted((k.group, k.partition) for k, _ in set_of(records)) == [("old", 0), ("old", 1)]
    assert {r.timestamp for r in records} == {T0 + retention}
    part.append(records)
    part.catch_up(state)
    assert state.groups() == ["fresh"]
    assert len(state.plan_expiration(T0 + 500 + retention)) == 2


def test_expiration_in_bounded_steps_finds_the_same_groups(part: Partition) -> None:
    """The node expires a partition of 10^6 groups in steps that yield between them: the steps
    together tombstone exactly what one pass does, each looking at no more groups than asked."""
    retention = 1000
    state = GroupCoordinatorState(OffsetsConfig(retention_ms=retention))
    for n in range(7):
        commit(state, part, f"g{n}", offsets((TP0, n), (TP1, n)), now_ms=T0 + 600 * (n % 2))
    commit(state, part, "g2", offsets((TP0, 9)), now_ms=T0 + 900)  # refreshed
    now = T0 + retention
    steps = list(state.expiration_steps(now, 2))
    assert len(steps) == 4  # 7 groups, 2 a step
    assert [len(step) for step in steps] == [2, 0, 2, 2]  # g0; none; g4; g6
    assert sorted(r for step in steps for r in step) == sorted(state.plan_expiration(now))
    assert {k.group for step in steps for k, _ in set_of(step)} == {"g0", "g4", "g6"}
    assert list(state.expiration_steps(T0, 3)) == [[], [], []]


# ---- damaged bytes: logged and skipped, never raised -------------------------------------------


def _record(key: bytes | None, value: bytes | None) -> RecordInput:
    return RecordInput(value, key, T0)


GOOD_KEY = encode_key(OffsetKey("g", "t", 0))
GOOD = encode_value(OffsetValue(5, -1, "", T0, 0, 1))


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (_record(None, GOOD), "has no key"),
        (_record(b"\x00\x01\x00", GOOD), "bad key"),
        (_record(struct.pack(">hh", 2, 1) + b"g", GOOD), "group-metadata key"),
        (_record(GOOD_KEY, GOOD[:-1]), "bad value"),
        (_record(GOOD_KEY, struct.pack(">h", 3) + GOOD[2:]), "unknown value version 3"),
    ],
)
def test_a_damaged_record_is_skipped_with_its_reason(
    record: RecordInput, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = _record(
        encode_key(OffsetKey("g", "u", 0)), encode_value(OffsetValue(7, -1, "", T0, 1, 1))
    )
    state = GroupCoordinatorState(CONFIG)
    with caplog.at_level(logging.WARNING):
        state.apply(assign_offsets(build_batch([record, good]), 0, 0))
    assert reason in caplog.text
    assert state.fetch("g", None) == {TP2: CommittedOffset(7, -1, "")}
    assert state.applied_offset == 1


def test_an_undecodable_value_gets_its_key_written_again(part: Partition) -> None:
    leader = GroupCoordinatorState(CONFIG)
    commit(leader, part, "g", offsets((TP0, 4)))
    part.append([_record(GOOD_KEY, b"\x00")])
    new = part.load()
    assert new.fetch("g", [TP0]) == {TP0: CommittedOffset(4, -1, "")}
    assert [(k, v and v.offset) for k, v in set_of(new.finish_loading(T0))] == [
        (OffsetKey("g", "t", 0), 4)
    ]


def test_a_batch_with_a_bad_crc_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    good = assign_offsets(build_batch([_record(GOOD_KEY, GOOD)]), 0, 0)
    bad = bytearray(assign_offsets(build_batch([_record(GOOD_KEY, GOOD)]), 1, 0))
    bad[-5] ^= 0xFF
    state = GroupCoordinatorState(CONFIG)
    with caplog.at_level(logging.WARNING):
        state.apply(good + bytes(bad))
    assert "CRC mismatch" in caplog.text
    assert state.applied_offset == 1
    assert state.fetch("g", [TP0]) == {TP0: CommittedOffset(5, -1, "")}


def test_bytes_that_are_no_batch_stop_the_apply_without_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = assign_offsets(build_batch([_record(GOOD_KEY, GOOD)]), 0, 0)
    state = GroupCoordinatorState(CONFIG)
    for tail in (b"\x00" * 7, good[:40], b"\xff" * 100):
        with caplog.at_level(logging.ERROR):
            state.apply(good + tail)
        assert "not applied" in caplog.text
    assert state.applied_offset == 0
    assert state.fetch("g", [TP0]) == {TP0: CommittedOffset(5, -1, "")}


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_random_bytes_never_raise(data: bytes) -> None:
    GroupCoordinatorState(CONFIG).apply(data)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_damaged_record_bytes_never_raise(data: st.DataObject) -> None:
    """Random bytes inside well-framed records (CRC right): keys and values that lie."""
    records = [
        _record(data.draw(st.one_of(st.none(), st.binary(max_size=30))),
                data.draw(st.one_of(st.none(), st.binary(max_size=60))))
        for _ in range(data.draw(st.integers(1, 5)))
    ]
    state = GroupCoordinatorState(CONFIG)
    state.apply(assign_offsets(build_batch(records), 0, 0))
    assert state.applied_offset == len(records) - 1
    state.finish_loading(T0)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_batch_damaged_anywhere_with_its_crc_right_never_raises(data: st.DataObject) -> None:
    """Bytes changed anywhere in a commit set's batch, the CRC made to match again (so the
    damage reaches the record walk and the codec): never an exception out of apply."""
    plan = GroupCoordinatorState(CONFIG).plan_commit(
        "g", offsets((TP0, 1), (TP1, 2), metadata="m"), T0
    )
    batch = bytearray(assign_offsets(build_batch(plan.records), 0, 0))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    state = GroupCoordinatorState(CONFIG)
    state.apply(bytes(batch))
    state.finish_loading(T0)


# ---- random logs: in pieces, whole, compacted ---------------------------------------------------

_GROUPS = ["a", "b", ""]
_TPS = [TP0, TP1, TP2, TopicPartition("t", 2)]
_RANDOM_CONFIG = OffsetsConfig(retention_ms=5)

_commit = st.tuples(
    st.just("commit"),
    st.sampled_from(_GROUPS),
    st.dictionaries(st.sampled_from(_TPS), st.integers(0, 1000), min_size=1),
    st.one_of(st.none(), st.integers(1, 3)),  # keep only this many records: a torn set
    st.integers(0, 3),  # commit time steps
)
_op = st.one_of(
    _commit,
    _commit,  # commits are most of what a coordinator sees
    _commit,
    st.tuples(st.just("delete"), st.sampled_from(_GROUPS), st.sets(st.sampled_from(_TPS))),
    st.tuples(st.just("delete_groups"), st.sets(st.sampled_from([*_GROUPS, "x"]))),
    st.tuples(st.just("expire"), st.integers(0, 6)),
    st.tuples(st.just("repair")),
)


class RandomLog:
    """A leader driven by random requests, each batch applied as it commits, beside a model of
    what the table must hold: whole sets change it, torn ones do not, tombstones delete."""

    def __init__(self, ops: list[tuple[object, ...]]) -> None:
        self.leader = GroupCoordinatorState(_RANDOM_CONFIG)
        self.appends: list[list[RecordInput]] = []
        self.batches: list[bytes] = []
        self.model: dict[tuple[str, TopicPartition], int] = {}
        self.now = 0
        for op in ops:
            self._run(op)

    def append(self, records: list[RecordInput]) -> None:
        if not records:
            return
        base = sum(len(records) for records in self.appends)
        batch = assign_offsets(build_batch(records), base, 0)
        self.appends.append(records)
        self.batches.append(batch)
        self.leader.apply(batch)

    def _delete(self, records: list[RecordInput]) -> None:
        self.append(records)
        for key, value in set_of(records):
            assert value is None
            self.model.pop((key.group, TopicPartition(key.topic, key.partition)), None)

    def _run(self, op: tuple[object, ...]) -> None:
        leader = self.leader
        if op[0] == "commit":
            _, group, request, keep, step = op
            assert isinstance(group, str) and isinstance(request, dict)
            assert isinstance(step, int) and (keep is None or isinstance(keep, int))
            self.now += step
            plan = leader.plan_commit(group, offsets(*request.items()), self.now)
            records = plan.records if keep is None else plan.records[:keep]
            self.append(records)
            if len(records) == len(plan.records):
                self.model.update({(group, tp): offset for tp, offset in request.items()})
        elif op[0] == "delete":
            assert isinstance(op[1], str) and isinstance(op[2], set)
            self._delete(leader.plan_offset_delete(op[1], op[2]))
        elif op[0] == "delete_groups":
            assert isinstance(op[1], set)
            self._delete(leader.plan_delete_groups(op[1])[0])
        elif op[0] == "expire":
            assert isinstance(op[1], int)
            self._delete(leader.plan_expiration(self.now + op[1]))
        else:
            self.append(leader.finish_loading(self.now))  # repairs change no value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=25), st.data())
def test_replaying_a_prefix_then_the_rest_equals_replaying_the_whole_log(
    ops: list[tuple[object, ...]], data: st.DataObject
) -> None:
    run = RandomLog(ops)
    whole = GroupCoordinatorState(_RANDOM_CONFIG)
    whole.apply(b"".join(run.batches))
    assert table(whole) == run.model == table(run.leader)

    # The same log handed over in pieces, cut at batch boundaries, some parts twice.
    pieces = GroupCoordinatorState(_RANDOM_CONFIG)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(run.batches)))))
    start = 0
    for cut in [*cuts, len(run.batches)]:
        overlap = data.draw(st.integers(0, start))
        pieces.apply(b"".join(run.batches[overlap:cut]))
        start = max(start, cut)
    assert table(pieces) == table(whole)
    assert pieces.applied_offset == whole.applied_offset
    assert set_of(pieces.finish_loading(run.now)) == set_of(whole.finish_loading(run.now))
    probe = offsets((TP0, 1))
    assert set_of(pieces.plan_commit("p", probe, run.now).records) == set_of(
        whole.plan_commit("p", probe, run.now).records
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, max_size=25), st.booleans())
# A torn set over a committed value: without the repair the cleaner keeps only the torn record.
@example([("commit", "a", {TP0: 1}, None, 0), ("commit", "a", {TP0: 2, TP1: 2}, 1, 0)], False)
# A torn set over a value and a key with none: once the repair supersedes the first, the torn
# batch is compacted, so only a tombstone keeps its second record from being applied.
@example(
    [("commit", "a", {TP0: 1}, None, 0), ("commit", "a", {TP0: 2, TP1: 2, TP2: 2}, 2, 0)], False
)
def test_a_repaired_log_compacted_by_the_cleaner_loads_the_same_table(
    ops: list[tuple[object, ...]], drop_tombstones: bool
) -> None:
    """Why the repair (contract §8.5): once it is appended, the cleaner (newest record per
    key, tombstones dropped when old) may compact the log and a new leader still loads the
    committed offsets, torn sets and all."""
    run = RandomLog(ops)
    run.append(run.leader.finish_loading(run.now))
    with tempfile.TemporaryDirectory() as directory:
        part = Partition(Path(directory))
        try:
            for records in run.appends:
                part.append(records)
                part.log.roll()  # every batch in a closed segment: all of it is cleanable
            if drop_tombstones:
                part.clock.advance(part.log.config.delete_retention_ms + 1)
            LogCleaner(part.log).clean(part.clock.now)
            loaded = part.load(_RANDOM_CONFIG)
            assert table(loaded) == run.model
            assert loaded.finish_loading(run.now) == []
        finally:
            part.log.close()
