"""The group coordinator's driver on one replica set in this process (its own directory, Ready
and tick loops, as a node runs them), where the moment a new leader replays its offsets
partition can be held: requests answer COORDINATOR_LOAD_IN_PROGRESS (14) until the replay is
done, NOT_COORDINATOR (16) once leadership is lost, and the reloaded state holds every commit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.replica_helpers import running
from tidelog import errors
from tidelog.coordinator.controller import CONSUMER_OFFSETS_TOPIC, METADATA_TP
from tidelog.coordinator.metadata_records import TopicRecord
from tidelog.coordinator.offset_table import CommittedOffset
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators import driver as coordinator_driver
from tidelog.node.coordinators.group_driver import GroupCoordinatorDriver
from tidelog.node.coordinators.topic import CoordinatorTopic
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.types import TopicPartition

pytestmark = pytest.mark.timeout(60)

OFFSETS_TP = TopicPartition(CONSUMER_OFFSETS_TOPIC, 0)
EVENTS_0 = TopicPartition("events", 0)
T = TypeVar("T")


@contextlib.asynccontextmanager
async def _coordinator(tmp_path: Path) -> AsyncIterator[GroupCoordinatorDriver]:
    """One node leading the one partition of the offsets topic, with a topic to commit for."""
    config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path,
                        peers={1: "127.0.0.1:1"}, offsets_topic_num_partitions=1)
    replicas = ReplicaSet(config)
    routing = Routing(config, replicas.partitions, METADATA_TP)
    controller = ControllerDriver(config, replicas, routing)
    configs = {"cleanup.policy": "compact"}
    controller.image.apply(0, TopicRecord(CONSUMER_OFFSETS_TOPIC, 1, ((1,),), configs))
    controller.image.apply(1, TopicRecord(EVENTS_0.topic, 2, ((1,),), {}))
    driver = GroupCoordinatorDriver(
        config, replicas, CoordinatorTopic.offsets(config, controller, routing)
    )
    replicas.open_replica(OFFSETS_TP, (1,), configs)
    async with running(replicas, tick=True):
        try:
            yield driver
        finally:
            driver.close()


async def _once_loaded(call: Callable[[], Awaitable[T]]) -> T:
    """`call`'s result once the coordinator is elected and loaded."""
    async with asyncio.timeout(30):
        while True:
            try:
                return await call()
            except (errors.NotCoordinatorError, errors.CoordinatorLoadInProgressError):
                await asyncio.sleep(0.01)


def test_a_new_leader_answers_load_in_progress_until_its_replay_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replay = coordinator_driver._replay

    async def scenario() -> None:
        gate = asyncio.Event()
        gate.set()

        async def held_replay(*args: Any) -> None:  # the real replay, once the test lets it run
            await gate.wait()
            await replay(*args)

        monkeypatch.setattr(coordinator_driver, "_replay", held_replay)
        async with _coordinator(tmp_path) as driver:
            offsets = [("events", 0, 42, 3, "m")]
            answer = await _once_loaded(lambda: driver.commit("g", -1, offsets))
            assert answer == {}
            assert await driver.fetch("g", None, False) == {EVENTS_0: CommittedOffset(42, 3, "m")}

            gate.clear()
            try:
                replica = driver.replicas.partitions[OFFSETS_TP]
                await driver.replicas.rewrite_storage(replica, lambda: None)  # a new core
                with pytest.raises(errors.NotCoordinatorError):
                    await driver.fetch("g", None, False)

                async def loading() -> bool:
                    try:
                        await driver.fetch("g", None, False)
                    except errors.CoordinatorLoadInProgressError:
                        return True
                    except errors.NotCoordinatorError:  # not elected yet
                        return False
                    raise AssertionError("answered while the replay was held")

                async with asyncio.timeout(30):
                    while not await loading():
                        await asyncio.sleep(0.01)
                with pytest.raises(errors.CoordinatorLoadInProgressError):
                    await driver.commit("g", -1, offsets)
                assert driver.list_groups() == ([], True)
            finally:
                gate.set()
            reloaded = await _once_loaded(lambda: driver.fetch("g", None, False))
            assert reloaded == {EVENTS_0: CommittedOffset(42, 3, "m")}
            assert driver.list_groups() == ([("g", 1)], False)

    asyncio.run(scenario())


def test_a_long_replay_leaves_the_disk_thread_and_the_event_loop_to_the_node(
    tmp_path: Path,
) -> None:
    """A new leader replaying a big offsets partition must hold neither the node's one disk
    thread (every partition's fsyncs wait on it) nor the event loop for the whole replay: the
    loop sees the replay part done, and a disk job submitted then is done before the replay is.
    Before, the replay ran on the disk thread (the job waited for its end; 264,000 records held
    a node 3-6 s), or, for the records the new leader had not yet seen committed, in one go on
    the loop (nothing else ran meanwhile)."""

    async def scenario() -> None:
        async with _coordinator(tmp_path) as driver:
            sets = 8
            for n in range(sets):  # 8 sets of 4,000 records, each set one batch
                offsets = [("events", p, n, 0, "") for p in range(4000)]
                await _once_loaded(lambda offsets=offsets: driver.commit("g", -1, offsets))
            replica = driver.replicas.partitions[OFFSETS_TP]
            last = replica.log.log_end_offset - 1
            await driver.replicas.rewrite_storage(replica, lambda: None)  # a new core: a reload

            def replay_part_done() -> bool:
                led = driver._led.get(OFFSETS_TP)
                return led is not None and led.loading and 0 <= led.state.applied_offset < last

            async with asyncio.timeout(30):
                while not replay_part_done():
                    await asyncio.sleep(0)
            await asyncio.get_running_loop().run_in_executor(driver.replicas.disk, lambda: None)
            assert replay_part_done()
            with pytest.raises(errors.CoordinatorLoadInProgressError):
                await driver.fetch("g", [EVENTS_0], False)
            reloaded = await _once_loaded(lambda: driver.fetch("g", [EVENTS_0], False))
            assert reloaded == {EVENTS_0: CommittedOffset(sets - 1, 0, "")}

    asyncio.run(scenario())
