"""``tidelog cluster status [--watch]``: nodes, partitions and every replica's offsets, as tables.

What it shows comes from what any client may ask: Metadata from one reachable node (every
node, fenced ones included, with its addresses and its liveness as the controller sees it:
alive, fenced, or not registered; the controller and the other seats of its quorum, leaders,
epochs, replicas, ISR), a health
check per node, and per node two debug
requests (replica_id -2, which any replica answers, not only the leader) for the partitions it
hosts: ListOffsets "latest" for the replica's log end offset, then a Fetch at that offset
(no data comes back) for its log start offset, high watermark and last stable offset. A
replica's lag is its leader's log end offset minus its own, as kafka-topics' and Kafka's
ReplicaLag say. A partition whose ISR is smaller than its replica set is under-replicated, one
without a leader offline; both are highlighted.

Two RPCs per node rather than per replica, so a cluster of hundreds of partitions is still one
quick round; the nodes are asked in turn, so the figures are a near-instant, not one instant.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from tidelog.transport import Security

_RPC_TIMEOUT_S = 5.0
#: Columns wide enough for long topic names when the output is not a terminal (a pipe, a file,
#: a test): rich would otherwise fit the tables into 80 columns and cut cells.
_PIPE_WIDTH = 220


@dataclass(frozen=True)
class ReplicaState:
    """One replica as its node answered: (log start, HW, LSO, LEO), or None when it did not."""

    node_id: int
    offsets: tuple[int, int, int, int] | None

    @property
    def log_end_offset(self) -> int | None:
        return None if self.offsets is None else self.offsets[3]


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int
    states: tuple[ReplicaState, ...]

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return not self.offline and len(self.isr) < len(self.replicas)

    def lag_of(self, replica: ReplicaState) -> int | None:
        """The leader's log end offset minus this replica's (None when either is unknown)."""
        leader = next((s for s in self.states if s.node_id == self.leader), None)
        if leader is None or leader.log_end_offset is None or replica.log_end_offset is None:
            return None
        return leader.log_end_offset - replica.log_end_offset


@dataclass(frozen=True)
class NodeState:
    node_id: int
    address: str
    status: str
    is_controller: bool
    #: Its node-to-node address, as the answering node knows it.
    internal_address: str = ""
    #: As the controller sees it: "alive", "fenced" (heartbeats stopped), or "unregistered"
    #: (a node of the static peers list that has not registered).
    liveness: str = "alive"
    #: Whether it holds a seat of the controller's quorum (the controller is one of them).
    controller_voter: bool = False


@dataclass
class ClusterState:
    nodes: list[NodeState] = field(default_factory=list)
    controller_id: int = -1
    partitions: list[PartitionState] = field(default_factory=list)
    topic_errors: dict[str, int] = field(default_factory=dict)


def configure(parser: argparse.ArgumentParser) -> None:
    from tidelog.commands._common import add_bootstrap_servers

    add_bootstrap_servers(parser)
    parser.add_argument("--watch", action="store_true",
                        help="redraw the tables every --interval seconds until Ctrl-C")
    parser.add_argument("--interval", type=float, default=2.0,
                        help="seconds between redraws with --watch (default 2)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tidelog.commands._common import security_for, status, status_done
    from tidelog.errors import ConfigurationError, NodeUnavailableError

    console = Console(width=None if sys.stdout.isatty() else _PIPE_WIDTH)
    # A reader gone away (`| head -1`) ends the command as it ends every other one (the CLI's
    # exit code 141), not with rich's own exit code 1.
    console.on_broken_pipe = _reader_gone  # type: ignore[method-assign]
    security = security_for(args)
    if not args.watch:
        status(f"asking {args.bootstrap} for metadata...")
        try:
            state = gather(args.bootstrap, security)
        finally:
            status_done()
        if state is None:
            raise NodeUnavailableError(f"no node reachable at {args.bootstrap}")
        console.print(render(state))
        return 0
    if args.interval <= 0:
        raise ConfigurationError(f"--interval must be > 0, got {args.interval}")
    return _watch(console, args.bootstrap, security, args.interval)


def _reader_gone() -> None:
    raise BrokenPipeError


def _watch(console: Console, bootstrap: str, security: Security, interval: float) -> int:
    """Redraws in place until Ctrl-C, which ends it quietly (exit code 0); a cluster that
    stops answering is shown as such, and the watch goes on."""
    from rich.live import Live

    def view() -> RenderableType:
        state = gather(bootstrap, security)
        stamp = time.strftime("%H:%M:%S")
        if state is None:
            return f"{stamp}  no node reachable at {bootstrap}"
        return render(state, title=f"{stamp}  every {interval:g}s, Ctrl-C to stop")

    # Ctrl-C sets a flag instead of raising KeyboardInterrupt wherever the main thread happens
    # to be: raised inside a gRPC call it can be swallowed there, and the watch went on for
    # ever. A round in progress finishes (its RPCs are bounded), then the watch ends.
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    try:
        with Live(view(), console=console, auto_refresh=False) as live:
            while not stop.wait(interval):
                live.update(view(), refresh=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    return 0


# ---- gathering ------------------------------------------------------------------------------


def gather(bootstrap: str, security: Security) -> ClusterState | None:
    """The cluster as its nodes answer now; None when no bootstrap node answers Metadata."""
    import grpc

    from tidelog.testing import probe
    from tidelog.v1 import tidelog_pb2 as pb
    from tidelog.v1 import tidelog_pb2_grpc

    meta = None
    for address in filter(None, (a.strip() for a in bootstrap.split(","))):
        with security.channel(address) as channel:
            try:
                meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(
                    pb.MetadataRequest(include_fenced_nodes=True), timeout=_RPC_TIMEOUT_S
                )
                break
            except grpc.RpcError:
                continue
    if meta is None:
        return None
    state = ClusterState(controller_id=meta.controller_id)
    for node in meta.nodes:
        status = probe(node.address, with_metadata=False, security=security)
        liveness = ("fenced" if node.is_fenced else "alive" if node.registered
                    else "unregistered")
        state.nodes.append(NodeState(node.node_id, node.address, str(status),
                                     node.node_id == meta.controller_id,
                                     node.internal_address, liveness,
                                     node.controller_voter))
    addresses = {node.node_id: node.address for node in meta.nodes}
    hosted: dict[int, list[tuple[str, int]]] = {}
    for topic in meta.topics:
        if topic.error_code:
            state.topic_errors[topic.name] = topic.error_code
        for p in topic.partitions:
            for replica in p.replicas:
                hosted.setdefault(replica, []).append((topic.name, p.partition))
    offsets: dict[tuple[str, int, int], tuple[int, int, int, int]] = {}
    for node_id, partitions in hosted.items():
        node_address = addresses.get(node_id)
        if node_address is not None:
            found_here = _replica_offsets(security, node_address, partitions)
            for (topic, partition), found in found_here.items():
                offsets[(topic, partition, node_id)] = found
    for topic in sorted(meta.topics, key=lambda t: t.name):
        for p in sorted(topic.partitions, key=lambda p: p.partition):
            states = tuple(
                ReplicaState(r, offsets.get((topic.name, p.partition, r))) for r in p.replicas
            )
            state.partitions.append(PartitionState(
                topic.name, p.partition, p.leader_id, p.leader_epoch, tuple(p.replicas),
                tuple(p.isr), p.error_code, states,
            ))
    return state


def _replica_offsets(
    security: Security, address: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int, int, int]]:
    """(log start, HW, LSO, LEO) of each of `partitions` as the node at `address` holds it,
    through two debug requests; partitions it did not answer for are left out."""
    import grpc

    from tidelog.v1 import tidelog_pb2 as pb
    from tidelog.v1 import tidelog_pb2_grpc

    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    with security.channel(address) as channel:
        stub = tidelog_pb2_grpc.TidelogStub(channel)
        try:
            listed = stub.ListOffsets(pb.ListOffsetsRequest(
                replica_id=-2,
                topics=[pb.ListOffsetsTopic(name=topic, partitions=[
                    pb.ListOffsetsPartition(partition=p, timestamp=-1, current_leader_epoch=-1)
                    for p in parts]) for topic, parts in by_topic.items()],
            ), timeout=_RPC_TIMEOUT_S)
            ends = {(t.name, p.partition): p.offset for t in listed.topics for p in t.partitions
                    if not p.error_code}
            if not ends:
                return {}
            fetch_topics: dict[str, list[pb.FetchPartition]] = {}
            for (topic, partition), end in ends.items():
                fetch_topics.setdefault(topic, []).append(pb.FetchPartition(
                    partition=partition, fetch_offset=end, current_leader_epoch=-1))
            fetched = stub.Fetch(pb.FetchRequest(
                replica_id=-2, max_bytes=1, max_wait_ms=0, min_bytes=0,
                topics=[pb.FetchTopic(name=t, partitions=ps) for t, ps in fetch_topics.items()],
            ), timeout=_RPC_TIMEOUT_S)
        except grpc.RpcError:
            return {}
    return {
        (t.name, p.partition): (p.log_start_offset, p.high_watermark, p.last_stable_offset,
                                ends[(t.name, p.partition)])
        for t in fetched.topics for p in t.partitions
        if not p.error_code and (t.name, p.partition) in ends
    }


# ---- rendering ------------------------------------------------------------------------------


def render(state: ClusterState, title: str | None = None) -> RenderableType:
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from tidelog.errors import for_code

    nodes = Table("NODE", "ADDRESS", "NODE-TO-NODE", "LIVENESS", "STATUS", box=box.SIMPLE,
                  title=title, title_justify="left")
    for node in state.nodes:
        mark = (" (controller)" if node.is_controller
                else " (controller voter)" if node.controller_voter else "")
        style = ("" if node.status.startswith("SERVING") and node.liveness != "fenced"
                 else "bold red")
        nodes.add_row(str(node.node_id), node.address, node.internal_address or "?",
                      node.liveness, node.status + mark, style=style)
    parts: list[RenderableType] = [nodes]
    if state.controller_id < 0:
        parts.append(Text("no controller elected", style="bold red"))
    for name, code in sorted(state.topic_errors.items()):
        parts.append(Text(f"topic {name}: error {code} {for_code(code).name}", style="red"))
    if not state.partitions:
        parts.append(Text("no topics"))
        return Group(*parts)

    partitions = Table("TOPIC", "PART", "LEADER", "EPOCH", "REPLICAS", "ISR", "STATE",
                       box=box.SIMPLE)
    replicas = Table("TOPIC", "PART", "REPLICA", "ROLE", "START", "HW", "LSO", "LEO", "LAG",
                     box=box.SIMPLE)
    for column in (*partitions.columns[1:4], *replicas.columns[1:3], *replicas.columns[4:]):
        column.justify = "right"
    for p in state.partitions:
        condition, style = _condition(p)
        partitions.add_row(p.topic, str(p.partition), str(p.leader), str(p.epoch),
                           _ids(p.replicas), _ids(p.isr), condition, style=style)
        for replica in p.states:
            role = ("leader" if replica.node_id == p.leader
                    else "in-sync" if replica.node_id in p.isr else "out-of-sync")
            if replica.offsets is None:
                cells = ["unreachable", "", "", "", ""]
            else:
                lag = p.lag_of(replica)
                cells = [*map(str, replica.offsets), "?" if lag is None else str(lag)]
            replicas.add_row(p.topic, str(p.partition), str(replica.node_id), role, *cells,
                             style="bold yellow" if role == "out-of-sync" else "")
    parts += [partitions, replicas]
    return Group(*parts)


def _condition(p: PartitionState) -> tuple[str, str]:
    from tidelog.errors import for_code

    if p.offline:
        return "offline", "bold red"
    if p.under_replicated:
        return "under-replicated", "bold yellow"
    if p.error_code:
        return for_code(p.error_code).name, "red"
    return "ok", ""


def _ids(ids: Iterable[int]) -> str:
    return ",".join(map(str, ids))
