"""A node's data dir: created for its owner alone, checked at start, and its small files (its
identity, its bound addresses, its lock) written whole and private."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import IO, Literal

from tidelog.storage.checkpoint import DATA_DIR_MODE, DATA_FILE_MODE

log = logging.getLogger("tidelog.node")


def prepare_data_dir(data_dir: Path) -> None:
    """Create the data dir (mode 0700), or check the one there. As etcd does, a data dir that
    other users may read or enter is reported at start; unlike etcd, which only warns, it is
    then tightened to 0700 as well: files a node wrote before its files were created private
    (0644 segments) are guarded by nothing but the directory's mode, so a warning alone would
    leave their payloads readable until someone acts on it. A directory the node may not
    change (another owner's) is only reported."""
    data_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
    mode = stat.S_IMODE(data_dir.stat().st_mode)
    if not mode & ~DATA_DIR_MODE:
        return
    try:
        data_dir.chmod(DATA_DIR_MODE)
    except OSError as exc:
        log.warning("data dir %s has mode %04o: other local users may read the records in it; "
                    "it should be 0700, and could not be changed (%s)", data_dir, mode, exc,
                    extra={"event": "data_dir_mode", "mode": f"{mode:04o}"})
        return
    log.warning("data dir %s had mode %04o: other local users could read the records in it; "
                "changed to 0700", data_dir, mode,
                extra={"event": "data_dir_mode", "mode": f"{mode:04o}"})


def open_private(path: Path, mode: Literal["w", "a"]) -> IO[str]:
    """`path` opened for writing as `open` would ("w" truncates, "a" appends), created readable
    by its owner alone whatever the umask."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, DATA_FILE_MODE), mode)


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a torn write."""
    tmp = path.with_name(path.name + ".tmp")
    with open_private(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
