"""Cluster membership on the node side: registering with the controller, heartbeating it, and
the controller leader's sessions that fence a node whose heartbeats stop (Kafka's
BrokerRegistration and BrokerHeartbeat, KRaft's broker lifecycle).

The rules (ids, incarnations, epochs, the refusals) are the controller's state machine's
(`coordinator.controller.MetadataImage.plan_register` and its neighbours); this module holds the
I/O: the identity kept in the data dir, the RPCs with their per-attempt timeouts, forwarding to
the controller leader, and the clock of the sessions, which only the leader keeps (in memory: a
new leader gives every node a fresh session, so a failover fences nobody).

Every node registers at start, the nodes of a static peers list too, so that the metadata holds
every node with its addresses; a node that joins a running cluster (`tidelog node --join`)
registers before it builds anything else, since it needs its id and the controller's voters
first (`join_cluster`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc

from tidelog import errors
from tidelog.coordinator.metadata_records import RegisterNodeRecord, valid_incarnation
from tidelog.node.cluster.controller_driver import ControllerDriver
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.edge.security import PeerDialer
from tidelog.node.files import write_atomically
from tidelog.node.replicas.transport import CHANNEL_OPTIONS
from tidelog.properties import read_properties
from tidelog.v1 import raft_pb2 as rpb
from tidelog.v1 import raft_pb2_grpc

log = logging.getLogger("tidelog.node")

#: The data dir's identity (Kafka's meta.properties): the node id it belongs to and the
#: incarnation made when it was first used.
META_FILE = "meta.properties"
#: One attempt of a registration or heartbeat RPC, forwarding included.
_ATTEMPT_S = 3.0
#: What a forwarded call keeps of its caller's deadline to answer in time.
_FORWARD_MARGIN_S = 0.2
_RETRY_S = (0.1, 0.2, 0.5, 1.0)
#: How long a joining node keeps trying to register before it gives up.
JOIN_TIMEOUT_S = 120.0
#: How long a graceful stop waits for the controller to fence the node.
_GOODBYE_S = 1.0
#: How long the leader waits for a fencing record to commit.
_PROPOSE_S = 5.0

R = TypeVar("R", rpb.RegisterNodeResponse, rpb.NodeHeartbeatResponse)


# ---- the data dir's identity ---------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """Who this data dir is: its node id (-1 until a joining node is assigned one) and its
    incarnation, made once so that a wiped node that comes back is told apart."""

    node_id: int
    incarnation: str


def load_identity(data_dir: Path, configured_id: int) -> Identity:
    """The data dir's identity, made (and kept, fsynced) on first use. A data dir of another
    node id than the configured one is refused, as Kafka refuses a meta.properties of another
    node.id: its logs are that node's."""
    path = data_dir / META_FILE
    if not path.exists():
        identity = Identity(configured_id, secrets.token_hex(16))
        save_identity(data_dir, identity)
        return identity
    props = read_properties(path)
    incarnation = props.get("incarnation.id", "")
    stored = props.get("node.id", "")
    if not valid_incarnation(incarnation) or not (stored == "" or stored.isdigit()):
        raise errors.InvalidConfigError(
            f"{path} is damaged: expected incarnation.id (32 hex digits) and node.id, got "
            f"{incarnation!r} and {stored!r}"
        )
    stored_id = int(stored) if stored else -1
    if configured_id >= 0 and stored_id >= 0 and stored_id != configured_id:
        raise errors.InvalidConfigError(
            f"data dir {data_dir} belongs to node {stored_id}, not node.id {configured_id}"
        )
    identity = Identity(configured_id if configured_id >= 0 else stored_id, incarnation)
    if identity.node_id != stored_id:
        save_identity(data_dir, identity)
    return identity


def save_identity(data_dir: Path, identity: Identity) -> None:
    text = f"incarnation.id={identity.incarnation}\n"
    if identity.node_id >= 0:
        text += f"node.id={identity.node_id}\n"
    write_atomically(data_dir / META_FILE, text)


# ---- calls ---------------------------------------------------------------------------------


def _failed(response_type: type[R], exc: errors.TidelogError) -> R:
    return response_type(error_code=exc.code, error_message=str(exc))


def _refused(
    method: str, exc: errors.TidelogError
) -> rpb.RegisterNodeResponse | rpb.NodeHeartbeatResponse:
    if method == "RegisterNode":
        return _failed(rpb.RegisterNodeResponse, exc)
    return _failed(rpb.NodeHeartbeatResponse, exc)


async def _call(
    dialer: PeerDialer, channels: dict[str, grpc.aio.Channel], address: str, method: str,
    request: rpb.RegisterNodeRequest | rpb.NodeHeartbeatRequest, timeout_s: float,
) -> rpb.RegisterNodeResponse | rpb.NodeHeartbeatResponse:
    """One RaftTransport call on a kept channel; a node that does not answer in time is
    NOT_CONTROLLER, which callers retry elsewhere."""
    channel = channels.get(address)
    if channel is None:
        channel = channels[address] = dialer.channel(address, CHANNEL_OPTIONS)
    stub = raft_pb2_grpc.RaftTransportStub(channel)
    try:
        response: rpb.RegisterNodeResponse | rpb.NodeHeartbeatResponse = await getattr(
            stub, method
        )(request, timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        return _refused(method, errors.NotControllerError(
            f"{address} did not answer {method}: {exc.code().name}"
        ))
    return response


async def _close(channels: dict[str, grpc.aio.Channel]) -> None:
    for channel in channels.values():
        await channel.close()
    channels.clear()


# ---- the controller leader's side ----------------------------------------------------------


class NodeRegistry:
    """Answers RegisterNode and NodeHeartbeat on every node: the controller leader decides,
    any other node forwards once to it. The leader keeps each registered node's session and
    fences those silent for broker.session.timeout.ms."""

    def __init__(
        self, config: NodeConfig, controller: ControllerDriver, routing: Routing,
        dialer: PeerDialer,
    ) -> None:
        self.config = config
        self.controller = controller
        self.routing = routing
        self._dialer = dialer
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: Leader only: node id -> loop time of its last heartbeat (or of this node becoming
        #: leader, or of its registration).
        self._heard: dict[int, float] = {}

    async def register(
        self, request: rpb.RegisterNodeRequest, timeout_s: float
    ) -> rpb.RegisterNodeResponse:
        if not self.controller.is_leader:
            return await self._forward("RegisterNode", request, timeout_s,
                                       rpb.RegisterNodeResponse)
        image = self.controller.image
        reserved = set(self.config.peers)

        def plan() -> list[RegisterNodeRecord]:
            record = image.plan_register(
                request.node_id, request.incarnation, request.internal_address,
                request.client_address, fenced=request.fenced, reserved_ids=reserved,
                kafka_address=request.kafka_address,
            )
            return [] if record is None else [record]

        try:
            records = await self.controller.propose_metadata_records(plan, timeout_s)
        except errors.TidelogError as exc:
            return _failed(rpb.RegisterNodeResponse, exc)
        node_id = request.node_id if request.node_id >= 0 else image.node_id_of(
            request.incarnation
        )
        if records:
            assert isinstance(records[0], RegisterNodeRecord)
            node_id = records[0].node_id
        node = image.node(node_id)
        if node is None:  # unregistered meanwhile (decommissioned): the node asks again
            return _failed(rpb.RegisterNodeResponse, errors.NotControllerError(
                f"the registration of node {node_id} is gone"
            ))
        self._heard[node_id] = asyncio.get_running_loop().time()
        if records:
            log.info("node %d registered (incarnation %s, nodes %s, clients %s, %s)", node_id,
                     node.incarnation, node.internal_address, node.client_address,
                     "fenced" if node.fenced else "alive",
                     extra={"event": "node_registered", "node": node_id})
        response = rpb.RegisterNodeResponse(
            node_id=node_id, epoch=node.epoch, controller_voters=self.controller.voters
        )
        for entry in self.controller.known_nodes():
            response.nodes.add(
                node_id=entry.node_id, internal_address=entry.internal_address,
                client_address=entry.client_address, fenced=entry.fenced,
            )
        return response

    async def heartbeat(
        self, request: rpb.NodeHeartbeatRequest, timeout_s: float
    ) -> rpb.NodeHeartbeatResponse:
        if not self.controller.is_leader:
            return await self._forward("NodeHeartbeat", request, timeout_s,
                                       rpb.NodeHeartbeatResponse)
        image = self.controller.image
        try:
            node = image.check_heartbeat(request.node_id, request.epoch)
        except errors.TidelogError as exc:
            return _failed(rpb.NodeHeartbeatResponse, exc)
        self._heard[node.node_id] = asyncio.get_running_loop().time()
        if node.fenced != request.want_fence:
            plan = image.plan_fence if request.want_fence else image.plan_unfence
            try:
                await self.controller.propose_metadata_records(
                    lambda: [r for r in [plan(node.node_id)] if r is not None], timeout_s
                )
            except errors.TidelogError as exc:  # answered as it stands; the next one retries
                log.info("node %d: %s not committed: %s", node.node_id,
                         "fencing" if request.want_fence else "unfencing", exc)
            else:
                log.info("node %d %s", node.node_id,
                         "fenced (stopping)" if request.want_fence else "unfenced",
                         extra={"event": "node_fenced" if request.want_fence
                                else "node_unfenced", "node": node.node_id})
        now = image.node(node.node_id)
        return rpb.NodeHeartbeatResponse(
            fenced=now is None or now.fenced,
            metadata_high_watermark=self.controller.metadata_high_watermark(),
        )

    async def _forward(
        self, method: str, request: rpb.RegisterNodeRequest | rpb.NodeHeartbeatRequest,
        timeout_s: float, response_type: type[R],
    ) -> R:
        """The controller leader's answer, asked once (a forwarded request is not forwarded
        again: nodes whose views of the leader disagree cannot pass it around)."""
        leader = self.routing.controller_id
        address = self.routing.internal_address_of(leader) if leader >= 0 else ""
        if request.forwarded or leader == self.config.node_id or not address:
            return _failed(response_type, errors.NotControllerError(
                f"node {self.config.node_id} is not the controller leader"
                + (f" (node {leader} is)" if leader >= 0 else " and knows none")
            ))
        forwarded = type(request).FromString(request.SerializeToString())
        forwarded.forwarded = True
        answer = await _call(self._dialer, self._channels, address, method, forwarded,
                             max(timeout_s - _FORWARD_MARGIN_S, 0.05))
        assert isinstance(answer, response_type)
        return answer

    async def session_loop(self) -> None:
        """On the controller leader: fence every registered node whose heartbeats stopped for
        the session timeout. Sessions start afresh when this node becomes leader, and after a
        stall of this node's own loop (it must not take its own silence for theirs)."""
        loop = asyncio.get_running_loop()
        every_s = self.config.broker_heartbeat_interval_ms / 2000
        timeout_s = self.config.broker_session_timeout_ms / 1000
        last = loop.time()
        while True:
            await asyncio.sleep(every_s)
            now = loop.time()
            stalled, last = now - last > 4 * every_s + 0.5, now
            if not self.controller.is_leader:
                self._heard.clear()
                continue
            for node in list(self.controller.image.nodes.values()):
                heard = self._heard.setdefault(node.node_id, now)
                if stalled:
                    self._heard[node.node_id] = now
                elif not node.fenced and now - heard > timeout_s:
                    await self._fence(node.node_id, now - heard)

    async def _fence(self, node_id: int, silent_s: float) -> None:
        image = self.controller.image
        try:
            records = await self.controller.propose_metadata_records(
                lambda: [r for r in [image.plan_fence(node_id)] if r is not None], _PROPOSE_S
            )
        except errors.TidelogError as exc:  # the next round tries again
            log.info("node %d: fencing not committed: %s", node_id, exc)
            return
        if records:
            log.warning("node %d fenced: no heartbeat for %.1fs", node_id, silent_s,
                        extra={"event": "node_fenced", "node": node_id})

    async def close(self) -> None:
        await _close(self._channels)


# ---- a node's own registration -------------------------------------------------------------


class Registrant:
    """This node's registration and heartbeats: registers (again whenever the controller
    says the registration is unknown or stale), then heartbeats the controller leader every
    broker.heartbeat.interval.ms; a graceful stop says goodbye so that it is fenced at once."""

    def __init__(
        self, config: NodeConfig, identity: Identity, routing: Routing, dialer: PeerDialer,
        voters: Callable[[], Sequence[int]], epoch: int = -1,
        on_metadata_high_watermark: Callable[[int], None] = lambda hw: None,
    ) -> None:
        """`voters`: the controller's voters as this node knows them now;
        `on_metadata_high_watermark`: given the controller's metadata HW from every
        heartbeat's answer that has one."""
        self.config = config
        self._voters = voters
        self._on_metadata_high_watermark = on_metadata_high_watermark
        self.identity = identity
        self.routing = routing
        self._dialer = dialer
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: The epoch of this node's registration; -1 while it is not registered.
        self.epoch = epoch
        self.fenced = True
        self._turn = 0
        #: Refusals in a row (their log lines are spaced out).
        self._failures = 0

    def _targets(self) -> list[str]:
        """Where to send: the controller leader when known (no forwarding hop), else the
        voters in turn (each forwards to the leader it knows)."""
        leader = self.routing.controller_id
        if leader >= 0 and (address := self.routing.internal_address_of(leader)):
            return [address]
        voters = [self.routing.internal_address_of(v) for v in self._voters()]
        return [a for a in voters if a]

    async def _ask(
        self, method: str, request: rpb.RegisterNodeRequest | rpb.NodeHeartbeatRequest
    ) -> rpb.RegisterNodeResponse | rpb.NodeHeartbeatResponse:
        targets = self._targets()
        if not targets:
            return _refused(method, errors.NotControllerError("no controller voter is known"))
        self._turn += 1
        address = targets[self._turn % len(targets)]
        return await _call(self._dialer, self._channels, address, method, request, _ATTEMPT_S)

    def request(self) -> rpb.RegisterNodeRequest:
        return rpb.RegisterNodeRequest(
            node_id=self.config.node_id, incarnation=self.identity.incarnation,
            internal_address=self.config.peers.get(self.config.node_id,
                                                   self.config.internal_listen),
            client_address=self.config.advertised_address,
            kafka_address=self.config.kafka_advertised_address,
        )

    async def settle(self, timeout_s: float) -> None:
        """Register (and, registered fenced, heartbeat until unfenced) before the node reports
        SERVING, as a Kafka broker waits to be unfenced before it runs: once clients see it
        serve, placement counts it (a node restarted after it was fenced would otherwise be
        left out of a topic created right then). A controller that does not settle it within
        `timeout_s` is waited for in the background (`run`), the node serving meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            delay = await self._step()
            if self.epoch >= 0 and not self.fenced:
                return
            if loop.time() + delay > deadline:
                log.warning("node %d: not registered with the controller within %.1fs; serving "
                            "and trying on", self.config.node_id, timeout_s)
                return
            await asyncio.sleep(delay)

    async def run(self) -> None:
        """Register when not registered, then heartbeat, until cancelled."""
        while True:
            await asyncio.sleep(await self._step())

    async def _step(self) -> float:
        """One registration or heartbeat; returns how long to wait before the next."""
        if self.epoch < 0:
            request = self.request()
            answer = await self._ask("RegisterNode", request)
            assert isinstance(answer, rpb.RegisterNodeResponse)
            if answer.error_code == 0:
                self.epoch, self.fenced = answer.epoch, request.fenced
                log.info("node %d registered with the controller (epoch %d)",
                         self.config.node_id, answer.epoch,
                         extra={"event": "registered", "epoch": answer.epoch})
                return 0.0
            self._failures += 1
            _log_refusal(self.config.node_id, "registration", answer, self._failures)
            return _RETRY_S[min(self._failures, len(_RETRY_S)) - 1]
        beat = await self._ask("NodeHeartbeat", rpb.NodeHeartbeatRequest(
            node_id=self.config.node_id, epoch=self.epoch
        ))
        assert isinstance(beat, rpb.NodeHeartbeatResponse)
        if beat.error_code in (errors.BrokerIdNotRegisteredError.code,
                               errors.StaleBrokerEpochError.code):
            log.info("node %d registers again: %s", self.config.node_id, beat.error_message)
            self.epoch = -1
            return 0.0
        if beat.error_code:
            self._failures += 1
            _log_refusal(self.config.node_id, "heartbeat", beat, self._failures)
            return _RETRY_S[0]
        self._failures = 0
        self.fenced = beat.fenced
        if beat.HasField("metadata_high_watermark"):
            self._on_metadata_high_watermark(beat.metadata_high_watermark)
        return self.config.broker_heartbeat_interval_ms / 1000

    async def goodbye(self) -> None:
        """A graceful stop: ask to be fenced now (Kafka's controlled shutdown fences the
        broker), so that no new replica is placed here meanwhile. Best effort, bounded."""
        if self.epoch < 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ask("NodeHeartbeat", rpb.NodeHeartbeatRequest(
                node_id=self.config.node_id, epoch=self.epoch, want_fence=True
            )), _GOODBYE_S)

    async def close(self) -> None:
        await _close(self._channels)


def _log_refusal(
    node_id: int, what: str, answer: rpb.RegisterNodeResponse | rpb.NodeHeartbeatResponse,
    failures: int,
) -> None:
    """Not-yet answers (no controller elected) are routine at start; others are worth a
    warning, once and then every 30th time."""
    level = logging.DEBUG
    if answer.error_code != errors.NotControllerError.code or failures % 30 == 0:
        level = logging.WARNING if failures == 1 or failures % 30 == 0 else logging.DEBUG
    log.log(level, "node %d: %s refused: %s %s", node_id, what,
            errors.for_code(answer.error_code).name, answer.error_message)


# ---- joining a running cluster -------------------------------------------------------------


async def join_cluster(
    config: NodeConfig, identity: Identity, timeout_s: float = JOIN_TIMEOUT_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[NodeConfig, Identity, int]:
    """Register through the bootstrap nodes (config.join) before anything else is built: the
    answer gives this node its id (when it has none), the controller's voters and the other
    nodes' addresses. Returns the config the node runs with (its id, the voters as its peers,
    every node's client address), its identity (the id kept in the data dir) and the epoch
    of its registration. The node registers fenced; its first heartbeat, once it serves,
    unfences it. Refusals that trying again cannot cure (INVALID_REQUEST) end the start at
    once, the others (no controller yet, DUPLICATE_BROKER_REGISTRATION while the old
    incarnation's session lasts) after `timeout_s`."""
    dialer = PeerDialer(config)
    channels: dict[str, grpc.aio.Channel] = {}
    addresses = config.join_addresses
    request = rpb.RegisterNodeRequest(
        node_id=identity.node_id, incarnation=identity.incarnation,
        internal_address=config.internal_listen, client_address=config.advertised_address,
        kafka_address=config.kafka_advertised_address, fenced=True,
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    attempt = 0
    try:
        while True:
            answer = await _call(dialer, channels, addresses[attempt % len(addresses)],
                                 "RegisterNode", request, _ATTEMPT_S)
            assert isinstance(answer, rpb.RegisterNodeResponse)
            attempt += 1
            if answer.error_code == 0:
                break
            refusal = errors.for_code(answer.error_code)(answer.error_message)
            if answer.error_code == errors.InvalidRequestError.code or loop.time() > deadline:
                raise errors.InvalidConfigError(f"cannot join through {config.join}: {refusal}")
            _log_refusal(identity.node_id, "join", answer, attempt)
            await sleep(_RETRY_S[min(attempt, len(_RETRY_S)) - 1])
    finally:
        await _close(channels)
    node_id = answer.node_id
    if node_id != identity.node_id:
        identity = dataclasses.replace(identity, node_id=node_id)
        save_identity(config.data_dir, identity)
    voters = tuple(answer.controller_voters)
    nodes = {entry.node_id: entry for entry in answer.nodes}
    peers = {v: nodes[v].internal_address for v in voters if v in nodes and v != node_id}
    peers[node_id] = config.internal_listen
    # Only the voters are configured: the other nodes' addresses come from the metadata,
    # which follows them when they change.
    joined = dataclasses.replace(
        config, node_id=node_id, join="", peers=peers, controller_voters=voters,
        client_addresses={v: nodes[v].client_address for v in peers if v != node_id},
    )
    log.info("node %d joined through %s: epoch %d, controller voters %s, %d node(s) known",
             node_id, config.join, answer.epoch, list(voters), len(nodes),
             extra={"event": "joined", "epoch": answer.epoch})
    return joined, identity, answer.epoch
