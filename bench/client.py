"""Produce throughput through the client library against the raw cluster figure of
bench/cluster.py, same cluster, same run.

* raw: ``raw_produce`` from bench/cluster.py, unchanged: pre-built batches of 256 x 1 KiB
  records, acks=all, 6 partitions, 4 Produce requests in flight per partition, by raw gRPC.
* client: ``producer.send()`` of the same 1 KiB records, one call per record, with the
  producer's defaults (idempotent, acks=all, sticky partitioner over the same 6 partitions)
  except ``batch_size``, set so that a batch holds the same 256 records, and
  ``max_in_flight`` 4, the raw side's depth. Timed from the first ``send()`` of the measured
  records to the end of ``flush()``, after a warm-up of the same length as the raw side's.

The two alternate over several rounds, which side goes first alternating too (the machine
is shared, so its load drifts), each side's topic deleted after it; the ratio is the median
of the rounds' ratios. Goal: client / raw >= 0.8.

The raw side runs in a process of its own (one worker, started once), so that each side is a
process doing only its own produce, as a user's producer would be. In one process, gRPC's
asyncio stack has one completion queue for the whole process and every event loop that opened
a channel watches its wakeup socket: the client's loop then woke for every completion of the
raw side's loop (and handed them over to it), and the two sides' loops and the allocations of
the raw side shared one interpreter and one GIL (bench/README.md, fifth session).

Run: ``.venv/bin/python bench/client.py [--quick] [--rounds R] [--seconds S]``. ``--quick``
uses tiny sizes so a smoke test can keep the script working; its figures mean little.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog import Client  # noqa: E402
from tidelog.records import HEADER_SIZE, record_size  # noqa: E402
from tidelog.testing import LocalCluster, load_script  # noqa: E402
from tidelog.transport import Security  # noqa: E402

cluster_bench = load_script(Path(__file__).with_name("cluster.py"))


@dataclass(frozen=True)
class Addresses:
    """A cluster's node addresses (bench/cluster.py's ``Nodes``), which unlike the LocalCluster
    can be sent to the raw side's process."""

    by_id: dict[int, str]
    security: Security = field(default_factory=Security)

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.by_id)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.by_id[n] for n in self.node_ids)

    def address_of(self, node_id: int) -> str:
        return self.by_id[node_id]


def client_throughput(client: Client, topic: str, sizes: Any, rate_hint: float) -> float:
    """Records/s through ``send()``; about ``rate_hint * produce_s`` records measured."""
    value = os.urandom(cluster_bench.RECORD_BYTES)
    per_batch = sizes.records_per_batch
    batch_size = HEADER_SIZE + per_batch * record_size(per_batch, per_batch, None, value)
    client.create_topic(topic, partitions=sizes.partitions, replication_factor=3)
    with client.producer(batch_size=batch_size, max_in_flight=sizes.inflight) as producer:
        send = producer.send
        warmup_end = time.perf_counter() + sizes.warmup_s
        sent = 0
        while time.perf_counter() < warmup_end:
            for _ in range(per_batch):
                send(topic, value)
            sent += per_batch
        producer.flush()
        count = max(int(rate_hint * sizes.produce_s), per_batch)
        started = time.perf_counter()
        for _ in range(count):
            send(topic, value)
        producer.flush()
        elapsed = time.perf_counter() - started
        sent += count
        # Futures are not kept (a list of a million of them costs the collector ~10%, which a
        # streaming producer does not pay); the producer's counters say how they ended.
        if producer.records_failed or producer.records_acknowledged != sent:
            raise SystemExit(f"client producer: {sent} records sent, "
                             f"{producer.records_acknowledged} acknowledged, "
                             f"{producer.records_failed} failed")
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, help="measured seconds per side and round")
    args = parser.parse_args()
    sizes = cluster_bench.QUICK if args.quick else cluster_bench.FULL
    if args.seconds:
        sizes = type(sizes)(**{**sizes.__dict__, "produce_s": args.seconds})
    rounds: list[tuple[float, float]] = []
    print(f"# {sizes.partitions} partitions, replication 3, acks=all, batches of "
          f"{sizes.records_per_batch} x {cluster_bench.RECORD_BYTES} B records, "
          f"{sizes.inflight} in flight per partition; load average before: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    # "spawn": a forked child would inherit the gRPC state of this process and its threads.
    raw_process = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    with LocalCluster(3) as cluster, Client(cluster.bootstrap) as client, raw_process:
        addresses = Addresses({n: cluster.address_of(n) for n in cluster.node_ids})
        for r in range(args.rounds):
            # Each side writes a GiB or more: its topic is deleted after it, so that no side
            # runs on a disk and page cache filled by the other, nor pays the others'
            # partitions' heartbeats; the order alternates for the same reason.
            sides = ["raw", "client"] if r % 2 == 0 else ["client", "raw"]
            figures: dict[str, float] = {}
            for side in sides:
                topic = f"bench-{side}-{r}"
                if side == "raw":
                    raw = raw_process.submit(
                        cluster_bench.raw_produce, addresses, topic, sizes).result()
                    if raw.errors:
                        print(f"raw produce errors (retried): {dict(raw.errors)}")
                    figures["raw"] = raw.records_s
                else:
                    hint = figures.get("raw", rounds[-1][0] if rounds else 60_000.0)
                    figures["client"] = client_throughput(client, topic, sizes, hint)
                client.admin.delete_topic(topic)
            rounds.append((figures["raw"], figures["client"]))
            print(f"round {r + 1} ({' then '.join(sides)}): raw Produce (bench/cluster.py): "
                  f"{figures['raw']:,.0f} records/s ({figures['raw'] / 1024:.1f} MiB/s); client "
                  f"producer: {figures['client']:,.0f} records/s; ratio "
                  f"{figures['client'] / figures['raw']:.2f}", flush=True)
    ratio = statistics.median(ours / raw for raw, ours in rounds)
    verdict = "OK" if ratio >= 0.8 else "MISSED"
    print(f"ratio client/raw: {ratio:.2f} (goal >= 0.8) {verdict}")
    if args.quick:
        print("# --quick: sizes too small for the goal to mean anything")


if __name__ == "__main__":
    main()
