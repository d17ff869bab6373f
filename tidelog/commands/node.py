"""``tidelog node``: run one node in the foreground until SIGTERM or Ctrl-C; ``tidelog node
decommission N``: move every replica off node N, then say it may be stopped; ``tidelog node
unregister N``: once it is stopped, remove it from the cluster's nodes (Kafka's
``kafka-cluster unregister``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.commands._common import add_bootstrap, client_for

if TYPE_CHECKING:
    from tidelog.node.config import NodeConfig
    from tidelog.wire import DecommissionStatus

#: How often `decommission` asks how far the drain got.
_PROGRESS_EVERY_S = 1.0

#: flag dest -> Kafka-style key, so flags and a properties file name the same settings.
_FLAG_KEYS = {
    "node_id": "node.id",
    "listen": "listen",
    "advertised": "advertised.address",
    "data_dir": "data.dir",
    "peers": "peers",
    "join": "controller.quorum.bootstrap.servers",
    "metrics_port": "metrics.port",
    "log_format": "log.format",
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="node_action", metavar="ACTION")
    decommission = sub.add_parser(
        "decommission", help="move every replica off a node, then say it may be stopped",
        description="Decommission node N: it takes no new replica, and the controller moves "
        "those it holds to the other nodes, partition.autobalancing.max.moves at a time. Waits "
        "(printing progress) until it holds none; Ctrl-C stops waiting, not the decommission.",
    )
    decommission.add_argument("node", type=int, metavar="N", help="the node's id")
    decommission.add_argument("--cancel", action="store_true",
                              help="re-commission the node: it takes replicas again")
    decommission.add_argument("--no-wait", action="store_true",
                              help="record the decommission and print where it stands")
    add_bootstrap(decommission)
    unregister = sub.add_parser(
        "unregister", help="remove a drained, stopped node from the cluster's nodes",
        description="Unregister node N (Kafka's kafka-cluster unregister): Metadata and "
        "cluster status leave it out from then on. Refused while N is alive, holds a partition "
        "replica (decommission it first) or votes in the controller's quorum. Started again, "
        "the node registers afresh.",
    )
    unregister.add_argument("node", type=int, metavar="N", help="the node's id")
    add_bootstrap(unregister)
    parser.add_argument(
        "--node-id", help="this node's id (node.id); with --join it may be left out: the "
                          "controller assigns one, kept in the data dir"
    )
    parser.add_argument(
        "--listen", help="HOST:PORT to bind (0.0.0.0 needs --advertised); port 0: any free one"
    )
    parser.add_argument("--data-dir", help="directory of this node's logs (data.dir)")
    parser.add_argument(
        "--peers", help="every node, this one included: 1=127.0.0.1:7420,2=127.0.0.1:7421"
    )
    parser.add_argument(
        "--join", metavar="HOST:PORT[,HOST:PORT]",
        help="join a running cluster instead of listing --peers: the node-to-node address of "
             "any of its nodes (controller.quorum.bootstrap.servers); the node registers with "
             "the controller there and learns the other nodes from it",
    )
    parser.add_argument(
        "--advertised", help="address published to peers and clients (default: the bound one)"
    )
    parser.add_argument(
        "--metrics-port", type=int, metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics, HOST being the listen host; "
             "0 picks a free port (metrics.port; default -1: none)",
    )
    parser.add_argument(
        "--log-format", choices=("text", "json"),
        help="text lines, or one JSON object per line (log.format; default text)",
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="key=value properties file; flags win over it"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting, e.g. --set segment.bytes=1048576 (repeatable; wins over --config)",
    )
    parser.add_argument(
        "--exit-with-parent",
        type=int,
        metavar="PID",
        help="stop as soon as PID is no longer this process's parent (used by launchers)",
    )


def node_config(args: argparse.Namespace) -> NodeConfig:
    """The config the parsed command line describes: the file, then the flags, then --set
    (what deploy/'s unit and compose file are checked against, tests/cli/test_deploy.py)."""
    from tidelog.errors import InvalidConfigError
    from tidelog.node.config import NodeConfig

    overrides = {key: str(getattr(args, dest)) for dest, key in _FLAG_KEYS.items()
                 if getattr(args, dest) is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidConfigError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    return NodeConfig.load(args.config, overrides)


def run(args: argparse.Namespace) -> int:
    if args.node_action == "decommission":
        return _decommission(args)
    if args.node_action == "unregister":
        client = client_for(args)
        try:
            client.admin.unregister_node(args.node)
        finally:
            client.close()
        print(f"node {args.node} unregistered")
        return 0
    from tidelog import event_loops
    from tidelog.node import logs
    from tidelog.node.server import serve

    config = node_config(args)
    logs.configure(config.node_id, config.log_format)
    return event_loops.run(serve(config, exit_with_parent=args.exit_with_parent),
                           config.event_loop)


def _decommission(args: argparse.Namespace) -> int:
    import time

    client = client_for(args)
    try:
        status = client.admin.decommission_node(args.node, cancel=args.cancel)
        if args.cancel:
            print(f"node {args.node} re-commissioned: it takes replicas again (balancing, when "
                  "enabled, moves its share back)")
            return 0
        shown = ""
        while True:
            line = _progress(status)
            if line != shown:
                print(line, flush=True)
                shown = line
            if status.replicas_left == 0 or args.no_wait:
                break
            time.sleep(_PROGRESS_EVERY_S)
            status = client.admin.describe_decommission(args.node)
            if not status.decommissioning:
                print(f"node {args.node}'s decommission was cancelled")
                return 1
        if status.replicas_left == 0:
            print(f"node {args.node} holds no replica and no controller seat: it may be "
                  f"stopped, then unregistered (tidelog node unregister {args.node})")
    finally:
        client.close()
    return 0


def _progress(status: DecommissionStatus) -> str:
    """One line of how far the drain got, and a line per partition that cannot move."""
    line = (f"node {status.node_id}: {status.replicas_left} replica(s) left, "
            f"{status.moving} moving")
    return "\n".join([line, *(f"  {tp} cannot move: {why}" for tp, why in status.stuck)])
