"""``tidelog storage-demo``: a tour of one partition log on disk, until the cluster exists.

It writes timestamped records over several small segments, answers the ListOffsets lookups
(contract §6) from the storage engine directly, closes and reopens the log, and shows that every
answer survived. Time is simulated (one record per second from a fixed start), so the output
is the same on every run except the measured durations, and the by-time answers can be checked
by eye: the record at offset N has timestamp start + N seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidelog.storage import Log, TimestampAndOffset

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
RECORDS = 6000
RECORDS_PER_BATCH = 50
VALUE_BYTES = 200
SEGMENT_BYTES = 256 * 1024
PARTITION = "demo-0"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, metavar="DIR",
                        help=f"write the partition log to DIR/{PARTITION} and keep it "
                             "(default: a temporary directory, removed at the end)")


def run(args: argparse.Namespace) -> int:
    if args.data_dir is None:
        with tempfile.TemporaryDirectory(prefix="tidelog-storage-demo-") as tmp:
            return _tour(Path(tmp) / PARTITION, keep=False)
    directory: Path = args.data_dir / PARTITION
    if directory.exists():
        print(f"tidelog storage-demo: {directory} already exists; remove it or choose another "
              "--data-dir", file=sys.stderr)
        return 2
    return _tour(directory, keep=True)


class _SimulatedClock:
    """The broker clock follows the records, so segment last-modified times (the legacy
    lookup's input) line up with record timestamps."""

    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


def _tour(directory: Path, *, keep: bool) -> int:
    from tidelog.storage import Log, LogConfig

    config = LogConfig(segment_bytes=SEGMENT_BYTES)
    clock = _SimulatedClock()
    print("== 1. Write ==")
    print(f"partition directory: {directory}" + ("" if keep else " (temporary)"))
    print(f"segment.bytes={config.segment_bytes}  index.interval.bytes="
          f"{config.index_interval_bytes}  message.timestamp.type=CreateTime")
    print(f"{RECORDS} records of {VALUE_BYTES} bytes in batches of {RECORDS_PER_BATCH}, one "
          f"per second from {_iso(START_MS)}; leader epoch 1, then 2 from offset {RECORDS // 2}")
    log = Log.open(directory, config, clock=clock)
    try:
        _write(log, clock)
        log.update_high_watermark(log.log_end_offset)
        print(f"log end offset {log.log_end_offset} in {len(log.segments)} segments; high "
              "watermark moved to the log end (one replica: what it holds is committed)")

        print("\n== 2. Lookups ==")
        before = _lookups(log)
        for label, answer in before.items():
            print(f"  {label:<47} {answer}")
        print("  (legacy: base offsets of the segments last modified at or before the time,\n"
              "   and the log end offset for latest; newest first, at most 3)")
    finally:
        log.close()

    print("\n== 3. Close and reopen ==")
    started = time.perf_counter()
    log = Log.open(directory, config, clock=clock)
    elapsed_ms = (time.perf_counter() - started) * 1000
    try:
        print(f"closed cleanly, reopened in {elapsed_ms:.1f} ms (clean-shutdown marker: the "
              "indexes are loaded, not rebuilt)")
        after = _lookups(log)
    finally:
        log.close()
    changed = [label for label in before if before[label] != after[label]]
    for label in changed:
        print(f"  CHANGED {label}: {before[label]} -> {after[label]}")
    print(f"all {len(before)} lookups give the same answers after the reopen" if not changed
          else f"{len(changed)} of {len(before)} lookups changed after the reopen")

    print("\n== 4. Segment files ==")
    for path in sorted(directory.iterdir()):
        print(f"  {path.name:<36} {path.stat().st_size:>8} bytes")
    print(f"\ninspect one with: tidelog dump-log {directory}/{0:020d}.log --deep"
          if keep else "\nthe temporary directory is removed now; keep it with --data-dir DIR")
    return 1 if changed else 0


def _write(log: Log, clock: _SimulatedClock) -> None:
    from tidelog.records import RecordInput, build_batch

    value = b"x" * VALUE_BYTES
    with _progress(RECORDS) as advance:
        for first in range(0, RECORDS, RECORDS_PER_BATCH):
            offsets = range(first, min(first + RECORDS_PER_BATCH, RECORDS))
            records = [
                RecordInput(value=value, key=f"key-{o % 16}".encode(), timestamp=_ts(o))
                for o in offsets
            ]
            clock.now = records[-1].timestamp
            log.append_as_leader(build_batch(records), 1 if first < RECORDS // 2 else 2)
            advance(len(records))


@contextmanager
def _progress(total: int) -> Iterator[Callable[[int], None]]:
    """A bar redrawn in place on a terminal; a line per fifth of the work otherwise (logs,
    pipes and tests get no carriage returns)."""
    done = 0
    shown = 0
    tty = sys.stdout.isatty()

    def advance(n: int) -> None:
        nonlocal done, shown
        done += n
        fifths = done * 5 // total
        if tty:
            filled = done * 30 // total
            print(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} records",
                  end="", flush=True)
        elif fifths > shown:
            shown = fifths
            print(f"  wrote {done}/{total} records ({fifths * 20}%)")

    yield advance
    if tty:
        print()


def _ts(offset: int) -> int:
    return START_MS + offset * 1000


def _iso(ms: int) -> str:
    text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return text.replace(".000+00:00", "Z").replace("+00:00", "Z")


def _answer(found: TimestampAndOffset | None) -> str:
    if found is None:
        return "none (offset -1)"
    return f"offset {found.offset}, timestamp {_iso(found.timestamp)}, epoch {found.leader_epoch}"


def _lookups(log: Log) -> dict[str, str]:
    """What ListOffsets answers (contract §6) before any HW/LSO bound, plus the legacy v0 list."""
    from tidelog.types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

    earliest = log.fetch_earliest()
    mid = _ts(RECORDS // 3) + 500
    answers = {
        "earliest (-2)": f"offset {earliest.offset}, epoch {earliest.leader_epoch}",
        "latest (-1)": f"offset {log.log_end_offset}, epoch {log.latest_epoch}",
        "max timestamp (-3)": _answer(log.fetch_max_timestamp()),
        f"by time {_iso(START_MS - 3_600_000)}": _answer(
            log.fetch_offset_by_timestamp(START_MS - 3_600_000)
        ),
        f"by time {_iso(mid)}": _answer(log.fetch_offset_by_timestamp(mid)),
        f"by time {_iso(_ts(RECORDS))}": _answer(log.fetch_offset_by_timestamp(_ts(RECORDS))),
    }
    legacy_time = _ts(RECORDS // 2)
    for label, timestamp in (
        ("latest", LATEST_TIMESTAMP),
        ("earliest", EARLIEST_TIMESTAMP),
        (_iso(legacy_time), legacy_time),
    ):
        answers[f"legacy offsets_before({label}, 3)"] = str(log.offsets_before(timestamp, 3))
    return answers
