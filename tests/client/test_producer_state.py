"""The partition side of transactions without processes (kafka-mapping §5.7, §6.1, §8.9): a
`Log`'s producer state tracks open transactions, its last stable offset stops at the oldest one
until the HW passes its marker, an ABORT writes the `.txnindex` entry that read_committed
fetches use, the cleaner and retention never pass the LSO, and the `.snapshot` written at each
roll lets a reopened log skip the scan of everything before it; a snapshot with any bad byte is
never trusted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import T0, FakeClock, open_log

from tidelog import errors
from tidelog.records import (
    ControlType,
    RecordInput,
    build_batch,
    build_txn_marker,
    decode_records,
    iter_batches,
    read_header,
)
from tidelog.storage import AbortedTxn, Log
from tidelog.storage.cleaner import LogCleaner
from tidelog.storage.producer_state import (
    ProducerStateManager,
    snapshot_offsets,
    snapshot_path,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


_SEQ: dict[int, int] = {}


def txn(pid: int, *values: bytes, epoch: int = 0, key: bytes | None = None,
        transactional: bool = True) -> bytes:
    seq = _SEQ.get(pid, 0)
    _SEQ[pid] = seq + len(values)
    return build_batch([RecordInput(v, key, T0) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=transactional)


def end(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_txn_marker(commit, producer_id=pid, producer_epoch=epoch,
                            coordinator_epoch=coordinator_epoch)


def plain(*values: bytes, key: bytes | None = None) -> bytes:
    return build_batch([RecordInput(v, key, T0) for v in values])


@pytest.fixture(autouse=True)
def _fresh_sequences() -> Iterator[None]:
    _SEQ.clear()
    yield


def append(log: Log, *batches: bytes, commit: bool = True) -> list[int]:
    bases = [log.append_as_leader(b, 0).first_offset for b in batches]
    if commit:
        log.update_high_watermark(log.log_end_offset)
    return bases


def test_lso_stops_at_the_oldest_open_transaction_until_the_hw_passes_its_marker(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    append(log, plain(b"p"))
    assert log.last_stable_offset == log.high_watermark == 1  # no transaction: LSO = HW
    append(log, txn(1, b"a"), plain(b"q"), txn(2, b"b"), txn(1, b"c"))
    assert log.producer_state.open_transactions() == {1: 1, 2: 3}
    assert (log.last_stable_offset, log.high_watermark) == (1, 5)
    append(log, end(1, commit=True), commit=False)  # marker at 5, above the HW
    assert log.last_stable_offset == 1  # decided, but its marker is not committed
    log.update_high_watermark(6)
    assert log.last_stable_offset == 3  # now producer 2's transaction is the oldest
    append(log, end(2, commit=False))
    assert log.last_stable_offset == log.high_watermark == 7
    log.update_high_watermark(2)  # an LSO is never above the HW
    assert log.last_stable_offset == 2


def test_abort_writes_the_txnindex_entry_read_committed_fetches_use(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn(1, b"a", b"b"), txn(2, b"x"), txn(1, b"c"), end(1, commit=False))
    # producer 2's transaction (first offset 2) is still open: the entry's LSO is 2
    assert log.active_segment.txn_index.entries == [AbortedTxn(1, 0, 4, 2)]
    append(log, end(2, commit=False))
    assert log.active_segment.txn_index.entries[-1] == AbortedTxn(2, 2, 5, 6)  # marker + 1
    append(log, txn(3, b"k"), end(3, commit=True))  # a commit adds nothing
    assert len(log.active_segment.txn_index.entries) == 2
    assert log.aborted_transactions(0, 6) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)]
    assert log.aborted_transactions(5, 8) == [AbortedTxn(2, 2, 5, 6)]
    assert log.aborted_transactions(6, 8) == []


def test_producer_and_coordinator_fencing(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn(1, b"a", epoch=3), end(1, commit=True, epoch=3, coordinator_epoch=7))
    state = log.producer_state.clone()
    with pytest.raises(errors.InvalidProducerEpochError):
        state.check_marker(1, 2, 7)
    with pytest.raises(errors.TransactionCoordinatorFencedError):
        state.check_marker(1, 3, 6)
    state.check_marker(1, 4, 7)  # a bumped epoch (a fenced producer's abort) is fine
    append(log, txn(1, b"b", epoch=3))
    state = log.producer_state.clone()
    with pytest.raises(errors.InvalidTxnStateError):  # a plain batch inside its transaction
        state.check(read_header(txn(1, b"c", epoch=3, transactional=False)))
    with pytest.raises(errors.InvalidProducerEpochError):
        state.check(read_header(build_batch([RecordInput(b"z", None, T0)], producer_id=1,
                                            producer_epoch=2, base_sequence=0)))


def _values(log: Log) -> list[bytes | None]:
    data = log.read(log.log_start_offset, 1 << 20)
    return [r.value for pos, h in iter_batches(data) if not h.is_control
            for r in decode_records(data, pos, h)]


@pytest.mark.parametrize("policy", ["compact", "delete"])
def test_cleaner_and_retention_never_pass_the_lso(
    tmp_path: Path, clock: FakeClock, policy: str
) -> None:
    """Before the LSO bound, the cleaner compacted "a"=1..3 away past the open transaction and
    retention deleted the segments past it."""
    one = len(plain(b"v", key=b"a"))
    log = open_log(tmp_path, clock, cleanup_policy=frozenset({policy}),
                   segment_bytes=one + 40, retention_ms=1)
    append(log, plain(b"0", key=b"a"), txn(9, b"t", key=b"t"))
    for i in range(1, 5):
        append(log, plain(b"%d" % i, key=b"a"))
    assert log.last_stable_offset == 1 < log.high_watermark == 6
    clock.now += 10_000
    LogCleaner(log).clean(clock.now)
    log.delete_old_segments()
    values = _values(log)
    assert values[-5:] == [b"t", b"1", b"2", b"3", b"4"]  # nothing at or past the LSO went
    append(log, end(9, commit=False))
    assert log.last_stable_offset == log.high_watermark
    LogCleaner(log).clean(clock.now)
    log.delete_old_segments()
    assert len(_values(log)) < 5  # once it is decided, they may go


def _state(log: Log) -> tuple[object, ...]:
    s = log.producer_state
    return (s.encode(0), s.open_transactions())


def test_a_reopened_log_loads_its_snapshot_and_scans_only_what_follows(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = len(txn(1, b"a"))
    _SEQ.clear()
    log = open_log(tmp_path, clock, segment_bytes=2 * size + 10)
    append(log, txn(1, b"a"), txn(2, b"b"), end(1, commit=False), txn(3, b"c"), txn(2, b"d"),
           plain(b"e"), txn(4, b"f"))
    assert len(log.segments) >= 3
    assert snapshot_offsets(tmp_path)  # one per roll
    log.flush()
    log.checkpoint()  # the recovery point on disk (the node's housekeeping does this)
    append(log, txn(5, b"g"))
    before = _state(log)
    log.abandon()  # a crash: no snapshot at the log end, a batch after the recovery point
    starts: list[int] = []
    real = Log._scan_producer_state

    def spy(self: Log, state: ProducerStateManager, start: int) -> None:
        starts.append(start)
        real(self, state, start)

    monkeypatch.setattr(Log, "_scan_producer_state", spy)
    reopened = open_log(tmp_path, clock)
    assert _state(reopened) == before
    # the scan began at the newest snapshot at or below the recovery point, not at 0
    assert starts == [max(o for o in snapshot_offsets(tmp_path) if o <= 8)] and starts[0] > 0
    reopened.close()
    starts.clear()
    again = open_log(tmp_path, clock)  # after a clean close: a snapshot at the log end
    assert _state(again) == before
    assert starts == [again.log_end_offset]


def test_every_byte_of_a_snapshot_is_checked(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn(1, b"a"), txn(2, b"b"), end(1, commit=False), txn(3, b"c"),
           end(3, commit=True), commit=False)
    log.update_high_watermark(1)
    data = log.producer_state.encode(log.log_end_offset)
    decoded = ProducerStateManager.decode(data, log.log_end_offset)
    assert decoded.encode(log.log_end_offset) == data
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(ValueError):
            ProducerStateManager.decode(bytes(bad), log.log_end_offset)
    for cut in (0, 5, len(data) - 1):
        with pytest.raises(ValueError):
            ProducerStateManager.decode(data[:cut], log.log_end_offset)
    with pytest.raises(ValueError):
        ProducerStateManager.decode(data + b"\x00", log.log_end_offset)
    with pytest.raises(ValueError):
        ProducerStateManager.decode(data, log.log_end_offset + 1)  # another offset's name


def test_a_bad_snapshot_falls_back_to_a_scan(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn(1, b"a"), txn(2, b"b"), end(1, commit=False))
    before = _state(log)
    log.close()
    [offset] = snapshot_offsets(tmp_path)
    path = snapshot_path(tmp_path, offset)
    path.write_bytes(path.read_bytes()[:-3] + b"zzz")
    reopened = open_log(tmp_path, clock)
    assert _state(reopened) == before
    assert not path.exists()  # removed, not trusted again


def test_truncation_forgets_a_transaction_above_the_cut(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    append(log, txn(1, b"a"), end(1, commit=True))
    append(log, txn(2, b"b"), commit=False)
    assert log.producer_state.open_transactions() == {2: 2}
    log.truncate_to(2)
    assert log.producer_state.open_transactions() == {}
    assert log.last_stable_offset == log.high_watermark == 2


def test_only_a_transactions_first_batch_needs_verification_until_the_next_marker() -> None:
    """KIP-890 part 1 on the leader's copy of the state: a transactional batch that would open
    a transaction needs its coordinator's word; once verified (or once its transaction is
    open here) the producer's next batches do not, until its marker; an answer that comes back
    after the marker verifies nothing."""
    state = ProducerStateManager()
    first = read_header(txn(7, b"a"))
    assert not state.needs_verification(read_header(plain(b"p")))
    assert not state.needs_verification(read_header(end(7, True)))
    assert state.needs_verification(first)
    guard = state.verification_guard(7, 0)
    assert state.verification_guard(7, 0) is guard  # one question for concurrent batches
    assert state.needs_verification(first)  # asked, not answered
    guard.verified = True
    assert not state.needs_verification(first)
    assert state.needs_verification(read_header(txn(7, b"e1", epoch=1)))  # another epoch
    state.update(first._replace(base_offset=0))
    assert not state.needs_verification(read_header(txn(7, b"b")))  # open here
    state.update_marker(read_header(end(7, True))._replace(base_offset=2), ControlType.COMMIT, 0)
    assert state.needs_verification(read_header(txn(7, b"next")))  # the next transaction
    # A question asked before a marker and answered after it.
    late = state.verification_guard(7, 0)
    state.update_marker(read_header(end(7, False))._replace(base_offset=3), ControlType.ABORT, 0)
    late.verified = True
    assert state.needs_verification(read_header(txn(7, b"late")))
    # The state a new leader starts from (a clone of the log's) carries no verification.
    state.verification_guard(8, 0).verified = True
    assert state.clone().needs_verification(read_header(txn(8, b"x")))
