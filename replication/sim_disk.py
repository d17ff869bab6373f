"""The simulator's disk: one node's real log directory, and what of it a crash would leave.

The storage classes do their own file I/O and know nothing of this: the simulated disk only
looks at the directory at the driver's sync points and rewrites it when the node crashes.

- ``record_sync()`` runs after the driver synced a round: what the directory holds then is
  durable. Segment ``.log`` files are followed by what was appended to them (a rewrite is
  read in full); the small checkpoint files (term and vote, leader epochs, offsets) by inode
  and size, as they are replaced whole.
- ``crash(rng)`` closes the dead process's descriptors and puts every file back as it was at
  the last sync: files created since vanish, files deleted since return. The last write may be
  torn: when the newest segment only grew since the sync, a random prefix of its new bytes
  survives (possibly ending inside a batch, which recovery must cut). A truncation is lost as
  a whole, never half-applied.
- Index files are never kept: the sync point does not fsync them, so a crash deletes them and
  the next open rebuilds them from the segments (the pessimistic case of what a real crash
  leaves of an index that was not flushed).

A crash during recovery is not modelled: what recovery leaves is taken as durable.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

_LOG = ".log"
#: Rebuilt from the segments when missing, so never part of what a crash keeps.
_INDEXES = (".index", ".timeindex", ".txnindex")


def _base(name: str) -> int:
    return int(name.split(".", 1)[0])


class SimDisk:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        #: Name -> content at the last sync.
        self._synced: dict[str, bytes] = {}
        #: Name -> (inode, size) of the checkpoint files at the last sync.
        self._stats: dict[str, tuple[int, int]] = {}
        #: A segment was truncated or replaced since the last sync: read them all again.
        self.rewritten = True

    def record_sync(self) -> None:
        prefix = f"{self.directory}{os.sep}"
        old = self._synced
        stats = self._stats
        newest_old = max((n for n in old if n.endswith(_LOG)), key=_base, default=None)
        synced: dict[str, bytes] = {}
        new_stats: dict[str, tuple[int, int]] = {}
        with os.scandir(self.directory) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(_INDEXES):
                    continue
                data = old.get(name)
                if name.endswith(_LOG):
                    if data is None or self.rewritten:
                        data = _read(prefix + name)
                    elif name == newest_old:
                        data = _grown(prefix + name, data)
                    # else a closed segment, which changes only by truncation
                else:
                    st = entry.stat()
                    stat = new_stats[name] = (st.st_ino, st.st_size)
                    if data is None or stats.get(name) != stat:
                        data = _read(prefix + name)  # replaced whole (a checkpoint file)
                synced[name] = data
        self._synced = synced
        self._stats = new_stats
        self.rewritten = False

    def crash(self, rng: random.Random) -> None:
        directory = self.directory
        close_descriptors(directory)
        torn: tuple[str, bytes] | None = None
        newest = max((n for n in self._synced if n.endswith(_LOG)), key=_base, default=None)
        if newest is not None and not self.rewritten and (directory / newest).exists():
            synced, now = self._synced[newest], (directory / newest).read_bytes()
            if len(now) > len(synced) and now.startswith(synced):
                torn = newest, now[: rng.randint(len(synced), len(now))]
        for name in os.listdir(directory):
            if name not in self._synced:
                (directory / name).unlink()
        for name, data in self._synced.items():
            (directory / name).write_bytes(data)
        if torn is not None:
            (directory / torn[0]).write_bytes(torn[1])
        self._stats = {}
        self.rewritten = True


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _grown(path: str, data: bytes) -> bytes:
    """``data`` extended by what was appended to ``path`` since (read in full if it shrank)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == len(data):
            return data
        if size < len(data):
            return os.read(fd, size)
        return data + os.pread(fd, size - len(data), len(data))
    finally:
        os.close(fd)


def close_descriptors(directory: Path) -> None:
    """Close what the process holds open under ``directory``, as its death would: the log
    object is dropped without ``close()``, which would flush and mark a clean shutdown."""
    prefix = f"{directory}{os.sep}"
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix):
            os.close(int(fd))
