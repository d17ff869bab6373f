"""What many partitions cost a 3-node cluster (issue 18, "Many partitions").

For each partition count (10, 100, 1,000 and 5,000 by default; RF 3), on a fresh cluster:

* creation: the time from CreateTopics to every partition having a leader, as the Metadata
  answers of every node agree, and how many of those leaders are the preferred replica;
* idle CPU: each node process's user + system CPU (from ``/proc/<pid>/stat``) over 30 s with
  no traffic, as a fraction of one core (after a few seconds for the cluster to settle);
* produce: the same bytes (1 KiB records, acks=all) spread over all the topic's partitions
  against over a 6-partition topic of the same cluster, in the same run. Each request goes to
  one leader with a batch for each of up to 16 of its partitions, 256 KiB in all, 4 requests in
  flight per node, so only the number of partitions (Raft groups, batches and fsyncs) differs.
  Ratio goal at 1,000 partitions: >= 0.6. The disk's own ratio for the same shape (each batch
  fdatasync'd in 3 files of its partition, no gRPC and no Raft) is printed beside it.

Goals at 5,000 partitions (issue 32): every partition led within 120 s of CreateTopics, and
idle CPU <= 0.05 core per node; each is printed beside its figure.

``--warm`` writes a batch to every partition of each topic before its produce is measured:
a log's first write in its epoch also writes and fsyncs its leader-epoch file, once per
partition, which the default run counts (each of 1,000 partitions takes about two batches).
``--no-idle`` skips the idle CPU part. ``--data-dir /dev/shm`` runs the clusters and the disk's
floor on a RAM filesystem: the produce ratio there is what the CPU alone allows, with the disk
out of the way.

Run: ``.venv/bin/python bench/partitions.py [--counts 10,100] [--idle-s 30] [--quick]``.
``--quick`` uses tiny sizes so a smoke test keeps this script working. The figures are printed,
never asserted: exit 1 only when something went wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

# As a script this directory is first on sys.path: bench/cluster.py is imported from it (and
# takes the directory off again, so that bench/storage.py shadows nothing).
import cluster as cluster_bench  # type: ignore[import-not-found]
import grpc

from tidelog import Client, ClientConfig
from tidelog.clock import wall_clock_ms
from tidelog.errors import TidelogError
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster
from tidelog.v1 import tidelog_pb2 as pb
from tidelog.v1 import tidelog_pb2_grpc

MIB = 1024 * 1024
RECORD_BYTES = 1024
REQUEST_BYTES = 256 * 1024
PARTITIONS_PER_REQUEST = 16
INFLIGHT_PER_NODE = 4
BASE_PARTITIONS = 6
#: From this many partitions, the goals of issue 32: all led within this many seconds, and
#: idle CPU at most this fraction of a core per node.
GOAL_PARTITIONS = 5000
GOAL_LED_S = 120.0
GOAL_IDLE_CORE = 0.05


@dataclass(frozen=True)
class Sizes:
    counts: tuple[int, ...]
    idle_s: float
    settle_s: float
    create_timeout_s: float
    produce_bytes: int


FULL = Sizes((10, 100, 1000, 5000), 30.0, 5.0, 300.0, 64 * MIB)
QUICK = Sizes((4,), 1.0, 0.5, 60.0, 2 * MIB)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--counts", help="partition counts, comma-separated")
    parser.add_argument("--idle-s", type=float, help="seconds of idle CPU measurement")
    parser.add_argument("--create-timeout-s", type=float,
                        help="give up waiting for every partition to be led after this")
    parser.add_argument("--produce-mib", type=float, help="MiB produced per configuration")
    parser.add_argument("--no-produce", action="store_true", help="creation and idle CPU only")
    parser.add_argument("--no-idle", action="store_true", help="no idle CPU measurement")
    parser.add_argument("--warm", action="store_true",
                        help="before measuring produce, write a batch to every partition of "
                             "both topics, so no log's first write in its epoch (a leader "
                             "epoch file written and fsynced) falls in the measured window")
    parser.add_argument("--topic-partitions", type=int,
                        help="create the partitions as topics of this many each (one topic "
                             "after another, each led before the next), then idle CPU only")
    parser.add_argument("--data-dir", type=Path,
                        help="make the clusters' directories (and the disk floor's files) "
                             "under this directory; on a RAM filesystem (/dev/shm) an fsync "
                             "costs nothing, which leaves what the CPU allows")
    args = parser.parse_args(argv)
    if args.data_dir is not None:
        if not args.data_dir.is_dir():
            parser.error(f"--data-dir {args.data_dir}: not a directory")
        tempfile.tempdir = str(args.data_dir)  # LocalCluster's temporary directories go there
    sizes = QUICK if args.quick else FULL
    overrides: dict[str, object] = {}
    if args.counts:
        overrides["counts"] = tuple(int(c) for c in args.counts.split(","))
    if args.idle_s:
        overrides["idle_s"] = args.idle_s
    if args.create_timeout_s:
        overrides["create_timeout_s"] = args.create_timeout_s
    if args.produce_mib:
        overrides["produce_bytes"] = int(args.produce_mib * MIB)
    sizes = Sizes(**{**sizes.__dict__, **overrides})
    print(f"# tidelog partitions benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"grpcio {grpc.__version__}; 3 nodes and this client share the cores")
    where = Path(tempfile.gettempdir())
    print(f"# data under {where} ({filesystem_of(where)})")
    ok = True
    for count in sizes.counts:
        if args.topic_partitions:
            ok &= bench_topics(count, args.topic_partitions, sizes)
        else:
            ok &= bench_count(count, sizes, with_produce=not args.no_produce,
                              with_idle=not args.no_idle, warm=args.warm)
    if args.quick:
        print("# --quick: sizes too small for the goals to mean anything")
    return 0 if ok else 1


def filesystem_of(path: Path) -> str:
    """The type of the filesystem `path` is on (the longest mount point above it)."""
    best, kind = "", "unknown"
    resolved = str(path.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and (resolved == fields[1] or resolved.startswith(
                fields[1].rstrip("/") + "/")) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def idle_cpu(cluster: LocalCluster, seconds: float) -> dict[int, float]:
    """Each node's CPU over `seconds` with no traffic, as a fraction of one core."""
    pids = {n: cluster.pid_of(n) for n in cluster.node_ids}
    before = {n: cluster_bench.cpu_seconds(pid) for n, pid in pids.items() if pid is not None}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {n: (cluster_bench.cpu_seconds(pids[n] or 0) - cpu) / elapsed
            for n, cpu in before.items()}


def nodes_cpu_s(cluster: LocalCluster) -> float:
    """The CPU seconds the running nodes have taken so far, together."""
    pids = (cluster.pid_of(n) for n in cluster.node_ids)
    return sum(cluster_bench.cpu_seconds(pid) for pid in pids if pid is not None)


def batches_per_request(partitions: int) -> int:
    """How many batches each request of the produce carries over `partitions` partitions
    spread over 3 leaders: one for each of up to 16 of its leader's partitions, 256 KiB in
    all (so each batch is ``REQUEST_BYTES // batches_per_request``)."""
    return min(PARTITIONS_PER_REQUEST, max(1, partitions // 3))


def nodes_cpu_line(count: int, base_cpu: float, many_cpu: float) -> str:
    """What a MiB of the produce cost the nodes over the 6 and over `count` partitions (CPU
    seconds per MiB), and, by a straight line through the two, what a batch costs them beyond
    its bytes: over many partitions the same bytes come in more, smaller batches, and that
    fixed cost is what the ratio pays for."""
    line = (f"nodes' CPU per MiB produced: {BASE_PARTITIONS} partitions "
            f"{base_cpu * 1000:.1f} ms, {count} partitions {many_cpu * 1000:.1f} ms"
            + (f" ({many_cpu / base_cpu:.2f}x)" if base_cpu > 0 else ""))
    base_bytes, many_bytes = (REQUEST_BYTES // batches_per_request(n)
                              for n in (BASE_PARTITIONS, count))
    base_batches, many_batches = MIB / base_bytes, MIB / many_bytes
    if many_batches > base_batches:
        fixed = (many_cpu - base_cpu) / (many_batches - base_batches)
        line += (f"; batches of {base_bytes // 1024} and {many_bytes // 1024} KiB: a batch "
                 f"costs the nodes "
                 f"{fixed * 1000:.2f} ms beyond its bytes (its three replicas together)")
    return line


def raft_counts(cluster: LocalCluster) -> tuple[float, float]:
    """(Raft heartbeat items sent, batches proposed), summed over the nodes' metrics."""
    totals = {"tidelog_raft_heartbeat_items_total": 0.0, "tidelog_raft_proposals_total": 0.0}
    for node in cluster.node_ids:
        address = cluster.metrics_address(node)
        if address is None:
            continue
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
            for line in answer.read().decode().splitlines():
                name, _, value = line.partition(" ")
                if name in totals:
                    totals[name] += float(value)
    return totals["tidelog_raft_heartbeat_items_total"], totals["tidelog_raft_proposals_total"]


def leaders(cluster: LocalCluster, topic: str, count: int) -> list[tuple[int, int] | None]:
    """(leader, preferred replica) of each partition if every node names the same leader,
    else None for that partition."""
    views: list[dict[int, tuple[int, int]]] = []
    for node in cluster.node_ids:
        with grpc.insecure_channel(cluster.address_of(node)) as channel:
            try:
                meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(
                    pb.MetadataRequest(topics=[topic]), timeout=10)
            except grpc.RpcError:
                return [None] * count
        view = {}
        for topic_meta in meta.topics:
            for p in topic_meta.partitions:
                if p.error_code == 0 and p.leader_id >= 0:
                    view[p.partition] = (p.leader_id, p.replicas[0])
        views.append(view)
    return [views[0].get(p) if all(v.get(p) == views[0].get(p) for v in views) else None
            for p in range(count)]


def create_and_lead(cluster: LocalCluster, topic: str, count: int,
                    timeout_s: float) -> tuple[float | None, list[tuple[int, int] | None]]:
    """Seconds from CreateTopics until every node names a leader for every partition (None
    when that took longer than `timeout_s`), and the leaders at that point."""
    config = ClientConfig(bootstrap=tuple(cluster.bootstrap.split(",")))
    started = time.monotonic()
    with Client.from_config(config) as client:
        try:
            client.create_topic(topic, partitions=count, replication_factor=3,
                                timeout_ms=int(timeout_s * 1000))
        except TidelogError as exc:
            print(f"  create_topic: {type(exc).__name__}: {exc}")
    while True:
        led = leaders(cluster, topic, count)
        if None not in led:
            return time.monotonic() - started, led
        if time.monotonic() - started > timeout_s:
            return None, led
        time.sleep(0.1)


def produce_mib_s(cluster: LocalCluster, topic: str, led: list[tuple[int, int] | None],
            total_bytes: int) -> tuple[float, Counter[str]]:
    """MiB/s acknowledged of an acks=all produce of `total_bytes` spread evenly over the
    partitions of `topic` (see the module docstring for the request shape). A partition whose
    leader moved meanwhile answers NOT_LEADER: its bytes are not counted, and it is counted
    in the errors."""
    by_node: dict[int, list[int]] = {}
    for p, lead in enumerate(led):
        if lead is not None:
            by_node.setdefault(lead[0], []).append(p)
    errors: Counter[str] = Counter()
    batches: dict[int, bytes] = {}
    acked = [0]
    requests_per_node = max(1, total_bytes // REQUEST_BYTES // len(by_node))

    def request(partitions: list[int]) -> pb.ProduceRequest:
        records = max(1, REQUEST_BYTES // RECORD_BYTES // len(partitions))
        batch = batches.get(records)
        if batch is None:
            now = wall_clock_ms()
            batch = batches[records] = build_batch(
                [RecordInput(b"x" * RECORD_BYTES, None, now + i) for i in range(records)])
        return pb.ProduceRequest(acks=-1, timeout_ms=30_000, topics=[pb.TopicProduceData(
            name=topic, partitions=[pb.PartitionProduceData(partition=p, records=batch)
                                    for p in partitions])])

    async def run() -> float:
        for n in cluster.node_ids:
            by_node.setdefault(n, [])
        channels = {n: grpc.aio.insecure_channel(cluster.address_of(n), options=[
            ("grpc.max_send_message_length", 64 * MIB)]) for n in by_node}

        async def node_worker(node: int, turns: list[int]) -> None:
            stub = tidelog_pb2_grpc.TidelogStub(channels[node])
            while turns and by_node[node]:
                parts = by_node[node]
                i = turns.pop()
                per = min(PARTITIONS_PER_REQUEST, len(parts))
                chosen = [parts[(i * per + k) % len(parts)] for k in range(per)]
                try:
                    response = await stub.Produce(request(chosen), timeout=60)
                except grpc.aio.AioRpcError as exc:
                    errors[exc.code().name] += 1
                    continue
                for t in response.topics:
                    for r in t.partitions:
                        if r.error_code:
                            errors[f"error {r.error_code}"] += 1
                            moved = r.current_leader.leader_id
                            if moved in by_node and moved != node and r.partition in parts:
                                # The leader moved: its next requests go where it went.
                                parts.remove(r.partition)
                                by_node[moved].append(r.partition)
                        else:
                            acked[0] += REQUEST_BYTES // per

        started = time.monotonic()
        try:
            await asyncio.gather(*(
                node_worker(n, turns) for n in by_node
                for turns in [list(range(requests_per_node))]
                for _ in range(INFLIGHT_PER_NODE)))
        finally:
            for channel in channels.values():
                await channel.close()
        return time.monotonic() - started

    elapsed = asyncio.run(run())
    return acked[0] / MIB / elapsed, errors


def disk_floor_mib_s(partitions: int, total_bytes: int, directory: Path) -> float:
    """MiB/s of the produce's shape (`produce_mib_s`) with everything but the disk taken out:
    the partitions spread over 3 "nodes", 4 requests in flight each, a request a batch for each
    of up to 16 of its node's partitions; each batch appended to a file of that partition in
    each of 3 replica directories and fdatasync'd there (8 threads a node, as a node's
    flushers), the request done when every copy is synced. Over many partitions each request
    costs more fsyncs of smaller writes, which is what the disk charges for, whoever writes."""
    flushers = ThreadPoolExecutor(8 * 3)
    files: dict[tuple[int, int], int] = {}
    for replica in range(3):
        (directory / str(replica)).mkdir(parents=True, exist_ok=True)
    per = batches_per_request(partitions)
    batch = b"x" * (REQUEST_BYTES // per)
    requests_per_node = max(1, total_bytes // REQUEST_BYTES // 3)

    def store(replica: int, partition: int) -> None:
        fd = files.get((replica, partition))
        if fd is None:
            fd = files[(replica, partition)] = os.open(
                directory / str(replica) / f"{partition}.log",
                os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, batch)
        os.fdatasync(fd)

    async def run() -> float:
        loop = asyncio.get_running_loop()

        async def node_worker(node: int, turns: list[int]) -> None:
            parts = list(range(node, partitions, 3))
            while turns:
                i = turns.pop()
                chosen = [parts[(i * per + k) % len(parts)] for k in range(per)]
                await asyncio.gather(*(loop.run_in_executor(flushers, store, r, p)
                                       for p in chosen for r in range(3)))

        started = time.monotonic()
        await asyncio.gather(*(node_worker(n, turns) for n in range(3)
                               for turns in [list(range(requests_per_node))]
                               for _ in range(INFLIGHT_PER_NODE)))
        return time.monotonic() - started

    try:
        elapsed = asyncio.run(run())
    finally:
        flushers.shutdown()
        for fd in files.values():
            os.close(fd)
    return requests_per_node * 3 * per * len(batch) / MIB / elapsed


def warm_up(cluster: LocalCluster, topic: str, led: list[tuple[int, int] | None]) -> None:
    """A batch or more to every partition of `topic`: requests enough for each node to cover
    all of them (it leads fewer)."""
    produce_mib_s(cluster, topic, led,
                  REQUEST_BYTES * len(cluster.node_ids) * -(-len(led) // PARTITIONS_PER_REQUEST))


def bench_topics(count: int, per_topic: int, sizes: Sizes) -> bool:
    """`count` partitions as topics of `per_topic`, each led before the next is created; then
    the idle CPU (the steady state of many partitions, when one large CreateTopics does not
    finish)."""
    print(f"\n## {count} partitions as topics of {per_topic}, RF 3 (load average before: "
          f"{load()})")
    with LocalCluster(3, ready_timeout=120.0) as cluster:
        started = time.monotonic()
        preferred = 0
        for i in range(count // per_topic):
            seconds, led = create_and_lead(cluster, f"many-{i}", per_topic,
                                           sizes.create_timeout_s)
            if seconds is None:
                print(f"topic many-{i}: not led within {sizes.create_timeout_s:.0f} s")
                return False
            preferred += sum(1 for x in led if x is not None and x[0] == x[1])
        print(f"create + every partition led, topic after topic: "
              f"{time.monotonic() - started:.1f} s ({preferred}/{count} on their preferred "
              f"replica)")
        time.sleep(sizes.settle_s)
        cpu = idle_cpu(cluster, sizes.idle_s)
        print(f"idle CPU over {sizes.idle_s:.0f} s, fraction of a core per node: "
              + " ".join(f"node {n}: {c:.3f}" for n, c in sorted(cpu.items()))
              + f"  (max {max(cpu.values()):.3f}; load average after: {load()})")
    return True


def bench_count(count: int, sizes: Sizes, with_produce: bool, with_idle: bool = True,
                warm: bool = False) -> bool:
    print(f"\n## {count} partitions, RF 3 (load average before: {load()})")
    with LocalCluster(3, ready_timeout=120.0) as cluster:
        seconds, led = create_and_lead(cluster, "many", count, sizes.create_timeout_s)
        led_count = sum(1 for x in led if x is not None)
        preferred = sum(1 for x in led if x is not None and x[0] == x[1])
        goals = count >= GOAL_PARTITIONS
        if seconds is None:
            print(f"create + every partition led: NOT within {sizes.create_timeout_s:.0f} s "
                  f"({led_count}/{count} led)"
                  + (f" (goal: within {GOAL_LED_S:.0f} s: missed)" if goals else ""))
        else:
            met = "met" if seconds <= GOAL_LED_S else "missed"
            print(f"create + every partition led: {seconds:.2f} s "
                  f"({preferred}/{count} on their preferred replica)"
                  + (f" (goal <= {GOAL_LED_S:.0f} s: {met})" if goals else ""))
        if with_idle:
            time.sleep(sizes.settle_s)
            cpu = idle_cpu(cluster, sizes.idle_s)
            worst = max(cpu.values())
            print(f"idle CPU over {sizes.idle_s:.0f} s, fraction of a core per node: "
                  + " ".join(f"node {n}: {c:.3f}" for n, c in sorted(cpu.items()))
                  + f"  (max {worst:.3f}"
                  + (f", goal <= {GOAL_IDLE_CORE}: {'met' if worst <= GOAL_IDLE_CORE else 'missed'}"
                     if goals else "")
                  + f"; load average after: {load()})")
        if not with_produce or seconds is None:
            return True
        _, base_led = create_and_lead(cluster, "six", BASE_PARTITIONS, sizes.create_timeout_s)
        if None in base_led:
            print("the 6-partition topic was not led: no produce figures")
            return False
        if warm:
            warm_up(cluster, "six", base_led)
        before = nodes_cpu_s(cluster)
        base, base_errors = produce_mib_s(cluster, "six", base_led, sizes.produce_bytes)
        base_cpu = (nodes_cpu_s(cluster) - before) / (sizes.produce_bytes / MIB)
        if warm:
            # After the 6-partition figure: the warm-up's own aftermath (1,000 logs changed at
            # once) must not fall on the baseline.
            warm_up(cluster, "many", leaders(cluster, "many", count))
            time.sleep(sizes.settle_s)
        # Where the leaders are now (an election on a loaded machine may have moved some).
        now_led = leaders(cluster, "many", count)
        items_before, proposals_before = raft_counts(cluster)
        before = nodes_cpu_s(cluster)
        many, many_errors = produce_mib_s(cluster, "many", now_led, sizes.produce_bytes)
        many_cpu = (nodes_cpu_s(cluster) - before) / (sizes.produce_bytes / MIB)
        items_after, proposals_after = raft_counts(cluster)
        items, proposals = items_after - items_before, proposals_after - proposals_before
        print(f"produce {sizes.produce_bytes / MIB:.0f} MiB acks=all"
              f"{' (after a warm-up batch to every partition)' if warm else ''}: {BASE_PARTITIONS} "
              f"partitions {base:.1f} MiB/s, {count} partitions {many:.1f} MiB/s; "
              f"ratio {many / base:.2f}" + (" (goal >= 0.6)" if count >= 1000 else "")
              + f"; load average after: {load()}")
        print(nodes_cpu_line(count, base_cpu, many_cpu))
        with tempfile.TemporaryDirectory(dir=cluster.data_dir) as scratch:
            disk_base = disk_floor_mib_s(BASE_PARTITIONS, sizes.produce_bytes,
                                         Path(scratch, "six"))
            disk_many = disk_floor_mib_s(count, sizes.produce_bytes, Path(scratch, "many"))
        print(f"the disk's floor of the same shape (3 copies of each batch fdatasync'd, no "
              f"gRPC, no Raft): {BASE_PARTITIONS} partitions {disk_base:.1f} MiB/s, {count} "
              f"partitions {disk_many:.1f} MiB/s; ratio {disk_many / disk_base:.2f}; Tidelog's "
              f"ratio is {many / base / (disk_many / disk_base):.2f} of the disk's")
        print(f"heartbeat items per proposal over the {count}-partition produce: "
              f"{items / max(proposals, 1):.2f} ({items:.0f} heartbeats and answers, "
              f"{proposals:.0f} batches proposed)"
              + (" (goal <= 3)" if count >= 1000 else ""))
        if base_errors or many_errors:
            print(f"produce errors: {dict(base_errors)} / {dict(many_errors)}")
        return True


if __name__ == "__main__":
    sys.exit(main())
