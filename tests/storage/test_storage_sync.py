"""`Log.sync_data`, the per-acknowledgement fsync: data only, recovery point unchanged, so a
crash before the next `flush` recovers from the old recovery point and re-indexes the synced
batches instead of trusting indexes that were never synced."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import T0, FakeClock, assert_lookups_match_brute_force, batch, open_log


def test_sync_data_keeps_the_recovery_point_and_a_crash_reindexes(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path, clock, segment_bytes=2048, index_interval_bytes=64)
    for i in range(40):
        log.append_as_leader(batch([T0 + i, T0 + i + 1], value_size=40), leader_epoch=1)
    log.sync_data()
    assert log.recovery_point == 0
    assert len(log.segments) > 2
    log.flush()
    assert log.recovery_point == log.log_end_offset == 80
    for i in range(40, 60):
        log.append_as_leader(batch([T0 + i, T0 + i + 1], value_size=40), leader_epoch=1)
    log.sync_data()
    assert log.recovery_point == 80
    expected = log.read(0, 1 << 30)
    # A crash: no close, no marker. The indexes past the recovery point were never synced.
    for index in tmp_path.glob("*.index"):
        if int(index.stem) >= 80:
            index.write_bytes(b"\x00" * 5)  # torn: not a whole entry
    reopened = open_log(tmp_path, clock, segment_bytes=2048, index_interval_bytes=64)
    assert reopened.log_end_offset == 120
    assert reopened.read(0, 1 << 30) == expected
    assert_lookups_match_brute_force(reopened)
