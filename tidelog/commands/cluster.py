"""``tidelog cluster up|down|status``: a local cluster of node processes on 127.0.0.1."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from tidelog.commands import cluster_status
from tidelog.commands._common import add_security
from tidelog.errors import ConfigurationError

if TYPE_CHECKING:
    from tidelog.testing import LocalCluster


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    up = sub.add_parser("up", help="start N nodes, wait until ready, print the bootstrap string")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--data-dir", type=Path, default=Path("tidelog-data"),
                    help="cluster directory; starting again on it resumes (default ./tidelog-data)")
    up.add_argument("--base-port", type=int, default=7420,
                    help="node N serves clients on base-port + N - 1, its peers on base-port + "
                         "nodes + N - 1 and Kafka clients on base-port + 2 x nodes + N - 1; 0 "
                         "picks free ports (default 7420)")
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
                      help="seconds to wait for the nodes to exit (default 10); then the nodes "
                           "still running are named and the exit code is 1")
    down.add_argument("--force", action="store_true",
                      help="SIGKILL the nodes still running after --timeout")

    status = sub.add_parser(
        "status", help="nodes, partitions, leaders, epochs and every replica's offsets and lag"
    )
    cluster_status.configure(status)
    add_security(status)


def run(args: argparse.Namespace) -> int:
    return {"up": _up, "down": _down, "status": cluster_status.run}[args.action](args)


def _up(args: argparse.Namespace) -> int:
    from tidelog.testing import LocalCluster

    if not args.timeout > 0:  # checked before any node starts
        raise ConfigurationError(f"--timeout must be > 0 seconds, got {args.timeout}")
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
        for node_id in cluster.node_ids:
            print(f"node {node_id}: gRPC {cluster.address_of(node_id)}, Kafka protocol "
                  f"{cluster.kafka_address_of(node_id)}", file=sys.stderr)
            print(f"node {node_id}: metrics on http://{cluster.metrics_address(node_id)}/metrics",
                  file=sys.stderr)
        if args.tls:
            _print_tls_howto(cluster)
            _print_security(cluster)
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


def _print_security(cluster: LocalCluster) -> None:
    """What the cluster's listeners accept and who may do what, from the settings the nodes
    run with (node 1's node.properties): docs/security.md, in a few lines."""
    from tidelog.properties import read_properties

    props = read_properties(cluster.node_dir(cluster.node_ids[0]) / "node.properties")
    nodes = props.get("node.principals") or ", ".join(
        f"User:CN=node-{n}" for n in cluster.node_ids)
    if props.get("authorizer", "none") == "none":
        decides = "authorizer none: every request of every client is allowed"
    elif props.get("allow.everyone.if.no.acl.found", "").lower() == "true":
        decides = "authorizer acl: what no ACL mentions is open to everyone"
    else:
        decides = "authorizer acl: what no ACL allows is denied"
    clients = ", ".join(cluster.address_of(n) for n in cluster.node_ids)
    internal = ", ".join(cluster.internal_address_of(n) for n in cluster.node_ids)
    print(
        f"Security (docs/security.md):\n"
        f"  client listeners ({clients}): TLS, a client certificate of {cluster.tls_dir}/ca.pem "
        f"required; the Tidelog API, health, reflection\n"
        f"  node-to-node listeners ({internal}): mutual TLS, nodes only: "
        f"{nodes.replace(';', ', ')}\n"
        f"  {decides}; super users: {props.get('super.users', '').replace(';', ', ')}",
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
    """Stop every node found holding its data dir (a node restarted by hand included),
    saying so as each exits; exit code 1 naming those still running after --timeout."""
    from tidelog.testing import stop_cluster

    if not args.timeout >= 0:
        raise ConfigurationError(f"--timeout must be >= 0 seconds, got {args.timeout}")
    found, left = stop_cluster(
        args.data_dir, args.timeout, force=args.force,
        on_exit=lambda node_id: print(f"node {node_id} stopped", flush=True),
    )
    if not found:
        print(f"no node of {args.data_dir} was running")
        return 0
    if left:
        names = ", ".join(map(str, left))
        print(f"node(s) {names} did not stop within {args.timeout:g} s"
              + ("" if args.force else "; --force kills them"), file=sys.stderr)
        return 1
    print(f"stopped node(s) {', '.join(map(str, found))}")
    return 0


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
