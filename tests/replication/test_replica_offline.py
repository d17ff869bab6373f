"""A replica taken offline (its disk refused a write) stays offline until the retry that reopens
its log brings it back, whatever else restarts its core meanwhile."""

from __future__ import annotations

import asyncio
import errno
import time
from pathlib import Path

from waiting_helpers import async_wait_for

from tidelog.node.config import NodeConfig
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import TopicPartition


def test_a_write_refused_during_a_scrub_cut_leaves_the_replica_to_its_retry(
    tmp_path: Path,
) -> None:
    tp = TopicPartition("t", 0)

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        try:
            replicas.open_replica(tp, (1,), {})
            replica = replicas.partitions[tp]
            loop = asyncio.get_running_loop()
            refused = OSError(errno.ENOSPC, "No space left on device")

            def cut_while_a_round_fails() -> bool:
                loop.call_soon_threadsafe(replicas.storage_failed, replica, refused)
                time.sleep(0.2)
                return False

            log_before = replica.log
            await replicas.rewrite_storage(replica, cut_while_a_round_fails)
            assert replica.offline, "back in service while its log waits to be reopened"
            await async_wait_for(lambda: not replica.offline, 10, "the replica back in service")
            assert replica.log is not log_before  # reopened by the retry
        finally:
            await replicas.close()

    asyncio.run(scenario())


def test_a_replica_removed_while_offline_is_not_reopened(tmp_path: Path) -> None:
    """The retry's reopen runs on the disk thread after the removal deleted the directory: it
    must not create it again."""
    tp = TopicPartition("t", 0)

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        try:
            replicas.open_replica(tp, (1,), {})
            replica = replicas.partitions[tp]
            replicas.storage_failed(replica, OSError(errno.ENOSPC, "No space left on device"))
            replicas.remove_replica(tp)
            await asyncio.get_running_loop().run_in_executor(replicas.disk, replica.reopen_log)
            assert not (tmp_path / "t-0").exists()
        finally:
            await replicas.close()

    asyncio.run(scenario())
