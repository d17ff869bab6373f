"""Real multi-process clusters, on loopback unless told otherwise, for tests and for
``tidelog cluster``.

Each node is its own process and process group, so SIGKILL, SIGSTOP and crash-restart are the
real thing. Nothing may outlive the launcher: ``close()`` (run by ``with``, by ``atexit``, and on
every error path) kills every process group, and each node also watches its parent and exits
when the launcher disappears without cleaning up (SIGKILL), see ``node.server``.

Also what tests use to talk to such a cluster: :func:`wait_for` (the one poll-with-a-deadline)
and :class:`Raw` (blocking stubs to every node, for tests that check answers exactly as a node
gives them, which the client library would retry away).

Server packages are imported inside functions only: ``import tidelog.testing`` never pulls them
in.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tidelog
from tidelog import wire
from tidelog.clock import wall_clock_ms
from tidelog.errors import (
    ConfigurationError,
    NotControllerError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownLeaderEpochError,
    for_code,
)
from tidelog.records import RecordInput, build_batch, iter_batches
from tidelog.transport import Security
from tidelog.types import IsolationLevel, TopicPartition
from tidelog.v1 import tidelog_pb2, tidelog_pb2_grpc

if TYPE_CHECKING:
    from tidelog.certificates import CertFiles, CertificateAuthority

__all__ = [
    "ClusterError",
    "LocalCluster",
    "NodeRoutes",
    "NodeStatus",
    "Raw",
    "make_batch",
    "probe",
    "stop_cluster",
    "wait_for",
]

T = TypeVar("T")

LAYOUT_FILE = "cluster.json"
#: The principal of a TLS cluster's own client certificate (``client_options``): a super user,
#: the administrator that grants every other principal its ACLs.
ADMIN_PRINCIPAL = "User:CN=client"
_TIDELOG_SERVICE = tidelog_pb2.DESCRIPTOR.services_by_name["Tidelog"].full_name
#: How often `wait_for` and the process-exit waits look again. A condition is often an RPC
#: that the nodes answer with the CPU they share with the test: every 20 ms cost a test run more
#: than the 15 ms of latency it saved on average.
_POLL_S = 0.05
#: How often a starting cluster is probed: each probe opens a channel to every node, and at 20
#: ms apart they took 0.5 s of the launcher's CPU in a 3-node start of 2-3 s (0.2 s at 100 ms),
#: and more of the nodes' own, with no start measurably sooner.
_READY_POLL_S = 0.1
_RPC_TIMEOUT_S = 1.0
_STOP_TIMEOUT_S = 10.0
_LOG_TAIL_LINES = 25

_LIVE: set[LocalCluster] = set()


class ClusterError(TidelogError):
    """A local cluster could not be started, reached or stopped."""

    name = "CLUSTER_ERROR"
    description = "The local cluster failed."


@dataclass(frozen=True)
class NodeStatus:
    """What one probe of a node saw: reachable, serving, and who it thinks the controller is."""

    address: str
    serving: bool
    controller_id: int
    detail: str

    def __str__(self) -> str:
        return self.detail


def probe(
    address: str, *, with_metadata: bool = True, security: Security | None = None
) -> NodeStatus:
    """One health check (and Metadata call) against ``address``; never raises for a node that is
    down, because callers poll it."""
    with (security or Security()).channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=_TIDELOG_SERVICE), timeout=_RPC_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            return NodeStatus(address, False, -1, f"unreachable ({exc.code().name})")
        serving = reply.status == health_pb2.HealthCheckResponse.SERVING
        if not serving or not with_metadata:
            status_name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            return NodeStatus(address, serving, -1, status_name)
        try:
            meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(
                tidelog_pb2.MetadataRequest(), timeout=_RPC_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            return NodeStatus(address, True, -1, f"SERVING, Metadata failed ({exc.code().name})")
        controller = meta.controller_id
        known = f"controller {controller}" if controller >= 0 else "no controller"
        return NodeStatus(address, True, controller, f"SERVING, {known}")


@dataclass(frozen=True)
class NodeRoutes:
    """Where one node dials each node (itself included) and which address it tells clients to
    dial per node, when these are not the nodes' own: chaos runs put a proxy on every link."""

    peers: dict[int, str]
    client_addresses: dict[int, str]


class LocalCluster:
    """``nodes`` node processes on 127.0.0.1, as a context manager (contract §3).

    ``data_dir`` None uses a temporary directory removed on close; a given directory is kept and
    a cluster started on it again resumes with the same node ids, ports and data (the layout is
    recorded in ``cluster.json``). Node N's client listener is on ``base_port + N - 1``, its
    node-to-node listener on ``base_port + nodes + N - 1``, its Kafka listener on
    ``base_port + 2 x nodes + N - 1``; ``base_port`` 0 picks free ports once (the Kafka
    listener's at every start); restarts reuse them.
    ``first_node_id`` numbers the nodes from it rather than 1 (0: Kafka's first broker id;
    the port formulas above count N from it).
    ``node_config`` holds node settings by Python or Kafka name (``segment_bytes=1024`` or
    ``**{"segment.bytes": 1024}``); other names are topic defaults.
    ``require_controller``: readiness also needs every live node to know a metadata leader.
    ``tls`` True runs TLS on both listeners of every node, from certificates of a throwaway CA
    made in ``<data_dir>/tls`` (``tidelog.certificates``): mutual TLS between nodes, and clients
    must present a certificate too (``client_options`` are a Client's arguments for that, with
    the principal ``User:CN=client``), and the authorizer on (``authorizer=acl``, deny by
    default) with the nodes and that client as super users.
    ``client_ca`` True (with ``tls``) signs client certificates with a second CA of their own
    (in ``<tls_dir>/clients``), as a deployment whose nodes and clients come from different
    CAs: each node verifies clients with it (``ssl.cafile``) and its peers with the nodes' CA
    (``internal.ssl.cafile``), so no client certificate is even a candidate node; a client
    still trusts the nodes' CA for the servers it dials (``client_options``' ``ssl_cafile``).
    ``hosts`` (node id -> address) puts each node's two listeners on its own host, on the same
    ports as on loopback, and ``command_prefix(node_id)`` comes before each node's command (the
    network-namespace test: ``hosts`` 10.77.0.N, prefix ``ip netns exec NS``); the launcher
    must reach those addresses, and the ports are not checked beforehand (they are another
    host's), so ``base_port`` must be given.
    ``exit_with_parent`` False lets the nodes outlive this process (``tidelog cluster up
    --detach``); otherwise they stop when it dies, however it dies, and also when the *thread*
    that started them ends (the kernel's parent-death signal follows the thread): start and
    restart nodes from a thread that lives as long as they should.
    """

    def __init__(
        self,
        nodes: int = 3,
        data_dir: str | os.PathLike[str] | None = None,
        base_port: int = 0,
        *,
        require_controller: bool = True,
        ready_timeout: float = 30.0,
        exit_with_parent: bool = True,
        tls: bool = False,
        client_ca: bool = False,
        hosts: Mapping[int, str] | None = None,
        command_prefix: Callable[[int], Sequence[str]] | None = None,
        first_node_id: int = 1,
        **node_config: object,
    ) -> None:
        if nodes < 1:
            raise ConfigurationError(f"a cluster needs at least one node, got {nodes}")
        if hosts is not None and (sorted(hosts) != list(range(1, nodes + 1)) or not base_port):
            raise ConfigurationError(
                f"hosts must name nodes 1..{nodes} and come with a base port, got "
                f"{sorted(hosts)} and {base_port}"
            )
        if client_ca and not tls:
            raise ConfigurationError("client_ca needs tls: a plaintext cluster has no CA")
        if first_node_id < 0 or (hosts is not None and first_node_id != 1):
            raise ConfigurationError(
                f"first_node_id must be >= 0 (and 1 with hosts), got {first_node_id}")
        if not 0 <= base_port <= 65535 - 3 * nodes:
            raise ConfigurationError(f"base port {base_port} leaves no room for {nodes} nodes")
        self._owns_dir = data_dir is None
        self._dir = Path(data_dir if data_dir is not None else tempfile.mkdtemp(prefix="tidelog-"))
        self._nodes = nodes
        #: The nodes are numbered from it (Kafka's broker ids may start at 0).
        self._first_node_id = first_node_id
        self._base_port = base_port
        self._node_config = node_config
        self.require_controller = require_controller
        self._ready_timeout = ready_timeout
        self._exit_with_parent = exit_with_parent
        self.tls = tls
        self._client_ca = client_ca
        self._hosts = dict(hosts or {})
        self._command_prefix = command_prefix
        #: Node id -> client address, and -> node-to-node address.
        self._addresses: dict[int, str] = {}
        self._internal: dict[int, str] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._paused: set[int] = set()
        #: Nodes started by `join`: node id -> their data dir and settings.
        self._joined: dict[int, tuple[Path, dict[str, str]]] = {}
        #: Node id -> the Kafka listener it published once it served (its next start
        #: listens there again).
        self._kafka_listeners: dict[int, str] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
            self.wait_ready(self._ready_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Spawns every node without waiting for readiness (see :meth:`wait_ready`)."""
        from tidelog.node.server import data_dir_in_use

        self._dir.mkdir(parents=True, exist_ok=True)
        self._addresses, self._internal = self._layout()
        for node_id in self._addresses:
            if data_dir_in_use(self.node_dir(node_id)):
                raise ClusterError(
                    f"data dir {self._dir} is held by a running cluster (node {node_id}); "
                    f"stop it with: tidelog cluster down --data-dir {self._dir}"
                )
        if not self._hosts:
            _check_ports_free([*self._addresses.values(), *self._internal.values()])
        _LIVE.add(self)
        for node_id in self._addresses:
            self._spawn(node_id)

    def close(self) -> None:
        """Kills every node process group and waits for them; idempotent, never raises."""
        for node_id in list(self._procs):
            self._kill(node_id)
        _LIVE.discard(self)
        if self._owns_dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def stop_all(self, timeout: float = _STOP_TIMEOUT_S) -> None:
        """Graceful stop of every node at once (leadership moves away), SIGKILL after timeout."""
        _terminate({n: p.pid for n, p in self._procs.items()}, self._running, timeout)
        self._reap()

    def detach(self) -> None:
        """Leaves the nodes running when this object is closed or this process exits."""
        if self._exit_with_parent:
            raise ConfigurationError("only a cluster started with exit_with_parent=False detaches")
        self._procs.clear()
        self._paused.clear()
        _LIVE.discard(self)

    # -- what tests look at ------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._dir

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._addresses)

    @property
    def bootstrap(self) -> str:
        return ",".join(self._addresses[n] for n in self.node_ids)

    @property
    def tls_dir(self) -> Path:
        """Where a TLS cluster keeps its CA and certificates (``ca.pem``, ``node-N.pem``,
        ``client.pem`` and their ``-key.pem``)."""
        return self._dir / "tls"

    @property
    def client_options(self) -> dict[str, str]:
        """``Client(cluster.bootstrap, **cluster.client_options)`` connects as this cluster's
        listeners require (nothing for a plaintext cluster)."""
        return self.client_options_as("client")

    def client_options_as(self, name: str) -> dict[str, str]:
        """A Client's arguments with a certificate of the cluster's CA for ``CN=name`` (made
        on first use), whose principal is ``User:CN=name``: another user of a TLS cluster,
        who may do what its ACLs allow. Nothing for a plaintext cluster."""
        if not self.tls:
            return {}
        files = self._certificates(name)
        return {
            "security_protocol": "SSL",
            "ssl_cafile": str(files.cafile),
            "ssl_certfile": str(files.certfile),
            "ssl_keyfile": str(files.keyfile),
        }

    @property
    def security(self) -> Security:
        """How the harness's own channels (probes, :class:`Raw`) connect."""
        return Security(**self.client_options)

    def address_of(self, node_id: int) -> str:
        """The node's client listener."""
        return self._addresses[self._known(node_id)]

    def internal_address_of(self, node_id: int) -> str:
        """The node's node-to-node listener (Raft streams, metadata pulls)."""
        return self._internal[self._known(node_id)]

    def kafka_address_of(self, node_id: int) -> str:
        """The node's Kafka listener (on a free port chosen at its first start, and the same
        one when it starts again), as the node published it; ClusterError while the node has
        not published one."""
        address = _published_kafka_address(self.node_dir(self._known(node_id)))
        if address is None:
            raise ClusterError(
                f"node {node_id} has published no Kafka listener (is it running?)")
        return address

    @property
    def kafka_bootstrap(self) -> str:
        """The Kafka listeners of the running nodes, comma-separated: a Kafka client's
        bootstrap.servers."""
        addresses = []
        for node_id in self.node_ids:
            with contextlib.suppress(ClusterError):
                addresses.append(self.kafka_address_of(node_id))
        return ",".join(addresses)

    def pid_of(self, node_id: int) -> int | None:
        """The node's pid (also its process group), or None when it is not running."""
        proc = self._procs.get(self._known(node_id))
        return proc.pid if proc is not None and proc.poll() is None else None

    def metrics_address(self, node_id: int) -> str | None:
        """"host:port" of the node's Prometheus endpoint (``/metrics``), once it serves; None
        while it is not running or serves no metrics (``metrics_port=-1``)."""
        from tidelog.node.server import METRICS_ADDR_FILE

        if not self.is_running(node_id):
            return None
        path = self.node_dir(node_id) / METRICS_ADDR_FILE
        with contextlib.suppress(FileNotFoundError):
            return path.read_text().strip() or None
        return None

    def is_running(self, node_id: int) -> bool:
        return self.pid_of(node_id) is not None

    def logs(self, node_id: int) -> str:
        """Everything the node printed, across restarts; show it when a test fails."""
        path = self._log_path(self._known(node_id))
        return path.read_text(errors="replace") if path.exists() else ""

    def leader_of(self, tp: tuple[str, int]) -> int | None:
        """The partition's leader as the live nodes report it (the highest epoch wins: a node
        that missed an election still names the old leader)."""
        topic, partition = tp
        best: tuple[int, int] | None = None
        for node_id in self._live():
            with self.security.channel(self._addresses[node_id]) as channel:
                try:
                    meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(
                        tidelog_pb2.MetadataRequest(topics=[topic]), timeout=_RPC_TIMEOUT_S
                    )
                except grpc.RpcError:
                    continue
            for p in (p for t in meta.topics if t.name == topic for p in t.partitions):
                if p.partition == partition and p.leader_id >= 0 and p.error_code == 0:
                    candidate = (p.leader_epoch, p.leader_id)
                    best = candidate if best is None else max(best, candidate)
        return None if best is None else best[1]

    def routes(self, node_id: int) -> NodeRoutes | None:
        """The links a node is started with; None means every node's own addresses (its
        node-to-node listener for peers, its client listener for clients). A subclass
        overrides it to route links through proxies (see ``chaos.cluster``)."""
        return None

    # -- faults ------------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """SIGKILL: no flush, no goodbye."""
        self._kill(self._known(node_id))

    def stop(self, node_id: int, timeout: float = _STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait: the node moves its leaderships away first. SIGKILL after timeout.
        Returns the exit code (0 for a clean stop), None when the node was not running."""
        proc = self._procs.get(self._known(node_id))
        if proc is None:
            return None
        _terminate({node_id: proc.pid}, self._running, timeout)
        self._reap()
        return proc.returncode

    def restart(self, node_id: int, *, wait: bool = True) -> None:
        """Starts the node again on the same address and data dir (stopping it first if it
        runs); with ``wait``, returns once it serves."""
        if self.is_running(node_id):
            self.stop(node_id)
        self._spawn(node_id)
        if wait:
            self._wait([node_id], self._ready_timeout, require_controller=False)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the process is frozen but its sockets stay open (a stalled, not dead, node)."""
        self._signal_group(self._known(node_id), signal.SIGSTOP)
        self._paused.add(node_id)

    def resume(self, node_id: int) -> None:
        self._signal_group(self._known(node_id), signal.SIGCONT)
        self._paused.discard(node_id)

    # -- readiness ---------------------------------------------------------------------------

    def wait_ready(
        self, timeout: float = 30.0, progress: Callable[[str], None] | None = None
    ) -> None:
        """Waits until every running, unpaused node serves (and, with ``require_controller``,
        knows a metadata leader). Raises :class:`ClusterError` with the nodes' logs when a node
        exits or the deadline passes."""
        self._wait(self._live(), timeout, self.require_controller, progress)

    def _wait(
        self,
        node_ids: Sequence[int],
        timeout: float,
        require_controller: bool,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout
        last_summary = ""
        while True:
            for node_id in node_ids:
                proc = self._procs.get(node_id)
                if proc is None or proc.poll() is not None:
                    code = None if proc is None else proc.returncode
                    raise ClusterError(
                        f"node {node_id} exited (code {code}) before it was ready\n"
                        + self._log_tail(node_id)
                    )
            statuses = {
                n: probe(self._addresses[n], with_metadata=require_controller,
                         security=self.security)
                for n in node_ids
            }
            serving = sum(s.serving for s in statuses.values())
            controllers = {s.controller_id for s in statuses.values()}
            controller_known = -1 not in controllers
            summary = f"{serving}/{len(node_ids)} nodes serving"
            if require_controller:
                summary += ", controller " + (
                    "/".join(map(str, sorted(controllers))) if controller_known else "not elected"
                )
            if progress is not None and summary != last_summary:
                progress(summary)
                last_summary = summary
            if serving == len(node_ids) and (controller_known or not require_controller):
                for node_id in node_ids:
                    if (kafka := _published_kafka_address(self.node_dir(node_id))) is not None:
                        self._kafka_listeners[node_id] = kafka
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"cluster not ready after {timeout:g}s: {summary}\n"
                    + "\n".join(
                        f"node {n} ({s.address}): {s}\n{self._log_tail(n)}"
                        for n, s in statuses.items()
                    )
                )
            time.sleep(_READY_POLL_S)

    # -- internals ---------------------------------------------------------------------------

    def _layout(self) -> tuple[dict[int, str], dict[int, str]]:
        """Node id -> client address and node id -> node-to-node address: the recorded ones
        when resuming, else freshly chosen."""
        layout_path = self._dir / LAYOUT_FILE
        if layout_path.exists():
            recorded, internal = _read_layout(self._dir)
            ports = sorted(int(a.rpartition(":")[2]) for a in recorded.values())
            if len(recorded) != self._nodes or self._base_port not in (0, ports[0]):
                raise ConfigurationError(
                    f"{self._dir} holds a {len(recorded)}-node cluster on ports from {ports[0]}; "
                    "start it with the same --nodes and --base-port, or use another data dir"
                )
            if set(internal) != set(recorded):  # recorded before nodes had two listeners
                internal = dict(zip(sorted(recorded), _addresses(_free_ports(self._nodes)),
                                    strict=True))
            return recorded, internal
        count = 2 * self._nodes
        ports = (
            list(range(self._base_port, self._base_port + count))
            if self._base_port
            else _free_ports(count)
        )
        ids = range(self._first_node_id, self._first_node_id + self._nodes)
        hosts = [self._hosts.get(n, "127.0.0.1") for n in (*ids, *ids)]
        addresses = _addresses(ports, hosts)
        return (
            dict(zip(ids, addresses[: self._nodes], strict=True)),
            dict(zip(ids, addresses[self._nodes :], strict=True)),
        )

    def join(self, node_id: int | None = None) -> int:
        """Starts one more node that joins the running cluster (``tidelog node --join``
        through the cluster's node-to-node listeners), on free loopback ports and a data dir of
        its own, with the cluster's node settings; returns the id it registered under (the
        controller assigns one unless `node_id` is given) once it serves. `kill`, `restart`
        and the rest take that id; it is not part of the layout a resumed cluster starts
        with. Plaintext loopback clusters only."""
        if self.tls or self._hosts or self._command_prefix is not None:
            raise ConfigurationError("joining nodes run on plaintext loopback clusters only")
        name = f"joined-{len(self._joined) + 1}"
        node_dir = self._dir / name
        client, internal = _addresses(_free_ports(2))
        props = self._common_props()
        props.setdefault("kafka.listen", "127.0.0.1:0")
        props.update({
            "listen": client,
            "internal.listen": internal,
            "data.dir": str(node_dir),
            "controller.quorum.bootstrap.servers": ",".join(
                self._internal[n] for n in self._live()
            ),
        })
        if node_id is not None:
            props["node.id"] = str(node_id)
        proc = self._launch(node_dir, self._dir / f"{name}.log", props, ())

        def registered() -> int | None:
            from tidelog.node.cluster.registration import META_FILE
            from tidelog.properties import read_properties

            if proc.poll() is not None:
                raise ClusterError(
                    f"the joining node exited (code {proc.returncode}) before it registered\n"
                    + (self._dir / f"{name}.log").read_text(errors="replace")[-4000:]
                )
            path = node_dir / META_FILE
            stored = read_properties(path).get("node.id", "") if path.exists() else ""
            return int(stored) if stored.isdigit() else None

        try:
            assigned = wait_for(registered, self._ready_timeout, "the joining node's id")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        self._joined[assigned] = (node_dir, {**props, "node.id": str(assigned)})
        self._addresses[assigned], self._internal[assigned] = client, internal
        self._procs[assigned] = proc
        self._wait([assigned], self._ready_timeout, require_controller=False)
        return assigned

    def _common_props(self) -> dict[str, str]:
        from tidelog.node.config import key_for

        # Every node serves metrics on a free port unless told otherwise (metrics_address).
        props = {"metrics.port": "0"}
        props.update({key_for(name): str(value) for name, value in self._node_config.items()})
        return props

    def _spawn(self, node_id: int) -> None:
        if node_id in self._joined:
            node_dir, props = self._joined[node_id]
            prefix: Sequence[str] = ()
        else:
            node_dir, props = self.node_dir(node_id), self._static_props(node_id)
            prefix = self._command_prefix(node_id) if self._command_prefix is not None else ()
        kept = self._kafka_listeners.get(node_id)
        if kept and props.get("kafka.listen", "").endswith(":0"):
            # Started again, the node listens for Kafka clients where it did, as a Kafka
            # broker restarts on its configured listener: a client that knew it there (in
            # its metadata, or as the coordinator it found) reaches it again. A new port
            # each start left librdkafka dialling the old one for its transaction
            # coordinator for over a minute.
            props = {**props, "kafka.listen": kept}
        self._procs[node_id] = self._launch(node_dir, self._log_path(node_id), props, prefix)
        self._paused.discard(node_id)
        self._record_layout()

    def _static_props(self, node_id: int) -> dict[str, str]:
        from tidelog.node.config import format_peers

        node_dir = self.node_dir(node_id)
        props = self._common_props()
        props.update({
            "node.id": str(node_id),
            "listen": self._addresses[node_id],
            "internal.listen": self._internal[node_id],
            "data.dir": str(node_dir),
            "peers": format_peers(self._static(self._internal)),
            "client.addresses": format_peers(self._static(self._addresses)),
        })
        # Every node has a Kafka listener (kafka_address_of): with a base port, on the port
        # after the node-to-node ones (base_port + 2 x nodes + N - 1), so that it is known
        # before the cluster starts; else on a free port of its host.
        kafka_port = (self._base_port + 2 * self._nodes + node_id - self._first_node_id
                      if self._base_port else 0)
        props.setdefault("kafka.listen", f"{self._hosts.get(node_id, '127.0.0.1')}:{kafka_port}")
        if self.tls:
            files = self._certificates(f"node-{node_id}", node=True)
            props.update({
                "security.protocol": "SSL",
                "security.inter.broker.protocol": "SSL",
                "ssl.certfile": str(files.certfile),
                "ssl.keyfile": str(files.keyfile),
                "ssl.cafile": str(files.cafile),
                "ssl.client.auth": "required",
            })
            # The authorizer is on, denying what no ACL allows (allow.everyone.if.no.acl.found
            # unset is false). The nodes are the node principals (the only callers of the
            # node-to-node listener, and the only ones that may forward a request as its
            # client's) and super users. So is the harness's own client certificate
            # (client_options, User:CN=client): the administrator that creates the ACLs every
            # other principal needs.
            if self._client_ca:
                props["internal.ssl.cafile"] = props["ssl.cafile"]
                props["ssl.cafile"] = str(self._client_authority().cafile)
            props.setdefault("authorizer", "acl")
            nodes = [f"User:CN=node-{n}" for n in self._addresses]
            props.setdefault("node.principals", ";".join(nodes))
            principals = [*props.get("super.users", "").split(";"), ADMIN_PRINCIPAL, *nodes]
            props["super.users"] = ";".join(dict.fromkeys(filter(None, principals)))
        routes = self.routes(node_id)
        if routes is not None:
            props["peers"] = format_peers(routes.peers)
            props["client.addresses"] = format_peers(routes.client_addresses)
        return props

    def _static(self, by_node: dict[int, T]) -> dict[int, T]:
        """What `by_node` holds for the nodes of the static peers list (not those that
        joined)."""
        return {n: a for n, a in by_node.items() if n not in self._joined}

    def _launch(
        self, node_dir: Path, log_path: Path, props: dict[str, str], prefix: Sequence[str]
    ) -> subprocess.Popen[bytes]:
        from tidelog.node.config import NodeConfig
        from tidelog.node.files import open_private
        from tidelog.storage.checkpoint import DATA_DIR_MODE

        # The node's own data dir, private as the node makes it (it warns about any other).
        node_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        config = NodeConfig.from_properties(props)  # refuses bad settings here, not in a log
        config_path = node_dir / "node.properties"
        with open_private(config_path, "w") as properties:
            properties.write("".join(f"{k}={v}\n" for k, v in config.to_properties().items()))
        command = [*prefix, sys.executable, "-m", "tidelog.node", "--config", str(config_path)]
        if self._exit_with_parent:
            command += ["--exit-with-parent", str(os.getpid())]
        package_root = str(Path(tidelog.__file__).resolve().parent.parent)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        with log_path.open("ab") as log:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )

    def _certificates(self, name: str, *, node: bool = False) -> CertFiles:
        """The certificate ``name`` (its common name too) of the cluster's CA, made on first
        use and kept with the cluster's data: a client's, or with ``node`` a node's
        (`CertificateAuthority.issue`). With ``client_ca`` a client's comes from the clients'
        CA, and its ``cafile`` is still the nodes' CA, the one that verifies the servers."""
        from tidelog.certificates import CertFiles, CertificateAuthority

        nodes_ca = CertificateAuthority(self.tls_dir)
        ca = self._client_authority() if self._client_ca and not node else nodes_ca
        files = CertFiles(
            certfile=ca.directory / f"{name}.pem",
            keyfile=ca.directory / f"{name}-key.pem",
            cafile=nodes_ca.cafile,
        )
        if not (files.certfile.exists() and files.keyfile.exists()):
            ca.issue(name, name, node=node)
        return files

    def _client_authority(self) -> CertificateAuthority:
        """The CA of client certificates with ``client_ca`` (made on first use)."""
        from tidelog.certificates import CertificateAuthority

        return CertificateAuthority(self.tls_dir / "clients")

    def _record_layout(self) -> None:
        """The static nodes' addresses and pids (joined nodes are not resumed)."""
        pids = {n: p.pid for n, p in self._procs.items() if p.poll() is None}
        layout = {
            "nodes": {str(n): a for n, a in self._static(self._addresses).items()},
            "internal": {str(n): a for n, a in self._static(self._internal).items()},
            "pids": {str(n): pid for n, pid in self._static(pids).items()},
        }
        path = self._dir / LAYOUT_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(layout, indent=2) + "\n")
        os.replace(tmp, path)

    def _kill(self, node_id: int) -> None:
        proc = self._procs.pop(node_id, None)
        self._paused.discard(node_id)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def _reap(self) -> None:
        for node_id, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[node_id]
                self._paused.discard(node_id)

    def _running(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.poll() is None

    def _live(self) -> list[int]:
        return [n for n in self.node_ids if self._running(n) and n not in self._paused]

    def _signal_group(self, node_id: int, signum: signal.Signals) -> None:
        proc = self._procs.get(node_id)
        if proc is None or proc.poll() is not None:
            raise ClusterError(f"node {node_id} is not running")
        os.killpg(proc.pid, signum)

    def _known(self, node_id: int) -> int:
        if node_id not in self._addresses:
            raise ConfigurationError(f"no node {node_id}; nodes are {self.node_ids}")
        return node_id

    def node_dir(self, node_id: int) -> Path:
        """The node's data dir."""
        if node_id in self._joined:
            return self._joined[node_id][0]
        return self._dir / f"node-{node_id}"

    def _log_path(self, node_id: int) -> Path:
        if node_id in self._joined:
            node_dir = self._joined[node_id][0]
            return node_dir.with_name(f"{node_dir.name}.log")
        return self._dir / f"node-{node_id}.log"

    def _log_tail(self, node_id: int) -> str:
        lines = self.logs(node_id).splitlines()[-_LOG_TAIL_LINES:]
        return "".join(f"    | {line}\n" for line in lines)


def load_script(path: Path) -> ModuleType:
    """A script (one of bench/, which is a directory of scripts, not a package) as a module, so
    that one benchmark can reuse another's cluster set-up and measurements."""
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def wait_for(
    condition: Callable[[], T | None],
    timeout: float = 30.0,
    what: str = "",
    *,
    interval: float = _POLL_S,
) -> T:
    """Polls ``condition`` until it returns something truthy, and returns that. A gRPC error
    counts as "not yet" (a node starting, stopping or between leaders does not answer); the
    deadline raises AssertionError naming ``what``, so a test fails with the condition it
    waited for rather than a hang."""
    deadline = time.monotonic() + timeout
    while not (value := _try(condition)):
        _check_deadline(deadline, timeout, what or condition)
        time.sleep(interval)
    return value


def _try(condition: Callable[[], T | None]) -> T | None:
    try:
        return condition()
    except grpc.RpcError:
        return None


def _check_deadline(deadline: float, timeout: float, what: object) -> None:
    if time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def make_batch(values: Sequence[bytes], timestamp_ms: int | None = None) -> bytes:
    """One plain producer batch of unkeyed ``values``, stamped now (or ``timestamp_ms``)."""
    ts = wall_clock_ms() if timestamp_ms is None else timestamp_ms
    return build_batch([RecordInput(v, None, ts) for v in values])


class Raw:
    """Blocking stubs to every node of a :class:`LocalCluster`, one channel per node, and the
    calls tests make most, each on one partition and answering that partition's part of the
    response unchanged (error code, hint and all). The requests come from :mod:`tidelog.wire`,
    the client's own builders; a test that needs a field the client never sets (or leaves one
    unset on purpose) builds its request itself and calls :meth:`stub`."""

    def __init__(
        self, cluster: LocalCluster, channel_options: Sequence[tuple[str, Any]] = ()
    ) -> None:
        self.cluster = cluster
        self._options = list(channel_options)
        self._channels: dict[str, grpc.Channel] = {}

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def stub(self, node_id: int) -> tidelog_pb2_grpc.TidelogStub:
        address = self.cluster.address_of(node_id)
        channel = self._channels.get(address)
        if channel is None:
            channel = self.cluster.security.channel(address, options=self._options)
            self._channels[address] = channel
        return tidelog_pb2_grpc.TidelogStub(channel)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def metadata(self, node_id: int, topic: str) -> tidelog_pb2.TopicMetadata:
        answer = self.stub(node_id).Metadata(wire.metadata_request([topic]), timeout=5)
        topic_metadata: tidelog_pb2.TopicMetadata = answer.topics[0]
        return topic_metadata

    def create_topic(self, name: str, partitions: int, rf: int, **configs: str) -> None:
        """Creates the topic (``segment_bytes="1024"`` is ``segment.bytes``) through whichever
        node is asked first, retrying while no controller has settled, and waits until every
        live node names the same live leaders."""

        maybe_created = False

        def created() -> bool | None:
            nonlocal maybe_created
            answer = self.create_topic_once(name, partitions, rf, configs)
            code = answer.topics[0].error_code
            if code == 0 or (maybe_created and code == TopicAlreadyExistsError.code):
                return True
            # Not decided yet: no controller, or a controller just elected and settling its
            # log, or one deposed before it saw the topic commit (then it may have).
            maybe_created = maybe_created or code == RequestTimedOutError.code
            unsettled = (NotControllerError, NotEnoughReplicasError, RequestTimedOutError)
            assert for_code(code) in unsettled, answer
            return None

        wait_for(created, what=f"a controller to create {name}")
        self.wait_leaders(name, partitions)

    def create_topic_once(
        self, name: str, partitions: int, rf: int, configs: dict[str, str]
    ) -> tidelog_pb2.CreateTopicsResponse:
        """One CreateTopics call to the first node, its answer as it comes."""
        request = wire.create_topics_request(
            name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()}, 15_000
        )
        node = self.cluster.node_ids[0]
        response: tidelog_pb2.CreateTopicsResponse = self.stub(node).CreateTopics(
            request, timeout=20
        )
        return response

    def wait_leaders(
        self, topic: str, partitions: int | None = None, timeout: float = 30.0
    ) -> list[int]:
        """Leaders of every partition (``partitions`` of them, or as many as the nodes know)
        once all live nodes agree on them."""

        def agreed() -> list[int] | None:
            views = []
            for node in self.cluster.node_ids:
                if not self.cluster.is_running(node):
                    continue
                md = self.metadata(node, topic)
                count = len(md.partitions) if partitions is None else partitions
                if md.error_code or not md.partitions or len(md.partitions) != count:
                    return None
                views.append([p.leader_id for p in md.partitions])
            if views and all(v == views[0] for v in views) and min(views[0]) >= 0:
                live = [n for n in views[0] if self.cluster.is_running(n)]
                return views[0] if len(live) == len(views[0]) else None
            return None

        return wait_for(agreed, timeout, f"leaders of {topic}")

    def wait_leader_epoch(
        self, topic: str, partition: int = 0, timeout: float = 30.0
    ) -> tuple[int, int]:
        """The leader of `partition` and its epoch, once the leaders of `topic` are agreed
        (`wait_leaders`), every live node names that leader at one epoch, and each holds a
        replica at that epoch. Right after a topic is created on a fresh cluster its leader may
        already be in a second term while a follower, whose view and replica are still in the
        first, names the same leader: a test that needs each node's replica at the leader's
        epoch (fencing, leader hints) waits here rather than in `wait_leaders`."""

        def settled() -> tuple[int, int] | None:
            self.wait_leaders(topic, timeout=timeout)
            nodes = [n for n in self.cluster.node_ids if self.cluster.is_running(n)]
            views = {(p.leader_id, p.leader_epoch)
                     for p in (self.metadata(n, topic).partitions[partition] for n in nodes)}
            if len(views) != 1:
                return None
            [(leader, epoch)] = views
            behind = [n for n in nodes if self.fetch(n, topic, partition, 0, epoch=epoch)
                      .error_code == UnknownLeaderEpochError.code]
            return None if behind else (leader, epoch)

        return wait_for(settled, timeout, f"{topic}-{partition} led at an epoch every node knows")

    def produce(
        self, node: int, topic: str, partition: int, batch: bytes, acks: int = -1,
        timeout_ms: int = 10_000,
    ) -> tidelog_pb2.PartitionProduceResponse:
        serialized = wire.serialized_produce_request(
            {TopicPartition(topic, partition): [batch]}, acks, timeout_ms
        )
        response = self.stub(node).Produce(
            tidelog_pb2.ProduceRequest.FromString(serialized), timeout=timeout_ms / 1000 + 5
        )
        answer: tidelog_pb2.PartitionProduceResponse = response.topics[0].partitions[0]
        return answer

    def produce_acknowledged(
        self, topic: str, partition: int, batches: Iterable[Sequence[bytes]],
        timeout: float = 30.0,
    ) -> dict[int, bytes]:
        """Produces each batch of values in turn to the partition's leader (asked again before
        every attempt, so leader changes are followed) until acks=all acknowledges it; the
        acknowledged value at each offset. A batch retried after an error may be in the log
        twice: only the offsets an acknowledgement names are the batch's."""
        acked: dict[int, bytes] = {}
        for i, values in enumerate(batches):

            def sent(values: Sequence[bytes] = values) -> int | None:
                leader = self.wait_leaders(topic)[partition]
                answer = self.produce(leader, topic, partition, make_batch(values))
                return answer.base_offset + 1 if answer.error_code == 0 else None

            base = wait_for(sent, timeout, f"batch {i} of {topic}-{partition} acknowledged") - 1
            acked.update({base + j: v for j, v in enumerate(values)})
        return acked

    def fetch(
        self, node: int, topic: str, partition: int, offset: int, *, replica_id: int = -1,
        isolation: int = 0, max_bytes: int = 1 << 20, epoch: int = -1,
    ) -> tidelog_pb2.FetchPartitionData:
        """A Fetch that does not wait for data; ``replica_id`` >= 0 fetches as that follower."""
        request = wire.fetch_request(
            {TopicPartition(topic, partition): wire.FetchPosition(offset, epoch)},
            isolation=IsolationLevel(isolation),
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes,
            partition_max_bytes=0,  # the request's whole budget
        )
        request.replica_id = replica_id  # the client is never a replica
        response = self.stub(node).Fetch(request, timeout=10)
        answer: tidelog_pb2.FetchPartitionData = response.topics[0].partitions[0]
        return answer

    def fetch_all(self, node: int, topic: str, partition: int, **kw: int) -> bytes:
        """Every batch from offset 0 up to the requester's bound."""
        data = b""
        offset = 0
        while True:
            part = self.fetch(node, topic, partition, offset, **kw)
            assert part.error_code == 0, part
            if not part.records:
                return data
            data += part.records
            last = None
            for _, header in iter_batches(part.records):
                last = header
            assert last is not None
            offset = last.next_offset

    def list_offset(
        self, node: int, topic: str, partition: int, timestamp: int, *, replica_id: int = -1,
        isolation: int = 0, epoch: int = -1, max_num_offsets: int = 0,
    ) -> tidelog_pb2.ListOffsetsPartitionResponse:
        lookup = wire.OffsetLookup(timestamp, epoch, max_num_offsets)
        request = wire.list_offsets_request(
            {TopicPartition(topic, partition): lookup},
            IsolationLevel(isolation),
            replica_id,
        )
        response = self.stub(node).ListOffsets(request, timeout=10)
        answer: tidelog_pb2.ListOffsetsPartitionResponse = response.topics[0].partitions[0]
        return answer


def stop_cluster(
    data_dir: str | os.PathLike[str],
    timeout: float = _STOP_TIMEOUT_S,
    *,
    force: bool = True,
    on_exit: Callable[[int], None] | None = None,
) -> tuple[list[int], list[int]]:
    """Gracefully stops the nodes of a (detached) cluster recorded in ``data_dir``: SIGTERM
    (and SIGCONT, so that a paused node wakes to handle it), then up to ``timeout`` seconds for
    them to exit; ``force`` SIGKILLs those still running then. ``on_exit(node_id)`` is called
    as each node exits. Returns the nodes that were running, and those still running at the
    end (without ``force``, those that ignored SIGTERM).

    A node is the process that holds its data-dir lock (`data_dir_holder` names its pid), not
    the pid recorded at start: a node restarted by hand is found and stopped too, and a
    recycled pid of a long-dead node is never signalled."""
    from tidelog.node.server import data_dir_holder, data_dir_in_use

    root = Path(data_dir)
    if not (root / LAYOUT_FILE).exists():
        raise ConfigurationError(f"no cluster recorded in {root} (no {LAYOUT_FILE})")
    layout = json.loads((root / LAYOUT_FILE).read_text())
    recorded = {int(n): pid for n, pid in layout["pids"].items()}

    def running(node_id: int) -> bool:
        return data_dir_in_use(root / f"node-{node_id}")

    # Every node of the layout, also one that was not running when it was recorded.
    victims: dict[int, int | None] = {
        n: data_dir_holder(root / f"node-{n}") or recorded.get(n)
        for n in sorted({*recorded, *map(int, layout["nodes"])}) if running(n)
    }
    for pid in victims.values():
        for signum in (signal.SIGTERM, signal.SIGCONT):
            _signal_process(pid, signum)
    left = _wait_exited(victims, running, timeout, on_exit)
    if force and left:
        for node_id in left:
            _signal_process(victims[node_id], signal.SIGKILL)
        left = _wait_exited({n: victims[n] for n in left}, running, _KILLED_EXIT_S, on_exit)
    return sorted(victims), left


#: How long a node SIGKILLed by `stop_cluster` may take to release its lock (the kernel
#: frees it as the process dies; only a process stuck in the kernel takes longer).
_KILLED_EXIT_S = 5.0


def _signal_process(pid: int | None, signum: signal.Signals) -> None:
    """Signal a node: its whole process group when it leads one (as launched nodes do), else
    the process alone (a node started by hand may share its shell's group)."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def _wait_exited(
    nodes: Mapping[int, object], running: Callable[[int], bool], timeout: float,
    on_exit: Callable[[int], None] | None,
) -> list[int]:
    """Wait up to ``timeout`` for ``nodes`` to stop ``running``, telling ``on_exit`` of each as
    it does; the ones still running."""
    left = sorted(nodes)
    deadline = time.monotonic() + timeout
    while True:
        for node_id in [n for n in left if not running(n)]:
            left.remove(node_id)
            if on_exit is not None:
                on_exit(node_id)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_POLL_S)


def _terminate(
    pids: dict[int, int], running: Callable[[int], bool], timeout: float
) -> None:
    """SIGTERM each node's process group, wait until none is ``running``, SIGKILL stragglers."""
    for pid in pids.values():
        for signum in (signal.SIGTERM, signal.SIGCONT):  # a paused node must wake to handle it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signum)
    deadline = time.monotonic() + timeout
    while any(running(n) for n in pids) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for node_id, pid in pids.items():
        if running(node_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    while any(running(n) for n in pids):
        time.sleep(_POLL_S)


def _read_layout(data_dir: Path) -> tuple[dict[int, str], dict[int, str]]:
    """The recorded client and node-to-node addresses (the latter empty in a layout recorded
    before nodes had two listeners)."""
    try:
        recorded: dict[str, Any] = json.loads((data_dir / LAYOUT_FILE).read_text())
        return (
            {int(n): str(a) for n, a in recorded["nodes"].items()},
            {int(n): str(a) for n, a in recorded.get("internal", {}).items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(f"{data_dir / LAYOUT_FILE} is unreadable: {exc}") from None


#: Where listening ports are looked for: below the kernel's ephemeral range (see
#: `_free_ports`), above the ports services commonly claim.
_LISTEN_PORTS_FROM = 20_000
#: The environment variable that narrows where `LocalCluster` looks for listening ports to
#: ``LOW-HIGH`` (inclusive). Harnesses running side by side on one host (parallel test workers)
#: each take a range of their own: a port is free again while a stopped node is down, and a
#: cluster of the other harness could pick it before that node restarts on it.
LISTEN_PORTS_ENV = "TIDELOG_LISTEN_PORTS"


def listen_port_room() -> range:
    """The ports `LocalCluster` picks its listening ports from: `LISTEN_PORTS_ENV` when it
    is set, else from 20000 up to the kernel's ephemeral range."""
    spec = os.environ.get(LISTEN_PORTS_ENV, "").strip()
    if not spec:
        return range(_LISTEN_PORTS_FROM, _ephemeral_ports_start())
    low, sep, high = spec.partition("-")
    try:
        room = range(int(low), int(high) + 1)
    except ValueError:
        room = range(0)
    if not sep or not room or room.start < 1 or room.stop > 65_536:
        raise ConfigurationError(
            f"{LISTEN_PORTS_ENV} must be LOW-HIGH, two ports from 1 to 65535, got {spec!r}"
        )
    return room


def _published_kafka_address(node_dir: Path) -> str | None:
    """The Kafka listener a node of `node_dir` published when it last started (None: it
    has published none, or has no Kafka listener)."""
    from tidelog.node.server import ADDR_FILE

    try:
        lines = (node_dir / ADDR_FILE).read_text().splitlines()
    except FileNotFoundError:
        return None
    return lines[2] if len(lines) > 2 and lines[2] else None


def _free_ports(count: int) -> list[int]:
    """Free ports of `listen_port_room` (by default below the kernel's ephemeral range), all
    held open together so none is handed out twice. A port the kernel picks for a bind to
    port 0 comes from the same range as the source ports of outbound connections, so one of
    the cluster's own connections (a node dialling a peer that is still starting) could take
    it before the node meant to listen on it binds, and that node would exit with "address in
    use"; no connection takes a port below the range. Where the room is too small, the kernel
    chooses."""
    room = listen_port_room()
    low, high = room.start, room.stop - 1
    with contextlib.ExitStack() as stack:
        if len(room) < 16 * count:
            socks = [stack.enter_context(socket.socket()) for _ in range(count)]
            return [_bind(sock, 0) for sock in socks]
        ports: list[int] = []
        for port in random.sample(room, min(len(room), 64 * count)):
            sock = stack.enter_context(socket.socket())
            with contextlib.suppress(ConfigurationError):
                ports.append(_bind(sock, port))
                if len(ports) == count:
                    return ports
        raise ConfigurationError(f"no {count} free ports between {low} and {high}")


def _ephemeral_ports_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _LISTEN_PORTS_FROM  # not Linux: let the kernel choose


def _addresses(ports: Sequence[int], hosts: Sequence[str] | None = None) -> list[str]:
    from tidelog.node.config import format_address

    return [
        format_address(host, port)
        for port, host in zip(ports, hosts or ["127.0.0.1"] * len(ports), strict=True)
    ]


def _check_ports_free(addresses: Iterable[str]) -> None:
    for address in addresses:
        with socket.socket() as sock:
            _bind(sock, int(address.rpartition(":")[2]))


def _bind(sock: socket.socket, port: int) -> int:
    # SO_REUSEADDR as gRPC sets it: a port in TIME_WAIT from an earlier run is free for a node.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        raise ConfigurationError(f"port {port} on 127.0.0.1 is in use") from None
    return int(sock.getsockname()[1])


@atexit.register
def _close_all() -> None:
    for cluster in list(_LIVE):
        cluster.close()

