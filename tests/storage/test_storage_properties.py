"""Property tests of the partition log: random operations, every lookup against brute force.

A state machine appends batches of random sizes with random, non-monotonic timestamps (keyed,
with tombstones, and epoch markers) to a log with tiny segments and index intervals, and
mixes in HW moves, truncations, log start moves, retention, compaction, clean and unclean
reopens. After every step the log is checked against a model of what was appended:

* it holds a subset of the model's records, each unchanged (offset, timestamp, epoch, key,
  value), and only compaction removes any: without it the subset is everything;
* it holds every control record and the newest value of every key;
* timestamp, max-timestamp and offset lookups equal the brute-force scan (storage_helpers),
  and the legacy lookup equals §3 computed from the segment list.

``TIDELOG_HYPOTHESIS_EXAMPLES`` raises the number of runs for a longer local search.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from storage_helpers import (
    T0,
    FakeClock,
    assert_lookups_match_brute_force,
    batch_bounds,
    marker,
    open_log,
)

from tidelog.errors import InvalidRecordError
from tidelog.records import RecordInput, build_batch, decode_records, iter_batches
from tidelog.storage import Log
from tidelog.storage.cleaner import LogCleaner

EXAMPLES = int(os.environ.get("TIDELOG_HYPOTHESIS_EXAMPLES", "30"))
KEYS = [b"a", b"b", b"c", None]  # few keys: batches and segments share them


class Row(NamedTuple):
    timestamp: int
    epoch: int
    key: bytes | None
    value: bytes | None
    control: bool


def log_rows(log: Log) -> dict[int, Row]:
    data = log.read(log.log_start_offset, 1 << 30)
    return {
        r.offset: Row(r.timestamp, h.partition_leader_epoch, r.key, r.value, h.is_control)
        for pos, h in iter_batches(data)
        for r in decode_records(data, pos, h)
        if r.offset >= log.log_start_offset
    }


def legacy_oracle(log: Log, now: int, timestamp: int, count: int) -> list[int]:
    """kafka-mapping §3 steps 5-7, phrased as a filter over the (offset, time) pairs."""
    pairs = [(max(s.base_offset, log.log_start_offset), s.last_modified_ms) for s in log.segments]
    if log.segments[-1].size > 0:
        pairs.append((log.log_end_offset, now))
    if timestamp == -1:
        chosen = pairs
    elif timestamp == -2:
        chosen = pairs[:1]
    else:
        chosen = [p for p in pairs if p[1] <= timestamp]
    return sorted((offset for offset, _ in chosen[-count:]), reverse=True)


record = st.tuples(
    st.sampled_from(KEYS),
    st.one_of(st.none(), st.binary(max_size=30)),
    st.integers(-50, 1000),
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="tidelog-prop-"))
        self.clock = FakeClock()
        self.model: dict[int, Row] = {}
        self.committed = 0  # what Raft would never truncate, even when the local HW lags
        self.cleaned = False

    @initialize(
        segment_bytes=st.sampled_from([450, 900, 2500]),  # a batch is at most 421 bytes
        index_interval_bytes=st.sampled_from([0, 1, 60, 300]),
        policy=st.sampled_from([{"delete"}, {"compact"}, {"compact", "delete"}]),
        retention_ms=st.sampled_from([-1, 400]),
        retention_bytes=st.sampled_from([-1, 2000]),
        delete_retention_ms=st.sampled_from([0, 150]),
    )
    def open(
        self,
        segment_bytes: int,
        index_interval_bytes: int,
        policy: set[str],
        retention_ms: int,
        retention_bytes: int,
        delete_retention_ms: int,
    ) -> None:
        self.config: dict[str, object] = {
            "segment_bytes": segment_bytes,
            "index_interval_bytes": index_interval_bytes,
            "cleanup_policy": frozenset(policy),
            "retention_ms": retention_ms,
            "retention_bytes": retention_bytes,
            "delete_retention_ms": delete_retention_ms,
        }
        self.log = self.reopen_log()

    def reopen_log(self) -> Log:
        return open_log(self.directory, self.clock, **self.config)

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def compacted(self) -> bool:
        return self.log.config.compact_enabled

    # ------------------------------------------------------------------------------------------
    # Operations

    @rule(records=st.lists(record, min_size=1, max_size=6), new_epoch=st.booleans())
    def append(
        self, records: list[tuple[bytes | None, bytes | None, int]], new_epoch: bool
    ) -> None:
        data = build_batch([RecordInput(value, key, T0 + ts) for key, value, ts in records])
        epoch = max(self.log.latest_epoch, 0) + int(new_epoch)
        if self.compacted and any(key is None for key, _, _ in records):
            end = self.log.log_end_offset
            try:
                self.log.append_as_leader(data, epoch)
            except InvalidRecordError:
                assert self.log.log_end_offset == end
                return
            raise AssertionError("a compacted topic accepted a record without a key")
        info = self.log.append_as_leader(data, epoch)
        for i, (key, value, ts) in enumerate(records):
            self.model[info.first_offset + i] = Row(T0 + ts, epoch, key, value, False)

    @rule()
    def append_marker(self) -> None:
        epoch = max(self.log.latest_epoch, 0) + 1
        info = self.log.append_as_leader(marker(), epoch)
        self.model[info.first_offset] = Row(-1, epoch, b"\x00\x00\x00\x02", b"", True)

    @rule(ms=st.integers(1, 300))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        hw = data.draw(st.integers(self.log.high_watermark, self.log.log_end_offset))
        self.log.update_high_watermark(hw)
        self.committed = max(self.committed, hw)

    @precondition(lambda self: self.log.log_end_offset > self.committed)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        self.log.truncate_to(data.draw(st.integers(self.committed, self.log.log_end_offset)))
        self.trim_model()

    @rule(data=st.data())
    def advance_log_start(self, data: st.DataObject) -> None:
        lso = self.log.log_start_offset
        self.log.maybe_increment_log_start_offset(
            data.draw(st.integers(lso, self.log.high_watermark))
        )
        self.trim_model()

    @rule()
    def retention(self) -> None:
        self.log.delete_old_segments()
        self.trim_model()

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def compact(self) -> None:
        hw = self.log.high_watermark
        cleanable_end = max(
            (s.base_offset for s in self.log.segments[1:] if s.base_offset <= hw), default=0
        )
        LogCleaner(self.log).clean(self.clock.now)
        if not self.compacted:
            return
        rows = log_rows(self.log)
        # the cleaner's map holds the records of whole batches below the HW
        committed = {
            o for base, last in batch_bounds(self.log) if last < hw for o in range(base, last + 1)
        }
        newest = {r.key: o for o, r in sorted(rows.items()) if o in committed and not r.control}
        for offset, row in rows.items():
            if offset < cleanable_end and not row.control:
                assert newest[row.key] == offset, f"older value of {row.key!r} at {offset} kept"

    @rule()
    def reopen(self) -> None:
        legacy = [self.log.offsets_before(t, 5) for t in (-1, -2, T0, self.clock.now)]
        self.log.close()
        self.log = self.reopen_log()
        assert [self.log.offsets_before(t, 5) for t in (-1, -2, T0, self.clock.now)] == legacy

    @rule(flush=st.booleans())
    def crash(self, flush: bool) -> None:
        """The process dies: what is in the page cache survives, descriptors are dropped."""
        if flush:
            self.log.flush()
        self.log.checkpoint()
        for segment in self.log.segments:
            segment.close_handles()
        self.log = self.reopen_log()
        self.trim_model()

    def trim_model(self) -> None:
        start, end = self.log.log_start_offset, self.log.log_end_offset
        self.model = {o: r for o, r in self.model.items() if start <= o < end}

    # ------------------------------------------------------------------------------------------
    # Checks

    @invariant()
    def records_match_the_model(self) -> None:
        if not hasattr(self, "log"):
            return
        rows = log_rows(self.log)
        assert all(self.model.get(o) == r for o, r in rows.items())
        if not self.compacted:
            assert rows == self.model
            return
        newest: dict[bytes | None, int] = {}
        for offset, row in sorted(self.model.items()):
            if not row.control:
                newest[row.key] = offset
        for offset, row in self.model.items():
            if row.control or (newest[row.key] == offset and row.value is not None):
                assert offset in rows, f"record {offset} {row} lost"

    @invariant()
    def lookups_match_brute_force(self) -> None:
        if not hasattr(self, "log"):
            return
        assert_lookups_match_brute_force(self.log)
        for timestamp in (-1, -2, T0 - 100, T0, self.clock.now - 200, self.clock.now):
            for count in (1, 3, 100):
                assert self.log.offsets_before(timestamp, count) == legacy_oracle(
                    self.log, self.clock.now, timestamp, count
                )


LogMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_log_properties = LogMachine.TestCase
