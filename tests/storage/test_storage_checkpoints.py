"""Garbage in a checkpoint file: the log still opens, whole, and a warning names the file.

Every checkpoint only remembers something the segments also hold (or is a hint that saves
work), so a damaged one is rebuilt from the segments or ignored, never a reason for a node to
refuse to start. The damage is generated from a fixed seed per file and kind, so a failure
replays.
"""

from __future__ import annotations

import logging
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_helpers import T0, FakeClock, all_records, batch, marker, open_log

from tidelog.node.replicas.partition import PartitionReplica
from tidelog.replication import RaftConfig
from tidelog.replication.log_store import RAFT_STATE_FILE
from tidelog.replication.term_votes import TERM_VOTES_FILE, TermVotes
from tidelog.storage import Log, LogConfig
from tidelog.storage.epoch import LEADER_EPOCH_CHECKPOINT
from tidelog.storage.loader import LAST_MODIFIED_CHECKPOINT, OFFSETS_CHECKPOINT
from tidelog.types import TopicPartition

CONFIG = {"segment_bytes": 1500, "index_interval_bytes": 150}
CHECKPOINTS = [LEADER_EPOCH_CHECKPOINT, OFFSETS_CHECKPOINT, LAST_MODIFIED_CHECKPOINT]


def _random_bytes(rng: random.Random, text: str) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


def _flipped(rng: random.Random, text: str) -> bytes:
    data = bytearray(text.encode())
    for _ in range(rng.randrange(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def _cut(rng: random.Random, text: str) -> bytes:
    return text.encode()[: rng.randrange(len(text))]


def _words(rng: random.Random, text: str) -> bytes:
    """Well-formed lines with wrong values: negatives, letters, huge numbers, swapped rows."""
    lines = text.splitlines()
    rows = [line.split() for line in lines[2:]]
    for row in rows:
        i = rng.randrange(len(row))
        row[i] = rng.choice(["-7", "x", "1e3", str(1 << 70), "-1", "0"])
    rng.shuffle(rows)
    return "\n".join(lines[:2] + [" ".join(r) for r in rows]).encode() + b"\n"


def _header(rng: random.Random, text: str) -> bytes:
    lines = text.splitlines()
    lines[rng.randrange(2)] = rng.choice(["7", "-1", "", "abc", "99999999999999999999"])
    return "\n".join(lines).encode()


DAMAGE: dict[str, Callable[[random.Random, str], bytes]] = {
    "random-bytes": _random_bytes,
    "flipped": _flipped,
    "cut": _cut,
    "wrong-values": _words,
    "header": _header,
}


def _written(directory: Path) -> Log:
    """A log of several segments and epochs, checkpointed, as a running node leaves it."""
    rng = random.Random(5)
    log = open_log(directory, FakeClock(), **CONFIG)
    epoch = 0
    for i in range(60):
        if i % 15 == 0:
            epoch += 1
            log.append_as_leader(marker(), epoch)
        log.append_as_leader(batch([T0 + i] * rng.randrange(1, 4), 20), epoch)
    log.flush()
    log.checkpoint()
    return log


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.parametrize("kind", sorted(DAMAGE))
@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_garbage_checkpoint_is_rebuilt_or_ignored(
    tmp_path: Path, name: str, kind: str, shutdown: str, caplog: pytest.LogCaptureFixture
) -> None:
    original = _written(tmp_path / "orig")
    expected = all_records(original)
    epochs = original.leader_epoch_cache.entries
    end = original.log_end_offset
    if shutdown == "clean":
        original.close()
    damaged = tmp_path / "damaged"
    shutil.copytree(original.directory, damaged)
    if shutdown == "crash":
        original.close()
    path = damaged / name
    for trial in range(4):
        rng = random.Random(f"{name}/{kind}/{shutdown}/{trial}")
        path.write_bytes(DAMAGE[kind](rng, (original.directory / name).read_text()))
        copy = tmp_path / f"trial-{trial}"
        shutil.copytree(damaged, copy)
        with caplog.at_level(logging.WARNING):
            log = Log.open(copy, LogConfig(**CONFIG), clock=FakeClock())  # type: ignore[arg-type]
        try:
            assert log.log_end_offset == end
            assert all_records(log) == expected
            assert log.leader_epoch_cache.entries == epochs
            assert log.high_watermark <= log.log_end_offset
        finally:
            log.close()


def test_garbage_leader_epoch_checkpoint_names_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _written(tmp_path / "log")
    epochs = log.leader_epoch_cache.entries
    log.close()
    (log.directory / LEADER_EPOCH_CHECKPOINT).write_text("0\n2\nabc 0\n3 x\n")
    with caplog.at_level(logging.WARNING):
        reopened = Log.open(log.directory, LogConfig(**CONFIG), clock=FakeClock())  # type: ignore[arg-type]
    assert reopened.leader_epoch_cache.entries == epochs
    assert LEADER_EPOCH_CHECKPOINT in caplog.text
    assert "rebuilt the leader-epoch history" in caplog.text
    reopened.close()


@pytest.mark.parametrize(
    "garbage", ["0\n2\nterm -5\nvote 1\n", "0\n2\nterm x\nvote 1\n", "\x00\xff", "0\n1\nfoo 3\n"]
)
def test_garbage_raft_state_is_ignored(
    tmp_path: Path, garbage: str, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "t-0"
    _written(directory).close()
    (directory / RAFT_STATE_FILE).write_bytes(garbage.encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        replica = PartitionReplica(
            TopicPartition("t", 0), 1, (1, 2, 3), directory, LogConfig(**CONFIG),  # type: ignore[arg-type]
            RaftConfig(), seed=1, term_votes=TermVotes(tmp_path / TERM_VOTES_FILE),
        )
    assert replica.core.term == 0
    assert RAFT_STATE_FILE in caplog.text
    replica.log.close()


def _segment_files(log: Log) -> list[Path]:
    return sorted(log.directory.glob("*.log"))


def test_a_log_that_lost_durable_batches_knows_its_repair_floor(tmp_path: Path) -> None:
    log = _written(tmp_path / "log")
    floor = (log.latest_epoch, log.log_end_offset)
    log.close()
    middle = _segment_files(log)[len(_segment_files(log)) // 2]
    middle.write_bytes(middle.read_bytes()[: middle.stat().st_size // 2])  # its index fails
    damaged = Log.open(log.directory, LogConfig(**CONFIG), clock=FakeClock())  # type: ignore[arg-type]
    assert damaged.log_end_offset < floor[1]
    assert damaged.repair_floor == floor
    # The floor survives restarts until the log is durably past it again.
    damaged.flush()
    damaged.checkpoint()
    damaged.close()
    again = Log.open(log.directory, LogConfig(**CONFIG), clock=FakeClock())  # type: ignore[arg-type]
    assert again.repair_floor == floor
    while again.log_end_offset < floor[1]:
        again.append_as_leader(batch([T0], 20), floor[0])
    again.flush()
    again.checkpoint()
    assert again.repair_floor is None
    again.close()
    assert Log.open(log.directory, LogConfig(**CONFIG), clock=FakeClock()).repair_floor is None  # type: ignore[arg-type]


def test_a_truncated_log_is_not_taken_for_a_damaged_one(tmp_path: Path) -> None:
    log = _written(tmp_path / "log")
    log.truncate_to(log.log_end_offset // 2)  # a follower dropping a diverged tail
    shutil.copytree(log.directory, tmp_path / "crashed")  # no flush, no checkpoint since
    log.close()
    crashed = Log.open(tmp_path / "crashed", LogConfig(**CONFIG), clock=FakeClock())  # type: ignore[arg-type]
    assert crashed.repair_floor is None
    crashed.close()
