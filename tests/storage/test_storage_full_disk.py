"""A log on a disk that runs out of space: a refused write leaves no partial batch behind, what
was written before it stays intact, and the log reopened after space is freed takes writes; a
replica whose log the disk cannot create is created once it can."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest
from storage_helpers import T0, FakeClock, all_records, batch, open_log
from tmpfs_helpers import fill, tmpfs, use_up_inodes
from waiting_helpers import async_wait_for

from tidelog.node.config import NodeConfig
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.storage import CheckpointFile
from tidelog.types import TopicPartition

CONFIG = {"segment_bytes": 512 * 1024}


def test_a_write_the_full_disk_refuses_leaves_the_log_intact(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        log = open_log(disk / "log", FakeClock(), **CONFIG)
        filler = fill(disk, 200 * 1024)
        written = []
        with pytest.raises(OSError) as refused:
            for i in range(100):
                log.append_as_leader(batch([T0 + i] * 30, 1000), 1)  # ~30 KiB each
                log.sync_data()
                written = all_records(log)
        assert refused.value.errno == errno.ENOSPC
        assert written, "nothing fitted before the disk was full"
        segment = log.active_segment
        # The batch that did not fit is cut back off the file, not left half written.
        assert segment.log_path.stat().st_size == segment.size
        # A checkpoint the disk refuses keeps the previous one.
        state = CheckpointFile(disk / "log" / "state", version=0, width=1)
        filler.unlink()
        state.write([[1]])
        fill(disk, 0)
        with pytest.raises(OSError):
            state.write([[2] for _ in range(2000)])
        assert state.read() == [["1"]]

        log.abandon()  # as a crash would: no flush, no clean-shutdown marker
        (disk / "filler").unlink()
        reopened = open_log(disk / "log", FakeClock(), **CONFIG)
        assert all_records(reopened) == written
        reopened.append_as_leader(batch([T0] * 30, 1000), 1)
        reopened.close()


def test_a_replica_the_disk_cannot_create_is_created_once_it_can(tmp_path: Path) -> None:
    """A topic assigned here while the disk can create no file: the node retries instead of
    failing the round that applied the topic (which ended the node)."""
    with tmpfs(tmp_path / "disk", "size=1m,nr_inodes=64") as disk:
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=disk)
        tp = TopicPartition("t", 0)

        async def scenario() -> None:
            replicas = ReplicaSet(config)
            try:
                fillers = use_up_inodes(disk)
                replicas.add_replica(tp, (1,), {})
                await async_wait_for(lambda: tp in replicas._unopened, 20,
                                     "the disk to refuse the replica's files")
                assert tp not in replicas.partitions
                for path in fillers:
                    path.unlink()
                await async_wait_for(lambda: tp in replicas.partitions, 20,
                                     "the replica to be created")
            finally:
                await replicas.close()

        asyncio.run(scenario())
