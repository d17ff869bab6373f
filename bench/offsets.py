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
  sides alternate over several rounds; the figure is the median of the rounds' ratios.
  Goal: >= 0.8 in every configuration.
* fetch: p50 latency of OffsetFetch of one committed partition from its coordinator, beside
  the gRPC health check of the same node (same process, channel and connection; the node
  answers it on the same event loop as OffsetFetch but does nothing else for it), the calls
  taking turns. OffsetFetch of 100 partitions is printed for context. Goal: ratio <= 1.5.
* failover: SIGKILL of a group's coordinator to the next OffsetCommit that a coordinator
  acknowledges, found as a client finds it: FindCoordinator on the live nodes until one names
  a live node, then OffsetCommit there, retried on any error. The node restarts, and every
  partition of __consumer_offsets is back on its preferred leader and the next group's replicas
  agree on its log end before the next kill; the groups rotate over partitions whose preferred
  leaders are on different nodes, so every node dies in turn. Goal: p50 <= 1 s, p99 <= 2 s.

Run: ``.venv/bin/python bench/offsets.py [--quick] [--only PART] [--kills N] [--rounds R]``.
``--quick`` uses tiny sizes (seconds) so that a smoke test keeps the script working; its figures
mean little. Figures are printed, never asserted: exit 1 only when something went wrong (a
wrong OffsetFetch answer, a side that completed nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from tidelog import Client  # noqa: E402
from tidelog.clock import wall_clock_ms  # noqa: E402
from tidelog.coordinator.controller import CONSUMER_OFFSETS_TOPIC  # noqa: E402
from tidelog.coordinator.offsets_records import (  # noqa: E402
    OffsetKey,
    OffsetValue,
    encode_key,
    encode_value,
)
from tidelog.hashing import group_partition  # noqa: E402
from tidelog.records import RecordInput, build_batch  # noqa: E402
from tidelog.testing import LocalCluster  # noqa: E402
from tidelog.v1 import tidelog_pb2 as pb  # noqa: E402
from tidelog.v1 import tidelog_pb2_grpc  # noqa: E402


def load_script(name: str) -> ModuleType:
    """Another script of bench/ as a module (bench/ is a directory of scripts, not a package)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


cluster_bench = load_script("cluster.py")

SERVICE = "/tidelog.v1.Tidelog/"
CONSUMED_TOPIC = "bench-consumed"  # the topic whose positions the groups commit
CONSUMED_PARTITIONS = 100
PRODUCE_TOPIC = "bench-offsets-produce"
#: Offsets the throughput committers commit (partition p: BASE_OFFSET + p), read back by the
#: fetch benchmark to check its answers.
BASE_OFFSET = 1_000_000


@dataclass(frozen=True)
class Sizes:
    committers: tuple[int, ...]
    partitions: tuple[int, ...]  # partitions per commit set
    rounds: int
    warmup_s: float
    measure_s: float
    latency_samples: int
    kills: int


FULL = Sizes((1, 8, 64), (1, 100), 3, 1.0, 4.0, 2000, 60)
QUICK = Sizes((1, 8, 64), (1, 100), 1, 0.2, 0.5, 50, 2)
PARTS = ("commit", "fetch", "failover")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", choices=PARTS, action="append", help="run this part (repeatable)")
    parser.add_argument("--rounds", type=int, help="rounds of each commit/produce configuration")
    parser.add_argument("--seconds", type=float, help="measured seconds per side and round")
    parser.add_argument("--kills", type=int, help="coordinator kills in the failover benchmark")
    parser.add_argument("--offsets-partitions", type=int, default=50,
                        help="offsets.topic.num.partitions (Kafka's default: 50)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    overrides = {k: v for k, v in (("rounds", args.rounds), ("measure_s", args.seconds),
                                   ("kills", args.kills)) if v}
    sizes = Sizes(**{**sizes.__dict__, **overrides})
    parts = set(args.only or PARTS)
    print(f"# tidelog consumer-offsets benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"grpcio {grpc.__version__}; 3 nodes and this client share the cores; "
          f"offsets.topic.num.partitions {args.offsets_partitions}")
    print("# load average before the run (other work on this machine skews every figure): "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    ok = True
    options = {"offsets.topic.num.partitions": args.offsets_partitions}
    with LocalCluster(3, **options) as cluster:
        setup = set_up(cluster, args.offsets_partitions, max(sizes.committers))
        if "commit" in parts:
            ok &= bench_commit(cluster, setup, sizes)
        if "fetch" in parts:
            ok &= bench_fetch(cluster, setup, sizes)
        if "failover" in parts:
            ok &= bench_failover(cluster, setup, sizes)
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
        client.find_coordinator("bench-0")  # creates __consumer_offsets, waits for its leader
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


def drive(address: str, side: Side, records_per_request: int, sizes: Sizes,
          errors: Counter[str]) -> float:
    """Records/s: every request of ``side`` sent by a sender of its own, each sender waiting
    for its answer before sending again; answers counted between the warm-up and the end."""

    async def run() -> int:
        window = cluster_bench.Window(sizes.warmup_s, sizes.measure_s)
        async with grpc.aio.insecure_channel(address,
                                             options=cluster_bench.CHANNEL_OPTIONS) as channel:
            call = channel.unary_unary(SERVICE + side.method)

            async def sender(request: bytes) -> None:
                while window.open():
                    try:
                        answer = await call(request, timeout=35)
                    except grpc.aio.AioRpcError as exc:
                        errors[f"{side.method} {exc.code().name}"] += 1
                        await asyncio.sleep(0.05)
                        continue
                    code = side.parse_error(answer)
                    if code == 0:
                        window.complete()
                    else:
                        errors[f"{side.method} error {code}"] += 1
                        await asyncio.sleep(0.05)

            await asyncio.gather(*(sender(r) for r in side.requests))
        completed: int = window.completed
        return completed

    completed = asyncio.run(run())
    return completed * records_per_request / sizes.measure_s


def bench_commit(cluster: LocalCluster, setup: Setup, sizes: Sizes) -> bool:
    address = cluster.address_of(setup.coordinator)
    print(f"\n## commit: OffsetCommit to the coordinator (node {setup.coordinator}, "
          f"{CONSUMER_OFFSETS_TOPIC}-{setup.partition}) vs Produce of the same records to "
          f"{PRODUCE_TOPIC}-{setup.produce_partition} (RF 3, acks=all, same leader); "
          f"{sizes.rounds} rounds of {sizes.measure_s:g} s after {sizes.warmup_s:g} s warm-up "
          "per side, sides alternating")
    print(f"{'committers':>10} {'partitions':>10} {'produce rec/s':>14} {'commit rec/s':>13} "
          f"{'ratio':>6}  rounds")
    ok = True
    errors: Counter[str] = Counter()
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
            figures: dict[str, list[float]] = {"produce": [], "commit": []}
            for r in range(sizes.rounds):
                for name in ("produce", "commit") if r % 2 == 0 else ("commit", "produce"):
                    # A side that an election disturbed must not leave the next one elsewhere.
                    wait_layout(cluster, setup)
                    figures[name].append(drive(address, sides[name], partitions, sizes, errors))
            ratios = [c / p if p else 0.0 for p, c in zip(figures["produce"], figures["commit"],
                                                          strict=True)]
            ratio = statistics.median(ratios)
            ok &= all(figures["produce"]) and all(figures["commit"])
            summary.append((committers, partitions, ratio))
            produced, committed = (statistics.median(figures[k]) for k in ("produce", "commit"))
            print(f"{committers:>10} {partitions:>10} {produced:>14,.0f} {committed:>13,.0f} "
                  f"{ratio:>6.2f}  "
                  + " ".join(f"{x:.2f}" for x in ratios), flush=True)
    if errors:
        print(f"errors (retried): {dict(errors)}")
    for committers, partitions, ratio in summary:
        print(f"ratio commit/produce ({committers} committers x {partitions} partitions): "
              f"{ratio:.2f} (goal >= 0.8) {cluster_bench.verdict(ratio >= 0.8)}")
    return ok


# ----------------------------------------------------------------------------------------------
# OffsetFetch latency


def bench_fetch(cluster: LocalCluster, setup: Setup, sizes: Sizes) -> bool:
    """Every answer is checked against the offsets committed first."""
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

    def fetch_partitions(count: int) -> Callable[[], None]:
        request = pb.OffsetFetchRequest(group_id=group, topics=[
            pb.OffsetFetchTopic(name=CONSUMED_TOPIC, partitions=list(range(count)))])

        def call() -> None:
            response = fetch(request, timeout=5)
            got = [(p.error_code, p.committed_offset)
                   for t in response.topics for p in t.partitions]
            if response.error_code or got != [(0, BASE_OFFSET + p) for p in range(count)]:
                wrong.append(f"{count} partitions: error {response.error_code}, {got[:3]}...")

        return call

    calls: dict[str, Callable[[], object]] = {
        "OffsetFetch, 1 partition": fetch_partitions(1),
        "node health check (baseline)": lambda: health.Check(health_pb2.HealthCheckRequest(),
                                                             timeout=5),
        "OffsetFetch, 100 partitions": fetch_partitions(CONSUMED_PARTITIONS),
    }
    samples = cluster_bench.interleaved_latencies(calls, sizes.latency_samples)
    print(f"\n## fetch: group {group!r} on its coordinator (node {setup.coordinator}), "
          f"{sizes.latency_samples} sequential calls of each kind, interleaved")
    print(f"{'call':<32} {'p50 us':>8} {'p99 us':>8}")
    pct = cluster_bench.percentile
    for name, values in samples.items():
        print(f"{name:<32} {pct(values, 50) * 1e6:8.0f} {pct(values, 99) * 1e6:8.0f}")
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
    preferred = setup.preferred
    # One group per node that is some partition's preferred leader, on such a partition.
    by_node: dict[int, str] = {}
    for group in (f"failover-{i}" for i in range(10 * setup.offsets_partitions)):
        by_node.setdefault(preferred[group_partition(group, setup.offsets_partitions)], group)
    groups = [by_node[n] for n in sorted(by_node)]
    requests = {g: commit_request(g, 1) for g in groups}
    times: list[float] = []
    print(f"\n## failover: SIGKILL of the coordinator -> next OffsetCommit acknowledged, "
          f"{sizes.kills} kills, default node settings", flush=True)
    cycle_started = time.monotonic()
    for kill in range(sizes.kills):
        group = groups[kill % len(groups)]
        tp_partition = group_partition(group, setup.offsets_partitions)
        coordinator = settle(cluster, setup, preferred, group, requests[group])
        started = time.perf_counter()
        cluster.kill(coordinator)
        new = commit_after_failover(cluster, group, coordinator, requests[group])
        elapsed = time.perf_counter() - started
        times.append(elapsed)
        print(f"kill {kill + 1:>3}: {CONSUMER_OFFSETS_TOPIC}-{tp_partition}, node {coordinator} "
              f"-> node {new}: {elapsed * 1000:7.1f} ms", flush=True)
        cluster.restart(coordinator)
    pct = cluster_bench.percentile
    p50, p99 = pct(times, 50), pct(times, 99)
    print(f"failover cycles took {time.monotonic() - cycle_started:.0f} s in all")
    print(f"failover p50: {p50 * 1000:.0f} ms, p99: {p99 * 1000:.0f} ms, max: "
          f"{max(times) * 1000:.0f} ms over {len(times)} kills (goal p50 <= 1000 ms, "
          f"p99 <= 2000 ms) {cluster_bench.verdict(p50 <= 1 and p99 <= 2)}")
    return True


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


def settle(cluster: LocalCluster, setup: Setup, preferred: list[int], group: str,
           request: pb.OffsetCommitRequest) -> int:
    """Waits until every node runs and names the preferred leader of every offsets partition,
    the group's coordinator acknowledges a commit and the replicas of the group's partition
    have the same log end. Returns the coordinator."""
    partition = group_partition(group, setup.offsets_partitions)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not steady(cluster, preferred):
            continue
        coordinator = preferred[partition]
        stub = tidelog_pb2_grpc.TidelogStub(cluster_bench.channel_to(cluster, coordinator))
        try:
            if commit_error(stub.OffsetCommit(request, timeout=5)):
                continue
            ends = {cluster_bench.list_offsets(
                tidelog_pb2_grpc.TidelogStub(cluster_bench.channel_to(cluster, n)),
                CONSUMER_OFFSETS_TOPIC, -1, partition=partition, replica_id=-2).offset
                for n in cluster.node_ids}
        except grpc.RpcError:
            continue
        if len(ends) == 1:
            return coordinator
    raise RuntimeError(f"{CONSUMER_OFFSETS_TOPIC}-{partition} did not settle within 120 s")


def commit_after_failover(cluster: LocalCluster, group: str, dead: int,
                          request: pb.OffsetCommitRequest) -> int:
    """What a client does once its coordinator is gone: FindCoordinator on any live node,
    OffsetCommit to the node it names, again on any failure. Returns the new coordinator."""
    live = [n for n in cluster.node_ids if n != dead]
    find = pb.FindCoordinatorRequest(key=group)
    deadline = time.monotonic() + 30
    attempt = 0
    while time.monotonic() < deadline:
        asked = live[attempt % len(live)]
        attempt += 1
        try:
            answer = tidelog_pb2_grpc.TidelogStub(cluster_bench.channel_to(cluster, asked)) \
                .FindCoordinator(find, timeout=0.5)
            if answer.error_code == 0 and answer.node_id in live:
                stub = tidelog_pb2_grpc.TidelogStub(
                    cluster_bench.channel_to(cluster, answer.node_id))
                if commit_error(stub.OffsetCommit(request, timeout=2)) == 0:
                    return int(answer.node_id)
        except grpc.RpcError:
            pass
        time.sleep(0.005)
    raise RuntimeError(f"no commit of group {group!r} acknowledged within 30 s of the kill")


if __name__ == "__main__":
    sys.exit(main())
