"""Crash tests: damage a partition directory the way crashes and bad disks do, then reopen.

A crash is simulated by copying the directory while the log is open (what the disk holds if
the process dies now), then cutting, flipping or deleting. Whatever the damage, opening never
raises, exactly the intact prefix of batches survives, and every lookup agrees with a brute
force decode of what survived. The seeds are fixed, so a failure replays.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
from storage_helpers import (
    T0,
    FakeClock,
    assert_lookups_match_brute_force,
    batch,
    batch_bounds,
    marker,
    open_log,
)

from tidelog.errors import CorruptMessageError
from tidelog.records import iter_batches
from tidelog.storage import Log, TimestampAndOffset

CONFIG = {"segment_bytes": 1500, "index_interval_bytes": 150}


class OnDisk(NamedTuple):
    """One batch as the crashed directory holds it."""

    path: Path
    position: int
    size: int
    base_offset: int
    last_offset: int


def written_log(directory: Path, clock: FakeClock, seed: int, *, flush_at: int | None) -> Log:
    rng = random.Random(seed)
    log = open_log(directory, clock, **CONFIG)
    for i in range(60):
        if i == flush_at:
            log.flush()
            log.checkpoint()
        if rng.random() < 0.1:
            log.append_as_leader(marker(), log.latest_epoch + 1)
        else:
            stamps = [T0 + rng.randrange(1000) for _ in range(rng.randrange(1, 4))]
            log.append_as_leader(batch(stamps, rng.randrange(40)), max(log.latest_epoch, 0))
    return log


def crash_copy(log: Log, tmp_path: Path) -> tuple[Path, list[OnDisk]]:
    """The directory as a crash would leave it, and its batches in log order."""
    crashed = tmp_path / "crashed"
    shutil.copytree(log.directory, crashed)
    layout = []
    for path in sorted(crashed.glob("*.log")):
        data = path.read_bytes()
        for pos, h in iter_batches(data):
            layout.append(OnDisk(path, pos, h.size, h.base_offset, h.last_offset))
    return crashed, layout


def reopen_and_check(crashed: Path, survivors: list[OnDisk]) -> Log:
    log = open_log(crashed, FakeClock(), **CONFIG)
    assert batch_bounds(log) == [(b.base_offset, b.last_offset) for b in survivors]
    assert log.log_end_offset == (survivors[-1].last_offset + 1 if survivors else 0)
    assert log.high_watermark <= log.log_end_offset and log.recovery_point <= log.log_end_offset
    assert_lookups_match_brute_force(log)
    # the recovered log takes appends where the intact prefix ends
    info = log.append_as_leader(batch([T0 + 5000]), log.latest_epoch + 1)
    assert info.first_offset == log.log_end_offset - 1
    assert log.fetch_offset_by_timestamp(T0 + 5000) == TimestampAndOffset(
        T0 + 5000, info.first_offset, log.latest_epoch
    )
    log.close()
    reopened = open_log(crashed, FakeClock(), **CONFIG)
    assert reopened.log_end_offset == info.last_offset + 1
    return reopened


@pytest.mark.parametrize("seed", range(25))
def test_torn_write_keeps_the_intact_prefix(tmp_path: Path, seed: int) -> None:
    """Writes reach the disk in order and stop at a random byte: the segment holding that
    byte is cut there and later segments are empty or were never created."""
    rng = random.Random(seed)
    log = written_log(tmp_path / "log", FakeClock(), seed, flush_at=None)
    crashed, layout = crash_copy(log, tmp_path)
    victim = rng.choice(layout)
    cut = victim.position + rng.randrange(victim.size + 1)
    with open(victim.path, "r+b") as f:
        f.truncate(cut)
    for later in sorted(crashed.glob("*.log")):
        if later.name > victim.path.name:
            if rng.random() < 0.5:
                later.write_bytes(b"")
            else:
                for sibling in crashed.glob(later.stem + ".*"):
                    sibling.unlink()
    survivors = [
        b
        for b in layout
        if b.path.name < victim.path.name or (b.path == victim.path and b.position + b.size <= cut)
    ]
    reopen_and_check(crashed, survivors)


@pytest.mark.parametrize("seed", range(25))
def test_flipped_byte_ends_the_log_before_the_damaged_batch(tmp_path: Path, seed: int) -> None:
    """A byte flipped in a batch of data never flushed: that batch and everything after it go.

    The flip lands anywhere the batch protects itself: the length, the magic, the CRC and
    everything it covers. (Base offset and epoch are outside the CRC by design, as in Kafka,
    so that the leader can patch them without recomputing it.)
    """
    rng = random.Random(seed)
    log = written_log(tmp_path / "log", FakeClock(), seed, flush_at=None)
    crashed, layout = crash_copy(log, tmp_path)
    victim = rng.choice(layout)
    where = victim.position + rng.choice([*range(8, 12), *range(16, victim.size)])
    data = bytearray(victim.path.read_bytes())
    data[where] ^= 1 << rng.randrange(8)
    victim.path.write_bytes(bytes(data))
    survivors = layout[: layout.index(victim)]
    reopen_and_check(crashed, survivors)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_damaged_indexes_are_rebuilt(tmp_path: Path, seed: int, shutdown: str) -> None:
    """Deleted, cut or garbled index files lose nothing: they are detected and rebuilt."""
    rng = random.Random(seed)
    log = written_log(tmp_path / "log", FakeClock(), seed, flush_at=30)
    if shutdown == "clean":
        log.close()
    crashed, layout = crash_copy(log, tmp_path)
    indexes = sorted([*crashed.glob("*.index"), *crashed.glob("*.timeindex")])
    for path in rng.sample(indexes, k=rng.randrange(1, len(indexes) + 1)):
        size = path.stat().st_size
        damage = rng.randrange(4)
        if damage == 0:
            path.unlink()
        elif damage == 1 and size:
            path.write_bytes(path.read_bytes()[: rng.randrange(size)] + b"\x01")
        elif damage == 2:
            path.write_bytes(rng.randbytes(rng.randrange(1, 64)) + b"\xff" * 8)
        else:
            path.write_bytes(path.read_bytes() + rng.randbytes(rng.randrange(1, 30)))
    reopen_and_check(crashed, layout)


def test_crash_after_flush_keeps_flushed_data(tmp_path: Path) -> None:
    """The recovery point: a torn tail after it costs only what was not flushed."""
    clock = FakeClock()
    log = written_log(tmp_path / "log", clock, 7, flush_at=40)
    crashed, layout = crash_copy(log, tmp_path)
    active = layout[-1].path
    with open(active, "r+b") as f:
        f.truncate(layout[-1].position + 3)
    reopened = reopen_and_check(crashed, layout[:-1])
    assert reopened.log_start_offset == 0


def test_corrupt_batch_in_a_flushed_segment_is_reported_not_dropped(tmp_path: Path) -> None:
    """Below the recovery point nothing is rescanned on open (that is what makes a restart
    fast); damage there is reported with file and position when a read meets it, and the
    data after it is still served."""
    clock = FakeClock()
    log = written_log(tmp_path / "log", clock, 3, flush_at=None)
    log.close()
    crashed, layout = crash_copy(log, tmp_path)
    first_segment = [b for b in layout if b.path == layout[0].path]
    victim = first_segment[1]
    data = bytearray(victim.path.read_bytes())
    data[victim.position + 16] = 99  # the magic byte
    victim.path.write_bytes(bytes(data))
    reopened = open_log(crashed, FakeClock(), **CONFIG)
    assert reopened.log_end_offset == layout[-1].last_offset + 1
    with pytest.raises(CorruptMessageError) as excinfo:
        reopened.read(victim.base_offset, 1 << 20)
    assert victim.path.name in str(excinfo.value)
    assert f"position {victim.position}" in str(excinfo.value)
    later = first_segment[-1]
    assert reopened.read(later.base_offset, 1)[:8] == later.base_offset.to_bytes(8, "big")


def test_lost_tail_before_a_roll_leaves_no_hole(tmp_path: Path) -> None:
    """A closed segment lost its last batches at a batch boundary while the files of the
    later (rolled) segments reached the disk empty: those would make the LEO jump over the
    lost offsets, so they go."""
    log = written_log(tmp_path / "log", FakeClock(), 11, flush_at=None)
    crashed, layout = crash_copy(log, tmp_path)
    paths = sorted({b.path for b in layout})
    assert len(paths) >= 3
    victim = [b for b in layout if b.path == paths[0]][-2]
    with open(victim.path, "r+b") as f:
        f.truncate(victim.position)  # exactly at the start of the batch before the last
    for later in paths[1:]:
        later.write_bytes(b"")
    survivors = [b for b in layout if b.path == paths[0] and b.position < victim.position]
    reopen_and_check(crashed, survivors)
