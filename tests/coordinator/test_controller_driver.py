"""The controller's driver on one replica set in this process (its own directory and Ready loop,
as a node runs them; no tick loop, so elections happen only when the test steps them, and the
other voters are played by the test): a node killed right after a change applies it from its
own disk at start; a controller deposed after it proposed a change but before it saw the change
commit answers REQUEST_TIMED_OUT, not NOT_CONTROLLER, because the next controller may still
commit it; a new controller decides nothing until its image holds every record written
before its election; and a voter that a committed configuration of the controller's group
leaves out deletes its replica and stays out after a restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tidelog import errors
from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.cluster.controller_driver import QUORUM_FILE, ControllerDriver, load_quorum
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.replicas.partition import PartitionReplica
from tidelog.node.replicas.replica_set import ReplicaSet
from tidelog.records import ControlType, build_control_batch
from tidelog.replication import AppendResponse, Heartbeat, PreVoteResponse, VoteResponse
from tidelog.replication.membership import Membership, encode_membership

pytestmark = pytest.mark.timeout(60)


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.005)


def _config(tmp_path: Path, nodes: int = 3) -> NodeConfig:
    return NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path,
                      peers={n: f"127.0.0.1:{n}" for n in range(1, nodes + 1)},
                      client_addresses={n: f"127.0.0.1:1{n}" for n in range(2, nodes + 1)})


@contextlib.asynccontextmanager
async def _controller(
    tmp_path: Path, nodes: int = 3, *, killed: bool = False
) -> AsyncIterator[tuple[ControllerDriver, PartitionReplica]]:
    """Node 1 of `nodes`, its metadata replica opened and its Ready loop running. `killed`:
    at the end the node stops as a SIGKILL would stop it, without closing its logs (no last
    checkpoint)."""
    config = _config(tmp_path, nodes)
    replicas = ReplicaSet(config)
    controller = ControllerDriver(config, replicas, Routing(config, replicas.partitions,
                                                            METADATA_TP))
    ready_loop = asyncio.create_task(replicas.ready_loop())
    try:
        await controller.load()
        yield controller, replicas.partitions[METADATA_TP]
    finally:
        ready_loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ready_loop
        if killed:
            replicas.disk.shutdown()
            replicas.flushers.shutdown()
        else:
            await replicas.close()


async def _elect(controller: ControllerDriver, replica: PartitionReplica) -> int:
    """Node 1 stands for the next term and node 2 grants the pre-vote and the vote; the
    term it leads."""
    core = replica.core
    core.campaign()
    term = core.term + 1
    if len(controller.voters) > 1:
        core.step(PreVoteResponse(term, 2, 1, True))
        core.step(VoteResponse(term, 2, 1, True))
    controller.replicas.changed(replica)
    await _until(lambda: replica.is_leader and replica.leader_epoch_start_offset is not None)
    return term


async def _deposed_mid_change(
    controller: ControllerDriver, replica: PartitionReplica
) -> asyncio.Task[object]:
    """Node 1 leads, proposes topic "t" (written here only), then node 3 leads a newer term;
    the proposal's task."""
    term = await _elect(controller, replica)
    proposal = asyncio.create_task(controller.propose_metadata(
        lambda: controller.image.plan_create("t", 1, 3, {}, [1, 2, 3]), 30))
    await _until(lambda: replica.log.log_end_offset > 0)
    replica.core.step(Heartbeat(term + 1, 3, 1, leader_hw=0))
    controller.replicas.changed(replica)
    return proposal


def test_a_node_killed_right_after_a_change_applies_it_from_its_own_disk(tmp_path: Path) -> None:
    """A lone node applies its metadata log at start up to the HW it checkpointed, and has no
    other voter to catch up from: the HW is checkpointed when a change commits, before it is
    answered, so a node killed right after (no periodic checkpoint, no clean close) knows the
    change before any election. It did not: it knew it only after its first commit as leader
    again, and answered UNKNOWN_TOPIC_OR_PARTITION meanwhile."""

    async def scenario() -> None:
        async with _controller(tmp_path, nodes=1, killed=True) as (controller, replica):
            await _elect(controller, replica)
            await controller.propose_metadata(
                lambda: controller.image.plan_create("t", 1, 1, {}, [1]), 30)
        config = _config(tmp_path, nodes=1)
        restarted = ReplicaSet(config)
        try:
            again = ControllerDriver(config, restarted, Routing(config, restarted.partitions,
                                                                METADATA_TP))
            await again.load()
            assert "t" in again.image.topics
        finally:
            await restarted.close()

    asyncio.run(scenario())


def test_a_controller_deposed_before_its_change_committed_answers_request_timed_out(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with _controller(tmp_path) as (controller, replica):
            proposal = await _deposed_mid_change(controller, replica)
            with pytest.raises(errors.RequestTimedOutError, match="lost its leadership"):
                await proposal
            assert replica.high_watermark == 0

    asyncio.run(scenario())


def test_a_new_controller_decides_nothing_before_it_applied_what_came_before_its_epoch(
    tmp_path: Path,
) -> None:
    """Elected again with topic "t" written but not known committed (its HW is behind), the
    controller's image lacks "t" until its epoch's marker commits: deciding on it, it would
    create "t" a second time. It answers NOT_CONTROLLER (retriable) until then."""

    async def scenario() -> None:
        async with _controller(tmp_path) as (controller, replica):
            with contextlib.suppress(errors.RequestTimedOutError):
                await (await _deposed_mid_change(controller, replica))
            await _elect(controller, replica)
            assert replica.leader_epoch_start_offset == 1  # its marker follows "t"
            assert replica.high_watermark == 0 and "t" not in controller.image.topics

            def create_t() -> object:
                return controller.image.plan_create("t", 1, 3, {}, [1, 2, 3])

            with pytest.raises(errors.NotControllerError, match="before its election"):
                await controller.propose_metadata(create_t, 5)
            await _until(lambda: replica.log.log_end_offset == 2)  # the marker is written
            replica.core.step(AppendResponse(replica.core.term, 2, 1, True, match_end=2))
            controller.replicas.changed(replica)
            await _until(lambda: "t" in controller.image.topics)
            with pytest.raises(errors.TopicAlreadyExistsError):
                await controller.propose_metadata(create_t, 5)

    asyncio.run(scenario())


def test_an_unregistered_static_peer_is_no_node_until_it_registers_again(tmp_path: Path) -> None:
    """A node of the static peers list counts as a live node before it registers (a cluster
    just started); once unregistered it must not come back so, or Metadata would list a
    stopped node and topics would be placed on it."""

    async def scenario() -> None:
        config = _config(tmp_path, nodes=4)
        replicas = ReplicaSet(config)
        controller = ControllerDriver(config, replicas, Routing(config, replicas.partitions,
                                                                METADATA_TP))
        try:
            image = controller.image
            assert controller.known_node_ids() == [1, 2, 3, 4]
            registration = image.plan_register(4, "ab" * 16, "127.0.0.1:4", "127.0.0.1:14",
                                               fenced=True)
            assert registration is not None
            image.apply(0, registration)
            image.apply(1, image.plan_unregister(4, controller.voters))
            assert controller.known_node_ids() == [1, 2, 3]
            assert controller.placement_node_ids() == [1, 2, 3]
            image.apply(2, registration)
            assert controller.known_node_ids() == [1, 2, 3, 4]
        finally:
            await replicas.close()

    asyncio.run(scenario())


def _configuration(offset: int, voters: list[int], learners: tuple[int, ...] = ()) -> bytes:
    """A committed configuration of the metadata group, as a node reads it in the log."""
    return build_control_batch(ControlType.MEMBERSHIP, base_offset=offset,
                               value=encode_membership(Membership.of(voters, learners)))


def test_a_voter_left_out_of_the_quorum_deletes_its_replica_and_stays_out_after_a_restart(
    tmp_path: Path,
) -> None:
    """Node 1, a bootstrap voter (the first of the static peers), applies a configuration
    without it (pulled from a voter: its own replica hears no more once removed): it deletes
    its metadata replica, keeps the configuration, and built again on its data dir (a restart)
    it neither opens the replica nor counts itself a voter, whatever its peers list says. A
    configuration naming it again, as a learner, opens a replica as a learner."""

    async def scenario() -> None:
        async with _controller(tmp_path, nodes=4) as (controller, _):
            assert controller.voters == (1, 2, 3) and controller.is_voter
            controller._apply_metadata_bytes(_configuration(0, [2, 3, 4]))
            assert METADATA_TP not in controller.replicas.partitions
            assert controller.voters == (2, 3, 4) and not controller.is_voter
            await asyncio.get_running_loop().run_in_executor(controller.replicas.disk, int)
        assert not (tmp_path / "__cluster_metadata-0").exists()
        assert load_quorum(tmp_path / QUORUM_FILE) == Membership.of([2, 3, 4])
        config = _config(tmp_path, nodes=4)
        replicas = ReplicaSet(config)
        again = ControllerDriver(config, replicas, Routing(config, replicas.partitions,
                                                           METADATA_TP))
        try:
            assert again.voters == (2, 3, 4)
            await again.load()
            assert not replicas.hosts(METADATA_TP)
            again._apply_metadata_bytes(_configuration(1, [2, 3, 4], (1,)))
            assert replicas.hosts(METADATA_TP)  # queued to open, as a learner
            await _until(lambda: METADATA_TP in replicas.partitions)
            assert replicas.partitions[METADATA_TP].core.membership == Membership.of(
                [2, 3, 4], [1])
        finally:
            await replicas.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("text", ["voters=\nlearners=\n", "voters=1,x\nlearners=\n",
                                  "voters=1\nlearners=1\n", "voters=1\n"])
def test_a_damaged_quorum_file_fails_the_start(tmp_path: Path, text: str) -> None:
    (tmp_path / QUORUM_FILE).write_text(text)
    with pytest.raises(errors.InvalidConfigError, match="damaged"):
        load_quorum(tmp_path / QUORUM_FILE)
