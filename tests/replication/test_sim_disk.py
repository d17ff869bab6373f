"""The simulator's disk under a real storage log: a crash keeps what was synced, loses what was
not, tears the last append at a random point, and the log recovers through its loader."""

from __future__ import annotations

import random
from pathlib import Path

from tidelog.clock import wall_clock_ms
from tidelog.records import RecordInput, build_batch
from tidelog.replication.sim_disk import SimDisk
from tidelog.storage import Log, LogConfig

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=256)


def _append(log: Log, count: int) -> None:
    for _ in range(count):
        end = log.log_end_offset
        log.append_as_follower(build_batch([RecordInput(b"v%04d" % end + b"x" * 60)],
                                           base_offset=end, partition_leader_epoch=1))


def _synced(tmp_path: Path, config: LogConfig = CONFIG) -> tuple[Log, SimDisk]:
    log = Log.open(tmp_path / "p", config, clock=wall_clock_ms)
    disk = SimDisk(log.directory)
    _append(log, 30)
    log.sync_data()
    disk.record_sync()
    return log, disk


def test_a_crash_keeps_the_synced_batches_and_tears_the_unsynced_append(tmp_path: Path) -> None:
    ends = set()
    one_segment = LogConfig(index_interval_bytes=256)
    for seed in range(12):
        log, disk = _synced(tmp_path / str(seed), one_segment)
        _append(log, 5)  # not synced
        disk.crash(random.Random(seed))
        reopened = Log.open(log.directory, one_segment, clock=wall_clock_ms)
        assert 30 <= reopened.log_end_offset <= 35
        assert reopened.read(0, 1 << 20)  # every batch below parses again
        ends.add(reopened.log_end_offset)
        reopened.close()
    assert 30 in ends and len(ends) > 2  # all lost, or a prefix survived


def test_a_crash_loses_an_unsynced_truncation_as_a_whole(tmp_path: Path) -> None:
    log, disk = _synced(tmp_path)
    assert len(log.segments) > 1
    log.truncate_to(3)  # deletes later segments, cuts the first
    _append(log, 2)
    disk.rewritten = True
    disk.crash(random.Random(0))
    reopened = Log.open(log.directory, CONFIG, clock=wall_clock_ms)
    assert reopened.log_end_offset == 30
    assert b"v0003" in bytes(reopened.read(3, 80))  # the old batch came back


def test_a_crash_undoes_an_unsynced_deletion_and_creation(tmp_path: Path) -> None:
    log, disk = _synced(tmp_path)
    first = log.segments[0].log_path
    log.maybe_increment_log_start_offset(0)
    log.update_high_watermark(30)
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    log.delete_old_segments()
    log.checkpoint()
    assert not first.exists()
    disk.crash(random.Random(0))
    assert first.exists()
    reopened = Log.open(log.directory, CONFIG, clock=wall_clock_ms)
    assert reopened.log_start_offset == 0 and reopened.log_end_offset == 30
