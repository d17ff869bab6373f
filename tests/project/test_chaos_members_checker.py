"""The chaos checker's consumer-group invariants on hand-written member histories: what it must
accept (a clean handover, a zombie that had been fenced) and what it must refuse (a partition
owned by two members, committed offsets going back, a record nobody consumed)."""

from __future__ import annotations

from typing import Any

from tidelog.chaos.checker import check_members


def _event(member: str, t: float, ev: str, **fields: Any) -> dict[str, Any]:
    return {"type": "info", "process": member, "f": "member", "ev": ev, "t": t, **fields}


def _end(member: str, at: float) -> dict[str, Any]:
    return {"type": "info", "process": member, "f": "member_end", "at": at}


def _offsets(*pairs: tuple[int, int]) -> dict[str, Any]:
    return {"type": "info", "process": "mf", "f": "member_offsets",
            "offsets": [list(pair) for pair in pairs]}


def _failed(entries: list[dict[str, Any]], data: dict[int, set[int]] | None = None
            ) -> dict[str, list[str]]:
    return {i.name: i.violations for i in check_members(entries, data or {}) if not i.ok}


HANDOVER = [
    _event("a", 1.0, "assigned", p=[0, 1]),
    _event("a", 1.1, "recs", r=[[0, 0], [1, 0]]),
    _offsets((0, 1), (1, 1)),
    _event("a", 2.0, "revoked", p=[1]),
    _event("b", 2.1, "assigned", p=[1]),
    _event("b", 2.2, "recs", r=[[1, 1]]),
    _offsets((0, 1), (1, 2)),
    _end("a", 3.0),
    _end("b", 3.0),
]


def test_a_clean_handover_passes() -> None:
    assert _failed(HANDOVER, {0: {0}, 1: {0, 1}}) == {}
    assert check_members([], {0: {0}}) == []  # a run without members checks nothing


def test_double_ownership_backward_commits_and_unconsumed_records_fail() -> None:
    early = [*HANDOVER[:4], _event("b", 1.5, "assigned", p=[1]), *HANDOVER[5:]]
    assert list(_failed(early)) == ["no_double_ownership"]
    backwards = [*HANDOVER, _offsets((0, 1), (1, 1))]
    assert list(_failed(backwards)) == ["member_commits_never_go_back"]
    failed = _failed(HANDOVER, {0: {0, 1}, 1: {0, 1}})
    assert list(failed) == ["every_record_consumed"] and "p0" in failed["every_record_consumed"][0]


def test_a_fenced_member_that_has_not_learnt_it_is_a_zombie_not_a_failure() -> None:
    zombie = [
        _event("a", 1.0, "assigned", p=[0]),
        _event("b", 2.0, "assigned", p=[0]),  # a's session ran out: b got it
        _event("a", 2.5, "lost", p=[0]),  # a learns at its next heartbeat
        _end("a", 3.0),
        _end("b", 3.0),
    ]
    assert _failed(zombie) == {}
