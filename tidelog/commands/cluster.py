"""``tidelog cluster up|down|status``: a local cluster of node processes on 127.0.0.1."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from tidelog.commands._common import add_security, security_for

if TYPE_CHECKING:
    from tidelog.testing import LocalCluster

_DEFAULT_BOOTSTRAP = "127.0.0.1:7420"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    up = sub.add_parser("up", help="start N nodes, wait until ready, print the bootstrap string")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--data-dir", type=Path, default=Path("tidelog-data"),
                    help="cluster directory; starting again on it resumes (default ./tidelog-data)")
    up.add_argument("--base-port", type=int, default=7420,
                    help="node N serves clients on base-port + N - 1 and its peers on base-port + "
                         "nodes + N - 1; 0 picks free ports (default 7420)")
    up.add_argument("--detach", action="store_true",
                    help="return once ready and leave the nodes running (stop: cluster down)")
    up.add_argument("--timeout", type=float, default=30.0,
                    help="seconds to wait for readiness (default 30)")
    up.add_argument("--tls", action="store_true",
                    help="TLS on both listeners of every node, with certificates of a throwaway "
                         "CA made in DATA_DIR/tls (clients need one too; up prints the flags)")

    down = sub.add_parser("down", help="gracefully stop a cluster started with up")
    down.add_argument("--data-dir", type=Path, default=Path("tidelog-data"),
                      help="the directory given to up (default ./tidelog-data)")
    down.add_argument("--timeout", type=float, default=10.0,
                      help="seconds before stragglers are killed (default 10)")

    status = sub.add_parser("status", help="nodes, partitions, leaders and epochs")
    status.add_argument("--bootstrap", default=_DEFAULT_BOOTSTRAP,
                        help=f"any node(s), HOST:PORT[,...] (default {_DEFAULT_BOOTSTRAP})")
    add_security(status)


def run(args: argparse.Namespace) -> int:
    return {"up": _up, "down": _down, "status": _status}[args.action](args)


def _up(args: argparse.Namespace) -> int:
    from tidelog.testing import LocalCluster

    cluster = LocalCluster(
        args.nodes,
        args.data_dir.resolve(),
        args.base_port,
        exit_with_parent=not args.detach,
        tls=args.tls,
    )
    # SIGTERM should stop the nodes as gracefully as Ctrl-C does.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        cluster.start()
        cluster.wait_ready(args.timeout, progress=_progress)
        _progress_done()
        print(cluster.bootstrap, flush=True)
        if args.tls:
            _print_tls_howto(cluster)
        if args.detach:
            cluster.detach()
            print(f"stop it with: tidelog cluster down --data-dir {args.data_dir}", file=sys.stderr)
            return 0
        print("running; Ctrl-C stops every node gracefully", file=sys.stderr)
        _watch(cluster)
    except KeyboardInterrupt:
        _progress_done()
        print("stopping...", file=sys.stderr)
        cluster.stop_all()
    finally:
        cluster.close()
    return 0


def _print_tls_howto(cluster: LocalCluster) -> None:
    """How a client connects: the flags, the same as a --command-config file, and Python."""
    options = cluster.client_options
    properties = cluster.tls_dir / "client.properties"
    properties.write_text(
        "".join(f"{key.replace('_', '.', 1)}={value}\n" for key, value in options.items())
    )
    flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in options.items())
    python = ", ".join(f"{key}={value!r}" for key, value in options.items())
    print(
        f"TLS on every listener (client certificate required; principal User:CN=client).\n"
        f"  CLI:    tidelog topic list --bootstrap {cluster.bootstrap} {flags}\n"
        f"     or:  tidelog topic list --bootstrap {cluster.bootstrap} "
        f"--command-config {properties}\n"
        f"  Python: Client({cluster.bootstrap!r}, {python})",
        file=sys.stderr,
    )


def _watch(cluster: LocalCluster) -> None:
    """Runs until interrupted, telling the operator once about each node that dies."""
    reported: set[int] = set()
    while True:
        for node_id in cluster.node_ids:
            if node_id not in reported and not cluster.is_running(node_id):
                reported.add(node_id)
                print(f"node {node_id} exited; its log: "
                      f"{cluster.data_dir / f'node-{node_id}.log'}", file=sys.stderr)
        time.sleep(0.5)


def _down(args: argparse.Namespace) -> int:
    from tidelog.testing import stop_cluster

    stopped = stop_cluster(args.data_dir, args.timeout)
    if stopped:
        print(f"stopped node(s) {', '.join(map(str, stopped))}")
    else:
        print(f"no node of {args.data_dir} was running")
    return 0


def _status(args: argparse.Namespace) -> int:
    import grpc

    from tidelog.errors import NodeUnavailableError
    from tidelog.testing import probe
    from tidelog.v1 import tidelog_pb2, tidelog_pb2_grpc

    security = security_for(args)
    meta = None
    for address in filter(None, (a.strip() for a in args.bootstrap.split(","))):
        with security.channel(address) as channel:
            try:
                meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(
                    tidelog_pb2.MetadataRequest(), timeout=5.0
                )
                break
            except grpc.RpcError:
                continue
    if meta is None:
        raise NodeUnavailableError(f"no node reachable at {args.bootstrap}")

    print(f"{'NODE':>4}  {'ADDRESS':<22} STATUS")
    for node in meta.nodes:
        mark = " (controller)" if node.node_id == meta.controller_id else ""
        status = probe(node.address, with_metadata=False, security=security)
        print(f"{node.node_id:>4}  {node.address:<22} {status}{mark}")
    if meta.controller_id < 0:
        print("no controller elected")
    if not meta.topics:
        print("no topics")
        return 0
    print()
    print(f"{'TOPIC':<24} {'PART':>4} {'LEADER':>6} {'EPOCH':>5}  {'REPLICAS':<12} ISR")
    for topic in sorted(meta.topics, key=lambda t: t.name):
        if topic.error_code:
            print(f"{topic.name:<24} error {topic.error_code}")
        for p in topic.partitions:
            print(
                f"{topic.name:<24} {p.partition:>4} {p.leader_id:>6} {p.leader_epoch:>5}  "
                f"{_ids(p.replicas):<12} {_ids(p.isr)}"
                + (f"  error {p.error_code}" if p.error_code else "")
            )
    addresses = {node.node_id: node.address for node in meta.nodes}
    print()
    print(f"{'TOPIC':<24} {'PART':>4} {'REPLICA':>7} {'ROLE':<8} {'START':>8} {'HW':>8} "
          f"{'LSO':>8} {'LEO':>8}")
    channels = {a: security.channel(a) for a in addresses.values()}
    try:
        for topic in sorted(meta.topics, key=lambda t: t.name):
            for p in topic.partitions:
                for replica in p.replicas:
                    stub = tidelog_pb2_grpc.TidelogStub(channels[addresses[replica]])
                    role = "leader" if replica == p.leader_id else "follower"
                    state = _replica_offsets(stub, topic.name, p.partition)
                    cells = " ".join(f"{v:>8}" for v in state) if state else "unreachable"
                    print(f"{topic.name:<24} {p.partition:>4} {replica:>7} {role:<8} {cells}")
    finally:
        for channel in channels.values():
            channel.close()
    return 0


def _replica_offsets(stub: Any, topic: str, partition: int) -> tuple[int, int, int, int] | None:
    """(log start, HW, LSO, LEO) as one replica holds them, through debug requests
    (replica_id -2), which any replica answers."""
    import grpc

    from tidelog.v1 import tidelog_pb2 as pb

    try:
        listed = stub.ListOffsets(
            pb.ListOffsetsRequest(
                replica_id=-2,
                topics=[pb.ListOffsetsTopic(name=topic, partitions=[
                    pb.ListOffsetsPartition(partition=partition, timestamp=-1,
                                            current_leader_epoch=-1)])],
            ),
            timeout=5.0,
        ).topics[0].partitions[0]
        leo = listed.offset
        fetched = stub.Fetch(
            pb.FetchRequest(
                replica_id=-2,
                max_bytes=1,
                topics=[pb.FetchTopic(name=topic, partitions=[
                    pb.FetchPartition(partition=partition, fetch_offset=leo,
                                      current_leader_epoch=-1)])],
            ),
            timeout=5.0,
        ).topics[0].partitions[0]
    except grpc.RpcError:
        return None
    if listed.error_code or fetched.error_code:
        return None
    return (fetched.log_start_offset, fetched.high_watermark, fetched.last_stable_offset, leo)


def _ids(ids: Iterable[int]) -> str:
    return ",".join(map(str, ids))


def _progress(summary: str) -> None:
    """One line rewritten in place on a terminal; plain lines when piped."""
    if sys.stderr.isatty():
        print(f"\rwaiting: {summary}\033[K", end="", file=sys.stderr, flush=True)
    else:
        print(f"waiting: {summary}", file=sys.stderr, flush=True)


def _progress_done() -> None:
    if sys.stderr.isatty():
        print(file=sys.stderr)


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
