"""Storage engine benchmarks, each against a baseline measured in the same run on the same disk.

* append: Log.append_as_leader of pre-built batches (1 KiB records, 100 per batch), one flush
  at the end, against os.write of the same bytes to a plain file plus one fsync.
  Goal: ratio >= 0.5.
* lookup: Log.fetch_offset_by_timestamp for random targets as one log grows through 10^4 ..
  10^7 records (16-byte values, segment.bytes 64 MiB), beside a linear scan of the batches
  with the codec for the smaller sizes. Goal: latency(10^7) / latency(10^4) <= 2.
* reopen: Log.open of the cleanly closed append log (1 GiB), with warm and cold page cache;
  goal < 1 s. Unclean reopens (no clean-shutdown marker; then no checkpoints either) for
  contrast.

Run: ``.venv/bin/python bench/storage.py [--quick] [--dir DIR]``. ``--quick`` uses tiny sizes
(seconds) so that a smoke test can keep this script working; its figures mean little.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path, where this very file would
# shadow the storage package it measures.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog.clock import wall_clock_ms  # noqa: E402
from tidelog.records import (  # noqa: E402
    RecordInput,
    build_batch,
    iter_batches,
    record_timestamps,
)
from tidelog.storage import Log, LogConfig, TimestampAndOffset  # noqa: E402
from tidelog.storage.loader import CLEAN_SHUTDOWN_FILE, OFFSETS_CHECKPOINT  # noqa: E402

MIB = 1024 * 1024
T0 = 1_700_000_000_000


@dataclass(frozen=True)
class Sizes:
    append_bytes: int
    lookup_checkpoints: tuple[int, ...]
    lookup_queries: int
    scan_up_to: int  # the linear scan baseline runs for checkpoints up to this many records
    scan_queries: int


FULL = Sizes(1024 * MIB, (10**4, 10**5, 10**6, 10**7), 2000, 10**6, 30)
QUICK = Sizes(4 * MIB, (10**3, 10**4), 200, 10**4, 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write (default: a new temporary directory)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-", dir=args.dir))
    try:
        need = 2 * sizes.append_bytes + sizes.lookup_checkpoints[-1] * 60
        free = shutil.disk_usage(root).free
        print(f"# tidelog storage benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
        print(f"# {platform.platform()}, {os.cpu_count()} cores, Python "
              f"{platform.python_version()}; writing in {root} ({free / 2**30:.0f} GiB free)")
        print(f"# load average at start: {os.getloadavg()[0]:.1f} (other processes skew "
              "wall-clock figures; the CPU-time ratio is immune to them)")
        if free < need * 1.2:
            print(f"not enough free disk: need about {need / 2**30:.1f} GiB", file=sys.stderr)
            return 2
        ok = bench_append_and_reopen(root, sizes)
        ok &= bench_lookup(root, sizes)
        print(f"# load average at end: {os.getloadavg()[0]:.1f}")
        if args.quick:
            print("# --quick: sizes too small for the goals to mean anything; exit 0 regardless")
            return 0
        return 0 if ok else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


# ----------------------------------------------------------------------------------------------
# Append throughput and reopen time


def append_batches(total_bytes: int) -> list[bytes]:
    """1 KiB records, 100 per batch, timestamped now (CreateTime validation accepts them)."""
    value = random.Random(1).randbytes(1024)
    now = wall_clock_ms()
    one = build_batch([RecordInput(value=value, timestamp=now)] * 100)
    count = -(-total_bytes // len(one))
    return [
        build_batch([RecordInput(value=value, timestamp=now + b) for _ in range(100)])
        for b in range(count)
    ]


@dataclass(frozen=True)
class Timing:
    """Seconds until the bytes were in the page cache, and until the final fsync returned;
    and the CPU seconds of the first part, which other tenants of the machine do not inflate."""

    written: float
    durable: float
    written_cpu: float


def time_raw_writes(path: Path, batches: list[bytes]) -> Timing:
    started, started_cpu = time.perf_counter(), time.process_time()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for data in batches:
            os.write(fd, data)
        written, written_cpu = time.perf_counter() - started, time.process_time() - started_cpu
        os.fsync(fd)
    finally:
        os.close(fd)
    return Timing(written, time.perf_counter() - started, written_cpu)


def time_log_appends(directory: Path, batches: list[bytes]) -> tuple[Timing, Log]:
    log = Log.open(directory, LogConfig(), clock=wall_clock_ms)
    started, started_cpu = time.perf_counter(), time.process_time()
    for data in batches:
        log.append_as_leader(data, 0)
    written, written_cpu = time.perf_counter() - started, time.process_time() - started_cpu
    log.flush()
    return Timing(written, time.perf_counter() - started, written_cpu), log


def bench_append_and_reopen(root: Path, sizes: Sizes) -> bool:
    batches = append_batches(sizes.append_bytes)
    total = sum(map(len, batches))
    print(f"\n## append: {len(batches)} batches of 100 x 1 KiB records, "
          f"{total / MIB:.0f} MiB, one flush at the end")
    raw_path, log_dir = root / "raw.bin", root / "append-0"
    raw_runs: list[Timing] = []
    log_runs: list[Timing] = []
    log: Log | None = None
    # Alternating order, and no dirty pages left over from the previous run: the final fsync
    # of either side must not pay for the other's writeback.
    for raw_first in (True, False, True):
        for is_raw in (raw_first, not raw_first):
            os.sync()
            if is_raw:
                raw_runs.append(time_raw_writes(raw_path, batches))
                raw_path.unlink()
            else:
                if log is not None:
                    log.close()
                    shutil.rmtree(log_dir)
                timing, log = time_log_appends(log_dir, batches)
                log_runs.append(timing)
    assert log is not None
    del batches
    for name, runs in (("raw os.write", raw_runs), ("Log.append_as_leader", log_runs)):
        for field_name, label in (
            ("written_cpu", "CPU time"), ("written", "page cache"), ("durable", "+ fsync")
        ):
            times = [getattr(run, field_name) for run in runs]
            median = statistics.median(times)
            print(f"{name:<21} {label:<11} median {median:6.3f} s {total / MIB / median:6.0f} "
                  f"MiB/s  (runs: {', '.join(f'{t:.3f}' for t in times)})")
    ratio = statistics.median(r.durable for r in raw_runs) / statistics.median(
        r.durable for r in log_runs
    )
    for field_name, label in (("written", "wall"), ("written_cpu", "CPU")):
        engine_ratio = statistics.median(getattr(r, field_name) for r in raw_runs) / (
            statistics.median(getattr(r, field_name) for r in log_runs)
        )
        print(f"ratio append/raw-write before the fsync, {label} time (engine cost alone): "
              f"{engine_ratio:.2f}")
    print(f"ratio append/raw-write: {ratio:.2f} (goal >= 0.5) {verdict(ratio >= 0.5)}")
    return (ratio >= 0.5) & bench_reopen(log, total)


def bench_reopen(log: Log, total: int) -> bool:
    directory = log.directory
    segments = len(log.segments)
    log.close()
    print(f"\n## reopen: {total / MIB:.0f} MiB log in {segments} segments")

    def reopen(prepare: Callable[[], None] | None = None) -> float:
        if prepare is not None:
            prepare()
        started = time.perf_counter()
        reopened = Log.open(directory, LogConfig(), clock=wall_clock_ms)
        elapsed = time.perf_counter() - started
        reopened.close()
        return elapsed

    warm = min(reopen() for _ in range(3))
    cold = reopen(lambda: evict_page_cache(directory))
    unclean = reopen(lambda: (directory / CLEAN_SHUTDOWN_FILE).unlink())
    def forget_everything() -> None:
        (directory / CLEAN_SHUTDOWN_FILE).unlink()
        (directory / OFFSETS_CHECKPOINT).unlink()

    full = reopen(forget_everything)
    for label, seconds in (
        ("clean, warm page cache", warm),
        ("clean, cold page cache", cold),
        ("unclean: no marker, recovery from the recovery point", unclean),
        ("unclean: no marker, no offsets checkpoint (all recovered)", full),
    ):
        print(f"{label:<58} {seconds * 1000:9.1f} ms")
    worst = max(warm, cold)
    print(f"reopen clean (worst of warm/cold): {worst:.3f} s (goal < 1 s) {verdict(worst < 1)}")
    return worst < 1


def evict_page_cache(directory: Path) -> None:
    """Drop the log's clean pages (no root needed, unlike drop_caches) so the open reads disk."""
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ----------------------------------------------------------------------------------------------
# Timestamp lookups


RECORDS_PER_BATCH = 100


def lookup_chunks(first_record: int, end_record: int) -> Iterator[bytes]:
    """Batches with their final offsets (record i has offset i and timestamp T0 + i), joined
    1000 at a time for append_as_follower."""
    value = bytes(16)
    chunk: list[bytes] = []
    for base in range(first_record, end_record, RECORDS_PER_BATCH):
        count = min(RECORDS_PER_BATCH, end_record - base)
        records = [RecordInput(value=value, timestamp=T0 + base + i) for i in range(count)]
        chunk.append(build_batch(records, base_offset=base, partition_leader_epoch=0))
        if len(chunk) == 1000:
            yield b"".join(chunk)
            chunk = []
    if chunk:
        yield b"".join(chunk)


def scan_by_timestamp(log: Log, target: int) -> TimestampAndOffset | None:
    """The reference: read batches from the log start and decode until a record reaches it."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, MIB)
        for pos, header in iter_batches(data):
            if not header.is_control and header.max_timestamp >= target:
                for record_offset, ts in record_timestamps(data, pos, header):
                    if ts >= target and record_offset >= offset:
                        return TimestampAndOffset(ts, record_offset, header.partition_leader_epoch)
            offset = header.next_offset
    return None


def latencies_us(lookup: Callable[[int], object], targets: list[int]) -> list[float]:
    out = []
    for target in targets:
        started = time.perf_counter_ns()
        lookup(target)
        out.append((time.perf_counter_ns() - started) / 1000)
    return out


def bench_lookup(root: Path, sizes: Sizes) -> bool:
    print(f"\n## lookup by timestamp: 16-byte values, {RECORDS_PER_BATCH} records per batch, "
          "segment.bytes 64 MiB, random targets")
    print(f"{'records':>10} {'segments':>8} {'MiB':>7} {'median us':>10} {'p99 us':>9} "
          f"{'scan median us':>15} {'build s':>8}")
    log = Log.open(root / "lookup-0", LogConfig(segment_bytes=64 * MIB), clock=wall_clock_ms)
    rng = random.Random(42)
    medians: dict[int, float] = {}
    written = 0
    try:
        for checkpoint in sizes.lookup_checkpoints:
            started = time.perf_counter()
            for chunk in lookup_chunks(written, checkpoint):
                log.append_as_follower(chunk)
            written = checkpoint
            build = time.perf_counter() - started
            targets = [T0 + rng.randrange(checkpoint) for _ in range(sizes.lookup_queries)]
            latencies_us(log.fetch_offset_by_timestamp, targets[:50])  # warm up
            lat = latencies_us(log.fetch_offset_by_timestamp, targets)
            medians[checkpoint] = statistics.median(lat)
            scan = "-"
            if checkpoint <= sizes.scan_up_to:
                probe = targets[: sizes.scan_queries]
                for target in probe:
                    found = log.fetch_offset_by_timestamp(target)
                    if found != scan_by_timestamp(log, target):
                        print(f"WRONG ANSWER for {target}: {found}", file=sys.stderr)
                        return False
                scanned = latencies_us(lambda t: scan_by_timestamp(log, t), probe)
                scan = f"{statistics.median(scanned):.0f}"
            print(f"{checkpoint:>10} {len(log.segments):>8} {log.size / MIB:>7.1f} "
                  f"{medians[checkpoint]:>10.1f} {quantile(lat, 0.99):>9.1f} {scan:>15} "
                  f"{build:>8.1f}")
    finally:
        log.close()
    smallest, largest = sizes.lookup_checkpoints[0], sizes.lookup_checkpoints[-1]
    ratio = medians[largest] / medians[smallest]
    print(f"ratio lookup latency {largest}/{smallest} records: {ratio:.2f} (goal <= 2) "
          f"{verdict(ratio <= 2)}")
    return ratio <= 2


def quantile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


if __name__ == "__main__":
    sys.exit(main())
