"""The transaction benchmarks, each a ratio measured in one run.

Produce as Kafka measures it (goal >= 0.95): one transactional producer sending 1 KiB records
to the 3 partitions as fast as it can and committing every 100 ms (begin, sends until 100 ms
have passed, commit_transaction(), begin again: a stream processor's exactly-once commit
interval), against the idempotent producer sending the same number of records
(``--timed-records``) with one flush at the end, in alternating rounds (``--rounds`` each) on
the same cluster; the figure is the ratio of the median records/s, beside the median of each
round's own ratio.

Produce in transactions of 100 records (reported; its goal was >= 0.7): transactional produce
against idempotent produce of the same records on a 3-node cluster (a topic of 3 partitions,
replication factor 3, one leader per node). A round sends ``--produce-txns`` transactions of
``--records`` records of 1 KiB spread over the 3 partitions (begin, sends, commit_transaction()
returning once PrepareCommit is durable); the idempotent round sends the same number of records
with the same producer settings and one flush at the end. Rounds alternate, ``--rounds`` each;
the figure is the median records/s and the ratio transactional/idempotent. Beside it, the median
of each round's own ratio (its transactional rate over the idempotent round that ran right after
it), which the other sessions' load on a shared machine moves less than the ratio of medians: it
swings by 2-4x over seconds, and adjacent rounds see about the same. This is measured at 1
producer and again at ``--producers`` producers side by side (each transactional one with its
own transactional id, against as many idempotent producers), the way Kafka's transaction
throughput is usually reported; all on the same cluster, one count after the other
(``--producers``, default 1,4,16,32). The goal is judged at the largest count (32 by default):
Kafka users run transactional producers many at a time, and then the ratio is bound by the
nodes' CPU a transactional record rather than by one producer's round trips; 1 and 4 are
reported beside it, never dropped. Per round the requests the nodes answered (their metrics) per
``--records`` records are printed too: a transaction's AddPartitionsToTxn, EndTxn and
WriteTxnMarkers beside its Produce requests. ``--produce-only`` skips the consume part,
``--consume-only`` the produce parts, ``--timed-only`` runs the commit-every-100-ms part alone.

Each round also reads the node processes' CPU (user + system, /proc) around it and prints it
per record: on 2 cores shared with other sessions the nodes' CPU is what the rates follow, and
it moves much less with the load than records/s. Its ratio idempotent/transactional is the
ratio the rates tend to once the cores are the limit (a transaction's coordinator writes,
markers and their RPCs are CPU, whether on the producer's path or beside it).

A third kind of round, reported beside the ratio: the idempotent producer with a flush after
every ``--records`` records ("flushed"), which is a transaction's produce leg alone. A
transaction's records must all be acknowledged before EndTxn (commit_transaction() flushes,
then commits), and the application begins the next transaction only once that returns, so no
coordinator, however fast, makes transactional produce beat this: flushed/idempotent is the
ceiling of the ratio on the machine at the time, and transactional/flushed is what the
coordinator's writes (Ongoing, PrepareCommit, the markers and Complete) cost on top.

Consume (goal >= 0.9): read_committed against read_uncommitted consume of a log with 10%
aborted transactions.

One partition, replication factor 1, on the same cluster after the produce part (one cluster
start for both), written at and read from its leader. The log is written once: ``--txns``
transactions of ``--records`` records of 1 KiB, each a transactional batch of its own producer
ended by a marker that this process writes as a transaction coordinator would (node-to-node
WriteTxnMarkers on the node's internal listener); every tenth transaction is aborted, so the
.txnindex holds one entry per ten transactions and every read_committed Fetch answer carries the
aborted ones it overlaps. Then the whole log is consumed from the start by a fresh `Client`
consumer, read_uncommitted and read_committed in turn (each first in every other round),
``--consume-rounds`` times each: the figure is the median time to reach the log end, and the
ratio is read_uncommitted's median over read_committed's (the read_committed consumer's speed
over the same log bytes, relative to the other's; it returns 10% fewer records, which it must
skip, not save). Each round also checks what it read: every committed record, and under
read_committed no aborted one. A read takes ~0.3 s on a quiet machine, less than the other
sessions' load takes to swing, so a few rounds' medians move by +-30% (0.55-1.48 recorded
for the same code): hence many rounds, and beside the ratio the median of each round's own
ratio and the CPU a log record (this process, i.e. the consumer, plus the leader), which the
load moves least.

Run: ``.venv/bin/python bench/transactions.py [--quick] [--txns N] [--records N] [--rounds N]
[--consume-rounds N] [--timed-records N] [--produce-only | --consume-only | --timed-only]``.
``--quick`` is a smoke test (seconds) whose figures mean little. Figures are printed, never
asserted: exit 1 only when something went wrong (an error answer, records missing or aborted
records read).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

# As a script this directory is first on sys.path: bench/cluster.py is imported from it (and
# takes the directory off again); keep the repository's.
import cluster as cluster_bench  # type: ignore[import-not-found]

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import grpc  # noqa: E402

from tidelog import Client, TopicPartition  # noqa: E402
from tidelog.producer import Producer  # noqa: E402
from tidelog.records import RecordInput, build_batch  # noqa: E402
from tidelog.testing import LocalCluster, Raw  # noqa: E402
from tidelog.v1 import raft_pb2 as rpb  # noqa: E402

TOPIC = "bench-txn"
PRODUCE_TOPIC = "bench-txn-produce"
TP = TopicPartition(TOPIC, 0)
VALUE_BYTES = 1024
ABORT_EVERY = 10
_METHOD = "/tidelog.v1.RaftTransport/WriteTxnMarkers"


class BenchError(Exception):
    pass


def write_log(cluster: LocalCluster, raw: Raw, node: int, txns: int,
              records: int) -> tuple[int, int]:
    """The transactions, each aborted when its index is a multiple of ABORT_EVERY, written at
    `node`, the partition's leader; returns (the log end offset, the committed records
    written)."""
    channel = grpc.insecure_channel(cluster.internal_address_of(node))
    markers = channel.unary_unary(
        _METHOD,
        request_serializer=rpb.WriteTxnMarkersRequest.SerializeToString,
        response_deserializer=rpb.WriteTxnMarkersResponse.FromString,
    )
    committed = 0
    try:
        for i in range(txns):
            pid, commit = 10_000 + i, i % ABORT_EVERY != 0
            now = int(time.time() * 1000)
            values = [b"%c%08d-%06d" % (b"c" if commit else b"a", i, j) + b"x" * VALUE_BYTES
                      for j in range(records)]
            batch = build_batch([RecordInput(v, None, now) for v in values], producer_id=pid,
                                producer_epoch=0, base_sequence=0, transactional=True)
            answer = raw.produce(node, TOPIC, 0, batch)
            if answer.error_code:
                raise BenchError(f"produce of transaction {i}: error {answer.error_code}")
            request = rpb.WriteTxnMarkersRequest(markers=[rpb.WritableTxnMarker(
                producer_id=pid, producer_epoch=0, transaction_result=commit,
                topics=[rpb.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])],
            )])
            result = markers(request, timeout=30)
            codes = [p.error_code for m in result.markers for t in m.topics for p in t.partitions]
            if codes != [0]:
                raise BenchError(f"marker of transaction {i}: {codes}")
            committed += records if commit else 0
    finally:
        channel.close()
    end = raw.list_offset(node, TOPIC, 0, -1, isolation=1)
    if end.error_code:
        raise BenchError(f"ListOffsets: error {end.error_code}")
    return end.offset, committed


class Read(NamedTuple):
    seconds: float
    #: CPU of this process (the consumer and its client's threads) and of the partition's
    #: leader over the round, in microseconds a log record.
    cpu_us: float


def consume(cluster: LocalCluster, leader: int, isolation: str, end: int, expected: int) -> Read:
    """A fresh consumer reads the log to `end`; raises unless it read `expected` records,
    none of them aborted under read_committed."""
    leader_pid = cluster.pid_of(leader)
    assert leader_pid is not None
    with Client(cluster.bootstrap) as client:
        consumer = client.consumer(auto_offset_reset="earliest", isolation_level=isolation)
        consumer.assign([TP])
        read = aborted = 0
        cpu_s = time.process_time() + cluster_bench.cpu_seconds(leader_pid)
        started = time.perf_counter()
        deadline = time.monotonic() + 300
        while consumer.position(TP) < end:
            if time.monotonic() > deadline:
                raise BenchError(f"{isolation}: stuck at {consumer.position(TP)} of {end}")
            for record in consumer.poll(timeout_ms=500):
                read += 1
                aborted += record.value is not None and record.value[:1] == b"a"
        seconds = time.perf_counter() - started
        cpu_s = time.process_time() + cluster_bench.cpu_seconds(leader_pid) - cpu_s
    if read != expected or (isolation == "read_committed" and aborted):
        raise BenchError(f"{isolation}: read {read} records ({aborted} aborted), "
                         f"expected {expected}")
    return Read(seconds, cpu_s / end * 1e6)


KINDS = ("transactional", "idempotent", "flushed")
#: How often the "timed" transactional producer commits (Kafka Streams' exactly-once default
#: commit.interval.ms).
COMMIT_INTERVAL_S = 0.1


class Round(NamedTuple):
    records_s: float
    #: CPU of the node processes per record (user + system, every thread), in microseconds.
    nodes_us: float
    #: Requests the nodes answered per `--records` records, by RPC (their metrics).
    requests: dict[str, float]
    #: Transactions committed in the round.
    commits: int = 0


def requests_answered(cluster: LocalCluster) -> dict[str, float]:
    """Every node's answered requests by RPC, summed (``tidelog_requests_total``), but the
    nodes' own heartbeats to the controller."""
    counts: dict[str, float] = {}
    for line in cluster_bench.metrics_lines(cluster):
        if line.startswith("tidelog_requests_total{") and 'rpc="' in line:
            rpc = line.split('rpc="', 1)[1].split('"', 1)[0]
            if rpc != "NodeHeartbeat":
                counts[rpc] = counts.get(rpc, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def produce_round(client: Client, cluster: LocalCluster, txns: int, records: int, kind: str,
                  name: str, producers: int = 1) -> Round:
    """One round: `producers` producers side by side (threads of one client), each sending
    `txns` transactions of `records` records (transactional, each its own transactional id,
    named after the round's `name`), the same records flushed once (idempotent) or flushed
    every `records` (flushed), or the same records in transactions committed every
    COMMIT_INTERVAL_S whatever they hold ("timed"). The nodes' CPU and answered requests are
    read around it."""
    pids = [pid for n in cluster.node_ids if (pid := cluster.pid_of(n)) is not None]
    transactional = kind in ("transactional", "timed")
    value = b"x" * VALUE_BYTES
    configs = [{"transactional_id": f"bench-{name}-{p}"} if transactional else {}
               for p in range(producers)]
    opened = [client.producer(**config) for config in configs]
    try:
        if transactional:
            with ThreadPoolExecutor(producers) as pool:
                list(pool.map(lambda producer: producer.init_transactions(), opened))

        def run(producer: Producer) -> int:
            """Sends the round's records; returns the transactions committed."""
            if kind == "timed":
                clock, commits = time.monotonic, 1
                producer.begin_transaction()
                due = clock() + COMMIT_INTERVAL_S
                for i in range(txns * records):
                    producer.send(PRODUCE_TOPIC, value, partition=i % 3)
                    if clock() >= due:
                        producer.commit_transaction()
                        producer.begin_transaction()
                        due, commits = clock() + COMMIT_INTERVAL_S, commits + 1
                producer.commit_transaction()
                return commits
            for _ in range(txns):
                if transactional:
                    producer.begin_transaction()
                for i in range(records):
                    producer.send(PRODUCE_TOPIC, value, partition=i % 3)
                if transactional:
                    producer.commit_transaction()
                elif kind == "flushed":
                    producer.flush()
            producer.flush()
            return txns if transactional else 0

        answered = requests_answered(cluster)
        nodes_s = sum(cluster_bench.cpu_seconds(pid) for pid in pids)
        started = time.perf_counter()
        with ThreadPoolExecutor(producers) as pool:
            commits = sum(pool.map(run, opened))
        seconds = time.perf_counter() - started
        nodes_s = sum(cluster_bench.cpu_seconds(pid) for pid in pids) - nodes_s
        answered = {rpc: n - answered.get(rpc, 0.0)
                    for rpc, n in requests_answered(cluster).items()}
        failed = sum(producer.records_failed for producer in opened)
        if failed:
            raise BenchError(f"{failed} records failed")
    finally:
        for producer in opened:
            producer.close()
    sent = producers * txns * records
    return Round(sent / seconds, nodes_s / sent * 1e6,
                 {rpc: n * records / sent for rpc, n in answered.items()}, commits)


def timed_part(args: argparse.Namespace, cluster: LocalCluster) -> None:
    """One producer committing every COMMIT_INTERVAL_S against the idempotent producer, the
    same records, in alternating rounds (each kind first in every other round)."""
    txns = max(1, args.timed_records // args.records)
    rounds: dict[str, list[Round]] = {"timed": [], "idempotent": []}
    with Client(cluster.bootstrap) as client:
        produce_round(client, cluster, 2, args.records, "timed", "timed-warm-up")
        for n in range(args.rounds):
            for kind in sorted(rounds, reverse=n % 2 == 1):
                rounds[kind].append(produce_round(client, cluster, txns, args.records, kind,
                                                  f"timed-{n}"))
    rates = {kind: statistics.median(r.records_s for r in rs) for kind, rs in rounds.items()}
    cpu = {kind: statistics.median(r.nodes_us for r in rs) for kind, rs in rounds.items()}
    print(f"\n## produce at full speed, 1 producer, {txns * args.records} records of "
          f"{VALUE_BYTES} B a round over 3 partitions (RF 3), {args.rounds} alternating round(s) "
          f"of each kind; load {os.getloadavg()[0]:.1f}")
    commits = statistics.median(r.commits for r in rounds["timed"])
    for kind, label in (("timed", "transactional, commit every "
                                  f"{COMMIT_INTERVAL_S * 1000:.0f} ms"),
                        ("idempotent", "idempotent, one flush")):
        print(f"{label}: median {rates[kind]:,.0f} records/s "
              f"({rates[kind] * VALUE_BYTES / 1024 / 1024:.1f} MiB/s); nodes {cpu[kind]:,.0f} us "
              f"CPU/record; rounds "
              + " ".join(f"{r.records_s:,.0f}" for r in rounds[kind]))
    print(f"  transactions a round: median {commits:.0f} ({txns * args.records / commits:,.0f} "
          "records each)")
    ratio = rates["timed"] / rates["idempotent"]
    paired = [t.records_s / i.records_s for t, i in zip(rounds["timed"], rounds["idempotent"],
                                                       strict=True)]
    print(f"ratio transactional (commit every {COMMIT_INTERVAL_S * 1000:.0f} ms)/idempotent "
          f"produce: {ratio:.3f} (goal >= 0.95) {'met' if ratio >= 0.95 else 'missed'}; per "
          f"round median {statistics.median(paired):.3f} ({' '.join(f'{r:.2f}' for r in paired)})")


def produce(args: argparse.Namespace, cluster: LocalCluster,
            counts: list[int]) -> dict[int, dict[str, list[Round]]]:
    """Per producer count, the rounds of each kind in order."""
    rates: dict[int, dict[str, list[Round]]] = {n: {kind: [] for kind in KINDS} for n in counts}
    with Client(cluster.bootstrap) as client:
        # Warm-up: topics, coordinators.
        produce_round(client, cluster, 2, args.records, "transactional", "warm-up")
        for producers in counts:
            for n in range(args.rounds):
                for kind, values in rates[producers].items():
                    values.append(produce_round(client, cluster, args.produce_txns, args.records,
                                                kind, f"{producers}-{n}", producers))
    return rates


def report_produce(args: argparse.Namespace,
                   measured: dict[int, dict[str, list[Round]]]) -> None:
    ratios = {}
    for producers, by_round in measured.items():
        produced = {kind: statistics.median(r.records_s for r in rounds)
                    for kind, rounds in by_round.items()}
        cpu = {kind: statistics.median(r.nodes_us for r in rounds)
               for kind, rounds in by_round.items()}
        for kind, rate in produced.items():
            print(f"{producers} {kind} producer(s): median {rate:,.0f} records/s over "
                  f"{args.rounds} round(s) of {producers * args.produce_txns * args.records} "
                  f"records each; nodes {cpu[kind]:,.0f} us CPU/record")
        ratios[producers] = produced['transactional'] / produced['idempotent']
        print(f"ratio transactional/idempotent produce at {producers} producer(s): "
              f"{ratios[producers]:.3f} (goal >= 0.7)")
        print(f"  ceiling flushed/idempotent: {produced['flushed'] / produced['idempotent']:.3f}"
              f"; transactional/flushed: "
              f"{produced['transactional'] / produced['flushed']:.3f}; "
              f"load {os.getloadavg()[0]:.1f}")
        paired = [t.records_s / i.records_s for t, i in zip(
            by_round["transactional"], by_round["idempotent"], strict=True)]
        print(f"  per round, transactional over the idempotent round right after it: median "
              f"{statistics.median(paired):.3f} ({' '.join(f'{r:.2f}' for r in paired)})")
        for kind in ("transactional", "idempotent"):
            rpcs = sorted({rpc for r in by_round[kind] for rpc in r.requests})
            per = {rpc: statistics.median(r.requests.get(rpc, 0.0) for r in by_round[kind])
                   for rpc in rpcs}
            print(f"  requests the nodes answered per {args.records} {kind} records: "
                  + ", ".join(f"{rpc} {n:.2f}" for rpc, n in per.items() if n >= 0.005))
        txn_us = cpu["transactional"] or float("nan")  # a --quick round may read 0 ticks
        print(f"  nodes' CPU per record, idempotent/transactional: "
              f"{cpu['idempotent'] / txn_us:.3f}; flushed/transactional: "
              f"{cpu['flushed'] / txn_us:.3f}")
    judged = max(ratios)
    print(f"goal >= 0.7 judged at {judged} producers: {ratios[judged]:.3f} "
          f"({'met' if ratios[judged] >= 0.7 else 'missed'}); "
          + ", ".join(f"{n}: {r:.3f}" for n, r in ratios.items() if n != judged))


def consume_part(args: argparse.Namespace, cluster: LocalCluster, raw: Raw) -> None:
    """The read_committed / read_uncommitted ratio over a log of its own (one partition, RF 1,
    read from its leader)."""
    print(f"log: {args.txns} transactions of {args.records} records of {VALUE_BYTES} B, "
          f"1 in {ABORT_EVERY} aborted")
    raw.create_topic(TOPIC, 1, 1)
    (leader,) = raw.wait_leaders(TOPIC, 1)
    started = time.perf_counter()
    end, committed = write_log(cluster, raw, leader, args.txns, args.records)
    print(f"written in {time.perf_counter() - started:.1f}s; log end offset {end}")
    reads: dict[str, list[Read]] = {"read_uncommitted": [], "read_committed": []}
    expected = {"read_uncommitted": args.txns * args.records, "read_committed": committed}
    for n in range(args.consume_rounds):
        # Each isolation level first in every other round: neither always reads right after
        # the other's round (its garbage, its client's closing).
        for isolation in sorted(reads, reverse=n % 2 == 1):
            reads[isolation].append(consume(cluster, leader, isolation, end, expected[isolation]))
    medians = {k: statistics.median(r.seconds for r in v) for k, v in reads.items()}
    cpu = {k: statistics.median(r.cpu_us for r in v) for k, v in reads.items()}
    for isolation, median in medians.items():
        print(f"{isolation}: median {median:.3f}s over {args.consume_rounds} round(s) "
              f"({args.txns * args.records / median:,.0f} log records/s); consumer + leader "
              f"{cpu[isolation]:.2f} us CPU a log record; rounds "
              f"{' '.join(f'{r.seconds:.2f}' for r in reads[isolation])}")
    print(f"ratio read_committed/read_uncommitted consume speed: "
          f"{medians['read_uncommitted'] / medians['read_committed']:.3f} (goal >= 0.9)")
    paired = [u.seconds / c.seconds for u, c in zip(
        reads["read_uncommitted"], reads["read_committed"], strict=True)]
    print(f"  per round, read_committed over the read_uncommitted read beside it: median "
          f"{statistics.median(paired):.3f} ({' '.join(f'{r:.2f}' for r in paired)}); "
          f"CPU a log record, read_uncommitted/read_committed: "
          f"{cpu['read_uncommitted'] / (cpu['read_committed'] or float('nan')):.3f}; "
          f"load {os.getloadavg()[0]:.1f}")


def _counts(text: str) -> list[int]:
    counts = sorted({int(n) for n in text.split(",") if n.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"producer counts >= 1 expected, got {text!r}")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny sizes")
    parser.add_argument("--txns", type=int, default=400)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--consume-rounds", type=int, default=15,
                        help="reads of the log under each isolation level (a read takes "
                             "~0.3 s on a quiet machine: many short alternating rounds)")
    parser.add_argument("--timed-records", type=int, default=50_000,
                        help="records a round of the commit-every-100-ms comparison")
    parser.add_argument("--produce-txns", type=int, default=20,
                        help="transactions per produce round")
    parser.add_argument("--producers", type=_counts, default=[1, 4, 16, 32],
                        help="the producer counts measured, comma-separated (each count's "
                             "producers side by side, each transactional one with its own "
                             "transactional id); default 1,4,16,32")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--produce-only", action="store_true", help="skip the consume part")
    only.add_argument("--consume-only", action="store_true", help="skip the produce parts")
    only.add_argument("--timed-only", action="store_true",
                      help="only the transactional producer committing every 100 ms against "
                           "the idempotent one")
    args = parser.parse_args()
    if args.quick:
        args.txns, args.records, args.rounds, args.produce_txns = 20, 10, 1, 3
        args.consume_rounds, args.timed_records = 1, 500
        args.producers = [1, 4]
    print(f"# bench/transactions.py {datetime.now(UTC).isoformat(timespec='seconds')} "
          f"python {platform.python_version()} cpus {os.cpu_count()} "
          f"load {os.getloadavg()[0]:.1f}")
    try:
        # One cluster for both parts (one start: ``--quick`` stays a few seconds).
        # The consume part writes its transactions straight to the leader, with markers of
        # its own and no coordinator: nothing to verify them against.
        with LocalCluster(nodes=3, transaction_state_log_num_partitions=3,
                          offsets_topic_num_partitions=1,
                          transaction_partition_verification_enable=False) as cluster, \
                Raw(cluster) as raw:
            if not args.consume_only:
                raw.create_topic(PRODUCE_TOPIC, 3, 3)
                raw.wait_leaders(PRODUCE_TOPIC, 3)
                timed_part(args, cluster)
            if not (args.consume_only or args.timed_only):
                measured = produce(args, cluster, args.producers)
                report_produce(args, measured)
            if not (args.produce_only or args.timed_only):
                consume_part(args, cluster, raw)
    except BenchError as exc:
        print(f"FAILED: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
