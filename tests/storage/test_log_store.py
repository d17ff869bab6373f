"""The node's storage adapter for the Raft core: which storage entry point a Ready's entries
take. A leader's own entries were validated and stamped on this node and are written as they
are; entries received from another node have their CRCs checked first, even when they reach
the disk in a Ready of a replica that has since become leader."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import T0, batch, marker

import tidelog.storage.log
from tidelog.clock import wall_clock_ms
from tidelog.errors import CorruptMessageError
from tidelog.records import read_header
from tidelog.replication import Entry, MemoryLog
from tidelog.replication.log_store import StorageReplicaLog
from tidelog.storage import Log


def entry(data: bytes | memoryview, epoch: int) -> Entry:
    header = read_header(data)
    return Entry(header.base_offset, header.last_offset, epoch, data)


@pytest.fixture
def crc_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The base offsets of the batches whose CRC storage computes (the real check runs)."""
    checked: list[int] = []
    real = tidelog.storage.log.check_crc

    def counting(buf: bytes | memoryview, pos: int, header: object) -> None:
        checked.append(header.base_offset)  # type: ignore[attr-defined]
        real(buf, pos, header)  # type: ignore[arg-type]

    monkeypatch.setattr(tidelog.storage.log, "check_crc", counting)
    return checked


def test_a_leader_writes_its_own_entries_without_checking_them_again(
    tmp_path: Path, crc_checks: list[int]
) -> None:
    """Before, every entry went through `append_as_follower`, so a leader recomputed the CRC
    of each batch it had validated itself (this test saw [0, 2, 3])."""
    replica_log = StorageReplicaLog(Log.open(tmp_path, clock=wall_clock_ms))
    received = batch([T0, T0], base_offset=0, epoch=1)  # written while following epoch 1
    own = [marker(2, epoch=3), batch([T0], base_offset=3, epoch=3)]
    replica_log.leading_epoch = 3
    replica_log.append([entry(received, 1), *(entry(d, 3) for d in own)])
    assert crc_checks == [0]
    assert replica_log.log.read(0, 1 << 20) == received + b"".join(own)


def test_received_entries_are_checked_in_a_leaders_ready(
    tmp_path: Path, crc_checks: list[int]
) -> None:
    replica_log = StorageReplicaLog(Log.open(tmp_path, clock=wall_clock_ms))
    damaged = bytearray(batch([T0], base_offset=0, epoch=1))
    damaged[-1] ^= 1
    replica_log.leading_epoch = 2
    with pytest.raises(CorruptMessageError):
        replica_log.append([entry(bytes(damaged), 1), entry(marker(1, epoch=2), 2)])
    assert replica_log.log_end_offset == 0


def test_a_follower_checks_every_entry(tmp_path: Path, crc_checks: list[int]) -> None:
    replica_log = StorageReplicaLog(Log.open(tmp_path, clock=wall_clock_ms))
    data = [batch([T0], base_offset=0, epoch=2), batch([T0], base_offset=1, epoch=2)]
    replica_log.append([entry(d, 2) for d in data])  # leading_epoch is None: not leading
    assert crc_checks == [0, 1]


def test_epoch_ends_are_those_of_the_same_log_in_memory(tmp_path: Path) -> None:
    """The storage adapter answers the core's divergence question (the end of the latest epoch
    at or below the one asked) as the in-memory log does, also once the log start moved past
    the first epoch: both are the one question the core asks any log."""
    replica_log = StorageReplicaLog(Log.open(tmp_path, clock=wall_clock_ms))
    memory = MemoryLog()
    for offset, epoch in enumerate([1, 1, 3, 3, 3, 5, 8]):
        data = batch([T0], base_offset=offset, epoch=epoch)
        replica_log.append([entry(data, epoch)])
        memory.append([entry(data, epoch)])
    for log in (replica_log, memory):
        assert [log.end_offset_for_epoch(e) for e in range(-1, 10)] == [
            (-1, 0), (-1, 0), (1, 2), (1, 2), (3, 5), (3, 5), (5, 6), (5, 6), (5, 6),
            (8, 7), (8, 7),
        ]
    replica_log.log.update_high_watermark(7)
    replica_log.log.maybe_increment_log_start_offset(3)
    memory.advance_log_start(3)
    for log in (replica_log, memory):
        assert [log.end_offset_for_epoch(e) for e in range(-1, 10)] == [
            (-1, 3), (-1, 3), (-1, 3), (-1, 3), (3, 5), (3, 5), (5, 6), (5, 6), (5, 6),
            (8, 7), (8, 7),
        ]
