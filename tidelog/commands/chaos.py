"""``tidelog chaos run``: a real-process chaos test (issue 6, contract §3); ``tidelog chaos
lost-prepare``: one targeted transaction scenario (``chaos.scenarios``).

The run's plan is a function of its flags (the seed draws the faults), so the command it prints
replays it; exit 0 only when every invariant held.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.errors import ConfigurationError

if TYPE_CHECKING:
    from tidelog.chaos.report import Report


def _span(text: str) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX seconds, got {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"need 0 < MIN <= MAX, got {text!r}")
    return low, high


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    run = sub.add_parser("run", help="run a workload under faults, check it, write a report")
    run.add_argument("--duration", type=float, default=60.0,
                     help="seconds of workload under faults (default 60)")
    run.add_argument("--nemesis", default="kill-leader,partition,latency",
                     help="comma-separated faults: kill-leader, kill-random, pause, "
                     "isolate-leader, partition, latency, bandwidth, corrupt-replica, "
                     "kill-coordinator, pause-coordinator, isolate-coordinator; all; or none "
                     "(no node faults: the members' nemeses alone, or a baseline) "
                     "(default kill-leader,partition,latency)")
    run.add_argument("--seed", type=int, default=0, help="draws the fault schedule (default 0)")
    run.add_argument("--out", type=Path, default=Path("chaos-out"),
                     help="directory for history, report, timeline and node logs")
    run.add_argument("--nodes", type=int, default=3, help="cluster size (default 3)")
    run.add_argument("--partitions", type=int, default=3, help="partitions written (default 3)")
    run.add_argument("--rate", type=float, default=100.0, help="writes per second (default 100)")
    run.add_argument("--delivery-timeout-ms", type=int, default=20_000,
                     help="the producers' delivery timeout; past it a write is unknown "
                     "(default 20000)")
    run.add_argument("--interval", type=_span, default=(2.0, 5.0), metavar="MIN:MAX",
                     help="quiet seconds between faults (default 2:5)")
    run.add_argument("--hold", type=_span, default=(2.0, 6.0), metavar="MIN:MAX",
                     help="seconds each fault lasts (default 2:6)")
    run.add_argument("--commit-rate", type=float, default=20.0,
                     help="consumer-offset commits per second, each a set over every "
                     "partition; 0 turns committers and offset fetchers off (default 20)")
    run.add_argument("--offsets-partitions", type=int, default=2,
                     help="partitions of __consumer_offsets (default 2)")
    run.add_argument("--members", type=int, default=0,
                     help="consumer-group member processes subscribed to the topic, checked "
                     "for double ownership, backward commits and unconsumed records "
                     "(default 0)")
    run.add_argument("--member-kill-interval", type=float, default=0.0, metavar="S",
                     help="SIGKILL a member (and start another) about every S seconds "
                     "(default 0: never)")
    run.add_argument("--member-join-interval", type=float, default=0.0, metavar="S",
                     help="about every S seconds a new member joins while every other one is "
                     "paused (SIGSTOP) for up to 2 s, so that what it gets is owned by members "
                     "that cannot revoke it yet (default 0: never)")
    run.add_argument("--txn-rate", type=float, default=10.0,
                     help="transactions per second (two records on each of several "
                     "partitions, some aborted), read by read_committed consumers and checked "
                     "for aborted, intermediate, lost and torn reads; 0 turns them off "
                     "(default 10)")
    run.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                     help="a node setting for every node, e.g. election.timeout.ms=500")
    lost = sub.add_parser(
        "lost-prepare",
        help="a transaction coordinator cut off from its followers while it commits: the next "
        "coordinator must abort a transaction nothing of which is readable")
    lost.add_argument("--out", type=Path, default=Path("chaos-out"),
                      help="directory for history, report and node logs")
    lost.add_argument("--set", type=_setting, action="append", default=[],
                      metavar="KEY=VALUE",
                      help="a node setting for every node, e.g. "
                      "test.txn.markers.before.prepare=true")


def run(args: argparse.Namespace) -> int:
    if args.action == "lost-prepare":
        from tidelog.chaos.scenarios import lost_prepare

        report = lost_prepare(args.out, dict(args.set))
        return _verdict(report, args.out, report.replay)
    from tidelog.chaos.nemesis import NEMESES
    from tidelog.chaos.run import RunConfig
    from tidelog.chaos.run import run as run_chaos

    kinds = list(NEMESES) if args.nemesis == "all" else [] if args.nemesis == "none" else [
        k.strip() for k in args.nemesis.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(NEMESES))
    if unknown or (not kinds and args.nemesis != "none"):
        raise ConfigurationError(
            f"unknown nemesis {', '.join(unknown) or '(none)'}; choose from {', '.join(NEMESES)}"
        )
    if args.nodes < 3 or args.partitions < 1 or args.rate <= 0 or args.duration <= 0:
        raise ConfigurationError("need --nodes >= 3, --partitions >= 1, --rate > 0, --duration > 0")
    if args.commit_rate < 0 or args.offsets_partitions < 1:
        raise ConfigurationError("need --commit-rate >= 0 and --offsets-partitions >= 1")
    if args.txn_rate < 0 or args.delivery_timeout_ms <= 0:
        raise ConfigurationError("need --txn-rate >= 0 and --delivery-timeout-ms > 0")
    if args.members < 0 or args.member_kill_interval < 0 or args.member_join_interval < 0:
        raise ConfigurationError("need --members >= 0, --member-kill-interval >= 0 and "
                                 "--member-join-interval >= 0")
    config = RunConfig(
        seed=args.seed, duration=args.duration, nemeses=tuple(kinds), out=args.out,
        nodes=args.nodes, partitions=args.partitions, rate=args.rate,
        delivery_timeout_ms=args.delivery_timeout_ms,
        interval=args.interval, hold=args.hold, node_options=dict(args.set),
        commit_rate=args.commit_rate, offsets_partitions=args.offsets_partitions,
        members=args.members, member_kill_interval_s=args.member_kill_interval,
        member_join_interval_s=args.member_join_interval,
        txn_rate=args.txn_rate,
    )
    print(f"chaos run: {config.replay_command()}", flush=True)
    report = run_chaos(config, progress=lambda line: print(line, flush=True))
    return _verdict(report, config.out, config.replay_command())


def _verdict(report: Report, out: Path, replay: str) -> int:
    print(report.text())
    print(f"history, report and node logs in {out}/")
    if not report.ok:
        print(f"FAILED; replay with: {replay}", file=sys.stderr)
    return 0 if report.ok else 1
