"""Memory and speed of the committed-offsets table (`tidelog.coordinator.offset_table`), against
a plain dict of (group, topic, partition) -> CommittedOffset measured in the same run.

* memory: bytes per entry as tracemalloc sees them, after putting every entry of a shape into an
  empty table (empty metadata, one topic ``orders``, group names ``group-<n>``). Shapes: 10^4
  groups x 100 partitions and 10^6 groups x 1 partition (contract §8.4, goal <= 64),
  and 10^5 groups x 100 partitions (10^7 entries; the dict baseline is skipped there, it would
  take several GiB).
* speed: CPU nanoseconds per operation on the 10^6-entry tables, best of a few rounds over the
  same random keys: get of a present entry, get of an absent group, put overwriting an entry,
  and put of a new group (then removed again, so each round starts from the same table).

Run: ``.venv/bin/python bench/offset_table.py [--quick] [--no-big]``. ``--quick`` uses tiny
sizes (seconds) so that a smoke test can keep this script working; its figures mean little.
A full run takes several minutes and about 1 GiB of memory. Exits 1 if a full run misses the
memory goal.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep it off.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog.coordinator.offset_table import CommittedOffset, OffsetTable  # noqa: E402

T0 = 1_700_000_000_000
TOPIC = "orders"
VALUE = CommittedOffset(123_456_789, 5, "")
GOAL = 64


class DictTable:
    """The baseline: what a straightforward table would be."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, int], CommittedOffset] = {}
        self.stamps: dict[str, int] = {}

    def put(self, group: str, topic: str, partition: int, value: CommittedOffset, ts: int) -> None:
        self.entries[group, topic, partition] = value
        self.stamps[group] = max(ts, self.stamps.get(group, ts))

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        return self.entries.get((group, topic, partition))

    def remove_group(self, group: str) -> int:
        # Enough for the benchmark, which removes only groups of one entry on TOPIC 0.
        del self.entries[group, TOPIC, 0]
        del self.stamps[group]
        return 1


Table = OffsetTable | DictTable


def fill(table: Table, groups: int, partitions: int) -> None:
    for g in range(groups):
        name = f"group-{g}"
        for p in range(partitions):
            table.put(name, TOPIC, p, CommittedOffset(VALUE.offset + p, 5, ""), T0 + g)


def bytes_per_entry(make: Callable[[], Table], groups: int, partitions: int) -> float:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table = make()
        fill(table, groups, partitions)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del table
    return used / (groups * partitions)


def timed(loop: Callable[[], None]) -> float:
    start = time.process_time()
    loop()
    return time.process_time() - start


def speeds(table: Table, groups: int, partitions: int, ops: int, rounds: int) -> dict[str, float]:
    """Best CPU ns per operation over `rounds` rounds of `ops` operations each."""
    rng = random.Random(14)
    keys = [
        (f"group-{rng.randrange(groups)}", TOPIC, rng.randrange(partitions)) for _ in range(ops)
    ]
    absent = [f"absent-{i}" for i in range(ops)]
    new = [f"new-{i}" for i in range(ops)]
    get, put = table.get, table.put

    def get_present() -> float:
        def loop() -> None:
            for group, topic, partition in keys:
                get(group, topic, partition)

        return timed(loop)

    def get_absent() -> float:
        def loop() -> None:
            for group in absent:
                get(group, TOPIC, 0)

        return timed(loop)

    def put_overwrite() -> float:
        def loop() -> None:
            for group, topic, partition in keys:
                put(group, topic, partition, VALUE, T0)

        return timed(loop)

    def put_new_group() -> float:
        def loop() -> None:
            for group in new:
                put(group, TOPIC, 0, VALUE, T0)

        elapsed = timed(loop)
        for group in new:  # back to the same table for the next round
            table.remove_group(group)
        return elapsed

    def best(run: Callable[[], float]) -> float:
        return min(run() for _ in range(rounds)) / ops * 1e9

    assert all(get(*key) is not None for key in keys[:100])
    return {
        "get (present)": best(get_present),
        "get (absent group)": best(get_absent),
        "put (overwrite)": best(put_overwrite),
        "put (new group)": best(put_new_group),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--no-big", action="store_true", help="skip the 10^7-entry shape")
    args = parser.parse_args()
    scale = 100 if args.quick else 1
    shapes = [(10_000 // scale, 100), (1_000_000 // scale, 1)]
    big = (100_000 // scale, 100)
    ops, rounds = (1_000, 2) if args.quick else (100_000, 3)

    print(f"python {platform.python_version()}, {platform.machine()}, group names group-<n>")
    print("\nmemory (tracemalloc), bytes per entry")
    print(f"{'shape':>28} {'OffsetTable':>12} {'dict':>8} {'dict/table':>11}")
    worst = 0.0
    for groups, partitions in [*shapes, *([] if args.no_big else [big])]:
        table_bytes = bytes_per_entry(OffsetTable, groups, partitions)
        worst = max(worst, table_bytes)
        label = f"{groups} groups x {partitions}"
        if (groups, partitions) == big:
            print(f"{label:>28} {table_bytes:>12.1f} {'-':>8} {'-':>11}")
            continue
        dict_bytes = bytes_per_entry(DictTable, groups, partitions)
        print(
            f"{label:>28} {table_bytes:>12.1f} {dict_bytes:>8.1f} {dict_bytes / table_bytes:>11.1f}"
        )

    print("\nspeed, CPU ns per operation (best of rounds)")
    for groups, partitions in shapes:
        print(f"  {groups} groups x {partitions}")
        results: dict[str, dict[str, float]] = {}
        for name, make in (("OffsetTable", OffsetTable), ("dict", DictTable)):
            table: Table = make()
            fill(table, groups, partitions)
            results[name] = speeds(table, groups, partitions, ops, rounds)
            del table
        print(f"{'operation':>28} {'OffsetTable':>12} {'dict':>8} {'table/dict':>11}")
        for op, value in results["OffsetTable"].items():
            base = results["dict"][op]
            print(f"{op:>28} {value:>12.0f} {base:>8.0f} {value / base:>11.1f}")

    print(f"\nworst bytes per entry: {worst:.1f} (goal <= {GOAL})")
    return 0 if args.quick or worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
