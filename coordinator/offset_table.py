"""The committed consumer offsets of one `__consumer_offsets` partition, held compactly in memory.

Contract §8.4 asks for at most 64 bytes per (group, topic, partition) entry. A dict of
tuples costs 210-340 (a tuple key, its strings, an int object per field, the value tuple, the
dict slot), so the table keeps no Python object per entry or per group; everything lives in flat
`array` columns and one `bytearray`:

* Groups are rows of four columns (where the name ends in the arena, block start, block length,
  newest commit timestamp). Names are UTF-8 in one bytearray arena, appended in row order, so
  row r's name runs from where row r-1's ends to where its own ends: no length field, no
  pointer, and a name is compared in place (`bytearray.startswith` after a length check).
* A group is found through an open-addressing hash table of group rows (an `array("i")` of row
  numbers, -1 empty, -2 deleted), probed like CPython's dict, at most 2/3 full. The hash is
  Python's salted hash of the name's bytes, so clients cannot choose names that collide.
* The entries of a group are one contiguous block of three entry columns (offset int64, leader
  epoch int32, topic-partition id int32), sorted by topic-partition id, so a lookup inside the
  group is a C-level bisect, `group_offsets` is a slice, and `remove_group` drops a block. The
  entries need no group reference and no hash slot of their own: 16 bytes an entry.
* (topic, partition) pairs are interned to small ids: a cluster has far fewer partitions than a
  table has entries.
* The commit timestamp is kept per group, the newest. Kafka expires a simple group's offsets one
  by one by their own commit timestamps; Tidelog (issue 14) expires a group's offsets together
  once the group has had no commit for the retention period, which needs only the newest.
* Metadata is kept sparsely (a dict per group, only for non-empty strings): most commits carry
  none.
* The position columns are 4-byte unsigned and widen to 8 bytes only if the arena or the entry
  columns ever pass 2^32.

Blocks are tight (no spare room). A new entry goes in place when its group's block is the last
one in the columns (the common case: a commit set's records arrive one after another); otherwise
the block moves to the end and its old cells become garbage. Removing an entry inside a block
shifts the block's tail down and leaves one garbage cell at its end. When garbage cells exceed a
quarter of the entries (or dead group rows a quarter of the groups), everything is rewritten
densely (`_compact`), which also drops the names of deleted groups and unused topic-partition ids
and shrinks the hash table, so churn never grows memory without bound and each compaction is paid
for by removals numbering a quarter of what it rewrites.

Measured with tracemalloc (`bench/offset_table.py`; Python 3.11, group names ``group-<n>`` of
7-12 bytes, one topic, empty metadata), bytes per entry:

* 10^4 groups x 100 partitions: 16.7 (the 16-byte entry, plus the columns' growth slack; the
  group's row, name and hash slot shared by 100 entries); a dict of tuples: 211;
* 10^6 groups x 1 partition: 57.9 (about 17 for the entry, 21 for the group row, 12 for the
  name, 8.4 for the hash slots, 2^21 of them); a dict of tuples: 338;
* 10^5 groups x 100 partitions (10^7 entries): 16.8.

Lookups cost about as much as a few dict operations in Python (1-2 us a get or a put, the
benchmark prints them). Growing the hash table and compacting are pauses proportional to the
table, the price of doing them in Python: at 10^6 groups x 1, about 0.5 s of CPU to double the
hash table, 0.45 s to compact the entries alone (garbage cells from moved blocks and removed
entries) and 1.7 s to compact the groups too (after a quarter of them were removed). Each is
rare: once per doubling of the groups, once per quarter of the table rewritten or removed.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from itertools import accumulate, chain, compress, repeat
from operator import add
from typing import NamedTuple


class CommittedOffset(NamedTuple):
    """One committed position, as OffsetFetch returns it."""

    offset: int
    leader_epoch: int  # -1 when unknown
    metadata: str  # "" when none


_EMPTY = -1
_DELETED = -2
_MIN_SLOTS = 8
_U64 = (1 << 64) - 1
#: Builds a CommittedOffset without the Python-level `__new__` that NamedTuple generates.
_new_value = tuple.__new__
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _name_key(group: str) -> bytes:
    """The group's name as stored: UTF-8, surrogates passed through so that no str fails."""
    return group.encode("utf-8", "surrogatepass")


def _check_range(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} {value} is out of range [{low}, {high}]")


class OffsetTable:
    """Committed offsets by (group, topic, partition); see the module docstring for the layout.

    Not thread-safe (the group coordinator is a single-threaded state machine). A group exists
    while it has at least one entry.
    """

    #: Largest value the 4-byte unsigned columns (name and block positions, block lengths) hold;
    #: past it they are widened to 8 bytes. A class attribute so that tests can lower it.
    _NARROW_LIMIT = 0xFFFF_FFFF
    #: Garbage entry cells (and dead group rows) tolerated beyond a quarter of the live ones
    #: before compaction; keeps small tables from compacting on every removal.
    _COMPACT_SLACK = 1024
    #: The hash of a group's name: the builtin (salted per process), here so that tests can
    #: force collisions.
    _hash_name: Callable[[bytes], int] = staticmethod(hash)

    def __init__(self) -> None:
        self._arena = bytearray()
        # Row r's name is arena[_g_name[r]:_g_name[r + 1]]: names are appended in row order,
        # so one more position than rows (the arena's end) delimits them all.
        self._g_name = array("I", [0])
        self._g_start = array("I")
        self._g_count = array("I")  # 0 = dead row (removed group), until compaction
        self._g_ts = array("q")
        self._slots = array("i", [_EMPTY]) * _MIN_SLOTS
        self._slots_used = 0  # live rows plus deleted markers
        self._live_groups = 0
        self._dead_groups = 0
        self._e_off = array("q")
        self._e_epoch = array("i")
        self._e_tp = array("i")
        self._entries = 0
        self._garbage = 0  # entry cells in no block
        self._tp_ids: dict[tuple[str, int], int] = {}
        self._tps: list[tuple[str, int]] = []
        self._metadata: dict[int, dict[int, str]] = {}  # group row -> tp id -> non-empty

    # ---- hashing

    def _probe(self, key: bytes) -> tuple[int, int]:
        """(group row or -1, slot): the group's slot, or where to insert it (first deleted)."""
        slots = self._slots
        mask = len(slots) - 1
        arena = self._arena
        names = self._g_name
        size = len(key)
        h = self._hash_name(key) & _U64
        i = h & mask
        perturb = h
        free = -1
        while True:
            row = slots[i]
            if row == _EMPTY:
                return -1, (i if free < 0 else free)
            if row >= 0:
                start = names[row]
                if names[row + 1] - start == size and arena.startswith(key, start):
                    return row, i
            elif free < 0:
                free = i
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask

    def _live_rows(self) -> tuple[list[int], list[bytes]]:
        """The live group rows and their names, in row order."""
        rows = list(compress(range(len(self._g_count)), self._g_count))
        names = self._g_name
        arena = bytes(self._arena)
        starts = map(names.__getitem__, rows)
        ends = map(names.__getitem__, map(add, rows, repeat(1)))
        return rows, list(map(arena.__getitem__, map(slice, starts, ends)))

    def _rehash(self, rows: list[int], keys: list[bytes], room: int) -> None:
        """Rebuild the hash table for these rows (and `room` more), without deleted markers."""
        size = _MIN_SLOTS
        while size * 2 < (len(rows) + room) * 3:
            size *= 2
        # Row numbers stay below twice the slot count (dead rows are at most a quarter of the
        # live ones plus the slack), so 4-byte slots hold them up to 2**30 slots.
        slots = array("i" if size <= 1 << 30 else "q", [_EMPTY]) * size
        mask = size - 1
        for row, h in zip(rows, map(self._hash_name, keys), strict=True):
            h &= _U64
            i = h & mask
            perturb = h
            while slots[i] != _EMPTY:
                perturb >>= 5
                i = (i * 5 + perturb + 1) & mask
            slots[i] = row
        self._slots = slots
        self._slots_used = len(rows)

    # ---- groups

    def _add_group(self, key: bytes, slot: int, timestamp_ms: int) -> int:
        if (self._slots_used + 1) * 3 > len(self._slots) * 2:
            self._rehash(*self._live_rows(), room=1)
            _, slot = self._probe(key)
        row = len(self._g_count)
        self._arena += key
        if len(self._arena) > self._NARROW_LIMIT and self._g_name.typecode != "q":
            self._g_name = self._widened(self._g_name)
        self._g_name.append(len(self._arena))
        self._g_start.append(len(self._e_off))
        self._g_count.append(0)
        self._g_ts.append(timestamp_ms)
        if self._slots[slot] == _EMPTY:
            self._slots_used += 1
        self._slots[slot] = row
        self._live_groups += 1
        return row

    def _drop_group(self, row: int, slot: int) -> None:
        self._slots[slot] = _DELETED
        self._g_count[row] = 0
        self._metadata.pop(row, None)
        self._live_groups -= 1
        self._dead_groups += 1

    def _widened(self, column: array[int]) -> array[int]:
        return array("q", column)

    # ---- topic-partition ids

    def _tp_id(self, topic: str, partition: int) -> int:
        tp = (topic, partition)
        tp_id = self._tp_ids.get(tp)
        if tp_id is None:
            tp_id = len(self._tps)
            self._tp_ids[tp] = tp_id
            self._tps.append(tp)
        return tp_id

    # ---- entries

    def _insert_entry(self, row: int, pos: int, tp_id: int, value: CommittedOffset) -> None:
        start = self._g_start[row]
        count = self._g_count[row]
        end = start + count
        size = len(self._e_off)
        if size + count >= self._NARROW_LIMIT and self._g_start.typecode != "q":
            # The block's new end can reach size + count + 1.
            self._g_start = self._widened(self._g_start)
            self._g_count = self._widened(self._g_count)
        if end != size:  # not the last block: move it to the end, its cells become garbage
            for column in (self._e_off, self._e_epoch, self._e_tp):
                column.extend(column[start:end])
            self._garbage += count
            pos += size - start
            self._g_start[row] = size
        self._e_off.insert(pos, value.offset)
        self._e_epoch.insert(pos, value.leader_epoch)
        self._e_tp.insert(pos, tp_id)
        self._g_count[row] = count + 1
        self._entries += 1

    def _remove_entry(self, row: int, slot: int, pos: int) -> None:
        start = self._g_start[row]
        count = self._g_count[row]
        end = start + count
        if end == len(self._e_off):
            for column in (self._e_off, self._e_epoch, self._e_tp):
                del column[pos]
        else:
            for column in (self._e_off, self._e_epoch, self._e_tp):
                column[pos : end - 1] = column[pos + 1 : end]
            self._garbage += 1
        self._entries -= 1
        if count == 1:
            self._drop_group(row, slot)
        else:
            self._g_count[row] = count - 1

    def _find_entry(self, row: int, tp_id: int) -> tuple[int, bool]:
        start = self._g_start[row]
        end = start + self._g_count[row]
        pos = bisect_left(self._e_tp, tp_id, start, end)
        return pos, pos < end and self._e_tp[pos] == tp_id

    def _metadata_of(self, row: int, tp_id: int) -> str:
        group_metadata = self._metadata.get(row)
        return "" if group_metadata is None else group_metadata.get(tp_id, "")

    # ---- compaction

    def _maybe_compact(self) -> None:
        slack = self._COMPACT_SLACK
        if self._dead_groups > (self._live_groups >> 2) + slack:
            self._compact(drop_rows=True)
        elif self._garbage > (self._entries >> 2) + slack:
            self._compact(drop_rows=False)

    def _compact(self, drop_rows: bool) -> None:
        """Rewrite the entry columns densely (no garbage cells, no unused tp ids) and, with
        `drop_rows`, the group rows too (no dead rows or their names; the hash table rebuilt).

        Every step is a C-level pass (map, chain, accumulate over arrays) but the hash table's
        refill, so that compacting a million groups pauses the caller for a fraction of a
        second, and keeping the rows (the usual case when groups stay and entries move) skips
        the names and the hash table, the larger part of that.
        """
        if drop_rows:
            rows, keys = self._live_rows()
            counts = list(map(self._g_count.__getitem__, rows))
            starts = list(map(self._g_start.__getitem__, rows))
        else:  # dead rows have no cells: their empty ranges fall out by themselves
            counts = list(self._g_count)
            starts = list(self._g_start)
        cells = list(chain.from_iterable(map(range, starts, map(add, starts, counts))))
        offsets = array("q", map(self._e_off.__getitem__, cells))
        epochs = array("i", map(self._e_epoch.__getitem__, cells))
        tps = array("i", map(self._e_tp.__getitem__, cells))
        block_type = "I" if len(cells) < self._NARROW_LIMIT else "q"
        self._g_start = array(block_type, accumulate(counts, initial=0))
        self._g_start.pop()  # the end of the last block
        self._g_count = array(block_type, counts)
        metadata = self._metadata
        if drop_rows:
            self._arena = bytearray().join(keys)
            name_type = "I" if len(self._arena) <= self._NARROW_LIMIT else "q"
            self._g_name = array(name_type, accumulate(map(len, keys), initial=0))
            self._g_ts = array("q", map(self._g_ts.__getitem__, rows))
            metadata = {bisect_left(rows, old): texts for old, texts in metadata.items()}
            self._dead_groups = 0
            self._rehash(list(range(len(rows))), keys, room=0)
        used = sorted(set(tps))
        if len(used) < len(self._tps):
            # Renumbering in the old order keeps every block sorted.
            renumber = {old: new for new, old in enumerate(used)}
            tps = array("i", map(renumber.__getitem__, tps))
            self._tps = [self._tps[old] for old in used]
            self._tp_ids = {tp: tp_id for tp_id, tp in enumerate(self._tps)}
            metadata = {
                row: {renumber[tp_id]: text for tp_id, text in texts.items()}
                for row, texts in metadata.items()
            }
        self._e_off, self._e_epoch, self._e_tp = offsets, epochs, tps
        self._metadata = metadata
        self._garbage = 0

    # ---- the interface

    def put(
        self,
        group: str,
        topic: str,
        partition: int,
        value: CommittedOffset,
        commit_timestamp_ms: int,
    ) -> None:
        """Insert or overwrite one entry; the group's newest commit timestamp only grows."""
        if not (
            0 <= partition <= _INT32_MAX
            and _INT64_MIN <= value.offset <= _INT64_MAX
            and _INT32_MIN <= value.leader_epoch <= _INT32_MAX
            and _INT64_MIN <= commit_timestamp_ms <= _INT64_MAX
        ):  # checked before any change, so a bad value leaves the table as it was
            _check_range("partition", partition, 0, _INT32_MAX)
            _check_range("offset", value.offset, _INT64_MIN, _INT64_MAX)
            _check_range("leader epoch", value.leader_epoch, _INT32_MIN, _INT32_MAX)
            _check_range("commit timestamp", commit_timestamp_ms, _INT64_MIN, _INT64_MAX)
        key = _name_key(group)
        row, slot = self._probe(key)
        tp_id = self._tp_id(topic, partition)
        if row < 0:
            row = self._add_group(key, slot, commit_timestamp_ms)
            pos, found = len(self._e_off), False
        else:
            if commit_timestamp_ms > self._g_ts[row]:
                self._g_ts[row] = commit_timestamp_ms
            pos, found = self._find_entry(row, tp_id)
        if found:
            self._e_off[pos] = value.offset
            self._e_epoch[pos] = value.leader_epoch
        else:
            self._insert_entry(row, pos, tp_id, value)
        if value.metadata:
            self._metadata.setdefault(row, {})[tp_id] = value.metadata
        elif row in self._metadata:
            group_metadata = self._metadata[row]
            group_metadata.pop(tp_id, None)
            if not group_metadata:
                del self._metadata[row]
        if not found:
            self._maybe_compact()

    def put_many(
        self,
        group: str,
        entries: Iterable[tuple[str, int, int, int, str]],
        commit_timestamp_ms: int,
    ) -> None:
        """`put` of every (topic, partition, offset, leader epoch, metadata) of one commit of
        `group`, as one call: the group is found once and an entry it has is overwritten in
        place, so a commit set costs one probe rather than one a partition (the coordinator
        applies every committed offset through here). New entries go through `put`."""
        tp_ids = self._tp_ids
        put_any = False
        # The group's row and its columns, read again after every `put` (which may insert
        # into them, move the group or compact the table).
        row = -1
        stale = True
        for topic, partition, offset, leader_epoch, metadata in entries:
            put_any = True
            if stale:
                row, _ = self._probe(_name_key(group))
                if row >= 0:
                    start = self._g_start[row]
                    end = start + self._g_count[row]
                    e_tp, e_off, e_epoch = self._e_tp, self._e_off, self._e_epoch
                    plain = row not in self._metadata
                stale = False
            if row >= 0 and plain and not metadata:
                tp_id = tp_ids.get((topic, partition))
                if tp_id is not None:
                    pos = bisect_left(e_tp, tp_id, start, end)
                    if (
                        pos < end
                        and e_tp[pos] == tp_id
                        and _INT64_MIN <= offset <= _INT64_MAX
                        and _INT32_MIN <= leader_epoch <= _INT32_MAX
                    ):
                        e_off[pos] = offset
                        e_epoch[pos] = leader_epoch
                        continue
            # New entry, metadata to keep or drop, or a value `put` refuses: the general way.
            self.put(group, topic, partition,
                     _new_value(CommittedOffset, (offset, leader_epoch, metadata)),
                     commit_timestamp_ms)
            stale = True
        if put_any:
            row, _ = self._probe(_name_key(group))
            if row >= 0 and commit_timestamp_ms > self._g_ts[row]:
                self._g_ts[row] = commit_timestamp_ms

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        row, _ = self._probe(_name_key(group))
        if row < 0:
            return None
        tp_id = self._tp_ids.get((topic, partition))
        if tp_id is None:
            return None
        pos, found = self._find_entry(row, tp_id)
        if not found:
            return None
        metadata = self._metadata_of(row, tp_id) if self._metadata else ""
        return _new_value(CommittedOffset, (self._e_off[pos], self._e_epoch[pos], metadata))

    def remove(self, group: str, topic: str, partition: int) -> bool:
        row, slot = self._probe(_name_key(group))
        tp_id = self._tp_ids.get((topic, partition))
        if row < 0 or tp_id is None:
            return False
        pos, found = self._find_entry(row, tp_id)
        if not found:
            return False
        group_metadata = self._metadata.get(row)
        if group_metadata is not None:
            group_metadata.pop(tp_id, None)
            if not group_metadata:
                del self._metadata[row]
        self._remove_entry(row, slot, pos)
        self._maybe_compact()
        return True

    def remove_group(self, group: str) -> int:
        """Drop every entry of the group; returns how many there were."""
        row, slot = self._probe(_name_key(group))
        if row < 0:
            return 0
        start = self._g_start[row]
        count = self._g_count[row]
        if start + count == len(self._e_off):
            for column in (self._e_off, self._e_epoch, self._e_tp):
                del column[start:]
        else:
            self._garbage += count
        self._entries -= count
        self._drop_group(row, slot)
        self._maybe_compact()
        return count

    def group_offsets(self, group: str) -> list[tuple[str, int, CommittedOffset]]:
        """Every entry of the group as (topic, partition, value), by topic then partition."""
        row, _ = self._probe(_name_key(group))
        if row < 0:
            return []
        start = self._g_start[row]
        end = start + self._g_count[row]
        group_metadata = self._metadata.get(row, {})
        tps = self._tps
        result = [
            (*tps[tp_id], CommittedOffset(offset, epoch, group_metadata.get(tp_id, "")))
            for offset, epoch, tp_id in zip(
                self._e_off[start:end],
                self._e_epoch[start:end],
                self._e_tp[start:end],
                strict=True,
            )
        ]
        result.sort(key=lambda item: (item[0], item[1]))
        return result

    def groups(self) -> list[str]:
        """The names of the groups with at least one entry, sorted."""
        _, keys = self._live_rows()
        return sorted(key.decode("utf-8", "surrogatepass") for key in keys)

    def groups_committed_by(
        self, cutoff_ms: int, cursor: int, count: int
    ) -> tuple[list[str], int]:
        """The groups whose newest commit is at or before `cutoff_ms`, among at most `count`
        groups from `cursor`, and the cursor to go on from (0 once every group was looked at;
        start from 0). A bounded step, so that a scan of a million groups can be spread out
        (one pass over them all takes about a second of Python). The cursor is a group row:
        removals that compact the table renumber rows, so a scan across them may miss or
        repeat a group, which the next scan finds again."""
        rows = len(self._g_count)
        start = min(cursor, rows)
        stop = min(start + count, rows)
        live = self._g_count[start:stop]
        stale = compress(range(start, stop), map(cutoff_ms.__ge__, self._g_ts[start:stop]))
        names = self._g_name
        arena = self._arena
        found = [
            arena[names[row] : names[row + 1]].decode("utf-8", "surrogatepass")
            for row in stale
            if live[row - start]
        ]
        return found, (0 if stop >= rows else stop)

    def last_commit_ms(self, group: str) -> int | None:
        """The newest commit timestamp put for the group, None when it has no entry."""
        row, _ = self._probe(_name_key(group))
        return None if row < 0 else self._g_ts[row]

    def __len__(self) -> int:
        return self._entries
