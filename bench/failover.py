"""Failover as a user feels it (issue 18): SIGKILL of a partition's leader to the completion of
the client library's next operation on that partition, beside the cluster's own failover time
measured after the same kill.

* produce: ``producer.send(topic, value, partition=p).result()`` (acks=all, idempotent),
  issued right after the kill.
* poll: ``consumer.poll()`` of a consumer positioned on a record that was committed before the
  kill but not yet fetched; the sample ends when a poll returns it (the new leader must have
  committed an entry of its own term first, as Raft requires before its high watermark moves).
* list_offsets: ``client.list_offsets({tp: OffsetSpec.latest()})``.

Cluster side, per kill: the time from the kill to the ``elected leader in term T`` line (T
newer than the killed leader's epoch) that the new leader writes to its log, read afterwards
from the log files (the line carries its wall-clock time to the millisecond), so measuring it
costs the cluster and the client nothing while they work.

Kill ``i`` measures operation ``i % 3`` on partition ``(i // 3) % 3``: the operations take
turns, so load from other work on the machine falls on all of them alike, and every node dies
in turn (the controller too). Before each kill the cluster settles (bench/cluster.py's
``settle``: every node agrees on the preferred leader, an acks=all produce succeeds, every
replica has the same log end) and the operation runs once, so the client knows the current
leader and has a connection to it; after it, the node restarts.

Goals: per operation p50 <= 0.6 s and p99 <= 1.2 s, and client p50 <= 1.3x the cluster-side
p50 of the same run. p99 of 20 samples is interpolated between the two largest.

Then a stalled node: SIGSTOP of the controller while it leads a partition (its sockets stay
open, nothing fails fast), and from the pause to the completion of
``client.list_offsets(timeout_ms=60000)`` on that partition and of the first send of a new
idempotent producer (its InitProducerId goes to the stalled controller), run together, by a
client with request_timeout_ms=60000. Goal: both within 5 s.

Run: ``.venv/bin/python bench/failover.py [--kills N] [--pauses N] [--quick]`` (N kills per
operation, 20 by default; 5 pauses). Figures are printed, never asserted: exit 1 only when
something went wrong.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402

from tidelog import Client, OffsetSpec, TopicPartition  # noqa: E402
from tidelog.consumer import Consumer  # noqa: E402
from tidelog.producer import Producer  # noqa: E402
from tidelog.testing import LocalCluster, load_script  # noqa: E402

cluster_bench = load_script(Path(__file__).with_name("cluster.py"))

TOPIC = "bench-failover"
OPERATIONS = ("produce", "poll", "list_offsets")
P50_GOAL_S = 0.6
P99_GOAL_S = 1.2
RATIO_GOAL = 1.3
PAUSE_GOAL_S = 5.0
#: How long the new leader's election line may take to reach its log file after the operation.
_LOG_WAIT_S = 10.0
_ELECTED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) node-(\d+) INFO (\S+): elected leader in term (\d+)",
    re.M,
)


@dataclass
class Samples:
    client: list[float] = field(default_factory=list)
    cluster: list[float] = field(default_factory=list)


class Operation:
    """One kind of client operation on one partition: ``warm`` runs it before the kill (the
    client then knows the leader), ``after_kill`` runs it until it completes."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self.producer: Producer = client.producer(linger_ms=0)
        self.consumer: Consumer = client.consumer()
        self._expected: dict[int, int] = {}

    def warm(self, cluster: LocalCluster, partition: int) -> None:
        tp = TopicPartition(TOPIC, partition)
        self.producer.send(TOPIC, b"warm", partition=partition).result()
        self.client.list_offsets({tp: OffsetSpec.latest()})
        if self.name == "poll":
            self.consumer.assign([tp])
            # Committed before the kill, not yet fetched: the first poll after it must find it.
            self._expected[partition] = self.producer.send(
                TOPIC, b"pending", partition=partition).result().offset
            self.consumer.seek(tp, self._expected[partition])

    def after_kill(self, partition: int) -> None:
        tp = TopicPartition(TOPIC, partition)
        if self.name == "produce":
            self.producer.send(TOPIC, b"after", partition=partition).result()
        elif self.name == "list_offsets":
            self.client.list_offsets({tp: OffsetSpec.latest()}, timeout_ms=30_000)
        else:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                records = self.consumer.poll(timeout_ms=30_000)
                if any(r.offset == self._expected[partition] for r in records):
                    return
            raise RuntimeError(f"poll did not return offset {self._expected[partition]}")

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


def elected_at(cluster: LocalCluster, partition: int, old_epoch: int, dead: int) -> float:
    """Wall-clock time of the first election of the partition newer than `old_epoch` that a
    live node logged."""
    deadline = time.monotonic() + _LOG_WAIT_S
    name = f"{TOPIC}-{partition}"
    while True:
        found = [
            datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            for node in cluster.node_ids if node != dead
            for m in _ELECTED.finditer(cluster.logs(node))
            if m.group(3) == name and int(m.group(4)) > old_epoch
        ]
        if found:
            return min(found)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no node logged an election of {name} after epoch {old_epoch}")
        time.sleep(0.05)


def run(cluster: LocalCluster, kills: int) -> dict[str, Samples]:
    cluster_bench.create_topic(cluster, TOPIC, len(cluster.node_ids))
    cluster_bench.wait_leaders(cluster, TOPIC, len(cluster.node_ids))
    value = b"x" * 100
    clients = {name: Client(cluster.bootstrap) for name in OPERATIONS}
    operations = {name: Operation(clients[name], name) for name in OPERATIONS}
    samples = {name: Samples() for name in OPERATIONS}
    try:
        for kill in range(kills * len(OPERATIONS)):
            name = OPERATIONS[kill % len(OPERATIONS)]
            partition = (kill // len(OPERATIONS)) % len(cluster.node_ids)
            operation = operations[name]
            leader, epoch = cluster_bench.settle(cluster, TOPIC, partition, value)
            operation.warm(cluster, partition)
            killed_wall = time.time()
            started = time.perf_counter()
            cluster.kill(leader)
            operation.after_kill(partition)
            took = time.perf_counter() - started
            elected = elected_at(cluster, partition, epoch, leader) - killed_wall
            samples[name].client.append(took)
            samples[name].cluster.append(elected)
            print(f"kill {kill + 1:>3}: {name:<12} partition {partition}, node {leader}: client "
                  f"{took * 1000:6.0f} ms, elected after {elected * 1000:6.0f} ms", flush=True)
            cluster.restart(leader)
    finally:
        for operation in operations.values():
            operation.close()
        for client in clients.values():
            client.close()
    return samples


def run_pauses(cluster: LocalCluster, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"list_offsets": [], "new idempotent producer": []}
    with Client(cluster.bootstrap, request_timeout_ms=60_000) as client, \
            ThreadPoolExecutor(2) as pool:
        for round_ in range(rounds):
            controller = client.admin.describe_cluster().controller_id
            partition = next(
                p for p in range(len(cluster.node_ids))
                if cluster_bench.partition_view(cluster, controller, TOPIC, p).replicas[0]
                == controller
            )
            took = one_pause(cluster, client, pool, controller, partition)
            for name, seconds in took.items():
                times[name].append(seconds)
            print(f"pause {round_ + 1}: controller {controller}, partition {partition}: "
                  + ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in took.items()),
                  flush=True)
    return times


def one_pause(cluster: LocalCluster, client: Client, pool: ThreadPoolExecutor, controller: int,
              partition: int) -> dict[str, float]:
    """SIGSTOP of the controller, which leads `partition` once settled; the seconds from the
    pause to each call's completion."""
    value = b"x" * 100
    cluster_bench.settle(cluster, TOPIC, partition, value)
    tp = TopicPartition(TOPIC, partition)
    client.list_offsets({tp: OffsetSpec.latest()})  # the client knows the leader
    started = time.perf_counter()
    cluster.pause(controller)

    def lookup() -> float:
        client.list_offsets({tp: OffsetSpec.latest()}, timeout_ms=60_000)
        return time.perf_counter() - started

    def produce() -> float:
        with client.producer(idempotent=True) as producer:
            producer.send(TOPIC, value, partition=partition).result()
            return time.perf_counter() - started

    try:
        jobs = {"list_offsets": pool.submit(lookup),
                "new idempotent producer": pool.submit(produce)}
        return {name: job.result() for name, job in jobs.items()}
    finally:
        cluster.resume(controller)


def report_pauses(times: dict[str, list[float]]) -> None:
    print(f"\n## SIGSTOP of the controller leading the partition -> call complete "
          f"(goal <= {PAUSE_GOAL_S:g} s)")
    for name, samples in times.items():
        print(f"{name}: median {statistics.median(samples) * 1000:.0f} ms, max "
              f"{max(samples) * 1000:.0f} ms over {len(samples)} pauses "
              f"{'OK' if max(samples) <= PAUSE_GOAL_S else 'MISSED'}")


def report(samples: dict[str, Samples]) -> bool:
    pct = cluster_bench.percentile
    all_cluster = [s for name in OPERATIONS for s in samples[name].cluster]
    print(f"\n## SIGKILL of the leader -> operation complete, {len(samples[OPERATIONS[0]].client)}"
          f" kills per operation (goal p50 <= {P50_GOAL_S * 1000:.0f} ms, p99 <= "
          f"{P99_GOAL_S * 1000:.0f} ms, client p50 <= {RATIO_GOAL}x cluster p50)")
    print(f"cluster (kill -> new leader elected, all {len(all_cluster)} kills): p50 "
          f"{pct(all_cluster, 50) * 1000:.0f} ms, p99 {pct(all_cluster, 99) * 1000:.0f} ms, "
          f"max {max(all_cluster) * 1000:.0f} ms")
    for name in OPERATIONS:
        s = samples[name]
        p50, p99 = pct(s.client, 50), pct(s.client, 99)
        cluster_p50 = pct(s.cluster, 50)
        ratio = p50 / cluster_p50
        ok = p50 <= P50_GOAL_S and p99 <= P99_GOAL_S and ratio <= RATIO_GOAL
        print(f"{name}: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max "
              f"{max(s.client) * 1000:.0f} ms; cluster p50 {cluster_p50 * 1000:.0f} ms after the "
              f"same kills; ratio client/cluster p50 {ratio:.2f} "
              f"{'OK' if ok else 'MISSED'}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="kills per operation")
    parser.add_argument("--pauses", type=int, default=5, help="controller pauses")
    parser.add_argument("--quick", action="store_true", help="2 kills per operation (smoke)")
    args = parser.parse_args(argv)
    kills = 2 if args.quick else args.kills
    pauses = 1 if args.quick else args.pauses
    print(f"# tidelog failover benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"grpcio {grpc.__version__}; 3 nodes and this client share the cores")
    print("# load average before the run: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    started = time.monotonic()
    with LocalCluster(3) as cluster:
        samples = run(cluster, kills)
        paused = run_pauses(cluster, pauses) if pauses else {}
    ok = report(samples)
    if paused:
        report_pauses(paused)
    print("# load average after the run: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
          + f"; {time.monotonic() - started:.0f} s")
    if args.quick:
        print("# --quick: too few kills for the figures to mean anything")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
