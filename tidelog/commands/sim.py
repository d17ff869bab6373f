"""``tidelog sim``: run the deterministic Raft simulator for one seed or a range of seeds.

A run is a pure function of its flags, so a failure is reproduced by the one command this
prints. ``--jobs`` spreads a range over processes; results do not depend on it.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tidelog.commands._common import positive_int
from tidelog.errors import TidelogError

if TYPE_CHECKING:
    from tidelog.replication.sim import SimResult


def _seed_range(text: str) -> range:
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B (two integers), got {text!r}") from None
    if b <= a:
        raise argparse.ArgumentTypeError(f"empty range {text!r}: B must exceed A")
    return range(a, b)


def configure(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, help="replay one run and print its parameters")
    which.add_argument("--seeds", type=_seed_range, metavar="A:B",
                       help="run seeds A..B-1; print the replay command of each failure")
    parser.add_argument("--swarm", action="store_true",
                        help="let each seed switch fault kinds on/off and pick their rates")
    parser.add_argument("--nodes", type=int, help="replicas (default: derived from the seed)")
    parser.add_argument("--ticks", type=positive_int, default=200,
                        help="length of the fault phase in ticks (default 200)")
    parser.add_argument("--jobs", type=positive_int, default=1,
                        help="processes for --seeds (default 1)")


def replay_command(seed: int, args: argparse.Namespace) -> str:
    flags = [f"--seed {seed}"]
    if args.swarm:
        flags.append("--swarm")
    if args.nodes is not None:
        flags.append(f"--nodes {args.nodes}")
    if args.ticks != 200:
        flags.append(f"--ticks {args.ticks}")
    return "tidelog sim " + " ".join(flags)


def run_one(seed: int, args: argparse.Namespace) -> SimResult:
    from tidelog.replication.sim import run_seed

    if args.nodes is not None and args.nodes < 1:
        raise TidelogError("--nodes must be at least 1")
    return run_seed(seed, swarm=args.swarm, nodes=args.nodes, fault_ticks=args.ticks)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _job(item: tuple[int, argparse.Namespace]) -> SimResult:
    return run_one(*item)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.seed is not None:
        result = run_one(args.seed, args)
        for line in result.config.describe().split():
            print(line)
        elapsed = time.perf_counter() - started
        print(f"events={result.events} simulated_ticks={result.ticks} acked={result.acked} "
              f"reads={result.reads} elections={result.elections} failovers={result.failovers} "
              f"quiesces={result.quiesces} conf_changes={result.conf_changes} "
              f"conf_commits={result.conf_commits} events_per_s={result.events / elapsed:.0f}")
        if not result.ok:
            print(f"FAILED: {result.failure}", file=sys.stderr)
            return 1
        print("ok: every invariant held")
        return 0

    seeds: range = args.seeds
    failures = events = quiesces = conf_changes = conf_commits = 0
    elections: list[float] = []
    failovers: list[float] = []
    items = [(seed, args) for seed in seeds]
    with contextlib.ExitStack() as stack:
        if args.jobs > 1:
            pool = stack.enter_context(multiprocessing.Pool(args.jobs))
            results: Iterable[SimResult] = pool.imap(_job, items, chunksize=8)
        else:
            results = map(_job, items)
        tty = sys.stderr.isatty()
        step = max(1, len(items) // (100 if tty else 10))
        for done, result in enumerate(results, 1):
            events += result.events
            quiesces += result.quiesces
            conf_changes += result.conf_changes
            conf_commits += result.conf_commits
            elections.extend(result.elections)
            failovers.extend(result.failovers)
            if not result.ok:
                failures += 1
                print(f"seed {result.config.seed} FAILED: {result.failure}", flush=True)
                print(f"  replay: {replay_command(result.config.seed, args)}", flush=True)
            if len(items) >= 100 and (done % step == 0 or done == len(items)):
                # Progress on stderr, so the summary on stdout stays machine-readable.
                print(f"{chr(13) if tty else ''}{done}/{len(items)} seeds, {failures} failed, "
                      f"{time.perf_counter() - started:.0f}s", end="" if tty else "\n",
                      file=sys.stderr, flush=True)
        if len(items) >= 100 and tty:
            print(file=sys.stderr)
    elapsed = time.perf_counter() - started
    print(f"seeds={len(seeds)} failures={failures} events={events} quiesces={quiesces} "
          f"conf_changes={conf_changes} conf_commits={conf_commits} "
          f"events_per_s={events / elapsed:.0f} wall_s={elapsed:.1f}")
    for name, samples in (("election", elections), ("failover", failovers)):
        if samples:
            print(f"{name}_ticks p50={_percentile(samples, 0.5):.1f} "
                  f"p99={_percentile(samples, 0.99):.1f} samples={len(samples)}")
    return 1 if failures else 0
