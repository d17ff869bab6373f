"""Member processes (`member_process`) driven from a test, the chaos workload or a benchmark,
and the checks of their histories: who owned which partition when, and what each consumed.

`MemberProcess` starts one, reads its JSON lines on a thread, and always ends it (SIGKILL on
`kill()`, a `close` line on `close()`, and a kill at the latest when the owner is done);
`pause()`/`resume()` stop and continue it (SIGSTOP, SIGCONT).
`double_ownership` finds a partition two members owned at once: each member's ownership of a
partition runs from the wall time of its `assigned` to that of its `revoked` or `lost` (or its
end); every member reports on the same machine's clock, so intervals compare."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any


class MemberProcess:
    def __init__(self, bootstrap: str, group: str, topic: str, name: str,
                 *extra: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidelog.member_process", bootstrap, group, topic, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.ended_at: float | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)

    def history(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    @property
    def ready(self) -> bool:
        """Connected to the cluster (its `ready` line came)."""
        return any(e["ev"] == "ready" for e in self.history())

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def owned(self) -> set[int]:
        """The partitions its listener says it owns now."""
        owned: set[int] = set()
        for event in self.history():
            if event["ev"] == "assigned":
                owned |= set(event["p"])
            elif event["ev"] in ("revoked", "lost"):
                owned -= set(event["p"])
        return owned

    def consumed(self) -> list[tuple[int, int, float]]:
        """(partition, offset, wall time) of every record it returned."""
        return [(p, o, e["t"]) for e in self.history() if e["ev"] == "recs" for p, o in e["r"]]

    def send(self, line: str) -> None:
        """A line to its stdin (`go`, `close`)."""
        if self.alive and self.proc.stdin is not None:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()

    def pause(self) -> None:
        """SIGSTOP: its heartbeats, polls and listener stop, as in a long GC pause."""
        if self.alive:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._end()

    def close(self, timeout: float = 30.0) -> None:
        """Ask it to close (commit, revoke, leave) and wait; killed if it does not."""
        if self.alive:
            try:
                self.send("close")
                self.proc.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._end()

    def _end(self) -> None:
        self._reader.join(5)
        if self.ended_at is None:
            history = self.history()
            self.ended_at = history[-1]["t"] if history else 0.0


Events = list[dict[str, Any]]


def ownership(events: Events, ended_at: float | None) -> list[tuple[int, float, float]]:
    """(partition, from, to) of each time a member owned a partition, from its events; what it
    still owned at its end (`ended_at`; None: still running) runs to then."""
    since: dict[int, float] = {}
    out: list[tuple[int, float, float]] = []
    for event in events:
        if event["ev"] == "assigned":
            for p in event["p"]:
                since.setdefault(p, event["t"])
        elif event["ev"] in ("revoked", "lost"):
            for p in event["p"]:
                if p in since:
                    out.append((p, since.pop(p), event["t"]))
    end = ended_at if ended_at is not None else float("inf")
    out += [(p, start, end) for p, start in since.items()]
    return out


def fenced_at(events: Events) -> float | None:
    """When the member learnt it had been fenced (its first `lost`), if it was."""
    return next((e["t"] for e in events if e["ev"] == "lost"), None)


def double_ownership(histories: Mapping[str, tuple[Events, float | None]]) -> list[str]:
    """Every time two members owned the same partition at once, from each member's (events,
    end). A member that was fenced (its session ran out: it was too slow, or cut off) may go
    on reading what it owned until its next heartbeat tells it, as in Kafka (whose protocol
    cannot stop a zombie either; its commits are refused, STALE_MEMBER_EPOCH or
    UNKNOWN_MEMBER_ID): an overlap with such a member before it learnt of its fencing is
    listed apart, marked "zombie"."""
    fenced = {name: fenced_at(events) for name, (events, _) in histories.items()}
    intervals = [(p, a, b, name) for name, (events, end) in histories.items()
                 for p, a, b in ownership(events, end)]
    found = []
    for i, (p, a, b, name) in enumerate(intervals):
        for q, c, d, other in intervals[i + 1:]:
            if p == q and name != other and a < d and c < b:
                zombie = any(at is not None and max(a, c) <= at
                             for at in (fenced[name], fenced[other]))
                found.append(f"{'zombie ' if zombie else ''}partition {p}: {name} "
                             f"[{a:.3f}, {b:.3f}] and {other} [{c:.3f}, {d:.3f}]")
    return found


def histories_of(members: Iterable[MemberProcess]) -> dict[str, tuple[Events, float | None]]:
    return {m.name: (m.history(), m.ended_at) for m in members}
