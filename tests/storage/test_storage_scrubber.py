"""The scrub of closed segments: damage that a clean shutdown hid is found at its batch, within
a bounded read per step, and cutting the log there makes it a damaged replica."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import T0, FakeClock, all_records, batch, open_log

from tidelog.records import iter_batches
from tidelog.storage import Log
from tidelog.storage.scrubber import LogScrubber, ScrubStep

CONFIG = {"segment_bytes": 2048, "index_interval_bytes": 256}
EPOCH = 3


def written(directory: Path, batches: int = 60) -> Log:
    log = open_log(directory, FakeClock(), **CONFIG)
    for i in range(batches):
        log.append_as_leader(batch([T0 + i, T0 + i], 40), EPOCH)
    log.flush()
    return log


def reopened(log: Log) -> Log:
    log.close()
    return open_log(log.directory, FakeClock(), **CONFIG)


def flip_byte(log: Log, segment_index: int, batch_index: int) -> tuple[int, int]:
    """Flip a byte inside the records of one batch of a segment; returns its (position, base
    offset)."""
    segment = log.segments[segment_index]
    data = segment.log_path.read_bytes()
    pos, header = list(iter_batches(data))[batch_index]
    target = pos + header.size - 5
    segment.log_path.write_bytes(data[:target] + bytes([data[target] ^ 0x40]) + data[target + 1 :])
    return pos, header.base_offset


def scrub_until(scrubber: LogScrubber, budget: int) -> list[ScrubStep]:
    steps = []
    while True:
        step = scrubber.step(budget)
        steps.append(step)
        if step.pass_complete or step.damage is not None:
            return steps


def test_an_intact_log_is_read_once_per_pass_within_the_budget(tmp_path: Path) -> None:
    log = written(tmp_path / "log")
    assert log.active_segment.size > 0
    batch_size = next(iter_batches(log.segments[0].log_path.read_bytes()))[1].size
    scrubber = LogScrubber(log)
    steps = scrub_until(scrubber, 300)
    assert all(s.damage is None for s in steps)
    assert sum(s.bytes_read for s in steps) == log.size  # the active segment too
    assert max(s.bytes_read for s in steps) <= 300 + batch_size
    assert min(s.bytes_read for s in steps[:-1]) >= 300 - batch_size
    assert scrubber.passes == 1
    # A budget smaller than one batch still moves: one whole batch per step.
    assert LogScrubber(log).step(10).bytes_read == batch_size
    log.close()


def test_a_flipped_byte_hidden_by_a_clean_shutdown_is_found_and_cut(tmp_path: Path) -> None:
    log = written(tmp_path / "log")
    floor = (log.latest_epoch, log.log_end_offset)
    records_before = all_records(log)
    log.close()
    log = open_log(log.directory, FakeClock(), **CONFIG)
    position, offset = flip_byte(log, 2, 3)
    # A clean shutdown: the reopen checks no CRC, and the damage goes unnoticed.
    log = reopened(log)
    assert log.repair_floor is None and log.log_end_offset == floor[1]

    damage = scrub_until(LogScrubber(log), 500)[-1].damage
    assert damage is not None
    assert (damage.segment, damage.position, damage.offset) == (log.segments[2], position, offset)
    assert log.truncate_damaged(damage.segment, damage.position, damage.offset)
    assert log.log_end_offset == offset
    assert log.repair_floor == floor
    assert all_records(log) == [r for r in records_before if r.offset < offset]
    assert log.high_watermark <= offset
    # The floor is on disk with the cut: a crash now still knows the log is damaged.
    log = reopened(log)
    assert log.repair_floor == floor
    assert scrub_until(LogScrubber(log), 500)[-1].pass_complete
    log.close()


def test_a_header_that_does_not_parse_is_damage_at_its_position(tmp_path: Path) -> None:
    log = written(tmp_path / "log")
    segment = log.segments[1]
    data = segment.log_path.read_bytes()
    pos, header = list(iter_batches(data))[2]
    magic_at = pos + 16
    segment.log_path.write_bytes(data[:magic_at] + b"\x07" + data[magic_at + 1 :])
    damage = scrub_until(LogScrubber(log), 4096)[-1].damage
    assert damage is not None
    assert (damage.segment, damage.position, damage.offset) == (segment, pos, header.base_offset)
    assert "magic" in damage.reason
    assert log.truncate_damaged(damage.segment, damage.position, damage.offset)
    assert log.log_end_offset == header.base_offset
    log.close()


def test_damage_is_confirmed_under_the_lock_before_anything_is_cut(tmp_path: Path) -> None:
    log = written(tmp_path / "log")
    end = log.log_end_offset
    position, offset = flip_byte(log, 1, 1)
    damage = scrub_until(LogScrubber(log), 4096)[-1].damage
    assert damage is not None
    # Repaired meanwhile (the bytes are intact again): nothing to cut.
    segment = damage.segment
    flip_byte(log, 1, 1)
    assert not log.truncate_damaged(segment, position, offset)
    # A segment the log no longer holds (retention, the cleaner) is not cut either.
    flip_byte(log, 1, 1)
    log.update_high_watermark(end)
    log.maybe_increment_log_start_offset(log.segments[2].base_offset)
    log.delete_old_segments()
    assert not log.truncate_damaged(segment, position, offset)
    assert log.log_end_offset == end and log.repair_floor is None
    log.close()


def test_damage_below_the_log_start_offset_empties_the_log_there(tmp_path: Path) -> None:
    log = written(tmp_path / "log")
    floor = (log.latest_epoch, log.log_end_offset)
    position, offset = flip_byte(log, 1, 0)
    log.update_high_watermark(log.log_end_offset)
    start = offset + 4
    log.maybe_increment_log_start_offset(start)
    assert log.truncate_damaged(log.segments[1], position, offset)
    assert (log.log_start_offset, log.log_end_offset) == (start, start)
    assert log.repair_floor == floor
    log.close()


def test_a_segment_removed_during_a_step_ends_the_pass_without_damage(tmp_path: Path) -> None:
    log = written(tmp_path / "log")
    scrubber = LogScrubber(log)
    assert scrubber.step(100).damage is None  # inside the first segment
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(log.segments[-2].base_offset)
    log.delete_old_segments()
    steps = scrub_until(scrubber, 100_000)
    assert steps[-1].pass_complete and steps[-1].damage is None
    log.close()



def test_damage_in_the_active_segment_is_found_and_cut(tmp_path: Path) -> None:
    """A quiet partition's only segment is its active one (segment.bytes is 1 GiB by default)."""
    log = written(tmp_path / "log")
    floor = (log.latest_epoch, log.log_end_offset)
    position, offset = flip_byte(log, -1, 1)
    damage = scrub_until(LogScrubber(log), 4096)[-1].damage
    assert damage is not None
    assert (damage.segment, damage.position, damage.offset) == (log.active_segment, position,
                                                                 offset)
    assert log.truncate_damaged(damage.segment, damage.position, damage.offset)
    assert log.log_end_offset == offset and log.repair_floor == floor
    log.append_as_leader(batch([T0], 40), EPOCH)  # the cut segment takes appends again
    assert scrub_until(LogScrubber(log), 4096)[-1].pass_complete
    log.close()


def test_a_pass_over_a_log_appended_to_meanwhile_ends(tmp_path: Path) -> None:
    log = written(tmp_path / "log", batches=4)
    scrubber = LogScrubber(log)
    for i in range(200):
        step = scrubber.step(200)
        assert step.damage is None
        if step.pass_complete:
            break
        log.append_as_leader(batch([T0 + i, T0 + i], 40), EPOCH)
    else:
        raise AssertionError("the walk chased the log end")
    log.close()
