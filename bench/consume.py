"""The consume path on a real 3-node cluster, each figure beside a baseline from the same run.

* poll: the client library's ``Consumer.poll`` reading a topic of 6 partitions (RF 3) from the
  beginning to its end, each record's offset and value read as an application reads them,
  records/s, against raw Fetch of the same log: the same Fetch requests (one per leader,
  Kafka's consumer defaults: 50 MiB per request, 1 MiB per partition) sent by this script with
  grpc.aio, the batches' headers read to advance, no record decoded.
  Goal: poll / raw >= 0.8. Printed beside it: the client CPU a record that poll takes beyond
  raw Fetch, and the floor of that in Python (`object_floor`).
* spark: ``spark.read.format("tidelog")`` of the same topic on local[2] into Spark's noop sink,
  rows/s against the consumer's poll rate (reported; ``--spark``, a session takes ~10 s).
* end-to-end latency, the OpenMessaging Benchmark's way: the client's producer sends at a fixed
  rate of half the maximum it reached in this run, while a consumer tails the topic in a
  process of its own (as OMB's consumer workers are); each record carries its send time, and
  the latency is from ``send()`` to the ``poll()`` that returns it (CLOCK_MONOTONIC, which
  both processes read on the same machine). Baseline: bench/cluster.py's replication floor
  (three processes relaying each request to the two others over gRPC, each appending it to a
  file and fdatasyncing it before acknowledging) at the same rate, in requests of the records
  the producer's requests held on average (as the nodes counted them): its round trip, what an
  acks=all write to three disks takes at the least. Goal: p99 <= 3x the floor's. The load
  average is printed with the figures. ``--fractions 0.5,0.25,0.125`` runs it again at each
  of these fractions of the maximum (measured once): how the ratio follows the machine's load.

Run: ``.venv/bin/python bench/consume.py [--quick] [--spark | --latency-only]
[--fractions F,...]``. The figures
are printed, never asserted: exit 1 only when something went wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from itertools import repeat
from operator import add
from pathlib import Path

# As a script this directory is first on sys.path: bench/cluster.py is imported from it (and
# takes the directory off again, so that bench/storage.py shadows nothing).
import cluster as cluster_bench  # type: ignore[import-not-found]
import grpc

from tidelog import Client, TopicPartition
from tidelog.clock import wall_clock_ms
from tidelog.records import RecordInput, build_batch, iter_batches
from tidelog.testing import LocalCluster
from tidelog.types import ConsumerRecord, IsolationLevel
from tidelog.v1 import tidelog_pb2_grpc
from tidelog.wire import FetchPosition, fetch_request

TOPIC = "bench-consume"
PARTITIONS = 6
RECORD_BYTES = 1024
RECORDS_PER_BATCH = 256
MIB = 1024 * 1024
#: The producer's linger in the latency run (and so the records per relay request).
LINGER_MS = 5
_STAMP = struct.Struct(">d")  # the send time at the head of each latency record's value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--records", type=int, default=204_800)
    parser.add_argument("--rounds", type=int, default=3, help="alternating poll/raw rounds")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency run length")
    parser.add_argument("--spark", action="store_true", help="also the Spark batch read")
    parser.add_argument("--latency-only", action="store_true",
                        help="only the end-to-end latency (no poll rounds)")
    parser.add_argument("--fractions", type=fractions_of, default=(0.5,),
                        help="the end-to-end latency at each of these fractions of the "
                             "producer's maximum, comma-separated (the goal's is 0.5)")
    parser.add_argument("--tail", nargs=4, metavar=("BOOTSTRAP", "RECORDS", "SECONDS", "OUT"),
                        help=argparse.SUPPRESS)  # the latency run's consumer process
    args = parser.parse_args()
    if args.tail:
        bootstrap, expected, seconds, out = args.tail
        tail(bootstrap, int(expected), float(seconds), Path(out))
        return 0
    if args.quick:
        args.records, args.rounds, args.seconds = 2 * RECORDS_PER_BATCH * PARTITIONS, 1, 2.0
    print(f"# tidelog consume benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"grpcio {grpc.__version__}; 3 nodes and this client share the cores")
    print("# load average before the run: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with LocalCluster(3) as cluster, Client(cluster.bootstrap) as client:
        records = load(cluster, RECORDS_PER_BATCH * PARTITIONS if args.latency_only
                       else args.records)
        if not args.latency_only:
            poll_rate = bench_poll(cluster, client, records, args.rounds)
            if args.spark:
                bench_spark(cluster.bootstrap, poll_rate, records)
        ok = bench_latency(cluster, client, args.seconds, args.fractions)
    if args.quick:
        print("# --quick: sizes too small for the goals to mean anything")
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------
# The log read back


def load(cluster: LocalCluster, records: int) -> int:
    """`records` (rounded to whole batches) of random 1 KiB values over the partitions, as
    acks=all raw Produce requests of pre-built batches."""
    cluster_bench.create_topic(cluster, TOPIC, PARTITIONS)
    leaders = cluster_bench.wait_leaders(cluster, TOPIC, PARTITIONS)
    value = random.randbytes(RECORD_BYTES)
    batches = max(PARTITIONS, records // RECORDS_PER_BATCH)
    started = time.perf_counter()
    for n in range(batches):
        partition = n % PARTITIONS
        batch = build_batch([RecordInput(value, None, wall_clock_ms())] * RECORDS_PER_BATCH)
        for _attempt in range(20):  # a loaded machine moves leaders now and then: follow them
            stub = tidelog_pb2_grpc.TidelogStub(
                cluster_bench.channel_to(cluster, leaders[partition]))
            result = cluster_bench.produce_one(stub, TOPIC, partition, batch)
            if not result.error_code:
                break
            time.sleep(0.2)
            leaders = cluster_bench.wait_leaders(cluster, TOPIC, PARTITIONS)
        else:
            raise RuntimeError(f"loading: produce to {TOPIC}-{partition} failed: {result}")
    total = batches * RECORDS_PER_BATCH
    print(f"\n## consume: {total} records of {RECORD_BYTES} B in {PARTITIONS} partitions, RF 3 "
          f"(loaded in {time.perf_counter() - started:.1f} s)")
    return total


def poll_all(client: Client, records: int) -> float:
    """records/s of one consumer assigned every partition, from the beginning to the end,
    reading each record's offset and value as an application does (records decoded lazily,
    on first touch, would otherwise be counted as read)."""
    consumer = client.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    seen = payload = 0
    started = time.perf_counter()
    while seen < records:
        for record in consumer.poll(timeout_ms=1000):
            seen += 1
            payload += len(record.value or b"") + (record.offset >= 0)
    elapsed = time.perf_counter() - started
    consumer.close()
    if payload < seen * RECORD_BYTES:
        raise RuntimeError(f"poll returned {payload} bytes of values for {seen} records")
    return records / elapsed


class LeadersMoved(Exception):
    """A partition's leader moved during a raw read; the read starts again."""


def raw_fetch_all(cluster: LocalCluster, records: int) -> float:
    """records/s of Fetch requests shaped as the consumer's (one per leader, its defaults),
    every partition from offset 0 to the end, the batches' headers read to advance."""
    leaders = cluster_bench.wait_leaders(cluster, TOPIC, PARTITIONS)
    by_node: dict[int, list[int]] = {}
    for partition, node in enumerate(leaders):
        by_node.setdefault(node, []).append(partition)

    async def node_reader(node: int, partitions: list[int]) -> int:
        seen = 0
        async with cluster.security.aio_channel(cluster.address_of(node),
                                                cluster_bench.CHANNEL_OPTIONS) as channel:
            stub = tidelog_pb2_grpc.TidelogStub(channel)
            positions = {TopicPartition(TOPIC, p): 0 for p in partitions}
            ends = {tp: -1 for tp in positions}
            while any(positions[tp] != ends[tp] for tp in positions):
                request = fetch_request(
                    {tp: FetchPosition(off, -1) for tp, off in positions.items()
                     if off != ends[tp]},
                    isolation=IsolationLevel.READ_UNCOMMITTED, max_wait_ms=500, min_bytes=1,
                    max_bytes=50 * MIB, partition_max_bytes=MIB,
                )
                try:
                    response = await stub.Fetch(request, timeout=30)
                except grpc.aio.AioRpcError:  # a connection the loaded machine let time out
                    await asyncio.sleep(0.1)
                    continue
                for topic in response.topics:
                    for part in topic.partitions:
                        if part.error_code:
                            raise LeadersMoved(f"{TOPIC}-{part.partition}: {part.error_code}")
                        tp = TopicPartition(TOPIC, part.partition)
                        ends[tp] = part.high_watermark
                        for _, header in iter_batches(part.records):
                            if not header.is_control:  # a new leader's epoch marker
                                seen += header.records_count
                            positions[tp] = header.next_offset
        return seen

    async def run() -> int:
        counts = await asyncio.gather(*(node_reader(n, ps) for n, ps in by_node.items()))
        return sum(counts)

    started = time.perf_counter()
    seen = asyncio.run(run())
    elapsed = time.perf_counter() - started
    if seen != records:
        raise RuntimeError(f"raw fetch read {seen} records, expected {records}")
    return records / elapsed


class CpuPerRecord:
    """Microseconds of CPU per record spent by this process (every thread: the consumer's
    loop and gRPC's threads too) and by the nodes, over one read: what decides the ratio when
    the cores are busy, and much steadier than records/s on a shared machine."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.pids = [pid for n in cluster.node_ids if (pid := cluster.pid_of(n)) is not None]

    def __enter__(self) -> CpuPerRecord:
        self.client_s = time.process_time()
        self.nodes_s = sum(cluster_bench.cpu_seconds(pid) for pid in self.pids)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client_s = time.process_time() - self.client_s
        self.nodes_s = sum(cluster_bench.cpu_seconds(pid) for pid in self.pids) - self.nodes_s

    def text(self, records: int) -> str:
        return (f"client {self.client_s / records * 1e6:4.1f} + nodes "
                f"{self.nodes_s / records * 1e6:4.1f} us CPU/record")


def object_floor(records: int) -> float:
    """Microseconds of CPU a record of what any Python consumer adds to the raw read: a
    record object holding its value (copied out of the fetched bytes) and its offset, built
    the cheapest way Python has (tuple.__new__ mapped over zip, in C, nothing checked), and
    the application's read of both, as `poll_all` reads them. The floor under the consumer's
    cost beyond raw Fetch, measured in this run."""
    data = random.randbytes(RECORD_BYTES * RECORDS_PER_BATCH)
    starts = range(0, len(data), RECORD_BYTES)
    made = payload = 0
    started = time.process_time()
    while made < records:
        values = map(data.__getitem__, map(slice, starts, map(add, starts, repeat(RECORD_BYTES))))
        for record in list(map(tuple.__new__, repeat(ConsumerRecord), zip(
            repeat(TOPIC), repeat(0), range(made, made + len(starts)), repeat(made), repeat(None),
            values, repeat(()), repeat(0),
        ))):
            payload += len(record.value or b"") + (record.offset >= 0)
        made += len(starts)
    return (time.process_time() - started) / made * 1e6


def bench_poll(cluster: LocalCluster, client: Client, records: int, rounds: int) -> float:
    polls, raws = [], []
    raw_client, poll_client = [], []
    for round_ in range(rounds):
        for attempt in range(3):
            try:
                with CpuPerRecord(cluster) as raw_cpu:
                    raws.append(raw_fetch_all(cluster, records))
                break
            except LeadersMoved as exc:
                print(f"round {round_}: raw read again, a leader moved ({exc})")
                if attempt == 2:
                    raise
        with CpuPerRecord(cluster) as poll_cpu:
            polls.append(poll_all(client, records))
        raw_client.append(raw_cpu.client_s / records * 1e6)
        poll_client.append(poll_cpu.client_s / records * 1e6)
        print(f"round {round_}: raw Fetch {raws[-1]:8.0f} records/s "
              f"({raws[-1] * RECORD_BYTES / MIB:5.1f} MiB/s, {raw_cpu.text(records)}), "
              f"consumer poll {polls[-1]:8.0f} records/s "
              f"({polls[-1] * RECORD_BYTES / MIB:5.1f} MiB/s, {poll_cpu.text(records)})",
              flush=True)
    poll, raw = statistics.median(polls), statistics.median(raws)
    ratio = poll / raw
    print(f"ratio consumer poll / raw Fetch records/s (medians): {ratio:.2f} (goal >= 0.8) "
          f"{cluster_bench.verdict(ratio >= 0.8)}")
    floor = object_floor(records)
    extra = statistics.median(poll_client) - statistics.median(raw_client)
    print(f"client CPU a record, poll - raw Fetch (medians): {extra:.2f} us; the floor of it "
          f"(a record object with its value and offset, built by map/zip in C and read): "
          f"{floor:.2f} us")
    return poll


def bench_spark(bootstrap: str, poll_rate: float, records: int) -> None:
    from tidelog.spark import local_session

    spark = local_session("tidelog-bench-consume")
    try:
        def read() -> float:
            started = time.perf_counter()
            (spark.read.format("tidelog").option("tidelog.bootstrap.servers", bootstrap)
             .option("subscribe", TOPIC).load().write.format("noop").mode("overwrite").save())
            return records / (time.perf_counter() - started)

        read()  # warm-up: the Python workers start
        rate = read()
    finally:
        spark.stop()
    print(f"spark batch read (local[2], noop sink): {rate:10.0f} rows/s; / consumer poll: "
          f"{rate / poll_rate:.2f}")


# ----------------------------------------------------------------------------------------------
# End-to-end latency


def max_send_rate(client: Client, seconds: float) -> float:
    """records/s the client's producer has acknowledged, sending as fast as it can."""
    value = random.randbytes(RECORD_BYTES)
    with client.producer(linger_ms=LINGER_MS) as producer:
        started = time.perf_counter()
        sent = 0
        while time.perf_counter() - started < seconds:
            for _ in range(1000):
                producer.send(TOPIC, value)
            sent += 1000
        producer.flush()
        return sent / (time.perf_counter() - started)


def tidelog_latencies(
    bootstrap: str, client: Client, per_second: float, seconds: float
) -> tuple[list[float], list[float]]:
    """send() to poll() seconds of records sent at `per_second` while a consumer process
    (this script with --tail) tails the topic, and send() to acknowledgement seconds of the
    same records (OMB's publish latency: what of the end-to-end figure the write takes)."""
    expected = int(per_second * seconds)
    scratch = tempfile.TemporaryDirectory()
    out = Path(scratch.name, "latencies.json")
    reader = subprocess.Popen(
        [sys.executable, __file__, "--tail", bootstrap, str(expected), str(seconds + 30),
         str(out)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert reader.stdout is not None
        if reader.stdout.readline().strip() != "ready":
            raise RuntimeError("the consumer process did not start")
        padding = random.randbytes(RECORD_BYTES - _STAMP.size)
        acked: list[float] = []
        with client.producer(linger_ms=LINGER_MS) as producer:
            start = time.perf_counter()
            for n in range(expected):
                delay = start + n / per_second - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                sent = time.perf_counter()
                producer.send(TOPIC, _STAMP.pack(sent) + padding).add_done_callback(
                    lambda _, sent=sent: acked.append(time.perf_counter() - sent)
                )
            producer.flush()
        reader.wait(timeout=seconds + 60)
        latencies: list[float] = json.loads(out.read_text())
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        scratch.cleanup()
    return latencies, acked


def tail(bootstrap: str, expected: int, seconds: float, out: Path) -> None:
    """The consumer process: positions resolved at the end of every partition, "ready"
    printed, then each record's latency taken as poll() returns it, until `expected` came or
    `seconds` passed; the latencies are written to `out` as JSON (a file, not its standard
    output: a line of a few hundred KiB on a pipe came back broken once, in CI, at 128 KiB).
    time.perf_counter is CLOCK_MONOTONIC, one clock for every process of the machine."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    latencies: list[float] = []
    with Client(bootstrap) as client:
        consumer = client.consumer(auto_offset_reset="latest")
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        for tp in tps:
            consumer.position(tp)  # resolved before the first send
        print("ready", flush=True)
        deadline = time.monotonic() + seconds
        while len(latencies) < expected and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=100)
            now = time.perf_counter()
            latencies.extend(now - _STAMP.unpack_from(r.value or bytes(8))[0] for r in records)
        consumer.close()
    out.write_text(json.dumps(latencies))


class Busy:
    """CPU over one stretch of the latency run: the machine's (every process, from
    /proc/stat), the given processes' (the nodes' or the floor's), and the wall time. At half
    the producer's maximum the cores are mostly busy, and what the latency does follows that;
    these figures say how busy, and what a request cost each side."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def __enter__(self) -> Busy:
        self.machine_s = _machine_busy_s()
        self.pids_s = sum(cluster_bench.cpu_seconds(pid) for pid in self.pids)
        self.wall_s = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.machine_s = _machine_busy_s() - self.machine_s
        self.pids_s = sum(cluster_bench.cpu_seconds(pid) for pid in self.pids) - self.pids_s
        self.wall_s = time.perf_counter() - self.wall_s

    def text(self, who: str, requests: float) -> str:
        return (f"{who} {self.pids_s / self.wall_s:.2f} cores ({self.pids_s / requests * 1000:.2f} "
                f"ms a request, {requests / self.wall_s:.0f} requests/s); the machine "
                f"{self.machine_s / self.wall_s:.2f} of {os.cpu_count()} cores busy")


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy so far (not idle, not waiting)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def produce_metrics(cluster: LocalCluster) -> tuple[float, dict[float, float]]:
    """(Produce requests answered, the nodes' histogram of Produce durations: count at or
    below each bucket's bound), summed over the nodes' metrics."""
    answered = 0.0
    buckets: dict[float, float] = {}
    for line in cluster_bench.metrics_lines(cluster):
        if 'rpc="Produce"' not in line:
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith("tidelog_requests_total{") and 'status="OK"' in line:
            answered += value
        elif line.startswith("tidelog_request_duration_seconds_bucket{"):
            bound = float(line.split('le="', 1)[1].split('"', 1)[0])
            buckets[bound] = buckets.get(bound, 0.0) + value
    return answered, buckets


def bucket_of(before: dict[float, float], after: dict[float, float], q: float) -> str:
    """The histogram bucket the q-th percentile of what was observed between the two reads
    falls in, as "<= N ms"."""
    counts = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    total = counts[-1][1] if counts else 0.0
    for bound, count in counts:
        if total and count >= q / 100 * total:
            return "> 30 s" if bound == float("inf") else f"<= {bound * 1000:g} ms"
    return "none"


def fractions_of(text: str) -> tuple[float, ...]:
    """``--fractions``: fractions of the maximum rate, each in (0, 1]."""
    try:
        fractions = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not numbers: {text!r}") from None
    if not all(0 < f <= 1 for f in fractions):
        raise argparse.ArgumentTypeError(f"each fraction must be in (0, 1]: {text!r}")
    return fractions


def bench_latency(cluster: LocalCluster, client: Client, seconds: float,
                  fractions: tuple[float, ...] = (0.5,)) -> bool:
    """The end-to-end latency at each of `fractions` of the producer's maximum rate (measured
    once), each against the floor at the same rate."""
    maximum = max_send_rate(client, min(seconds, 8.0))
    ok = True
    for fraction in fractions:
        ok &= latency_at(cluster, client, seconds, maximum, fraction)
    return ok


def latency_at(cluster: LocalCluster, client: Client, seconds: float, maximum: float,
               fraction: float) -> bool:
    rate = maximum * fraction
    nodes = [pid for n in cluster.node_ids if (pid := cluster.pid_of(n)) is not None]
    answered, durations = produce_metrics(cluster)
    with Busy(nodes) as tidelog_busy:
        latencies, acked = tidelog_latencies(cluster.bootstrap, client, rate, seconds)
    answered_after, durations_after = produce_metrics(cluster)
    produced = max(answered_after - answered, 1.0)
    # The floor gets requests of the size the producer sent: its linger gathers rate * linger
    # records, but its batch.size (16 KiB) seals a batch first above ~3,300 records/s.
    per_request = max(1, round(len(acked) / produced))
    batch = build_batch([RecordInput(random.randbytes(RECORD_BYTES), None, wall_clock_ms())]
                        * per_request)
    with cluster_bench.RelayFloor(disk=True) as floor, Busy(floor.pids) as floor_busy:
        relay = cluster_bench.relay_round_trips(floor.ports, batch, rate / per_request, seconds)
    print(f"\n## end-to-end latency: producer (linger.ms={LINGER_MS}, acks=all) at {rate:.0f} "
          f"records/s of {RECORD_BYTES} B ({rate * RECORD_BYTES / MIB:.1f} MiB/s) = "
          f"{'half' if fraction == 0.5 else f'{fraction:g}'} of its "
          f"maximum of {maximum:.0f} in this run, a consumer process tailing {PARTITIONS} "
          f"partitions, {seconds:g} s; replication floor (relay + append + fdatasync on 3 "
          f"processes) at the same rate in requests of {per_request} records, the producer's "
          f"average request ({rate / per_request:.0f} requests/s); load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{'':<34} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'samples':>8}")
    for name, samples in (("tidelog send() -> poll()", latencies),
                          ("  of which send() -> acknowledged", acked),
                          ("replication floor round trip", relay)):
        if not samples:
            print(f"{name:<34} no samples")
            return False
        print(f"{name:<34} {_pct(samples, 50):8.1f} {_pct(samples, 99):8.1f} "
              f"{_pct(samples, 99.9):9.1f} {len(samples):8d}")
    print(f"  of which in the nodes (Produce arrival to answer, their histogram): p50 "
          f"{bucket_of(durations, durations_after, 50)}, p99 "
          f"{bucket_of(durations, durations_after, 99)}")
    print("CPU, tidelog's run: " + tidelog_busy.text("nodes", produced)
          + " (a request: a Produce, with the consumer's Fetches counted in its cost); the "
          "producer and the consumer process take most of the rest")
    print("CPU, the floor's run: "
          + floor_busy.text("floor processes", max(len(relay), 1)))
    ratio = _pct(latencies, 99) / _pct(relay, 99)
    goal = f"(goal <= 3) {cluster_bench.verdict(ratio <= 3)}" if fraction == 0.5 else "(report)"
    print(f"ratio p99 tidelog end-to-end / replication floor round trip: {ratio:.2f} "
          f"{goal}; p50: "
          f"{_pct(latencies, 50) / _pct(relay, 50):.2f}")
    return len(latencies) >= 0.99 * int(rate * seconds)


def _pct(samples: list[float], q: float) -> float:
    """The q-th percentile in ms (nearest rank)."""
    ranked = sorted(samples)
    return ranked[min(len(ranked) - 1, int(q / 100 * len(ranked)))] * 1000


if __name__ == "__main__":
    sys.exit(main())
