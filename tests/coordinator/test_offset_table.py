"""The compact table of committed offsets: behaviour, a model check against a plain dict, and
its memory bound (contract §8.4, at a tenth of the benchmark's scale)."""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.coordinator.offset_table import CommittedOffset, OffsetTable

T0 = 1_700_000_000_000
EMPTY = CommittedOffset(0, -1, "")


class CollidingTable(OffsetTable):
    """Every group name hashes alike, and every removal may compact: the slow paths, always."""

    _COMPACT_SLACK = 0

    _hash_name = staticmethod(lambda key: 7)


class NarrowTable(OffsetTable):
    """Position columns widen to 8 bytes past 40 instead of past 2**32."""

    _NARROW_LIMIT = 40
    _COMPACT_SLACK = 2


TABLES = [OffsetTable, CollidingTable, NarrowTable]


@pytest.fixture(params=TABLES, ids=lambda cls: cls.__name__)
def table(request: pytest.FixtureRequest) -> OffsetTable:
    cls: type[OffsetTable] = request.param
    return cls()


def test_an_empty_table_knows_nothing(table: OffsetTable) -> None:
    assert len(table) == 0
    assert table.get("g", "t", 0) is None
    assert table.groups() == []
    assert table.group_offsets("g") == []
    assert table.last_commit_ms("g") is None
    assert not table.remove("g", "t", 0)
    assert table.remove_group("g") == 0


def test_put_get_overwrite(table: OffsetTable) -> None:
    table.put("g", "t", 0, CommittedOffset(5, 2, ""), T0)
    assert table.get("g", "t", 0) == CommittedOffset(5, 2, "")
    table.put("g", "t", 0, CommittedOffset(9, 3, ""), T0 + 1)
    assert table.get("g", "t", 0) == CommittedOffset(9, 3, "")
    assert len(table) == 1
    assert table.get("g", "t", 1) is None
    assert table.get("g", "u", 0) is None
    assert table.get("h", "t", 0) is None
    # Extremes of each column.
    table.put("g", "t", 2**31 - 1, CommittedOffset(2**63 - 1, 2**31 - 1, ""), 2**63 - 1)
    table.put("g", "t", 1, CommittedOffset(-(2**63), -(2**31), ""), -(2**63))
    assert table.get("g", "t", 2**31 - 1) == CommittedOffset(2**63 - 1, 2**31 - 1, "")
    assert table.get("g", "t", 1) == CommittedOffset(-(2**63), -(2**31), "")


@pytest.mark.parametrize(
    ("partition", "value", "timestamp"),
    [
        (-1, EMPTY, T0),
        (2**31, EMPTY, T0),
        (0, CommittedOffset(2**63, -1, ""), T0),
        (0, CommittedOffset(0, 2**31, ""), T0),
        (0, EMPTY, 2**63),
    ],
)
def test_out_of_range_values_are_refused_before_any_change(
    table: OffsetTable, partition: int, value: CommittedOffset, timestamp: int
) -> None:
    table.put("g", "t", 0, CommittedOffset(1, 1, "m"), T0)
    with pytest.raises(ValueError, match="out of range"):
        table.put("g", "t", partition, value, timestamp)
    with pytest.raises(ValueError, match="out of range"):
        table.put("new", "t", partition, value, timestamp)
    assert table.group_offsets("g") == [("t", 0, CommittedOffset(1, 1, "m"))]
    assert table.groups() == ["g"]
    assert table.last_commit_ms("g") == T0


def test_remove_and_remove_group(table: OffsetTable) -> None:
    for partition in range(3):
        table.put("g", "t", partition, CommittedOffset(partition, 0, ""), T0)
    table.put("h", "t", 0, EMPTY, T0)
    assert table.remove("g", "t", 1)
    assert not table.remove("g", "t", 1)
    assert not table.remove("g", "nope", 0)
    assert table.get("g", "t", 1) is None
    assert [p for _, p, _ in table.group_offsets("g")] == [0, 2]
    assert len(table) == 3
    assert table.remove_group("g") == 2
    assert table.remove_group("g") == 0
    assert table.groups() == ["h"]
    assert table.get("g", "t", 0) is None
    assert table.last_commit_ms("g") is None
    assert len(table) == 1
    # The last entry of a group removes the group.
    assert table.remove("h", "t", 0)
    assert table.groups() == []
    assert table.last_commit_ms("h") is None
    assert len(table) == 0


def test_group_offsets_are_ordered_by_topic_then_partition(table: OffsetTable) -> None:
    for topic, partition in [("b", 3), ("a", 10), ("b", 0), ("a", 2), ("c", 1)]:
        table.put("g", topic, partition, CommittedOffset(partition, 1, topic), T0)
    assert table.group_offsets("g") == [
        ("a", 2, CommittedOffset(2, 1, "a")),
        ("a", 10, CommittedOffset(10, 1, "a")),
        ("b", 0, CommittedOffset(0, 1, "b")),
        ("b", 3, CommittedOffset(3, 1, "b")),
        ("c", 1, CommittedOffset(1, 1, "c")),
    ]


def test_last_commit_ms_is_the_newest_of_the_group(table: OffsetTable) -> None:
    table.put("g", "t", 0, EMPTY, T0 + 10)
    table.put("g", "t", 1, EMPTY, T0 + 5)  # older timestamp, e.g. replayed out of order
    table.put("h", "t", 0, EMPTY, T0 + 1)
    assert table.last_commit_ms("g") == T0 + 10
    table.put("g", "t", 1, EMPTY, T0 + 20)
    assert table.last_commit_ms("g") == T0 + 20
    assert table.last_commit_ms("h") == T0 + 1
    table.remove_group("g")
    table.put("g", "t", 0, EMPTY, T0 + 3)  # a new life starts afresh
    assert table.last_commit_ms("g") == T0 + 3


NAMES = [
    "",
    "g",
    "ü-group",
    "日本語のグループ",
    "emoji-🚀",
    "x" * 127,
    "y" * 128,  # the first name with a two-byte length prefix
    "z" * 20_000,
    "lone-\udc80-surrogate",
    "g\x00nul",
]


def test_unicode_empty_and_long_group_names(table: OffsetTable) -> None:
    for i, name in enumerate(NAMES):
        table.put(name, "t", 0, CommittedOffset(i, 0, ""), T0 + i)
    for i, name in enumerate(NAMES):
        assert table.get(name, "t", 0) == CommittedOffset(i, 0, ""), name
        assert table.last_commit_ms(name) == T0 + i
    assert table.groups() == sorted(NAMES)
    # A name must not match a longer one it is a prefix of, nor a shorter one.
    assert table.get("x" * 126, "t", 0) is None
    assert table.get("x" * 128, "t", 0) is None
    assert table.get("gx", "t", 0) is None
    assert table.remove_group("") == 1
    assert table.get("", "t", 0) is None
    assert table.groups() == sorted(NAMES[1:])


def test_metadata_is_kept_and_dropped_again(table: OffsetTable) -> None:
    table.put("g", "t", 0, CommittedOffset(1, 0, "state-file-7"), T0)
    table.put("g", "t", 1, CommittedOffset(2, 0, ""), T0)
    table.put("g", "u", 0, CommittedOffset(3, 0, "ü" * 1000), T0)
    assert table.get("g", "t", 0) == CommittedOffset(1, 0, "state-file-7")
    assert table.get("g", "u", 0) == CommittedOffset(3, 0, "ü" * 1000)
    table.put("g", "t", 0, CommittedOffset(4, 0, ""), T0)
    assert table.get("g", "t", 0) == CommittedOffset(4, 0, "")
    assert table.get("g", "u", 0) == CommittedOffset(3, 0, "ü" * 1000)
    table.remove("g", "u", 0)
    table.put("g", "u", 0, CommittedOffset(5, 0, ""), T0)  # no stale metadata comes back
    assert table.get("g", "u", 0) == CommittedOffset(5, 0, "")
    table.put("h", "t", 0, CommittedOffset(1, 0, "m"), T0)
    table.remove_group("h")
    table.put("h", "t", 0, CommittedOffset(1, 0, ""), T0)
    assert table.get("h", "t", 0) == CommittedOffset(1, 0, "")


def test_many_groups_that_all_collide() -> None:
    table = CollidingTable()
    for g in range(300):
        table.put(f"g{g}", "t", g % 3, CommittedOffset(g, 0, ""), T0 + g)
    for g in range(0, 300, 2):
        assert table.remove_group(f"g{g}") == 1
    for g in range(300):
        expected = None if g % 2 == 0 else CommittedOffset(g, 0, "")
        assert table.get(f"g{g}", "t", g % 3) == expected
    for g in range(0, 300, 2):  # reinserted into slots freed by the removals
        table.put(f"g{g}", "t", 0, CommittedOffset(-g, 0, ""), T0)
    assert len(table) == 300
    assert table.get("g4", "t", 0) == CommittedOffset(-4, 0, "")
    assert table.get("g5", "t", 2) == CommittedOffset(5, 0, "")


def test_delete_then_reinsert_and_growth(table: OffsetTable) -> None:
    for round_ in range(3):
        for g in range(500):
            for p in range(g % 4 + 1):
                table.put(f"group-{g}", f"topic-{p % 2}", p, CommittedOffset(round_, p, ""), T0)
        assert len(table) == sum(g % 4 + 1 for g in range(500))
        assert table.get("group-499", "topic-1", 3) == CommittedOffset(round_, 3, "")
        for g in range(0, 500, 3):
            table.remove_group(f"group-{g}")
        for g in range(1, 500, 3):
            table.remove(f"group-{g}", "topic-0", 0)
    assert table.get("group-0", "topic-0", 0) is None
    assert table.get("group-2", "topic-0", 0) == CommittedOffset(2, 0, "")


def test_interleaved_growth_moves_blocks_without_losing_entries(table: OffsetTable) -> None:
    """Partition-major puts: every group's block moves to the end again and again."""
    for p in range(30):
        for g in range(40):
            table.put(f"g{g}", "t", 29 - p, CommittedOffset(g * 100 + p, 0, ""), T0)
    for g in range(40):
        offsets = table.group_offsets(f"g{g}")
        assert [p for _, p, _ in offsets] == list(range(30))
        assert [v.offset for _, _, v in offsets] == [g * 100 + 29 - p for p in range(30)]


def test_position_columns_widen_past_their_limit() -> None:
    table = NarrowTable()
    for g in range(30):
        for p in range(g % 5 + 1):
            table.put(f"name-{g:02}", "t", p, CommittedOffset(g * 10 + p, 0, ""), T0)
    # Positions past 40 (names: 7 bytes x 30, entries: 90) were stored, in 8-byte columns.
    assert table._g_name.typecode == "q"
    assert table._g_start.typecode == table._g_count.typecode == "q"
    for g in range(30):
        assert [v.offset for _, _, v in table.group_offsets(f"name-{g:02}")] == [
            g * 10 + p for p in range(g % 5 + 1)
        ]


# ---- the model: a plain dict


@dataclass
class Model:
    entries: dict[tuple[str, str, int], CommittedOffset]
    stamps: dict[str, int]

    def put(self, group: str, topic: str, partition: int, value: CommittedOffset, ts: int) -> None:
        self.entries[group, topic, partition] = value
        self.stamps[group] = max(ts, self.stamps.get(group, ts))

    def remove(self, group: str, topic: str, partition: int) -> bool:
        found = self.entries.pop((group, topic, partition), None) is not None
        self._forget_if_empty(group)
        return found

    def remove_group(self, group: str) -> int:
        keys = [key for key in self.entries if key[0] == group]
        for key in keys:
            del self.entries[key]
        self._forget_if_empty(group)
        return len(keys)

    def _forget_if_empty(self, group: str) -> None:
        if not any(key[0] == group for key in self.entries):
            self.stamps.pop(group, None)


groups_st = st.sampled_from(["", "a", "b", "ü", "c" * 130, "d", "e"])
topics_st = st.sampled_from(["t", "u", "ü"])
partitions_st = st.integers(0, 6)
values_st = st.builds(
    CommittedOffset,
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from(["", "", "", "m", "ü" * 3]),
)
ops_st = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            groups_st,
            topics_st,
            partitions_st,
            values_st,
            st.integers(T0 - 100, T0 + 100),
        ),
        st.tuples(st.just("remove"), groups_st, topics_st, partitions_st),
        st.tuples(st.just("remove_group"), groups_st),
        st.tuples(
            st.just("put_many"),
            groups_st,
            st.lists(st.tuples(topics_st, partitions_st, values_st), max_size=6),
            st.integers(T0 - 100, T0 + 100),
        ),
    ),
    max_size=120,
)


def check_against(table: OffsetTable, model: Model) -> None:
    assert len(table) == len(model.entries)
    assert table.groups() == sorted(model.stamps)
    for group in ["", "a", "b", "ü", "c" * 130, "d", "e"]:
        assert table.last_commit_ms(group) == model.stamps.get(group)
        assert table.group_offsets(group) == sorted(
            (topic, partition, value)
            for (g, topic, partition), value in model.entries.items()
            if g == group
        )
    for (group, topic, partition), value in model.entries.items():
        assert table.get(group, topic, partition) == value


@settings(max_examples=300, deadline=None)
@given(ops=ops_st, cls=st.sampled_from(TABLES))
def test_behaves_like_a_dict(ops: list[tuple[object, ...]], cls: type[OffsetTable]) -> None:
    table = cls()
    model = Model({}, {})
    for op in ops:
        if op[0] == "put":
            _, group, topic, partition, value, ts = op
            assert isinstance(group, str) and isinstance(topic, str)
            assert isinstance(partition, int) and isinstance(ts, int)
            assert isinstance(value, CommittedOffset)
            table.put(group, topic, partition, value, ts)
            model.put(group, topic, partition, value, ts)
        elif op[0] == "put_many":  # one commit set: as many puts
            _, group, parts, ts = op
            assert isinstance(group, str) and isinstance(parts, list) and isinstance(ts, int)
            table.put_many(group, [(t, p, *value) for t, p, value in parts], ts)
            for topic, partition, value in parts:
                model.put(group, topic, partition, value, ts)
        elif op[0] == "remove":
            _, group, topic, partition = op
            assert isinstance(group, str) and isinstance(topic, str)
            assert isinstance(partition, int)
            assert table.remove(group, topic, partition) == model.remove(group, topic, partition)
        else:
            _, group = op
            assert isinstance(group, str)
            assert table.remove_group(group) == model.remove_group(group)
        check_against(table, model)


# ---- memory


def traced_bytes_per_entry(groups: int, partitions: int) -> tuple[float, OffsetTable]:
    value = CommittedOffset(123_456_789, 5, "")
    names = [f"group-{g}" for g in range(groups)]  # made before tracing: tracing is slow
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table = OffsetTable()
        for g, name in enumerate(names):
            for p in range(partitions):
                table.put(name, "orders", p, value, T0 + g)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return used / (groups * partitions), table


@pytest.mark.parametrize(("groups", "partitions"), [
    (1_000, 100),
    pytest.param(100_000, 1, marks=pytest.mark.slow),  # the fast tier's longest test alone
])
def test_at_most_64_bytes_an_entry(groups: int, partitions: int) -> None:
    per_entry, table = traced_bytes_per_entry(groups, partitions)
    assert len(table) == groups * partitions
    assert per_entry <= 64, f"{per_entry:.1f} bytes per entry"


def test_churn_does_not_grow_memory() -> None:
    """Removed groups and entries leave no lasting garbage: memory after many rounds of
    remove-and-reinsert stays near memory after the first round (with a small compaction slack,
    so that a few rounds at this scale would show a leak)."""

    class SmallSlack(OffsetTable):
        _COMPACT_SLACK = 32

    table = SmallSlack()
    value = CommittedOffset(1, 0, "")

    def round_(r: int) -> None:
        for g in range(400):
            # Churning groups commit to a topic of their own round, which dies with them.
            name, topic = (f"group-{r}-{g}", f"topic-{r}") if g % 2 else (f"stable-{g}", "t")
            for p in range(5):
                table.put(name, topic, p, value, T0)
        for g in range(1, 400, 2):
            table.remove_group(f"group-{r}-{g}")
        for g in range(0, 400, 2):
            for p in range(1, 5):
                table.remove(f"stable-{g}", "t", p)

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        round_(0)
        after_one = tracemalloc.get_traced_memory()[0] - before
        for r in range(1, 7):
            round_(r)
        after_many = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(table) == 200  # partition 0 of each stable group
    assert after_many <= after_one * 2, (after_one, after_many)
