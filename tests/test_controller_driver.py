"""The controller's driver on one replica set in this process (its own directory and Ready loop,
as a node runs them; no tick loop, so elections happen only when the test steps them): a
controller deposed after it proposed a change but before it saw the change commit answers
REQUEST_TIMED_OUT, not NOT_CONTROLLER, because the next controller may still commit it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tidelog import errors
from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.config import NodeConfig
from tidelog.node.controller_driver import ControllerDriver
from tidelog.node.replicas import ReplicaSet
from tidelog.node.routing import Routing
from tidelog.replication import Heartbeat, PreVoteResponse, VoteResponse

pytestmark = pytest.mark.timeout(60)


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.005)


def test_a_controller_deposed_before_its_change_committed_answers_request_timed_out(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path,
                            peers={1: "127.0.0.1:1", 2: "127.0.0.1:2", 3: "127.0.0.1:3"},
                            client_addresses={2: "127.0.0.1:12", 3: "127.0.0.1:13"})
        replicas = ReplicaSet(config)
        controller = ControllerDriver(config, replicas, Routing(config, replicas.partitions,
                                                                METADATA_TP))
        ready_loop = asyncio.create_task(replicas.ready_loop())
        try:
            await controller.load()
            replica = replicas.partitions[METADATA_TP]
            core = replica.core
            core.campaign()  # a pre-vote for the next term, then the vote: node 2 grants both
            term = core.term + 1
            core.step(PreVoteResponse(term, 2, 1, True))
            core.step(VoteResponse(term, 2, 1, True))
            replicas.changed(replica)
            await _until(lambda: replica.leader_epoch_start_offset is not None)

            proposal = asyncio.create_task(controller.propose_metadata(
                lambda: controller.image.plan_create("t", 1, 3, {}, [1, 2, 3]), 30))
            await _until(lambda: replica.log.log_end_offset > 0)  # written here, not committed
            core.step(Heartbeat(term + 1, 3, 1, leader_hw=0))  # node 3 leads a newer term
            replicas.changed(replica)
            with pytest.raises(errors.RequestTimedOutError, match="lost its leadership"):
                await proposal
            assert replica.high_watermark == 0
        finally:
            ready_loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ready_loop
            await replicas.close()

    asyncio.run(scenario())
