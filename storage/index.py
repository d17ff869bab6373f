"""A segment's indexes: sparse offset and time indexes, and the aborted-transaction index.

File formats (fixed: ``tidelog dump-log`` reads them), all big-endian, never preallocated, so a
file's length is always a whole number of entries:

* ``.index``     8-byte entries: relative offset u32, file position u32 (kafka-mapping §5.3)
* ``.timeindex`` 12-byte entries: timestamp i64, relative offset u32 (§5.5)
* ``.txnindex``  34-byte entries: version i16, producer id, first offset, last offset,
  last stable offset, each i64 (§5.7)

Entries live in ``array`` columns loaded with one ``frombytes`` (or one ``iter_unpack``), and
lookups are a C-level ``bisect`` over them: lookup latency must not grow with the index, and
opening a cleanly closed 1 GiB log must not parse 250 000 entries in a Python loop.
The relative offset of an entry is stored against the segment's base offset, which comes from
the file name, as in Kafka.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import struct
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from tidelog.storage.checkpoint import DATA_FILE_MODE, pwrite_all
from tidelog.storage.errors import CorruptIndexError

INT32_MAX = 2**31 - 1
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class OffsetPosition(NamedTuple):
    """An offset index entry, or a lookup answer: the batch with `offset` starts at `position`."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry: no record at or before `offset` has a timestamp above `timestamp`."""

    timestamp: int
    offset: int


class AbortedTxn(NamedTuple):
    """One aborted transaction of a producer, in the segment where its ABORT marker landed."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def base_offset_from_path(path: Path) -> int:
    """A segment file is named by its base offset (``00000000000000000042.index`` -> 42)."""
    return int(path.name.split(".", 1)[0])


def _strictly_increasing(values: Sequence[int]) -> bool:
    return all(map(operator.lt, values, itertools.islice(values, 1, None)))


def _non_decreasing(values: Sequence[int]) -> bool:
    return all(map(operator.le, values, itertools.islice(values, 1, None)))


class IndexFile:
    """An index's file handle, opened on the first write so that closed segments, which are
    only read from their in-memory entries, hold no file descriptor."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._dirty = False

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, DATA_FILE_MODE)
        return self._fd

    def create(self) -> None:
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, DATA_FILE_MODE))
        self._dirty = True

    def write_at(self, position: int, data: bytes) -> None:
        pwrite_all(self._open(), data, position)
        self._dirty = True

    def truncate(self, size: int) -> None:
        os.ftruncate(self._open(), size)
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            os.fsync(self._open())
            self._dirty = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex:
    """Relative offset -> file position of the batch ending at that offset (§5.3, §5.4)."""

    ENTRY = struct.Struct(">II")

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.file = IndexFile(path)
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.ENTRY.size
        self._offsets = array("I")  # relative
        self._positions = array("I")

    @classmethod
    def create(cls, path: Path, base_offset: int, max_index_size: int) -> OffsetIndex:
        index = cls(path, base_offset, max_index_size)
        index.file.create()
        return index

    @classmethod
    def load(
        cls,
        path: Path,
        base_offset: int,
        max_index_size: int,
        *,
        offset_limit: int | None = None,
        position_limit: int | None = None,
    ) -> OffsetIndex:
        """Load and sanity-check an index file (raises CorruptIndexError or OSError).

        `offset_limit` (exclusive, absolute) and `position_limit` (the .log size) bound the
        entries when the caller knows them: an entry beyond either cannot be real.
        """
        data = path.read_bytes()
        if len(data) % cls.ENTRY.size:
            raise CorruptIndexError(f"{path}: length {len(data)} is not a multiple of 8")
        index = cls(path, base_offset, max_index_size)
        index._offsets, index._positions = cls._columns(data)
        offsets, positions = index._offsets, index._positions
        if not (_strictly_increasing(offsets) and _strictly_increasing(positions)):
            raise CorruptIndexError(f"{path}: entries are not strictly increasing")
        if offsets and offset_limit is not None and offsets[-1] >= offset_limit - base_offset:
            raise CorruptIndexError(f"{path}: last entry is beyond the segment's offsets")
        if positions and position_limit is not None and positions[-1] >= position_limit:
            raise CorruptIndexError(f"{path}: last entry points beyond the end of the log")
        return index

    @classmethod
    def _columns(cls, data: bytes) -> tuple[array[int], array[int]]:
        flat = array("I")
        flat.frombytes(data)
        if not _BIG_ENDIAN_HOST:
            flat.byteswap()
        return flat[0::2], flat[1::2]

    @classmethod
    def read_entries(cls, path: Path) -> list[OffsetPosition]:
        """Every whole entry of an index file with absolute offsets, without any check (for
        ``dump-log``, which reports problems rather than failing on them)."""
        data = path.read_bytes()
        data = data[: len(data) - len(data) % cls.ENTRY.size]
        base = base_offset_from_path(path)
        offsets, positions = cls._columns(data)
        return [OffsetPosition(base + o, p) for o, p in zip(offsets, positions, strict=True)]

    @property
    def entries(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def entry(self, n: int) -> OffsetPosition:
        return OffsetPosition(self.base_offset + self._offsets[n], self._positions[n])

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= target, or (base offset, 0) if there is none."""
        i = bisect.bisect_right(self._offsets, target_offset - self.base_offset) - 1
        if i < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(i)

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self.is_full:
            raise ValueError(f"{self.file.path}: index is full ({self.entries} entries)")
        if not 0 <= relative <= INT32_MAX:
            raise ValueError(f"{self.file.path}: offset {offset} does not fit the segment")
        if self._offsets and relative <= self._offsets[-1]:
            raise ValueError(f"{self.file.path}: offset {offset} is not above the last entry")
        self.file.write_at(self.entries * self.ENTRY.size, self.ENTRY.pack(relative, position))
        self._offsets.append(relative)
        self._positions.append(position)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries with offset >= `offset`."""
        keep = bisect.bisect_left(self._offsets, offset - self.base_offset)
        if keep < self.entries:
            del self._offsets[keep:]
            del self._positions[keep:]
            self.file.truncate(keep * self.ENTRY.size)


class TimeIndex:
    """Largest timestamp so far -> offset; timestamps only grow (§5.5)."""

    ENTRY = struct.Struct(">qI")

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.file = IndexFile(path)
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.ENTRY.size
        self._timestamps = array("q")
        self._offsets = array("I")  # relative

    @classmethod
    def create(cls, path: Path, base_offset: int, max_index_size: int) -> TimeIndex:
        index = cls(path, base_offset, max_index_size)
        index.file.create()
        return index

    @classmethod
    def load(
        cls, path: Path, base_offset: int, max_index_size: int, *, offset_limit: int | None = None
    ) -> TimeIndex:
        """Load and sanity-check a time index file (raises CorruptIndexError or OSError)."""
        data = path.read_bytes()
        if len(data) % cls.ENTRY.size:
            raise CorruptIndexError(f"{path}: length {len(data)} is not a multiple of 12")
        index = cls(path, base_offset, max_index_size)
        index._timestamps, index._offsets = cls._columns(data)
        if not (_strictly_increasing(index._timestamps) and _non_decreasing(index._offsets)):
            raise CorruptIndexError(f"{path}: entries are not increasing")
        if index._timestamps and index._timestamps[0] < 0:
            raise CorruptIndexError(f"{path}: negative timestamp")
        last = index._offsets[-1] if index._offsets else 0
        if offset_limit is not None and index._offsets and last >= offset_limit - base_offset:
            raise CorruptIndexError(f"{path}: last entry is beyond the segment's offsets")
        return index

    @classmethod
    def _columns(cls, data: bytes) -> tuple[array[int], array[int]]:
        rows = list(cls.ENTRY.iter_unpack(data))
        return array("q", [r[0] for r in rows]), array("I", [r[1] for r in rows])

    @classmethod
    def read_entries(cls, path: Path) -> list[TimestampOffset]:
        """Every whole entry with absolute offsets, unchecked (for ``dump-log``)."""
        data = path.read_bytes()
        data = data[: len(data) - len(data) % cls.ENTRY.size]
        base = base_offset_from_path(path)
        return [TimestampOffset(ts, base + rel) for ts, rel in cls.ENTRY.iter_unpack(data)]

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        """One slot stays free for the entry written when the segment is rolled or closed."""
        return self.entries >= self.max_entries - 1

    def last_entry(self) -> TimestampOffset:
        if not self._timestamps:
            return TimestampOffset(-1, self.base_offset)
        return TimestampOffset(self._timestamps[-1], self.base_offset + self._offsets[-1])

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= target, or (-1, base offset) if none."""
        i = bisect.bisect_right(self._timestamps, target_timestamp) - 1
        if i < 0:
            return TimestampOffset(-1, self.base_offset)
        return TimestampOffset(self._timestamps[i], self.base_offset + self._offsets[i])

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Record (timestamp, offset) if the timestamp is above the last entry's; an equal or
        missing (-1) timestamp adds nothing, so the index never records a smaller timestamp."""
        if not skip_full_check and self.is_full:
            raise ValueError(f"{self.file.path}: time index is full ({self.entries} entries)")
        last = self.last_entry()
        if self._timestamps and (offset < last.offset or timestamp < last.timestamp):
            raise ValueError(
                f"{self.file.path}: ({timestamp}, {offset}) is below the last entry {last}"
            )
        if timestamp <= last.timestamp:
            return
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise ValueError(f"{self.file.path}: offset {offset} does not fit the segment")
        self.file.write_at(self.entries * self.ENTRY.size, self.ENTRY.pack(timestamp, relative))
        self._timestamps.append(timestamp)
        self._offsets.append(relative)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries with offset >= `offset`."""
        keep = bisect.bisect_left(self._offsets, offset - self.base_offset)
        if keep < self.entries:
            del self._timestamps[keep:]
            del self._offsets[keep:]
            self.file.truncate(keep * self.ENTRY.size)


class TxnIndexSearchResult(NamedTuple):
    aborted: list[AbortedTxn]
    #: True when no later segment can hold an aborted transaction below the upper bound.
    is_complete: bool


class TransactionIndex:
    """The aborted transactions whose ABORT marker is in this segment (§5.7).

    Filled by the transactions work; the segment already creates, truncates, renames and deletes
    the file with its siblings so that the layout on disk is final.
    """

    VERSION = 0
    ENTRY = struct.Struct(">hqqqq")

    def __init__(self, path: Path) -> None:
        self.file = IndexFile(path)
        self._entries: list[AbortedTxn] = []

    @classmethod
    def create(cls, path: Path) -> TransactionIndex:
        index = cls(path)
        index.file.create()
        return index

    @classmethod
    def load(cls, path: Path) -> TransactionIndex:
        """Load a transaction index (raises CorruptIndexError or OSError)."""
        data = path.read_bytes()
        if len(data) % cls.ENTRY.size:
            raise CorruptIndexError(f"{path}: length {len(data)} is not a multiple of 34")
        index = cls(path)
        index._entries = cls._parse(data)
        if not _strictly_increasing([e.last_offset for e in index._entries]):
            raise CorruptIndexError(f"{path}: last offsets are not strictly increasing")
        return index

    @classmethod
    def _parse(cls, data: bytes) -> list[AbortedTxn]:
        entries = []
        for version, *fields in cls.ENTRY.iter_unpack(data):
            if version != cls.VERSION:
                raise CorruptIndexError(f"unknown transaction index entry version {version}")
            entries.append(AbortedTxn(*fields))
        return entries

    @classmethod
    def read_entries(cls, path: Path) -> list[AbortedTxn]:
        """Every whole entry, unchecked except for the version (for ``dump-log``)."""
        data = path.read_bytes()
        return cls._parse(data[: len(data) - len(data) % cls.ENTRY.size])

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def append(self, txn: AbortedTxn) -> None:
        if self._entries and txn.last_offset <= self._entries[-1].last_offset:
            raise ValueError(f"{self.file.path}: aborted txn {txn} is not after the last one")
        self.file.write_at(
            len(self._entries) * self.ENTRY.size, self.ENTRY.pack(self.VERSION, *txn)
        )
        self._entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Remove the transactions whose last offset is >= `offset`."""
        keep = bisect.bisect_left([e.last_offset for e in self._entries], offset)
        if keep < len(self._entries):
            del self._entries[keep:]
            self.file.truncate(keep * self.ENTRY.size)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> TxnIndexSearchResult:
        """The transactions overlapping [fetch_offset, upper_bound) that a read_committed fetch
        must skip (Kafka's ``TransactionIndex.collectAbortedTxns``)."""
        found = []
        for txn in self._entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)
