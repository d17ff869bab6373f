"""A `ReplicaSet` run in-process for a test, without a node around it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tidelog.node.replicas.replica_set import ReplicaSet


@contextlib.asynccontextmanager
async def running(replicas: ReplicaSet, *, tick: bool = False) -> AsyncIterator[ReplicaSet]:
    """Run the set's Ready loop (and its tick loop with ``tick``: groups with peers need
    elections and heartbeats; a single-node group elects itself without) for the block, then
    stop the loops and close the set, whatever the block raised."""
    loops = [replicas.ready_loop(), *([replicas.tick_loop()] if tick else [])]
    tasks = [asyncio.create_task(loop) for loop in loops]
    try:
        yield replicas
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await replicas.close()
