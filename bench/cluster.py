"""Cluster benchmarks on a real 3-node cluster, each figure beside a baseline from the same run.

* produce: acks=all throughput of 1 KiB records in batches of 256 to 6 partitions with
  replication factor 3 (default node settings: fsync before acknowledging), several requests in
  flight per partition, against one-hop gRPC bidi streaming of the same batches, with the same
  window of messages in flight, to a bench-local server in another process that keeps nothing.
  Goal: ratio >= 0.25. Printed beside it, the relay floor: the same requests through three
  bench-local processes that only relay each batch to the two others over gRPC streams and
  acknowledge (no storage, no Raft, no protobuf), the most three Python gRPC hops carry here.
  And the replication floor, the goal's baseline: the same three processes, each of which also
  appends every batch it receives or relays to a file and fdatasyncs it before acknowledging
  (batches that arrive during a sync share the next one), the same batches, no Raft, no
  validation: the least a replicated acks=all write to disk costs in Python gRPC here. Goals:
  Tidelog >= 0.85 of its MiB/s, and the nodes' CPU per MiB <= 1.3x its processes'.
  ``--floor-rounds N`` alternates N rounds of the floor and of Tidelog (the cluster idling
  during the floor's) and judges their medians.
* produce with ``--compare-loops``: the same against two clusters side by side, one on uvloop
  and one on asyncio's loop, in alternating rounds (``--rate`` to offer a fixed MiB/s, so that
  the nodes' CPU per MiB is read with cores to spare); reported.
* list-offsets: p50/p99 latency of ListOffsets by timestamp on a partition with data spread
  over many segments, beside the baseline: the gRPC health check of the same node (same process,
  event loop and channel, no work). An empty echo on the bench-local server and ListOffsets
  "latest" (no lookup) are printed for context. Goal: p50 ratio <= 1.5.
* produce with ``--tls``: the produce measurement against two clusters running side by side,
  one plaintext and one with TLS on both listeners (mutual TLS between nodes, client
  certificates required), in alternating rounds; the ratio of their medians. Goal: >= 0.8.
* failover: SIGKILL of a partition leader to the first acks=all produce that the new leader
  acknowledges, found by polling Metadata of the live nodes and retrying; the node restarts and
  catches up, and its preferred leadership returns, before the next kill. Goal: p50 <= 1 s,
  p99 <= 2 s.

Run: ``.venv/bin/python bench/cluster.py [--quick] [--event-loop auto|asyncio|uvloop]``; the
event loop is the nodes', the floors' processes' and this client's (tidelog/event_loops.py).
``--quick`` uses tiny sizes (seconds) so
that a smoke test keeps this script working; its figures mean little. The figures are printed,
never asserted: exit 1 only when something went wrong (errors, wrong answers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

# Run as a script, this file's directory comes first on sys.path, where bench/storage.py would
# shadow the storage package the nodes' code imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from tidelog import Client, ClientConfig, event_loops  # noqa: E402
from tidelog.clock import wall_clock_ms  # noqa: E402
from tidelog.compression import Codec  # noqa: E402
from tidelog.producer.accumulator import (  # noqa: E402
    CompressionRatioEstimator,
    batch_limit,
)
from tidelog.records import (  # noqa: E402
    HEADER_SIZE,
    RecordInput,
    build_batch,
    read_header,
    record_size,
    with_codec,
)
from tidelog.testing import LocalCluster  # noqa: E402
from tidelog.transport import CONNECT_TIMEOUT_MS, Security  # noqa: E402
from tidelog.v1 import tidelog_pb2 as pb  # noqa: E402
from tidelog.v1 import tidelog_pb2_grpc  # noqa: E402

T = TypeVar("T")
MIB = 1024 * 1024
RECORD_BYTES = 1024
SINK_METHOD = "/bench.Baseline/Sink"
ECHO_METHOD = "/bench.Baseline/Echo"
#: Short reconnect backoff (Kafka's reconnect.backoff.ms is 50 ms): after a kill and restart,
#: gRPC's default (1 s, growing) would measure the client's patience, not the cluster. The
#: least time a connection attempt gets is the client's (tidelog.transport): at 50 ms, TLS
#: handshakes on a loaded machine timed out again and again ("connection attempt timed out
#: before receiving SETTINGS frame"), and the TLS rounds lost seconds to it.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
    ("grpc.max_reconnect_backoff_ms", 250),
    ("grpc.max_send_message_length", 64 * MIB),
    ("grpc.max_receive_message_length", 64 * MIB),
]


#: The event loop of every process of a run (``--event-loop``): the nodes, the floors' processes
#: and this client.
EVENT_LOOP = "auto"


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the run's event loop."""
    return event_loops.run(coro, EVENT_LOOP)


class Nodes(Protocol):
    """What the produce helpers need of a cluster, its nodes' addresses: a LocalCluster, or
    bench/client.py's picklable copy of them for a process of its own."""

    @property
    def node_ids(self) -> list[int]: ...

    @property
    def bootstrap(self) -> str: ...

    def address_of(self, node_id: int) -> str: ...

    @property
    def security(self) -> Security: ...


@dataclass(frozen=True)
class Sizes:
    partitions: int
    records_per_batch: int
    inflight: int  # produce requests in flight per partition
    warmup_s: float
    produce_s: float
    lookup_bytes: int  # data in the ListOffsets partition
    latency_samples: int
    kills: int
    #: The produce benchmarks' offered load in MiB/s, 0: as fast as the requests in flight go.
    rate_mib_s: float = 0.0


FULL = Sizes(6, 256, 4, 3.0, 15.0, 64 * MIB, 2000, 24)
QUICK = Sizes(6, 16, 2, 0.3, 1.0, 1 * MIB, 50, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--inflight", type=int, help="produce requests in flight per partition")
    parser.add_argument("--kills", type=int, help="leader kills in the failover benchmark")
    parser.add_argument("--seconds", type=float, help="produce measurement time (after warm-up)")
    parser.add_argument("--only", choices=("produce", "list-offsets", "failover"),
                        help="run one benchmark (to profile it)")
    parser.add_argument("--tls", action="store_true",
                        help="produce throughput with TLS on both listeners against plaintext")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating rounds of --tls, --compare-loops or --compression")
    parser.add_argument("--compression", choices=("gzip", "snappy", "lz4", "zstd"),
                        help="produce throughput of compressed JSON-like records against the "
                             "same records uncompressed")
    parser.add_argument("--rate", type=float, metavar="MIB_S",
                        help="offer this many MiB/s in the produce benchmarks instead of all "
                             "they carry (CPU per MiB at a load that leaves cores idle)")
    parser.add_argument("--compare-loops", action="store_true",
                        help="produce throughput and nodes' CPU of nodes on uvloop against "
                             "nodes on asyncio, in alternating rounds")
    parser.add_argument("--floor-rounds", type=int, default=1, metavar="N",
                        help="alternate N rounds of the replication floor and Tidelog's produce "
                             "(medians; the floor measured while the cluster idles)")
    parser.add_argument("--event-loop", choices=event_loops.KINDS, default="auto",
                        help="the event loop of the nodes, the floors' processes and this "
                             "client (auto: uvloop where installed)")
    parser.add_argument("--baseline-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--relay-node", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--disk", type=Path, help=argparse.SUPPRESS)  # a relay node's file
    args = parser.parse_args(argv)
    if args.floor_rounds < 1:
        parser.error(f"--floor-rounds must be at least 1, got {args.floor_rounds}")
    if args.rate is not None and args.rate <= 0:
        parser.error(f"--rate must be positive, got {args.rate}")
    global EVENT_LOOP
    EVENT_LOOP = args.event_loop
    if args.baseline_server:
        run_loop(serve_baseline())
        return 0
    if args.relay_node:
        run_loop(serve_relay_node(args.disk))
        return 0
    sizes = QUICK if args.quick else FULL
    overrides = {k: v for k, v in (("inflight", args.inflight), ("kills", args.kills),
                                   ("produce_s", args.seconds), ("rate_mib_s", args.rate)) if v}
    sizes = Sizes(**{**sizes.__dict__, **overrides})
    print(f"# tidelog cluster benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"grpcio {grpc.__version__}; 3 nodes and this client share the cores")
    print("# load average before the run (other work on this machine skews every figure): "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"# event loop: {args.event_loop} "
          f"({event_loops.loop_name(event_loops.loop_factory(args.event_loop)())})")
    if args.tls:
        return 0 if bench_tls(sizes, 1 if args.quick else args.rounds) else 1
    if args.compare_loops:
        return 0 if bench_event_loops(sizes, 1 if args.quick else args.rounds) else 1
    if args.compression:
        rounds = 1 if args.quick else args.rounds
        return 0 if bench_compression(sizes, Codec[args.compression.upper()], rounds) else 1
    ok = True
    with BaselineServer() as baseline:
        if args.only in (None, "produce"):
            baseline_mib_s = bench_baseline_stream(baseline.address, sizes)
            floor = bench_relay_floor(sizes, baseline_mib_s)
            disk_floor = (bench_relay_floor(sizes, baseline_mib_s, disk=True)
                          if args.floor_rounds == 1 else None)
        with LocalCluster(3, event_loop=EVENT_LOOP) as cluster:
            if args.only in (None, "produce"):
                ok &= bench_produce(cluster, sizes, baseline_mib_s, floor, disk_floor,
                                    args.floor_rounds)
            if args.only in (None, "list-offsets"):
                ok &= bench_list_offsets(cluster, baseline.address, sizes)
            if args.only in (None, "failover"):
                ok &= bench_failover(cluster, sizes)
    if args.quick:
        print("# --quick: sizes too small for the goals to mean anything")
    return 0 if ok else 1


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def percentile(samples: list[float], q: int) -> float:
    """The q-th percentile, interpolated between the nearest samples."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def make_batch(records: int, timestamp_ms: int, value: bytes) -> bytes:
    return build_batch([RecordInput(value, None, timestamp_ms + i) for i in range(records)])


# ----------------------------------------------------------------------------------------------
# The bench-local baseline server: one gRPC hop, no storage, no replication


class BaselineServer:
    """This script with ``--baseline-server`` in a child process, so that the server does not
    share the client's GIL (a node does not either)."""

    def __enter__(self) -> BaselineServer:
        self._proc = subprocess.Popen(
            [sys.executable, __file__, "--baseline-server", "--event-loop", EVENT_LOOP],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        )
        assert self._proc.stdout is not None
        port = self._proc.stdout.readline().strip()
        if not port.isdigit():
            self._proc.kill()
            raise RuntimeError(f"the baseline server did not start (said {port!r})")
        self.address = f"127.0.0.1:{port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._proc.kill()
        self._proc.wait()


async def serve_baseline() -> None:
    """``Sink``: a bidi stream that answers every message with an empty one; ``Echo``: unary,
    returns its request. Bytes in and out, no protobuf: the cheapest gRPC can be."""

    async def sink(requests: object, context: grpc.aio.ServicerContext) -> object:
        async for _ in requests:  # type: ignore[attr-defined]
            yield b""

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    server = await start_local_server("bench.Baseline", {
        "Sink": grpc.stream_stream_rpc_method_handler(sink),
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
    })
    await server.wait_for_termination()


async def start_local_server(
    service: str, handlers: dict[str, grpc.RpcMethodHandler]
) -> grpc.aio.Server:
    """A bench-local gRPC server on a free loopback port, which it prints for its parent."""
    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, handlers)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    return server


# ----------------------------------------------------------------------------------------------
# Produce throughput


class Window:
    """Counts completions between the end of the warm-up and the deadline."""

    def __init__(self, warmup_s: float, measure_s: float) -> None:
        self.start = time.perf_counter() + warmup_s
        self.end = self.start + measure_s
        self.completed = 0

    def open(self) -> bool:
        return time.perf_counter() < self.end

    def complete(self) -> None:
        if self.start <= time.perf_counter() <= self.end:
            self.completed += 1

    def per_second(self, unit: float) -> float:
        return self.completed * unit / (self.end - self.start)


def bench_baseline_stream(address: str, sizes: Sizes) -> float:
    """MiB/s of produce-sized batches over one bidi stream, as many in flight as the produce
    benchmark keeps in flight in total."""
    batch = make_batch(sizes.records_per_batch, wall_clock_ms(), random.randbytes(RECORD_BYTES))
    window_size = sizes.partitions * sizes.inflight

    async def run() -> Window:
        async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            call = channel.stream_stream(SINK_METHOD)()
            window = Window(sizes.warmup_s, sizes.produce_s)
            slots = asyncio.Semaphore(window_size)

            async def write() -> None:
                while window.open():
                    await slots.acquire()
                    await call.write(batch)
                await call.done_writing()

            writer = asyncio.create_task(write())
            async for _ in call:
                slots.release()
                window.complete()
            await writer
            return window

    window = run_loop(run())
    mib_s = window.per_second(len(batch) / MIB)
    print(f"\n## produce: {sizes.records_per_batch} x {RECORD_BYTES} B records per batch "
          f"({len(batch)} B), {window_size} batches in flight, {sizes.produce_s:g} s after "
          f"{sizes.warmup_s:g} s warm-up")
    print(f"baseline gRPC bidi stream, one hop, no storage: {mib_s:8.1f} MiB/s "
          f"{mib_s * MIB / len(batch) * sizes.records_per_batch:10.0f} records/s")
    return mib_s


# ----------------------------------------------------------------------------------------------
# The floors: the produce path's gRPC hops alone, and with the disk


class DiskLog:
    """One file that batches are appended to, each acknowledged once it is fdatasync'd: what a
    replica's log does at least for an acks=all write with fsync before acknowledging. The
    write and the sync run in a thread (they release the GIL, as a node's storage calls do);
    batches that arrive while one is under way go in the next write together (group commit),
    so a sync is never waited for by more than one write's latency."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._writer = asyncio.create_task(self._run())

    def append(self, data: bytes) -> asyncio.Future[None]:
        done = asyncio.get_running_loop().create_future()
        self._pending.append((data, done))
        self._wake.set()
        return done

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batches, self._pending = self._pending, []
            await loop.run_in_executor(None, self._write, [data for data, _ in batches])
            for _, done in batches:
                done.set_result(None)

    def _write(self, batches: list[bytes]) -> None:
        if os.writev(self._fd, batches) != sum(map(len, batches)):
            raise OSError("a short write (disk full?)")
        os.fdatasync(self._fd)


async def serve_relay_node(disk: Path | None) -> None:
    """A stand-in for a node with everything but gRPC (and with ``disk``, a file of its own
    there, the disk) taken out. ``Relay`` (unary, as Produce) forwards the request's bytes to
    both peers over one bidi stream each (as the nodes' Raft streams), appends them to its
    file meanwhile, and answers once both peers acknowledged and its write is synced; ``Sink``
    acknowledges every message once written and synced, in order. No Raft, no validation, no
    protobuf. Prints its port; reads its two peers' ports from stdin."""
    peers: list[grpc.aio.StreamStreamCall] = []
    pending: list[asyncio.Queue[asyncio.Future[None]]] = []
    order = asyncio.Lock()
    log = None if disk is None else DiskLog(disk)

    def stored(request: bytes) -> asyncio.Future[None]:
        if log is not None:
            return log.append(request)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def acknowledgements(call: grpc.aio.StreamStreamCall,
                               queue: asyncio.Queue[asyncio.Future[None]]) -> None:
        async for _ in call:
            (await queue.get()).set_result(None)

    async def relay(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        loop = asyncio.get_running_loop()
        acks = [stored(request)]
        async with order:  # the acknowledgements come back in the order of the writes
            for call, queue in zip(peers, pending, strict=True):
                ack = loop.create_future()
                await queue.put(ack)
                acks.append(ack)
                await call.write(request)
        await asyncio.gather(*acks)
        return b""

    async def sink(requests: object, context: grpc.aio.ServicerContext) -> object:
        if log is None:
            async for _ in requests:  # type: ignore[attr-defined]
                yield b""
            return
        # Read on while earlier messages sync: each is acknowledged, in order, once synced.
        synced: asyncio.Queue[asyncio.Future[None] | None] = asyncio.Queue()

        async def read() -> None:
            async for request in requests:  # type: ignore[attr-defined]
                synced.put_nowait(log.append(request))
            synced.put_nowait(None)

        reader = asyncio.create_task(read())
        while (done := await synced.get()) is not None:
            await done
            yield b""
        await reader

    server = await start_local_server("bench.Relay", {
        "Relay": grpc.unary_unary_rpc_method_handler(relay),
        "Sink": grpc.stream_stream_rpc_method_handler(sink),
    })
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    readers = []  # referenced, so that the tasks live as long as the server
    for peer in line.split():
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{peer}", options=CHANNEL_OPTIONS)
        call = channel.stream_stream("/bench.Relay/Sink")()
        queue: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
        peers.append(call)
        pending.append(queue)
        readers.append(asyncio.create_task(acknowledgements(call, queue)))
    await server.wait_for_termination()


class RelayFloor:
    """Three relay nodes (`serve_relay_node`) in processes of their own, each relaying to the
    two others; ``ports`` are theirs. With ``disk``, each appends and syncs to a file of its
    own in a temporary directory (on the disk LocalCluster's nodes write to), removed after."""

    def __init__(self, disk: bool = False) -> None:
        self._disk = disk

    def __enter__(self) -> RelayFloor:
        self._dir = tempfile.TemporaryDirectory(prefix="tidelog-floor-")
        command = [sys.executable, __file__, "--relay-node", "--event-loop", EVENT_LOOP]
        self._procs = [subprocess.Popen(
            [*command, *(["--disk", f"{self._dir.name}/{n}.log"] if self._disk else [])],
            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True) for n in range(3)]
        try:
            ports = []
            for proc in self._procs:
                assert proc.stdout is not None
                ports.append(proc.stdout.readline().strip())
            for i, proc in enumerate(self._procs):
                assert proc.stdin is not None
                proc.stdin.write(f"{ports[(i + 1) % 3]} {ports[(i + 2) % 3]}\n")
                proc.stdin.flush()
        except BaseException:
            self.__exit__()
            raise
        self.ports = ports
        self.pids = [proc.pid for proc in self._procs]
        return self

    def __exit__(self, *exc_info: object) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()
        self._dir.cleanup()


def relay_round_trips(
    ports: Sequence[str], batch: bytes, per_second: float, seconds: float
) -> list[float]:
    """Seconds from sending each Relay request to its answer, the requests sent at a fixed
    rate (open loop: a slow answer does not delay the next request), spread over the relay
    nodes in turn: the round trip of an acks=all produce with nothing but its gRPC hops."""

    async def run() -> list[float]:
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
                    for port in ports]
        calls = [channel.unary_unary("/bench.Relay/Relay") for channel in channels]
        times: list[float] = []

        async def one(call: grpc.aio.UnaryUnaryMultiCallable) -> None:
            started = time.perf_counter()
            await call(batch, timeout=35)
            times.append(time.perf_counter() - started)

        tasks = []
        try:
            start = time.perf_counter()
            for n in range(int(per_second * seconds)):
                await asyncio.sleep(max(0.0, start + n / per_second - time.perf_counter()))
                tasks.append(asyncio.create_task(one(calls[n % len(calls)])))
            await asyncio.gather(*tasks)
        finally:
            for channel in channels:
                await channel.close()
        return times

    return run_loop(run())


@dataclass
class Floor:
    """What `bench_relay_floor` measured."""

    mib_s: float
    #: CPU ms (user + system) of the three relay processes per MiB relayed in the window.
    cpu_ms_per_mib: float


def bench_relay_floor(sizes: Sizes, baseline_mib_s: float, disk: bool = False) -> Floor:
    """MiB/s through three relay nodes (`serve_relay_node`), the produce benchmark's
    partitions and requests in flight spread over them: the most any three-replica
    acks=all produce can carry over Python gRPC on this machine (three hops per batch, all
    processes on the same cores), before storage, Raft and protobuf cost anything. With
    ``disk``, the replication floor: every process also appends and syncs each batch."""
    with RelayFloor(disk) as floor:
        ports = floor.ports
        batch = make_batch(sizes.records_per_batch, wall_clock_ms(), random.randbytes(RECORD_BYTES))

        async def run() -> tuple[Window, list[tuple[float, float]]]:
            channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
                        for port in ports]
            window = Window(sizes.warmup_s, sizes.produce_s)

            async def produce(partition: int) -> None:
                call = channels[partition % 3].unary_unary("/bench.Relay/Relay")
                while window.open():
                    await call(batch, timeout=35)
                    window.complete()

            try:
                metering = asyncio.create_task(meter_cpu(window, floor.pids))
                await asyncio.gather(*(
                    produce(p) for p in range(sizes.partitions) for _ in range(sizes.inflight)
                ))
                cpu = await metering
            finally:
                for channel in channels:
                    await channel.close()
            return window, cpu

        window, ((before, _), (after, _)) = run_loop(run())
    mib_s = window.per_second(len(batch) / MIB)
    cpu_ms_per_mib = (after - before) * 1000 / max(window.completed * len(batch) / MIB, 1e-9)
    what = ("replication floor: 3 relay processes, each batch relayed to 2 others, appended "
            "and fdatasync'd by all 3" if disk else
            "relay floor: 3 relay processes, each batch relayed to 2 others, no storage")
    print(f"{what}: {mib_s:8.1f} MiB/s, {mib_s / baseline_mib_s:.2f} of the baseline, "
          f"{cpu_ms_per_mib:.1f} CPU ms per MiB")
    return Floor(mib_s, cpu_ms_per_mib)


# ----------------------------------------------------------------------------------------------
# Produce through the cluster


@dataclass
class RawProduce:
    """What `raw_produce` measured."""

    mib_s: float
    records_s: float
    completed: int
    leaders: list[int]
    errors: Counter[str]
    #: CPU seconds (user + system, every thread) spent during the measured window by the
    #: processes of ``meter_pids`` together, and by this process (the client).
    nodes_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    #: MiB acknowledged in the measured window.
    mib: float = 0.0


def metrics_lines(cluster: LocalCluster) -> Iterator[str]:
    """Every line of the Prometheus page (``/metrics``) of each node that serves one."""
    for node in cluster.node_ids:
        address = cluster.metrics_address(node)
        if address is None:
            continue
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as page:
            yield from page.read().decode().splitlines()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all of its threads, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def meter_cpu(window: Window, pids: Sequence[int]) -> list[tuple[float, float]]:
    """CPU seconds of ``pids`` together and of this process, read when ``window`` opens and
    when it closes, so that warm-up and tear-down are not counted."""
    marks = []
    for moment in (window.start, window.end):
        await asyncio.sleep(max(0.0, moment - time.perf_counter()))
        times = os.times()
        marks.append((sum(cpu_seconds(pid) for pid in pids), times.user + times.system))
    return marks


def raw_produce(
    cluster: Nodes, topic: str, sizes: Sizes, meter_pids: Sequence[int] = (),
    batch: bytes | None = None,
) -> RawProduce:
    """acks=all Produce of one pre-built batch per request, ``sizes.inflight`` requests in
    flight per partition, each partition's requests sent to its leader (followed when it
    moves): the cluster's throughput with no client library in the way. bench/client.py
    measures the client library against this same function. The CPU time of ``meter_pids``
    (the nodes) and of this process is read at both ends of the measured window. ``batch``
    replaces the default batch of random 1 KiB values (MiB/s count its bytes as sent)."""
    create_topic(cluster, topic, sizes.partitions)
    leaders = wait_leaders(cluster, topic, sizes.partitions)
    if batch is None:
        batch = make_batch(sizes.records_per_batch, wall_clock_ms(),
                           random.randbytes(RECORD_BYTES))
    errors: Counter[str] = Counter()

    async def run() -> tuple[Window, list[tuple[float, float]]]:
        channels = {
            n: cluster.security.aio_channel(cluster.address_of(n), CHANNEL_OPTIONS)
            for n in cluster.node_ids
        }
        stubs = {p: tidelog_pb2_grpc.TidelogStub(channels[n]) for p, n in enumerate(leaders)}
        window = Window(sizes.warmup_s, sizes.produce_s)
        senders = sizes.partitions * sizes.inflight
        #: With a rate, each sender sends at most one batch per interval (open loop).
        interval = senders * len(batch) / MIB / sizes.rate_mib_s if sizes.rate_mib_s else 0.0

        async def produce(partition: int, sender: int) -> None:
            request = pb.ProduceRequest(acks=-1, timeout_ms=30_000, topics=[pb.TopicProduceData(
                name=topic, partitions=[pb.PartitionProduceData(partition=partition,
                                                                records=batch)],
            )])
            due = time.perf_counter() + interval * sender / senders
            while window.open():
                if interval:
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    due += interval
                try:
                    response = await stubs[partition].Produce(request, timeout=35)
                except grpc.aio.AioRpcError as exc:
                    errors[exc.code().name] += 1
                    await asyncio.sleep(0.05)
                    continue
                result = response.topics[0].partitions[0]
                if result.error_code == 0:
                    window.complete()
                    continue
                errors[f"error {result.error_code}"] += 1
                hint = result.current_leader
                if hint.leader_id in channels:  # the leader moved: follow it
                    stubs[partition] = tidelog_pb2_grpc.TidelogStub(channels[hint.leader_id])
                await asyncio.sleep(0.05)

        try:
            metering = asyncio.create_task(meter_cpu(window, meter_pids))
            await asyncio.gather(*(
                produce(p, p * sizes.inflight + i)
                for p in range(sizes.partitions) for i in range(sizes.inflight)
            ))
            cpu = await metering
        finally:
            for channel in channels.values():
                await channel.close()
        return window, cpu

    window, cpu = run_loop(run())
    (nodes_before, client_before), (nodes_after, client_after) = cpu
    return RawProduce(window.per_second(len(batch) / MIB),
                      window.per_second(sizes.records_per_batch), window.completed, leaders,
                      errors, nodes_after - nodes_before, client_after - client_before,
                      window.completed * len(batch) / MIB)


def bench_produce(
    cluster: LocalCluster, sizes: Sizes, baseline_mib_s: float, floor: Floor,
    disk_floor: Floor | None, rounds: int = 1,
) -> bool:
    """Tidelog's produce against the floors. With ``disk_floor`` None, ``rounds`` rounds
    alternate the replication floor (while the cluster idles) with Tidelog (each round a
    topic of its own), so that the other work on a shared machine falls on both alike; the
    figures are the medians, and each round's own ratio is printed."""
    pids = [pid for n in cluster.node_ids if (pid := cluster.pid_of(n)) is not None]
    floors: list[Floor] = [] if disk_floor is None else [disk_floor]
    raws: list[RawProduce] = []
    for round_ in range(rounds):
        if disk_floor is None:
            floors.append(bench_relay_floor(sizes, baseline_mib_s, disk=True))
        raws.append(raw_produce(cluster, f"bench-produce-{round_}" if round_ else "bench-produce",
                                sizes, pids))
        raw = raws[-1]
        if rounds > 1:
            cpu = raw.nodes_cpu_s * 1000 / max(raw.mib, 1e-9)
            print(f"round {round_}: tidelog {raw.mib_s:.1f} MiB/s ({cpu:.1f} nodes' CPU ms per "
                  f"MiB); of the replication floor: {raw.mib_s / floors[-1].mib_s:.2f}, CPU "
                  f"{cpu / max(floors[-1].cpu_ms_per_mib, 1e-9):.2f}; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    raw = sorted(raws, key=lambda r: r.mib_s)[len(raws) // 2]
    nodes_cpu_ms_per_mib = statistics.median(r.nodes_cpu_s * 1000 / max(r.mib, 1e-9)
                                             for r in raws)
    disk_floor = Floor(statistics.median(f.mib_s for f in floors),
                       statistics.median(f.cpu_ms_per_mib for f in floors))
    print(f"tidelog acks=all, 3 nodes, RF 3, {sizes.partitions} partitions x {sizes.inflight} "
          f"in flight (leaders on nodes {sorted(set(raw.leaders))}): {raw.mib_s:8.1f} MiB/s "
          f"{raw.records_s:10.0f} records/s, {nodes_cpu_ms_per_mib:.1f} nodes' CPU ms per MiB"
          + (f" (medians of {rounds} rounds; the replication floor's: {disk_floor.mib_s:.1f} "
             f"MiB/s, {disk_floor.cpu_ms_per_mib:.1f} CPU ms per MiB)" if rounds > 1 else ""))
    for errors in (r.errors for r in raws if r.errors):
        print(f"produce errors (retried): {dict(errors)}")
    ratio = raw.mib_s / floor.mib_s
    print(f"ratio produce MiB/s tidelog/relay floor: {ratio:.2f} (goal >= 0.7) "
          f"{verdict(ratio >= 0.7)}")
    cpu_ratio = nodes_cpu_ms_per_mib / max(floor.cpu_ms_per_mib, 1e-9)
    print(f"ratio CPU per MiB nodes/relay processes: {cpu_ratio:.2f} (goal <= 1.5) "
          f"{verdict(cpu_ratio <= 1.5)}")
    disk_ratio = raw.mib_s / disk_floor.mib_s
    print(f"ratio produce MiB/s tidelog/replication floor: {disk_ratio:.2f} (goal >= 0.85) "
          f"{verdict(disk_ratio >= 0.85)}")
    disk_cpu_ratio = nodes_cpu_ms_per_mib / max(disk_floor.cpu_ms_per_mib, 1e-9)
    print(f"ratio CPU per MiB nodes/replication floor processes: {disk_cpu_ratio:.2f} "
          f"(goal <= 1.3) {verdict(disk_cpu_ratio <= 1.3)}")
    baseline_ratio = raw.mib_s / baseline_mib_s
    print(f"ratio produce MiB/s tidelog/baseline: {baseline_ratio:.2f} (goal >= 0.25) "
          f"{verdict(baseline_ratio >= 0.25)}")
    return all(r.completed > 0 for r in raws)


#: Words of free text in the records (a customer's note): English text compresses about 3x.
_TEXT = (
    "the of and to in is was for on that with as by at from his an were are which this be has "
    "or had not but one their its all been have new more after also who two first into other "
    "delivery order package arrived late damaged great quality size color return refund "
    "shipping customer support thanks please update address gift wrap weekend morning "
    "evening store online price discount coupon account password email phone"
)
_WORDS = tuple(_TEXT.split())


def json_like_values(count: int, rng: random.Random) -> list[bytes]:
    """About 1 KiB of JSON per record, an event as applications log them: repeated field names
    and enumerations, ids, timestamps, a URL and a user agent, and a random token (which does
    not compress). What compresses is what compresses in real JSON streams."""
    events = ("page_view", "add_to_cart", "checkout", "search", "login", "logout")
    agents = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/126.0 Safari/537.36",
              "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like "
              "Gecko) Version/17.5 Safari/605.1.15")
    out = []
    for n in range(count):
        value = (
            f'{{"event_id": {1_000_000 + n}, "type": "{rng.choice(events)}", '
            f'"user": {{"id": {rng.randrange(100_000)}, "name": "user-{rng.randrange(5000)}", '
            f'"country": "{rng.choice(("DE", "FR", "US", "JP", "BR"))}", "plan": '
            f'"{rng.choice(("free", "pro", "team"))}"}}, "ts": {1_700_000_000_000 + n * 37}, '
            f'"url": "https://shop.example.com/products/{rng.randrange(20_000)}?ref=campaign-'
            f'{rng.randrange(40)}", "user_agent": "{rng.choice(agents)}", "session": '
            f'"{rng.randbytes(16).hex()}", "items": ['
            + ", ".join(f'{{"sku": "SKU-{rng.randrange(9999):04d}", "qty": {rng.randrange(1, 4)}, '
                        f'"price_cents": {rng.randrange(100, 20_000)}}}'
                        for _ in range(rng.randrange(1, 4)))
            + "]"
        )
        note: list[str] = []
        while len(value) + sum(len(w) + 1 for w in note) < RECORD_BYTES - 14:
            note.append(rng.choice(_WORDS))
        out.append((value + f', "note": "{" ".join(note)}"}}').encode())
    return out


def producer_batch(values: list[bytes], codec: Codec, batch_size: int, ts: int) -> bytes:
    """The batch of `codec` the client's producer fills from `values` with `batch_size` once
    its compression ratio estimate has settled (a producer that has sent a few hundred
    batches of such records): as in Kafka, batch_size counts compressed bytes, at the
    estimated ratio (`tidelog.producer.accumulator`), so the batch carries more records than
    an uncompressed one. The estimate settles by Kafka's steps, batch after batch, here."""
    estimator = CompressionRatioEstimator()
    records: list[RecordInput] = []
    for _ in range(500):
        limit, size = batch_limit(batch_size, estimator.estimate("bench")), HEADER_SIZE
        records = []
        for n, value in enumerate(values):
            if records and size + record_size(n, n, None, value) > limit:
                break
            records.append(RecordInput(value, None, ts + n))
            size += record_size(n, n, None, value)
        plain = size - HEADER_SIZE
        compressed = len(build_batch(records, compression=codec)) - HEADER_SIZE
        before = estimator.estimate("bench")
        if abs(estimator.observe("bench", compressed / plain) - before) < 1e-9:
            break
    return build_batch(records, compression=codec)


def bench_compression(sizes: Sizes, codec: Codec, rounds: int) -> bool:
    """acks=all produce of the same JSON-like records, compressed with `codec` by the
    producer (the topic keeps the producer's codec) and uncompressed, in alternating rounds
    on one cluster (each round a topic of its own): MiB/s of the records' uncompressed
    bytes committed, and the ratio of the medians. The uncompressed batch holds
    records_per_batch records, and its size is the batch_size of both: the compressed batch
    holds what the client's producer puts in a batch of that many compressed bytes
    (`producer_batch`)."""
    ts = wall_clock_ms()
    values = json_like_values(sizes.records_per_batch * 8, random.Random(5))
    plain_batch = build_batch([RecordInput(v, None, ts + i) for i, v in
                               enumerate(values[:sizes.records_per_batch])])
    batches = {Codec.NONE: plain_batch,
               codec: producer_batch(values, codec, len(plain_batch), ts)}
    #: Each batch's records count and uncompressed bytes (its payload).
    shape = {kind: (read_header(batch).records_count,
                    len(plain_batch) if kind is Codec.NONE else len(with_codec(batch, Codec.NONE)))
             for kind, batch in batches.items()}
    name = codec.name.lower()
    count, plain_bytes = shape[codec]
    print(f"\n## produce, {name} against uncompressed: JSON-like records of about "
          f"{RECORD_BYTES} B; uncompressed batches of {sizes.records_per_batch} records "
          f"({len(plain_batch)} B), {name} batches as the producer fills them to the same "
          f"batch_size of compressed bytes: {count} records ({plain_bytes} B uncompressed, "
          f"{len(batches[codec])} B {name}: {plain_bytes / len(batches[codec]):.1f}x); "
          f"acks=all, 3 nodes, RF 3, {sizes.partitions} partitions x {sizes.inflight} in "
          f"flight, {sizes.produce_s:g} s after {sizes.warmup_s:g} s warm-up per round")
    print(f"{'round':<16} {'payload MiB/s':>13} {'records/s':>10} {'wire MiB/s':>10} "
          f"{'nodes CPU ms/MiB':>17}")
    results: dict[Codec, list[float]] = {Codec.NONE: [], codec: []}
    with LocalCluster(3, event_loop=EVENT_LOOP) as cluster:
        pids = [pid for n in cluster.node_ids if (pid := cluster.pid_of(n)) is not None]
        for round_ in range(rounds):
            for kind, batch in batches.items():
                raw = raw_produce(cluster, f"bench-{kind.name.lower()}-{round_}", sizes, pids,
                                  batch)
                if raw.completed == 0:
                    print(f"round {round_}: nothing completed ({dict(raw.errors)})")
                    return False
                records, payload_bytes = shape[kind]
                payload = raw.mib_s * payload_bytes / len(batch)
                results[kind].append(payload)
                print(f"{round_:<5} {kind.name.lower():>10} {payload:13.1f} "
                      f"{raw.mib_s * MIB / len(batch) * records:10.0f} {raw.mib_s:10.1f} "
                      f"{raw.nodes_cpu_s * 1000 / (raw.mib * payload_bytes / len(batch)):17.1f}"
                      + (f" (retried errors {dict(raw.errors)})" if raw.errors else ""),
                      flush=True)
    plain_mib_s, codec_mib_s = (statistics.median(results[k]) for k in (Codec.NONE, codec))
    ratio = codec_mib_s / plain_mib_s
    print(f"median payload MiB/s: uncompressed {plain_mib_s:.1f}, {name} {codec_mib_s:.1f}")
    print(f"ratio payload MiB/s {name}/uncompressed: {ratio:.2f} (goal >= 2) "
          f"{verdict(ratio >= 2)}")
    return True


def offered(sizes: Sizes) -> str:
    """The offered load, for titles."""
    return f"offered {sizes.rate_mib_s:g} MiB/s" if sizes.rate_mib_s else "as fast as it goes"


def alternate_clusters(
    sizes: Sizes, rounds: int, clusters: dict[str, LocalCluster], title: str
) -> dict[str, list[RawProduce]] | None:
    """Produce throughput of clusters that run side by side the whole time, measured in
    alternating rounds (each round a topic of its own), so that load from elsewhere on the
    machine falls on all alike. Beside each round, the CPU time the three nodes and the client
    spent per MiB acknowledged (from /proc): throughput on a shared machine moves with the
    load, CPU per MiB much less, and the nodes and the client share the cores, so their CPU
    per MiB is what decides the ratio once the cores are busy. None if a round completed
    nothing."""
    results: dict[str, list[RawProduce]] = {label: [] for label in clusters}
    print(f"\n## produce, {title}: {sizes.records_per_batch} x {RECORD_BYTES} B "
          f"records per batch, acks=all, 3 nodes, RF 3, {sizes.partitions} partitions x "
          f"{sizes.inflight} in flight, {sizes.produce_s:g} s after {sizes.warmup_s:g} s "
          f"warm-up per round, {offered(sizes)}")
    print(f"{'round':<16} {'MiB/s':>8} {'records/s':>10} {'nodes CPU ms/MiB':>17} "
          f"{'client CPU ms/MiB':>18} {'cores busy':>10}")
    for round_ in range(rounds):
        for label, cluster in clusters.items():
            pids = [pid for n in cluster.node_ids if (pid := cluster.pid_of(n)) is not None]
            raw = raw_produce(cluster, f"bench-{round_}", sizes, pids)
            if raw.completed == 0:
                print(f"round {round_}: nothing completed ({dict(raw.errors)})")
                return None
            results[label].append(raw)
            print(f"{round_:<5} {label:>10} "
                  f"{raw.mib_s:8.1f} {raw.records_s:10.0f} "
                  f"{raw.nodes_cpu_s * 1000 / raw.mib:17.1f} "
                  f"{raw.client_cpu_s * 1000 / raw.mib:18.1f} "
                  f"{(raw.nodes_cpu_s + raw.client_cpu_s) / sizes.produce_s:10.2f}"
                  + (f" (retried errors {dict(raw.errors)})" if raw.errors else ""),
                  flush=True)
    return results


def medians(runs: list[RawProduce]) -> tuple[float, float, float]:
    """Median MiB/s, nodes' CPU ms per MiB and client CPU ms per MiB of rounds."""
    return (statistics.median(r.mib_s for r in runs),
            statistics.median(r.nodes_cpu_s * 1000 / r.mib for r in runs),
            statistics.median(r.client_cpu_s * 1000 / r.mib for r in runs))


def bench_tls(sizes: Sizes, rounds: int) -> bool:
    """A TLS cluster against a plaintext one (`alternate_clusters`)."""
    with LocalCluster(3, event_loop=EVENT_LOOP) as plain, \
            LocalCluster(3, tls=True, event_loop=EVENT_LOOP) as tls:
        results = alternate_clusters(sizes, rounds, {"plaintext": plain, "TLS": tls},
                                     "TLS against plaintext")
    if results is None:
        return False
    (plain_mib_s, *plain_cpu), (tls_mib_s, *tls_cpu) = (medians(results[k])
                                                        for k in ("plaintext", "TLS"))
    print(f"median CPU ms per MiB, nodes + client: plaintext {plain_cpu[0]:.1f} + "
          f"{plain_cpu[1]:.1f}, TLS {tls_cpu[0]:.1f} + {tls_cpu[1]:.1f}; ratio of the sums "
          f"plaintext/TLS {sum(plain_cpu) / sum(tls_cpu):.2f}")
    print(f"median produce MiB/s: plaintext {plain_mib_s:.1f}, TLS {tls_mib_s:.1f}")
    ratio = tls_mib_s / plain_mib_s
    print(f"ratio produce MiB/s TLS/plaintext: {ratio:.2f} (goal >= 0.8) {verdict(ratio >= 0.8)}")
    return True


def bench_event_loops(sizes: Sizes, rounds: int) -> bool:
    """Nodes on uvloop against nodes on asyncio's loop (`alternate_clusters`); this client's
    loop is ``--event-loop``'s for both."""
    with LocalCluster(3, event_loop="asyncio") as on_asyncio, \
            LocalCluster(3, event_loop="uvloop") as on_uvloop:
        results = alternate_clusters(sizes, rounds,
                                     {"asyncio": on_asyncio, "uvloop": on_uvloop},
                                     "nodes on uvloop against nodes on asyncio")
    if results is None:
        return False
    (base_mib_s, base_nodes, _), (uv_mib_s, uv_nodes, _) = (medians(results[k])
                                                            for k in ("asyncio", "uvloop"))
    print(f"median produce MiB/s: asyncio {base_mib_s:.1f}, uvloop {uv_mib_s:.1f}; nodes' CPU "
          f"ms per MiB: asyncio {base_nodes:.1f}, uvloop {uv_nodes:.1f}")
    print(f"ratio uvloop/asyncio: produce MiB/s {uv_mib_s / base_mib_s:.2f}, nodes' CPU per MiB "
          f"{uv_nodes / base_nodes:.2f} (reported)")
    return True


# ----------------------------------------------------------------------------------------------
# ListOffsets latency


def bench_list_offsets(cluster: LocalCluster, baseline_address: str, sizes: Sizes) -> bool:
    """Records are timestamped ``t0 + offset`` so that every answer can be checked."""
    topic = "bench-lookup"
    records_per_batch = 64
    segment_bytes = max(sizes.lookup_bytes // 64, 4 * records_per_batch * (RECORD_BYTES + 100))
    create_topic(cluster, topic, 1, {"segment.bytes": str(segment_bytes)})
    leader = wait_leaders(cluster, topic, 1)[0]
    value = random.randbytes(RECORD_BYTES)
    batches = max(1, sizes.lookup_bytes // (records_per_batch * RECORD_BYTES))
    t0 = wall_clock_ms() - 86_400_000
    stub = tidelog_pb2_grpc.TidelogStub(channel_to(cluster, leader))
    for b in range(batches):
        offset = b * records_per_batch
        result = produce_one(stub, topic, 0, make_batch(records_per_batch, t0 + offset, value))
        if result.error_code != 0 or result.base_offset != offset:
            print(f"lookup data: produce failed: {result}", file=sys.stderr)
            return False
    end = batches * records_per_batch
    health = health_pb2_grpc.HealthStub(channel_to(cluster, leader))
    with grpc.insecure_channel(baseline_address, options=CHANNEL_OPTIONS) as baseline_channel:
        echo = baseline_channel.unary_unary(ECHO_METHOD)
        wrong: list[str] = []
        rng = random.Random(7)

        def by_timestamp() -> None:
            target = rng.randrange(end)
            answer = list_offsets(stub, topic, t0 + target)
            if (answer.error_code, answer.offset) != (0, target):
                wrong.append(f"timestamp {t0 + target}: {answer}")

        calls: dict[str, Callable[[], object]] = {
            "ListOffsets by timestamp": by_timestamp,
            "node health check (baseline)": lambda: health.Check(
                health_pb2.HealthCheckRequest(), timeout=5),
            "ListOffsets latest": lambda: list_offsets(stub, topic, -1),
            "bench-local empty echo": lambda: echo(b"", timeout=5),
        }
        samples = interleaved_latencies(calls, sizes.latency_samples)
    print(f"\n## ListOffsets: {end} records of {RECORD_BYTES} B in {segment_bytes // 1024} KiB "
          f"segments on leader node {leader}, {sizes.latency_samples} sequential calls of each "
          "kind, interleaved")
    print(f"{'call':<32} {'p50 us':>8} {'p99 us':>8}")
    for name, values in samples.items():
        print(f"{name:<32} {percentile(values, 50) * 1e6:8.0f} {percentile(values, 99) * 1e6:8.0f}")
    for line in wrong[:5]:
        print(f"WRONG ANSWER: {line}", file=sys.stderr)
    lookup = samples["ListOffsets by timestamp"]
    base = samples["node health check (baseline)"]
    ratio = percentile(lookup, 50) / percentile(base, 50)
    ratio99 = percentile(lookup, 99) / percentile(base, 99)
    echo_ratio = percentile(lookup, 50) / percentile(samples["bench-local empty echo"], 50)
    print(f"ratio ListOffsets/health check p99: {ratio99:.2f}; p50 vs bench-local echo: "
          f"{echo_ratio:.2f}")
    print(f"ratio ListOffsets/health check p50: {ratio:.2f} (goal <= 1.5) {verdict(ratio <= 1.5)}")
    return not wrong


def interleaved_latencies(
    calls: dict[str, Callable[[], object]], count: int
) -> dict[str, list[float]]:
    """Seconds per call; the kinds take turns so that they share the same conditions."""
    for call in calls.values():  # warm-up: connections, caches
        for _ in range(20):
            call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    clock = time.perf_counter
    for _ in range(count):
        for name, call in calls.items():
            started = clock()
            call()
            samples[name].append(clock() - started)
    return samples


# ----------------------------------------------------------------------------------------------
# Failover


def bench_failover(cluster: LocalCluster, sizes: Sizes) -> bool:
    """Partitions with their preferred leaders on different nodes; kill ``i`` targets partition
    ``i % 3``, so every node dies in turn (the controller too, some of the time)."""
    topic = "bench-failover"
    partitions = len(cluster.node_ids)
    create_topic(cluster, topic, partitions)
    wait_leaders(cluster, topic, partitions)
    value = random.randbytes(RECORD_BYTES)
    times: list[float] = []
    print(f"\n## failover: SIGKILL of the leader -> first acks=all produce acknowledged, "
          f"{sizes.kills} kills, default node settings")
    for kill in range(sizes.kills):
        partition = kill % partitions
        leader, epoch = settle(cluster, topic, partition, value)
        started = time.perf_counter()
        cluster.kill(leader)
        new_leader = produce_after_failover(cluster, topic, partition, leader, epoch, value)
        elapsed = time.perf_counter() - started
        times.append(elapsed)
        print(f"kill {kill + 1:>2}: partition {partition}, node {leader} -> node {new_leader}: "
              f"{elapsed * 1000:7.1f} ms", flush=True)
        cluster.restart(leader)
    p50, p99 = percentile(times, 50), percentile(times, 99)
    print(f"failover p50: {p50 * 1000:.0f} ms, p99: {p99 * 1000:.0f} ms, max: "
          f"{max(times) * 1000:.0f} ms over {len(times)} kills (goal p50 <= 1000 ms, "
          f"p99 <= 2000 ms) {verdict(p50 <= 1 and p99 <= 2)}")
    return True


def settle(cluster: LocalCluster, topic: str, partition: int, value: bytes) -> tuple[int, int]:
    """Waits until every node runs and agrees on the partition's leader, that leader is its
    preferred replica, an acks=all produce succeeds and every replica has the same log end.
    Returns (leader, epoch)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            views = [partition_view(cluster, n, topic, partition) for n in cluster.node_ids]
        except grpc.RpcError:
            continue  # a node restarting, or too loaded to connect in time
        if any(v is None for v in views) or len({(v.leader_id, v.leader_epoch) for v in views
                                                  if v is not None}) != 1:
            continue
        view = views[0]
        assert view is not None
        if view.leader_id != view.replicas[0]:
            continue  # the preferred leader is back soon; killing it again is the point
        stub = tidelog_pb2_grpc.TidelogStub(channel_to(cluster, view.leader_id))
        try:
            batch = make_batch(1, wall_clock_ms(), value)
            if produce_one(stub, topic, partition, batch).error_code:
                continue
            ends = {list_offsets(tidelog_pb2_grpc.TidelogStub(channel_to(cluster, n)), topic,
                                 -1, partition=partition, replica_id=-2).offset
                    for n in cluster.node_ids}
        except grpc.RpcError:
            continue
        if len(ends) == 1:
            return view.leader_id, view.leader_epoch
    raise RuntimeError(f"{topic}-{partition} did not settle within 90 s")


def produce_after_failover(
    cluster: LocalCluster, topic: str, partition: int, dead: int, old_epoch: int, value: bytes
) -> int:
    """What a client does: ask the live nodes who leads now (the highest epoch wins), produce
    there, retry on any failure. Returns the new leader."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        best: tuple[int, int] | None = None
        for node in cluster.node_ids:
            if node == dead:
                continue
            try:
                view = partition_view(cluster, node, topic, partition, timeout=0.5)
            except grpc.RpcError:
                continue
            if view is not None and view.leader_id not in (-1, dead) and (
                view.leader_epoch > old_epoch
            ):
                best = max(best or (-1, -1), (view.leader_epoch, view.leader_id))
        if best is not None:
            stub = tidelog_pb2_grpc.TidelogStub(channel_to(cluster, best[1]))
            try:
                result = produce_one(stub, topic, partition, make_batch(1, wall_clock_ms(), value),
                                     timeout_ms=2000)
                if result.error_code == 0:
                    return best[1]
            except grpc.RpcError:
                pass
        time.sleep(0.005)
    raise RuntimeError(f"no acks=all produce to {topic}-{partition} within 30 s of the kill")


# ----------------------------------------------------------------------------------------------
# Raw gRPC calls. Not tidelog.testing.Raw: each request is built here in one step (the ListOffsets
# latency measured includes building it, and Raw goes through the client's tidelog.wire), and the
# calls take the short timeouts the failover measurement polls with.

_CHANNELS: dict[str, grpc.Channel] = {}


def channel_to(cluster: Nodes, node: int) -> grpc.Channel:
    address = cluster.address_of(node)
    channel = _CHANNELS.get(address)
    if channel is None:
        channel = _CHANNELS[address] = cluster.security.channel(address, CHANNEL_OPTIONS)
    return channel


def create_topic(
    cluster: Nodes, name: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    """Through the client library, which retries while the controller moves (the benchmarks
    load the machine enough for elections to happen)."""
    config = ClientConfig(bootstrap=tuple(cluster.bootstrap.split(",")),
                          security=cluster.security)
    with Client.from_config(config) as client:
        client.create_topic(name, partitions=partitions, replication_factor=3,
                            config=configs or {})


def partition_view(
    cluster: Nodes, node: int, topic: str, partition: int, timeout: float = 5
) -> pb.PartitionMetadata | None:
    stub = tidelog_pb2_grpc.TidelogStub(channel_to(cluster, node))
    meta: pb.TopicMetadata = stub.Metadata(
        pb.MetadataRequest(topics=[topic]), timeout=timeout).topics[0]
    for p in meta.partitions:
        if p.partition == partition and p.error_code == 0 and p.leader_id >= 0:
            return p
    return None


def wait_leaders(cluster: Nodes, topic: str, partitions: int) -> list[int]:
    """Leaders of every partition once every node names the same ones, preferably the
    preferred replicas: the nodes move leadership there soon after creation, which would
    disturb a measurement. A loaded machine may keep them elsewhere; after a while, any
    agreed leaders do."""
    started = time.monotonic()
    leaders: list[list[int | None]] = []
    while time.monotonic() < started + 30:
        try:
            views = [[partition_view(cluster, n, topic, p) for p in range(partitions)]
                     for n in cluster.node_ids]
        except grpc.RpcError:
            views = []
        leaders = [[None if v is None else v.leader_id for v in view] for view in views]
        agreed = bool(leaders) and None not in leaders[0] and all(
            x == leaders[0] for x in leaders)
        preferred = agreed and all(v is not None and v.leader_id == v.replicas[0]
                                   for v in views[0])
        if preferred or (agreed and time.monotonic() > started + 10):
            return [int(x) for x in leaders[0] if x is not None]
        time.sleep(0.05)
    raise RuntimeError(f"the leaders of {topic} were not agreed within 30 s: {leaders}")


def produce_one(
    stub: tidelog_pb2_grpc.TidelogStub, topic: str, partition: int, batch: bytes,
    timeout_ms: int = 10_000,
) -> pb.PartitionProduceResponse:
    response = stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=timeout_ms, topics=[
        pb.TopicProduceData(name=topic, partitions=[
            pb.PartitionProduceData(partition=partition, records=batch)])
    ]), timeout=timeout_ms / 1000 + 5)
    result: pb.PartitionProduceResponse = response.topics[0].partitions[0]
    return result


def list_offsets(
    stub: tidelog_pb2_grpc.TidelogStub, topic: str, timestamp: int, *, partition: int = 0,
    replica_id: int = -1,
) -> pb.ListOffsetsPartitionResponse:
    response = stub.ListOffsets(pb.ListOffsetsRequest(replica_id=replica_id, topics=[
        pb.ListOffsetsTopic(name=topic, partitions=[
            pb.ListOffsetsPartition(partition=partition, timestamp=timestamp,
                                    current_leader_epoch=-1)])
    ]), timeout=5)
    result: pb.ListOffsetsPartitionResponse = response.topics[0].partitions[0]
    return result


if __name__ == "__main__":
    sys.exit(main())
