"""One ``syncfs(2)`` in place of the fsyncs of many logs on one filesystem.

A round of writes that touched many logs (produce over hundreds of partitions: 30-70 logs a
round on each node) fsynced each of them, side by side on eight threads. On the shared VM
these were measured on, with other work writing to the same disk, the fdatasync of 64 files
of 16 KiB each took a median 103 ms eight at a time, and one ``syncfs`` of their filesystem
took 9.9 ms (16 files: 10.9 ms against 4.0; 3 files: alike, 0.4-0.5 ms). ext4 commits its
journal once for the one call instead of once per batch of concurrent fsyncs.

Durability is the same or stronger: ``syncfs`` writes back every dirty page and inode of the
filesystem and waits for them, then commits the journal and flushes the device's cache, as
``sync(2)`` does for all filesystems, so everything a log's fdatasync would have made durable
is, and its directory's new entries as well (a new segment file) — the directory fsync that
`Log.sync_data` adds for those is covered too. What is weaker is only the error report: a
``syncfs`` that fails says the filesystem lost a write, not whose. So the caller then falls
back on each log's own fsync, which reports an error to the log that lost the write (the
kernel keeps a writeback error per file as well as per filesystem). Linux reports writeback
errors from ``syncfs`` only since 5.8; on older kernels, and where libc has no ``syncfs``, it is
not used (`FilesystemSync.open` returns None) and every log is fsynced as before.

The price: the filesystem is shared, so ``syncfs`` also writes back what other processes left
dirty on it. That is why it is used only for rounds touching many logs (the caller's
threshold), where the fsyncs it replaces cost more than that on the machine measured.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path


def _kernel_reports_errors() -> bool:
    """Whether this kernel's syncfs reports writeback errors (Linux 5.8 and later)."""
    if platform.system() != "Linux":
        return False
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


class FilesystemSync:
    """``syncfs`` of the filesystem holding a directory (a node's data directory)."""

    def __init__(self, fd: int, syncfs: ctypes._NamedFuncPointer) -> None:
        self._fd = fd
        self._syncfs = syncfs
        #: The filesystem's device: a log on another one (a mount under the directory) is not
        #: covered.
        self.device = os.fstat(fd).st_dev

    @classmethod
    def open(cls, directory: Path) -> FilesystemSync | None:
        """None where syncfs is missing or does not report errors (see the module)."""
        if not _kernel_reports_errors():
            return None
        try:
            syncfs = ctypes.CDLL(None, use_errno=True).syncfs
        except (OSError, AttributeError):
            return None
        syncfs.argtypes = [ctypes.c_int]
        syncfs.restype = ctypes.c_int
        return cls(os.open(directory, os.O_RDONLY), syncfs)

    def covers(self, path: Path) -> bool:
        """Whether `path` lies on this filesystem (False when it is gone: its own fsync then
        reports that)."""
        try:
            return os.stat(path).st_dev == self.device
        except OSError:
            return False

    def sync(self) -> None:
        """Make every write to the filesystem so far durable; OSError when it lost one."""
        if self._syncfs(self._fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs: {os.strerror(errno)}")

    def close(self) -> None:
        os.close(self._fd)
