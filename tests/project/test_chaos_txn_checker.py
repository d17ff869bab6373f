"""The chaos checker's transaction invariants on hand-written histories: what it must accept
(committed transactions read whole and in order, aborted ones never read, an unknown one seen
whole or not at all) and what it must refuse (an aborted read, a read before the commit was
asked for, an acknowledged commit missing, a transaction partly visible or out of order)."""

from __future__ import annotations

import itertools
from typing import Any

from tidelog.chaos.checker import check_txns
from tidelog.chaos.history import INFO, INVOKE, OK, UNKNOWN


class Story:
    """A history written by hand: transactions of t0 (two records on partitions 0 and 1) and
    read_committed polls, with explicit times."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._ids = itertools.count()

    def _op(self, process: str, f: str, start: float, end: float, outcome: str,
            invoke: dict[str, Any], completion: dict[str, Any]) -> None:
        op = next(self._ids)
        self.entries.append({"type": INVOKE, "op": op, "process": process, "f": f,
                             "mono": start, **invoke})
        self.entries.append({"type": outcome, "op": op, "process": process, "f": f,
                             "mono": end, **invoke, **completion})

    def txn(self, n: int, start: float, end: float, committed: bool,
            outcome: str = OK) -> None:
        values = [[p, f"t0:{n}:{2 * p + k}"] for p in (0, 1) for k in range(2)]
        self._op("t0", "txn", start, end, outcome,
                 {"txn": f"t0:{n}", "values": values, "commit": committed},
                 {"committed": committed})
        self.entries.append({"type": INFO, "process": "t0", "f": "txn_end", "txn": f"t0:{n}",
                             "mono": (start + end) / 2})

    def poll(self, records: list[tuple[int, int, str]], start: float, end: float,
             process: str = "rc0") -> None:
        self._op(process, "txn_poll", start, end, OK, {},
                 {"records": [list(r) for r in records]})

    def failed(self) -> dict[str, list[str]]:
        self.entries.sort(key=lambda e: e["mono"])
        return {i.name: i.violations for i in check_txns(self.entries) if not i.ok}


def _whole(n: int, base: int) -> list[tuple[int, int, str]]:
    """Transaction n read whole: partition p at offsets base, base+1."""
    return [(p, base + k, f"t0:{n}:{2 * p + k}") for p in (0, 1) for k in range(2)]


def test_a_valid_history_passes() -> None:
    story = Story()
    story.txn(0, 0, 2, committed=True)
    story.txn(1, 2, 4, committed=False)
    story.txn(2, 4, 6, committed=True, outcome=UNKNOWN)  # may have committed: seen whole
    story.txn(3, 6, 8, committed=True, outcome=UNKNOWN)  # or not at all
    story.poll(_whole(0, 0), 1.5, 3)
    story.poll(_whole(2, 5), 6, 7)
    story.poll(_whole(0, 0) + _whole(2, 5), 9, 10, process="final")
    assert story.failed() == {}
    assert check_txns([]) == []  # a run without transactions checks nothing


def test_an_aborted_read_fails() -> None:
    story = Story()
    story.txn(0, 0, 2, committed=False)
    story.poll(_whole(0, 0), 3, 4)
    story.poll([], 9, 10, process="final")
    failed = story.failed()
    assert set(failed) == {"no_aborted_reads"}, failed
    assert "'t0:0:0' at p0@0; its transaction was aborted" in failed["no_aborted_reads"][0]


def test_a_read_before_the_commit_was_asked_for_fails() -> None:
    story = Story()
    story.txn(0, 0, 4, committed=True)  # commit asked for at 2
    story.poll(_whole(0, 0), 0.5, 1)
    story.poll(_whole(0, 0), 9, 10, process="final")
    assert set(story.failed()) == {"no_intermediate_reads"}


def test_a_lost_committed_transaction_fails() -> None:
    story = Story()
    story.txn(0, 0, 2, committed=True)
    story.poll([], 9, 10, process="final")
    assert set(story.failed()) == {"no_lost_committed_transactions"}
    no_final = Story()
    no_final.txn(0, 0, 2, committed=True)
    assert "no final read_committed read" in no_final.failed()[
        "no_lost_committed_transactions"][0]


def test_a_partly_visible_transaction_fails() -> None:
    story = Story()
    story.txn(0, 0, 2, committed=True, outcome=UNKNOWN)
    story.poll(_whole(0, 0)[:2], 9, 10, process="final")  # partition 0 only
    failed = story.failed()
    assert set(failed) == {"no_torn_transactions"}, failed
    assert "['t0:0:2', 't0:0:3'] not" in failed["no_torn_transactions"][0]


def test_a_transaction_read_out_of_order_fails() -> None:
    story = Story()
    story.txn(0, 0, 2, committed=True)
    story.txn(1, 2, 4, committed=True)
    # t0:1's first record on p0 between t0:0's two: the log broke t0:0 apart.
    story.poll([(0, 0, "t0:0:0"), (0, 1, "t0:1:0"), (0, 2, "t0:0:1"), (0, 3, "t0:1:1")], 5, 6)
    story.poll([(p, 10 + i, v) for i, (p, _, v) in enumerate(_whole(0, 0) + _whole(1, 2))],
               9, 10, process="final")
    failed = story.failed()
    assert set(failed) == {"no_torn_transactions"}, failed
    assert "then 't0:1:0' at @1, not 't0:0:1'" in failed["no_torn_transactions"][0]
