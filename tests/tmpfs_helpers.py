"""A small tmpfs to run out of space on: the full-disk tests mount one (root only) and skip with
the reason when the mount is refused."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(directory: Path, options: str) -> Iterator[Path]:
    """`directory` (created) with a tmpfs mounted on it (``options``: its size, and how many
    files it holds), unmounted on the way out."""
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
        capture_output=True, text=True, check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(directory: Path, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on `directory`'s file system;
    deleting it frees the space again."""
    stat = os.statvfs(directory)
    free = stat.f_bavail * stat.f_frsize
    filler = directory / "filler"
    with filler.open("wb") as f:
        f.write(bytes(max(0, free - leave)))
    return filler


def use_up_inodes(directory: Path) -> list[Path]:
    """Empty files until `directory`'s file system can create no more (ENOSPC); deleting
    them lets it create files again."""
    made: list[Path] = []
    try:
        while True:
            path = directory / f"inode-{len(made)}"
            path.touch()
            made.append(path)
    except OSError:
        return made
