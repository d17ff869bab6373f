"""Consumer-offset benchmarks (issue 14) on a real 3-node cluster, each beside a baseline from
the same run.

* commit: OffsetCommit throughput to one coordinator, 1, 8 and 64 concurrent committers, each
  committing sets of 1 and of 100 partitions, as records/s against Produce of the same records
  (the very key and value bytes the coordinator writes for those commits, as one pre-built
  batch per request) to a regular topic with replication factor 3, acks=all, whose leader is
  the coordinator's node, driven the same way: the same number of concurrent senders, one
  request per commit set, each waiting for its answer before sending the next. Both sides are
  raw gRPC (grpc.aio, pre-serialized requests, every answer parsed and checked), from this
  process, so that the ratio compares the two server paths and not two client libraries. The
  sides take turns in short slices over one connection (the load of a shared machine swings
  within seconds); the figure is the ratio of the records each side got acknowledged in the
  same total time. Goal: >= 0.8 in every configuration.
* fetch: p50 latency of OffsetFetch of one committed partition from its coordinator, beside
  the gRPC health check of the same node (same process, channel and connection; the node
  answers it on the same event loop as OffsetFetch but does nothing else for it), the calls
  taking turns. OffsetFetch of 100 partitions is printed for context. Goal: ratio <= 1.5.
* failover (run first, on small partitions): SIGKILL of a node; every group it coordinated (a
  group per offsets partition) commits again as a client would, concurrently: FindCoordinator
  on the live nodes until one names a live node, then OffsetCommit there, retried on any error.
  A sample per group and kill, from the kill to the acknowledgement; beside them, the next
  acks=all Produce to the partition of a regular topic that the node led. The node restarts,
  and every partition of __consumer_offsets is back on its preferred leader and the replicas
  of the next kill's groups agree on their log ends before it; the kills rotate over the nodes.
  Goal: p50 <= 1 s, p99 <= 2 s.
* table: bytes per entry of the coordinator's offset table at 10^6 entries, in both shapes of
  the issue (10^4 groups x 100 partitions, 10^6 groups x 1), measured by bench/offset_table.py's
  own function (tracemalloc, empty metadata). Goal: <= 64. That script also measures 10^7
  entries and the table's speed against a dict.

Run: ``.venv/bin/python bench/offsets.py [--quick] [--only PART] [--kills N] [--slices N]``.
``--quick`` uses tiny sizes (seconds) so that a smoke test keeps the script working; its figures
mean little. Figures are printed, never asserted: exit 1 only when something went wrong (a
wrong OffsetFetch answer, a side that completed nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from tidelog import Client  # noqa: E402
from tidelog.clock import wall_clock_ms  # noqa: E402
from tidelog.coordinator.controller import CONSUMER_OFFSETS_TOPIC  # noqa: E402
from tidelog.coordinator.offset_table import OffsetTable  # noqa: E402
from tidelog.coordinator.offsets_records import (  # noqa: E402
    OffsetKey,
    OffsetValue,
    encode_key,
    encode_value,
)
from tidelog.hashing import group_partition  # noqa: E402
from tidelog.records import RecordInput, build_batch  # noqa: E402
from tidelog.testing import LocalCluster, load_script  # noqa: E402
from tidelog.v1 import tidelog_pb2 as pb  # noqa: E402
from tidelog.v1 import tidelog_pb2_grpc  # noqa: E402

cluster_bench = load_script(Path(__file__).with_name("cluster.py"))

SERVICE = "/tidelog.v1.Tidelog/"
CONSUMED_TOPIC = "bench-consumed"  # the topic whose positions the groups commit
CONSUMED_PARTITIONS = 100
PRODUCE_TOPIC = "bench-offsets-produce"
#: Offsets the throughput committers commit (partition p: BASE_OFFSET + p), read back by the
#: fetch benchmark to check its answers.
BASE_OFFSET = 1_000_000
#: A failover client's pause between attempts. A third of the groups retry at once after a
#: kill (17 with 50 offsets partitions); Kafka's clients pause retry.backoff.ms (100 ms).
FAILOVER_PAUSE_S = 0.025


@dataclass(frozen=True)
class Sizes:
    committers: tuple[int, ...]
    partitions: tuple[int, ...]  # partitions per commit set
    slices: int  # per side and configuration, the sides taking turns
    slice_s: float
    warmup_s: float  # per side and configuration
    latency_samples: int
    kills: int
    table_shapes: tuple[tuple[int, int], ...]  # (groups, partitions per group)


FULL = Sizes((1, 8, 64), (1, 100), 10, 1.0, 0.5, 2000, 30, ((10_000, 100), (1_000_000, 1)))
QUICK = Sizes((1, 8, 64), (1, 100), 2, 0.3, 0.1, 50, 2, ((100, 100), (10_000, 1)))
PARTS = ("commit", "fetch", "failover", "table")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", choices=PARTS, action="append", help="run this part (repeatable)")
    parser.add_argument("--slices", type=int, help="slices per side of each commit configuration")
    parser.add_argument("--seconds", type=float, help="seconds per slice")
    parser.add_argument("--kills", type=int, help="coordinator kills in the failover benchmark")
    parser.add_argument("--committers", type=int, action="append",
                        help="commit part: only this many committers (repeatable)")
    parser.add_argument("--partitions", type=int, action="append",
                        help="commit part: only sets of this many partitions (repeatable)")
    parser.add_argument("--offsets-partitions", type=int, default=50,
                        help="offsets.topic.num.partitions (Kafka's default: 50)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    overrides = {k: v for k, v in (("slices", args.slices), ("slice_s", args.seconds),
                                   ("kills", args.kills),
                                   ("committers", tuple(args.committers or ())),
                                   ("partitions", tuple(args.partitions or ()))) if v}
    sizes = Sizes(**{**sizes.__dict__, **overrides})
    parts = set(args.only or PARTS)
    print(f"# tidelog consumer-offsets benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"grpcio {grpc.__version__}; 3 nodes and this client share the cores; "
          f"offsets.topic.num.partitions {args.offsets_partitions}")
    print("# load average before the run (other work on this machine skews every figure): "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    ok = True
    if parts - {"table"}:
        options = {"offsets.topic.num.partitions": args.offsets_partitions}
        with LocalCluster(3, **options) as cluster:
            setup = set_up(cluster, args.offsets_partitions, max(sizes.committers))
            # Failover first: a new coordinator replays its partition before it answers, and
            # the commit part leaves a few hundred thousand records in one partition (seconds
            # of loading, bench/README.md), as many as the machine's speed let it write.
            if "failover" in parts:
                ok &= bench_failover(cluster, setup, sizes)
            if "commit" in parts:
                ok &= bench_commit(cluster, setup, sizes)
            if "fetch" in parts:
                ok &= bench_fetch(cluster, setup, sizes)
    if "table" in parts:
        bench_table(sizes)
    print("# load average after the run: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.quick:
        print("# --quick: sizes too small for the goals to mean anything")
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------
# Set-up: the offsets topic, the groups of one coordinator, the produce baseline's partition


@dataclass(frozen=True)
class Setup:
    offsets_partitions: int
    #: The offsets partition every throughput and fetch group lives in, and its leader.
    partition: int
    coordinator: int
    #: Groups of that partition, one per concurrent committer.
    groups: list[str]
    #: The partition of PRODUCE_TOPIC led by the coordinator's node.
    produce_partition: int
    #: Each offsets partition's preferred leader.
    preferred: list[int]


def set_up(cluster: LocalCluster, offsets_partitions: int, committers: int) -> Setup:
    with Client(cluster.bootstrap) as client:
        # Only named by the commits, never written: one replica per partition is enough.
        client.create_topic(CONSUMED_TOPIC, partitions=CONSUMED_PARTITIONS, replication_factor=1)
        client.admin.find_coordinator("bench-0")  # creates __consumer_offsets, waits for its leader
    offsets_leaders = preferred_leaders(cluster, offsets_partitions)
    wait_steady(cluster, offsets_leaders)
    partition = group_partition("bench-0", offsets_partitions)
    groups = [g for g in (f"bench-{i}" for i in range(1_000_000))
              if group_partition(g, offsets_partitions) == partition][:committers]
    cluster_bench.create_topic(cluster, PRODUCE_TOPIC, 3)
    produce_leaders = cluster_bench.wait_leaders(cluster, PRODUCE_TOPIC, 3)
    coordinator = offsets_leaders[partition]
    if coordinator not in produce_leaders:
        raise RuntimeError(f"no partition of {PRODUCE_TOPIC} is led by node {coordinator}: "
                           f"{produce_leaders}")
    return Setup(offsets_partitions, partition, coordinator, groups,
                 produce_leaders.index(coordinator), offsets_leaders)


# ----------------------------------------------------------------------------------------------
# Commit throughput against Produce


def commit_request(group: str, partitions: int) -> pb.OffsetCommitRequest:
    return pb.OffsetCommitRequest(group_id=group, topics=[pb.OffsetCommitTopic(
        name=CONSUMED_TOPIC, partitions=[
            pb.OffsetCommitPartition(partition=p, committed_offset=BASE_OFFSET + p)
            for p in range(partitions)])])


def commit_error(response: pb.OffsetCommitResponse) -> int:
    """The first partition's error code, 0 when every partition committed."""
    return next((int(p.error_code) for t in response.topics for p in t.partitions
                 if p.error_code), 0)


def produce_request(setup: Setup, group: str, partitions: int) -> pb.ProduceRequest:
    """Produce of the records the coordinator writes for ``commit_request(group, partitions)``:
    the same keys and values (a commit's timestamp, id and set size are fixed-width, so any
    values give the same sizes), in one batch."""
    now = wall_clock_ms()
    batch = build_batch([
        RecordInput(encode_value(OffsetValue(BASE_OFFSET + p, -1, "", now, 1, partitions)),
                    encode_key(OffsetKey(group, CONSUMED_TOPIC, p)), now)
        for p in range(partitions)])
    return pb.ProduceRequest(acks=-1, timeout_ms=30_000, topics=[pb.TopicProduceData(
        name=PRODUCE_TOPIC, partitions=[pb.PartitionProduceData(
            partition=setup.produce_partition, records=batch)])])


def produce_error(response: pb.ProduceResponse) -> int:
    return int(response.topics[0].partitions[0].error_code)


@dataclass(frozen=True)
class Side:
    method: str
    requests: list[bytes]  # one per concurrent sender
    parse_error: Callable[[bytes], int]


async def run_slice(call: grpc.aio.UnaryUnaryMultiCallable, side: Side, seconds: float,
                    answers: Counter[str]) -> int:
    """Requests acknowledged within ``seconds``: every request of ``side`` sent by a sender of
    its own, each waiting for its answer before sending again. Requests still in flight at the
    end are waited for, not counted, so that the next slice starts with nothing in flight.
    Every answer, counted or not, is tallied in ``answers`` by method and outcome."""
    clock = time.perf_counter
    end = clock() + seconds
    completed = 0

    async def sender(request: bytes) -> None:
        nonlocal completed
        while clock() < end:
            try:
                answer = await call(request, timeout=35)
            except grpc.aio.AioRpcError as exc:
                answers[f"{side.method} {exc.code().name}"] += 1
                await asyncio.sleep(0.05)
                continue
            code = side.parse_error(answer)
            answers[f"{side.method} {f'error {code}' if code else 'OK'}"] += 1
            if code:
                await asyncio.sleep(0.05)
            elif clock() <= end:
                completed += 1

    await asyncio.gather(*(sender(r) for r in side.requests))
    return completed


def process_cpu_s(pid: int | None) -> float:
    """User plus system CPU seconds of process `pid` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def compare(address: str, sides: dict[str, Side], sizes: Sizes, answers: Counter[str],
            pid: int | None = None) -> tuple[dict[str, list[int]], dict[str, float]]:
    """Requests acknowledged per slice, per side: after a warm-up of each, the sides take
    turns slice by slice (which goes first alternating), over one channel and connection.
    Also the CPU seconds process `pid` (the coordinator's node) spent in each side's slices:
    CPU time, unlike the throughput, hardly depends on what else the machine runs."""

    async def run() -> tuple[dict[str, list[int]], dict[str, float]]:
        async with grpc.aio.insecure_channel(address,
                                             options=cluster_bench.CHANNEL_OPTIONS) as channel:
            calls = {name: channel.unary_unary(SERVICE + side.method)
                     for name, side in sides.items()}
            for name, side in sides.items():
                await run_slice(calls[name], side, sizes.warmup_s, answers)
            counts: dict[str, list[int]] = {name: [] for name in sides}
            cpu = dict.fromkeys(sides, 0.0)
            names = list(sides)
            for i in range(sizes.slices):
                for name in names if i % 2 == 0 else reversed(names):
                    before = process_cpu_s(pid)
                    counts[name].append(
                        await run_slice(calls[name], sides[name], sizes.slice_s, answers))
                    cpu[name] += process_cpu_s(pid) - before
            return counts, cpu

    return asyncio.run(run())


def bench_commit(cluster: LocalCluster, setup: Setup, sizes: Sizes) -> bool:
    address = cluster.address_of(setup.coordinator)
    print(f"\n## commit: OffsetCommit to the coordinator (node {setup.coordinator}, "
          f"{CONSUMER_OFFSETS_TOPIC}-{setup.partition}) vs Produce of the same records to "
          f"{PRODUCE_TOPIC}-{setup.produce_partition} (RF 3, acks=all, same leader); per "
          f"configuration {sizes.slices} slices of {sizes.slice_s:g} s per side, taking turns, "
          f"after {sizes.warmup_s:g} s of warm-up each")
    print(f"{'committers':>10} {'partitions':>10} {'produce rec/s':>14} {'commit rec/s':>13} "
          f"{'ratio':>6}  {'slice pairs: min p25 p50 p75 max':>34}  "
          f"{'coordinator CPU us/record: produce commit':>42}")
    answers: Counter[str] = Counter()
    summary: list[tuple[int, int, float]] = []
    for partitions in sizes.partitions:
        for committers in sizes.committers:
            groups = setup.groups[:committers]
            sides = {
                "produce": Side("Produce", [
                    produce_request(setup, g, partitions).SerializeToString() for g in groups],
                    lambda b: produce_error(pb.ProduceResponse.FromString(b))),
                "commit": Side("OffsetCommit", [
                    commit_request(g, partitions).SerializeToString() for g in groups],
                    lambda b: commit_error(pb.OffsetCommitResponse.FromString(b))),
            }
            # An election in the previous configuration must not leave this one elsewhere.
            wait_layout(cluster, setup)
            counts, cpu = compare(address, sides, sizes, answers,
                                  cluster.pid_of(setup.coordinator))
            produced, committed = sum(counts["produce"]), sum(counts["commit"])
            ratio = committed / produced if produced else 0.0
            pairs = sorted(c / p for p, c in zip(counts["produce"], counts["commit"], strict=True)
                           if p)
            spread = (" ".join(f"{cluster_bench.percentile(pairs, q):.2f}"
                               for q in (1, 25, 50, 75, 99)) if pairs else "-")
            per_s = partitions / (sizes.slices * sizes.slice_s)  # records/s per request counted
            summary.append((committers, partitions, ratio))
            cpu_us = "".join(
                f"{cpu[name] / (n * partitions) * 1e6:>8.1f}" if n else f"{'-':>8}"
                for name, n in (("produce", produced), ("commit", committed)))
            print(f"{committers:>10} {partitions:>10} {produced * per_s:>14,.0f} "
                  f"{committed * per_s:>13,.0f} {ratio:>6.2f}  {spread:>34}  {cpu_us:>42}",
                  flush=True)
    errors = {k: n for k, n in answers.items() if not k.endswith(" OK")}
    if errors:
        print(f"errors (retried): {errors}")
    ok = answers["Produce OK"] > 0 and answers["OffsetCommit OK"] > 0
    for committers, partitions, ratio in summary:
        print(f"ratio commit/produce ({committers} committers x {partitions} partitions): "
              f"{ratio:.2f} (goal >= 0.8) {cluster_bench.verdict(ratio >= 0.8)}")
    return ok


# ----------------------------------------------------------------------------------------------
# OffsetFetch latency


def bench_fetch(cluster: LocalCluster, setup: Setup, sizes: Sizes) -> bool:
    """Every answer is checked against the offsets committed first; a call that fails is
    timed all the same, and counted."""
    wait_layout(cluster, setup)
    channel = cluster_bench.channel_to(cluster, setup.coordinator)
    group = setup.groups[0]
    stub = tidelog_pb2_grpc.TidelogStub(channel)
    committed = commit_error(stub.OffsetCommit(commit_request(group, CONSUMED_PARTITIONS),
                                               timeout=10))
    if committed:
        print(f"fetch: the commit to read back failed with error {committed}", file=sys.stderr)
        return False
    fetch = channel.unary_unary(SERVICE + "OffsetFetch",
                                request_serializer=pb.OffsetFetchRequest.SerializeToString,
                                response_deserializer=pb.OffsetFetchResponse.FromString)
    health = health_pb2_grpc.HealthStub(channel)
    wrong: list[str] = []
    failed: Counter[str] = Counter()

    def fetch_partitions(count: int) -> Callable[[], None]:
        request = pb.OffsetFetchRequest(group_id=group, topics=[
            pb.OffsetFetchTopic(name=CONSUMED_TOPIC, partitions=list(range(count)))])

        def call() -> None:
            try:
                response = fetch(request, timeout=5)
            except grpc.RpcError as exc:
                failed[f"OffsetFetch {exc.code().name}"] += 1
                return
            if response.error_code:
                failed[f"OffsetFetch error {response.error_code}"] += 1
                return
            got = [(p.error_code, p.committed_offset)
                   for t in response.topics for p in t.partitions]
            if got != [(0, BASE_OFFSET + p) for p in range(count)]:
                wrong.append(f"{count} partitions: {got[:3]}...")

        return call

    def check() -> None:
        try:
            health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError as exc:
            failed[f"health check {exc.code().name}"] += 1

    calls: dict[str, Callable[[], object]] = {
        "OffsetFetch, 1 partition": fetch_partitions(1),
        "node health check (baseline)": check,
        "OffsetFetch, 100 partitions": fetch_partitions(CONSUMED_PARTITIONS),
    }
    samples = cluster_bench.interleaved_latencies(calls, sizes.latency_samples)
    print(f"\n## fetch: group {group!r} on its coordinator (node {setup.coordinator}), "
          f"{sizes.latency_samples} sequential calls of each kind, interleaved")
    print(f"{'call':<32} {'p50 us':>8} {'p99 us':>8} {'max us':>8}")
    pct = cluster_bench.percentile
    for name, values in samples.items():
        print(f"{name:<32} {pct(values, 50) * 1e6:8.0f} {pct(values, 99) * 1e6:8.0f} "
              f"{max(values) * 1e6:8.0f}")
    if failed:
        print(f"failed calls (timed all the same): {dict(failed)}")
    for line in wrong[:5]:
        print(f"WRONG ANSWER: {line}", file=sys.stderr)
    base = pct(samples["node health check (baseline)"], 50)
    ratio100 = pct(samples["OffsetFetch, 100 partitions"], 50) / base
    ratio = pct(samples["OffsetFetch, 1 partition"], 50) / base
    print(f"ratio OffsetFetch 100 partitions/health check p50: {ratio100:.2f}")
    print(f"ratio OffsetFetch/health check p50: {ratio:.2f} (goal <= 1.5) "
          f"{cluster_bench.verdict(ratio <= 1.5)}")
    return not wrong


# ----------------------------------------------------------------------------------------------
# Coordinator failover


def bench_failover(cluster: LocalCluster, setup: Setup, sizes: Sizes) -> bool:
    """Kill ``i`` takes node ``i % 3`` down; every group whose coordinator it was (one group per
    offsets partition, so about a third of them) then commits again, each as a client of its
    own, concurrently: a sample per group and kill."""
    by_partition: dict[int, str] = {}
    for group in (f"failover-{i}" for i in range(100 * setup.offsets_partitions)):
        by_partition.setdefault(group_partition(group, setup.offsets_partitions), group)
    requests = {g: commit_request(g, 1) for g in by_partition.values()}
    # The baseline: the partition of the produce topic that the killed node leads, produced to
    # by bench/cluster.py's failover client after the same kill.
    produce_partition = {cluster_bench.partition_view(cluster, cluster.node_ids[0], PRODUCE_TOPIC,
                                                      p).replicas[0]: p for p in range(3)}
    value = b"x" * 64
    times: list[float] = []
    worst_per_kill: list[float] = []
    produce_times: list[float] = []
    print(f"\n## failover: SIGKILL of the coordinator -> next OffsetCommit acknowledged, "
          f"{sizes.kills} kills, a group per offsets partition, clients pausing "
          f"{FAILOVER_PAUSE_S * 1000:g} ms between attempts, default node settings; baseline: "
          f"the next acks=all Produce to the partition of {PRODUCE_TOPIC} the node led, after "
          "the same kill (bench/cluster.py's failover client)", flush=True)
    cycle_started = time.monotonic()
    for kill in range(sizes.kills):
        victim = cluster.node_ids[kill % len(cluster.node_ids)]
        groups = [g for p, g in sorted(by_partition.items()) if setup.preferred[p] == victim]
        _, epoch = cluster_bench.settle(cluster, PRODUCE_TOPIC, produce_partition[victim], value)
        settle(cluster, setup, [requests[g] for g in groups])
        started = time.perf_counter()
        cluster.kill(victim)
        with ThreadPoolExecutor(len(groups) + 1) as pool:
            produced = pool.submit(produce_after_failover, cluster, produce_partition[victim],
                                   victim, epoch, value, started)
            jobs = [pool.submit(commit_after_failover, cluster, g, victim, requests[g], started)
                    for g in groups]
            results = [job.result() for job in jobs]
            produce_times.append(produced.result())
        samples = [r.acknowledged_s for r in results]
        times += samples
        worst_per_kill.append(max(samples))
        slowest = max(results, key=lambda r: r.acknowledged_s)
        print(f"kill {kill + 1:>3}: node {victim}, {len(groups)} groups: p50 "
              f"{statistics.median(samples) * 1000:.0f} ms, max {max(samples) * 1000:.0f} ms; "
              f"produce {produce_times[-1] * 1000:.0f} ms (slowest group: {slowest})", flush=True)
        cluster.restart(victim)
    pct = cluster_bench.percentile
    p50, p99 = pct(times, 50), pct(times, 99)
    print(f"failover: {len(times)} samples from {sizes.kills} kills in "
          f"{time.monotonic() - cycle_started:.0f} s; per kill, the slowest group: p50 "
          f"{pct(worst_per_kill, 50) * 1000:.0f} ms, max {max(worst_per_kill) * 1000:.0f} ms; "
          f"the produce baseline: p50 {pct(produce_times, 50) * 1000:.0f} ms, max "
          f"{max(produce_times) * 1000:.0f} ms")
    print(f"failover p50: {p50 * 1000:.0f} ms, p99: {p99 * 1000:.0f} ms, max: "
          f"{max(times) * 1000:.0f} ms over {len(times)} commits (goal p50 <= 1000 ms, "
          f"p99 <= 2000 ms) {cluster_bench.verdict(p50 <= 1 and p99 <= 2)}")
    return True


def produce_after_failover(cluster: LocalCluster, partition: int, dead: int, old_epoch: int,
                           value: bytes, started: float) -> float:
    """Seconds from the kill to the first acks=all Produce to ``partition`` acknowledged."""
    cluster_bench.produce_after_failover(cluster, PRODUCE_TOPIC, partition, dead, old_epoch,
                                         value)
    return time.perf_counter() - started


def offsets_views(
    cluster: LocalCluster, node: int, timeout: float = 5
) -> list[pb.PartitionMetadata]:
    stub = tidelog_pb2_grpc.TidelogStub(cluster_bench.channel_to(cluster, node))
    meta = stub.Metadata(pb.MetadataRequest(topics=[CONSUMER_OFFSETS_TOPIC]), timeout=timeout)
    return sorted(meta.topics[0].partitions, key=lambda p: p.partition)


def preferred_leaders(cluster: LocalCluster, partitions: int) -> list[int]:
    """Each offsets partition's preferred leader (its first replica), once a node knows them."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            view = offsets_views(cluster, cluster.node_ids[0])
        except grpc.RpcError:
            view = []
        if len(view) == partitions and all(p.replicas for p in view):
            return [p.replicas[0] for p in view]
        time.sleep(0.05)
    raise RuntimeError(f"node {cluster.node_ids[0]} does not know {CONSUMER_OFFSETS_TOPIC}")


def steady(cluster: LocalCluster, preferred: list[int]) -> bool:
    """Every node names the preferred leader of every offsets partition: no election or
    leadership hand-back is due to disturb a measurement."""
    try:
        views = [offsets_views(cluster, n) for n in cluster.node_ids]
    except grpc.RpcError:
        return False
    return all([(p.leader_id, p.error_code) for p in view] == [(n, 0) for n in preferred]
               for view in views)


def wait_steady(cluster: LocalCluster, preferred: list[int], timeout: float = 120) -> None:
    """Fifty partitions' elections on a loaded machine may take a while."""
    deadline = time.monotonic() + timeout
    while not steady(cluster, preferred):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the leaders of {CONSUMER_OFFSETS_TOPIC} did not settle on "
                               f"their preferred replicas within {timeout:g} s")
        time.sleep(0.05)


def wait_layout(cluster: LocalCluster, setup: Setup, timeout: float = 120) -> None:
    """The commit benchmark's layout: every offsets partition on its preferred leader, and the
    produce partition led by the coordinator's node."""
    deadline = time.monotonic() + timeout
    while not (steady(cluster, setup.preferred) and all(
        (view := cluster_bench.partition_view(cluster, n, PRODUCE_TOPIC, setup.produce_partition))
        is not None and view.leader_id == setup.coordinator for n in cluster.node_ids
    )):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the leaders did not come back within {timeout:g} s")
        time.sleep(0.05)


def settle(cluster: LocalCluster, setup: Setup, requests: list[pb.OffsetCommitRequest]) -> None:
    """Waits until every node runs and names the preferred leader of every offsets partition,
    each request's group's coordinator acknowledges it, and the replicas of those groups'
    partitions agree on their log end (the node restarted last has caught up)."""
    partitions = [group_partition(r.group_id, setup.offsets_partitions) for r in requests]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not steady(cluster, setup.preferred):
            continue
        try:
            if any(commit_error(tidelog_pb2_grpc.TidelogStub(cluster_bench.channel_to(
                    cluster, setup.preferred[p])).OffsetCommit(r, timeout=5))
                   for p, r in zip(partitions, requests, strict=True)):
                continue
            if all(len({cluster_bench.list_offsets(
                    tidelog_pb2_grpc.TidelogStub(cluster_bench.channel_to(cluster, n)),
                    CONSUMER_OFFSETS_TOPIC, -1, partition=p, replica_id=-2).offset
                    for n in cluster.node_ids}) == 1 for p in partitions):
                return
        except grpc.RpcError:
            continue
    raise RuntimeError(f"{CONSUMER_OFFSETS_TOPIC} did not settle within 120 s")


@dataclass
class Failover:
    """How one failover went, as the client saw it."""

    coordinator: int = -1  # the node that acknowledged the commit
    named_s: float = 0.0  # from the kill to the first answer naming a live coordinator
    acknowledged_s: float = 0.0  # from the kill to the acknowledgement
    longest_commit_s: float = 0.0  # the slowest OffsetCommit call
    answers: Counter[str] = field(default_factory=Counter)  # what the attempts got

    def __str__(self) -> str:
        seen = ", ".join(f"{k} x{n}" for k, n in sorted(self.answers.items()))
        return (f"node {self.coordinator} named after {self.named_s * 1000:.0f} ms, "
                f"acknowledged after {self.acknowledged_s * 1000:.0f} ms, longest OffsetCommit "
                f"call {self.longest_commit_s * 1000:.0f} ms; {seen}")


def commit_after_failover(cluster: LocalCluster, group: str, dead: int,
                          request: pb.OffsetCommitRequest, started: float) -> Failover:
    """What a client does once its coordinator is gone: FindCoordinator on any live node,
    OffsetCommit to the node it names, again on any failure."""
    live = [n for n in cluster.node_ids if n != dead]
    find = pb.FindCoordinatorRequest(key=group)
    deadline = time.monotonic() + 30
    attempt = 0
    result = Failover()
    while time.monotonic() < deadline:
        asked = live[attempt % len(live)]
        attempt += 1
        step = "FindCoordinator"
        try:
            answer = tidelog_pb2_grpc.TidelogStub(cluster_bench.channel_to(cluster, asked)) \
                .FindCoordinator(find, timeout=0.5)
            if answer.error_code:
                result.answers[f"FindCoordinator error {answer.error_code}"] += 1
            elif answer.node_id not in live:
                result.answers[f"FindCoordinator names node {answer.node_id}"] += 1
            else:
                if not result.named_s:
                    result.named_s = time.perf_counter() - started
                stub = tidelog_pb2_grpc.TidelogStub(
                    cluster_bench.channel_to(cluster, answer.node_id))
                step = "OffsetCommit"
                sent = time.perf_counter()
                try:
                    code = commit_error(stub.OffsetCommit(request, timeout=2))
                finally:
                    took = time.perf_counter() - sent
                    result.longest_commit_s = max(result.longest_commit_s, took)
                if code == 0:
                    result.coordinator = int(answer.node_id)
                    result.acknowledged_s = time.perf_counter() - started
                    return result
                result.answers[f"OffsetCommit error {code}"] += 1
        except grpc.RpcError as exc:
            result.answers[f"{step} {exc.code().name}"] += 1
        time.sleep(FAILOVER_PAUSE_S)
    raise RuntimeError(f"no commit of group {group!r} acknowledged within 30 s of the kill")


# ----------------------------------------------------------------------------------------------
# Table memory


def bench_table(sizes: Sizes) -> None:
    table_bench = load_script(Path(__file__).with_name("offset_table.py"))
    print("\n## table: bytes per entry of the coordinator's OffsetTable (tracemalloc, empty "
          "metadata; bench/offset_table.py's bytes_per_entry)")
    for groups, partitions in sizes.table_shapes:
        per_entry = table_bench.bytes_per_entry(OffsetTable, groups, partitions)
        print(f"table memory, {groups} groups x {partitions} partitions "
              f"({groups * partitions} entries): {per_entry:.1f} bytes/entry (goal <= 64) "
              f"{cluster_bench.verdict(per_entry <= 64)}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
