"""The history of a chaos run: every client operation and nemesis action, as JSON lines.

An operation is an ``invoke`` line followed by one completion line with the same ``op`` id:
``ok``, ``fail`` (it certainly did not take effect) or ``unknown`` (it may have: a write that
timed out or lost its connection). Nemesis actions are ``info`` lines. Every line carries the
monotonic time (for durations) and the wall time (to match node logs and record timestamps),
so the checker and the report can be rerun from the file alone.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = ["History", "Op", "load", "operations"]

INVOKE, OK, FAIL, UNKNOWN, INFO = "invoke", "ok", "fail", "unknown", "info"


class History:
    """Thread-safe appender; each line is flushed so a crashed run leaves a readable file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()
        self._ids = itertools.count()

    def _write(self, entry: dict[str, Any]) -> None:
        entry["mono"] = time.monotonic()
        entry["wall"] = time.time()
        line = json.dumps(entry, separators=(",", ":"))
        with self._lock:
            if self._file.closed:
                return  # a run that ended early: its threads' last lines are left out
            self._file.write(line + "\n")
            self._file.flush()

    def invoke(self, process: str, f: str, **fields: Any) -> int:
        op = next(self._ids)
        self._write({"type": INVOKE, "op": op, "process": process, "f": f, **fields})
        return op

    def complete(self, op: int, process: str, f: str, outcome: str, **fields: Any) -> None:
        assert outcome in (OK, FAIL, UNKNOWN), outcome
        self._write({"type": outcome, "op": op, "process": process, "f": f, **fields})

    def info(self, process: str, f: str, **fields: Any) -> None:
        self._write({"type": INFO, "process": process, "f": f, **fields})

    def close(self) -> None:
        with self._lock:
            self._file.close()


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


@dataclass(frozen=True)
class Op:
    """One operation: its invoke line and its completion (None when the run ended first)."""

    invoke: dict[str, Any]
    completion: dict[str, Any] | None

    @property
    def outcome(self) -> str:
        return UNKNOWN if self.completion is None else str(self.completion["type"])

    @property
    def start(self) -> float:
        return float(self.invoke["mono"])

    @property
    def end(self) -> float | None:
        return None if self.completion is None else float(self.completion["mono"])

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the completion, else of the invoke."""
        if self.completion is not None and key in self.completion:
            return self.completion[key]
        return self.invoke.get(key, default)


def operations(entries: list[dict[str, Any]], f: str | None = None) -> Iterator[Op]:
    """Operations (optionally of one kind) in invoke order, paired with their completions."""
    completions = {e["op"]: e for e in entries if e["type"] in (OK, FAIL, UNKNOWN)}
    for entry in entries:
        if entry["type"] == INVOKE and (f is None or entry["f"] == f):
            yield Op(entry, completions.get(entry["op"]))
