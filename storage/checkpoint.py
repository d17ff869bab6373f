"""Small text files that remember offsets across restarts, in Kafka's checkpoint layout.

Layout (Kafka's ``CheckpointFile``)::

    <version>
    <number of entries>
    <entry fields separated by spaces>
    ...

A checkpoint is only useful if a crash can never leave half of one behind, so a write goes to a
temporary file that is fsynced and then renamed over the old one, and the directory is fsynced so
that the rename itself survives a power loss.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"

#: The modes of what a node keeps under its data dir: its owner alone reads the records (any
#: local user could read payloads out of 0644 segments in 0755 directories). Files are created
#: with these modes, never chmodded afterwards, and the umask can only take bits away.
DATA_FILE_MODE = 0o600
DATA_DIR_MODE = 0o700


def pwrite_all(fd: int, data: bytes | memoryview, position: int) -> None:
    """Write all of `data` at `position`. A full disk may take part of a write and refuse the
    rest: the short write is continued, so that the refusal is an OSError (ENOSPC) and never a
    silently partial file."""
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], position + written)


def fsync_dir(path: Path) -> None:
    """Make creations, renames and deletions inside `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes) -> None:
    """Make `path` hold `data`, whole or not at all after a crash: written and synced beside
    it (``.tmp``), renamed over it, the rename synced."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, DATA_FILE_MODE)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class CheckpointFile:
    """One checkpoint file whose entries have `width` fields: integers, except the first one
    when the entries are `named` (``name value`` lines)."""

    def __init__(self, path: Path, version: int, width: int, *, named: bool = False) -> None:
        self.path = path
        self.version = version
        self.width = width
        self.named = named

    def write(self, entries: Iterable[Sequence[object]]) -> None:
        self.write_lines([" ".join(str(field) for field in entry) for entry in entries])

    def write_lines(self, rows: Sequence[str]) -> None:
        """`write` of entries already formatted as lines (fields joined by spaces): a writer
        that keeps thousands of entries and changes a few between writes keeps their lines,
        instead of formatting every one each time."""
        text = "\n".join([str(self.version), str(len(rows)), *rows]) + "\n"
        replace_durably(self.path, text.encode())

    def read(self) -> list[list[str]] | None:
        """The entries, or None when the file is missing or malformed (logged).

        A malformed file cannot come from a crash (writes are atomic), only from outside
        damage; every caller has a safe fallback (recover more, start from the segments), so
        the damage is reported and the file treated as absent instead of failing the open.
        """
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("cannot read checkpoint %s: %s", self.path, exc)
            return None
        try:
            if int(lines[0]) != self.version:
                raise ValueError(f"version {lines[0]}, expected {self.version}")
            count = int(lines[1])
            entries = [line.split() for line in lines[2:] if line.strip()]
            if len(entries) != count or any(len(e) != self.width for e in entries):
                raise ValueError("entry count or width does not match")
            first = 1 if self.named else 0
            for entry in entries:
                for field in entry[first:]:
                    int(field)
        except (IndexError, ValueError) as exc:
            log.warning("ignoring malformed checkpoint %s: %s", self.path, exc)
            return None
        return entries
