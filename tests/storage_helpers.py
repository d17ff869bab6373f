"""Helpers for the storage tests: a settable clock, batch builders and brute-force oracles.

The oracles decode everything a log holds with the codec alone (no index, no segment
bookkeeping), so a lookup that disagrees with them is wrong, whatever path it took.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tidelog.records import (
    ControlType,
    RecordInput,
    build_batch,
    build_control_batch,
    iter_batches,
    read_header,
    record_timestamps,
)
from tidelog.storage import Log, LogConfig, TimestampAndOffset

T0 = 1_700_000_000_000


@dataclass
class FakeClock:
    """Milliseconds that move only when a test says so."""

    now: int = T0

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(
    timestamps: Sequence[int], value_size: int = 10, *, base_offset: int = 0, epoch: int = -1
) -> bytes:
    """One batch with a record per timestamp."""
    return build_batch(
        [RecordInput(value=bytes(value_size), timestamp=ts) for ts in timestamps],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


def marker(base_offset: int = 0, epoch: int = -1) -> bytes:
    return build_control_batch(
        ControlType.LEADER_CHANGE, base_offset=base_offset, partition_leader_epoch=epoch
    )


def open_log(directory: Path, clock: FakeClock, **config: object) -> Log:
    return Log.open(directory, LogConfig(**config), clock=clock)  # type: ignore[arg-type]


class RecordRow(NamedTuple):
    offset: int
    timestamp: int
    epoch: int
    control: bool


def all_records(log: Log) -> list[RecordRow]:
    """Every record from the log start offset to the LEO, decoded by the codec only."""
    data = log.read(log.log_start_offset, 1 << 40)
    rows = []
    for pos, header in iter_batches(data):
        for offset, ts in record_timestamps(data, pos, header):
            if offset >= log.log_start_offset:
                rows.append(RecordRow(offset, ts, header.partition_leader_epoch, header.is_control))
    return rows


def brute_force_by_timestamp(rows: Sequence[RecordRow], target: int) -> TimestampAndOffset | None:
    for r in rows:
        if not r.control and r.timestamp >= target:
            return TimestampAndOffset(r.timestamp, r.offset, r.epoch)
    return None


def brute_force_max_timestamp(rows: Sequence[RecordRow]) -> TimestampAndOffset | None:
    best: RecordRow | None = None
    for r in rows:
        if not r.control and r.timestamp >= 0 and (best is None or r.timestamp > best.timestamp):
            best = r
    return None if best is None else TimestampAndOffset(best.timestamp, best.offset, best.epoch)


def batch_bounds(log: Log) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch, from the bytes alone."""
    data = log.read(log.log_start_offset, 1 << 40)
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


def assert_lookups_match_brute_force(log: Log) -> None:
    """Timestamp, max-timestamp and offset lookups all agree with decoding every record."""
    rows = all_records(log)
    for target in range(T0 - 60, T0 + 1010, 7):
        assert log.fetch_offset_by_timestamp(target) == brute_force_by_timestamp(rows, target)
    assert log.fetch_max_timestamp() == brute_force_max_timestamp(rows)
    bounds = batch_bounds(log)
    for offset in range(log.log_start_offset, log.log_end_offset):
        # The batch holding the offset; in a gap that compaction left between batches, the
        # next one (a dense log has no gaps, so there this is always the holding batch).
        expected = next(base for base, last in bounds if last >= offset)
        found = log.offset_position(offset)
        assert found is not None and found.batch_base_offset == expected
        assert read_header(log.read(offset, 1)).base_offset == expected
