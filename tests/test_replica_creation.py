"""A running node opens the replicas of a new topic on its disk thread, never on its event loop:
the loop also answers Metadata and keeps node liveness, and a topic of 1,000 partitions opened
on it blocked it for 5-50 s (its peers took the node for dead, its leaderships were lost)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from tidelog.node.config import NodeConfig
from tidelog.node.replicas import ReplicaSet
from tidelog.storage import Log
from tidelog.testing import async_wait_for
from tidelog.types import TopicPartition


def test_new_replicas_open_off_the_loop_and_a_removal_mid_open_leaves_no_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened_on: set[int] = set()
    original = Log.open.__func__  # type: ignore[attr-defined]

    def recording_open(cls: type[Log], *args: Any, **kwargs: Any) -> Log:
        opened_on.add(threading.get_ident())
        return original(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Log, "open", classmethod(recording_open))
    tps = [TopicPartition("t", p) for p in range(80)]

    async def scenario() -> None:
        replicas = ReplicaSet(NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path))
        try:
            for tp in tps:
                replicas.add_replica(tp, (1,), {})
            assert not replicas.partitions, "a replica was opened on the loop"
            await async_wait_for(lambda: replicas._opening, 10, "the first slice being opened")
            # One removed while its log is being opened, one while it waits for its turn.
            removed = [next(iter(replicas._opening)), tps[-1]]
            for tp in removed:
                replicas.remove_replica(tp)
            await async_wait_for(lambda: len(replicas.partitions) == len(tps) - 2, 30,
                                 "every replica in service")
            await asyncio.get_running_loop().run_in_executor(replicas.disk, lambda: None)
            assert threading.get_ident() not in opened_on
            for tp in removed:
                assert tp not in replicas.partitions
                assert not (tmp_path / f"{tp.topic}-{tp.partition}").exists()
            # A new partition's only replica is its preferred one: it stood at once.
            assert all(r.core.term == 1 for r in replicas.partitions.values())
        finally:
            await replicas.close()

    asyncio.run(scenario())
