"""The chaos checker's consumer-offset invariants on hand-written histories: what it must accept
(concurrent commits seen in either order, unknown commits taking effect late, the initial -1)
and what it must refuse (a stale fetch after an acknowledged commit, a value nobody committed, a
value from the future, a fetch that sees half of one commit and half of another)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tidelog.chaos.checker import check_offsets
from tidelog.chaos.history import FAIL, INVOKE, OK, UNKNOWN
from tidelog.chaos.workload import offset_groups
from tidelog.hashing import group_partition

PARTITIONS = [0, 1]


class Story:
    """A history written by hand: operations with explicit invoke and completion times."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._ids = itertools.count()

    def _op(self, f: str, start: float, end: float | None, outcome: str,
            invoke: dict[str, Any], completion: dict[str, Any]) -> None:
        op = next(self._ids)
        self.entries.append({"type": INVOKE, "op": op, "process": "p", "f": f, "mono": start,
                             **invoke})
        if end is not None:
            self.entries.append({"type": outcome, "op": op, "process": "p", "f": f,
                                 "mono": end, **invoke, **completion})

    def commit(self, value: int, start: float, end: float | None, outcome: str = OK,
               group: str = "g") -> None:
        self._op("offset_commit", start, end, outcome,
                 {"group": group, "value": value, "partitions": PARTITIONS}, {})

    def fetch(self, values: int | list[int], start: float, end: float,
              outcome: str = OK, group: str = "g") -> None:
        each = values if isinstance(values, list) else [values] * len(PARTITIONS)
        self._op("offset_fetch", start, end, outcome,
                 {"group": group, "node": 1, "partitions": PARTITIONS},
                 {"offsets": [list(pair) for pair in zip(PARTITIONS, each, strict=True)]}
                 if outcome == OK else {"error": "NOT_COORDINATOR"})

    def failed(self) -> dict[str, list[str]]:
        self.entries.sort(key=lambda e: e["mono"])
        return {i.name: i.violations for i in check_offsets(self.entries) if not i.ok}


def test_a_valid_history_passes() -> None:
    story = Story()
    story.fetch(-1, 0, 1)              # nothing committed yet
    story.commit(1, 1, 3)
    story.commit(2, 2, 4)              # concurrent with 1: either order is fine
    story.fetch(2, 2.5, 3.5)           # 2 took effect before 1 ...
    story.fetch(1, 4.5, 5)             # ... and 1 after it: the final value is 1
    story.fetch(1, 6, 7)
    story.commit(3, 7, None, UNKNOWN)  # never answered: may take effect late, or never
    story.fetch(1, 8, 9)
    story.fetch(3, 10, 11)
    story.fetch(-1, 0, 1, FAIL)        # a failed fetch says nothing
    assert story.failed() == {}


def test_a_fetch_older_than_an_acknowledged_commit_fails() -> None:
    story = Story()
    story.commit(1, 0, 1)
    story.commit(2, 2, 3)
    story.fetch(1, 4, 5)  # began after 2 was acknowledged, 1 was before 2 began
    failed = story.failed()
    assert list(failed) == ["offset_fetches_linearizable"]
    assert "read 1" in failed["offset_fetches_linearizable"][0]
    assert "but 2" in failed["offset_fetches_linearizable"][0]


def test_initial_value_after_an_acknowledged_commit_fails() -> None:
    story = Story()
    story.commit(1, 0, 1)
    story.fetch(-1, 2, 3)
    assert "offset_fetches_linearizable" in story.failed()


def test_a_fetch_older_than_what_another_fetch_saw_fails() -> None:
    """The newer value was never acknowledged, but a fetch returned it and ended before this
    one began: it was in effect then, and the older one cannot come back."""
    story = Story()
    story.commit(1, 0, 1)
    story.commit(2, 2, None, UNKNOWN)
    story.fetch(2, 3, 4)
    story.fetch(1, 5, 6)
    assert "offset_fetches_linearizable" in story.failed()


def test_values_nobody_committed_or_from_the_future_fail() -> None:
    story = Story()
    story.fetch(7, 0, 1)
    story.commit(8, 5, 6)
    story.fetch(8, 2, 3)  # ended before the commit of 8 began
    violations = story.failed()["offset_fetches_linearizable"]
    assert any("no commit wrote" in v for v in violations)
    assert any("committed only from" in v for v in violations)


def test_a_fetch_seeing_two_commits_fails_atomicity() -> None:
    story = Story()
    story.commit(1, 0, 1)
    story.commit(2, 2, 3)
    story.fetch([2, 1], 4, 5)
    failed = story.failed()
    assert "offset_commits_atomic" in failed
    assert "p0=2, p1=1" in failed["offset_commits_atomic"][0]


def test_groups_are_separate_registers() -> None:
    story = Story()
    story.commit(1, 0, 1, group="a")
    story.commit(2, 2, 3, group="b")
    story.fetch(1, 4, 5, group="a")
    story.fetch(-1, 4, 5, group="c")
    assert story.failed() == {}


@pytest.mark.parametrize(("count", "partitions"), [(3, 2), (4, 3), (1, 1)])
def test_offset_groups_spread_over_the_offsets_partitions(count: int, partitions: int) -> None:
    groups = offset_groups(count, partitions)
    assert len(set(groups)) == count
    assert [group_partition(g, partitions) for g in groups] == [
        i % partitions for i in range(count)
    ]
