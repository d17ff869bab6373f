"""Consumer-group benchmarks (issue 15) on a real 3-node cluster with real member processes
(`tidelog.member_process`), each figure beside its baseline from the same run.

* rebalance: a 3-member group consumes a 12-partition topic; a 4th member joins, and the time
  from its first heartbeat being allowed (it was started and connected beforehand, then told
  `go`, so the interpreter's start is not counted) to every partition being owned again at the
  new target (the last `assigned` event of the members that completes the 3/3/3/3 split) is
  one sample, in heartbeat intervals (group.consumer.heartbeat.interval.ms of the nodes). The
  4th member then leaves and the group settles before the next run. Goal: p50 over the runs
  <= 2 intervals.
* throughput: records/s of a 3-member group reading a pre-produced topic of 12 partitions to
  its end, against one consumer process assigned every partition (no group) reading the same
  topic, the same run; each side's processes are started and connected first, and timed from
  the first record any of them returned to the last (the group's joining is not counted;
  the rebalances while the other members join are), each poll at most 64 KiB per partition
  on both sides, so that a poll is not the whole topic.
  The two sides alternate for the rounds, and the figure is the ratio of the medians.
  Goal: >= 0.9 (the members share the machine's two cores).

Run: ``.venv/bin/python bench/groups.py [--quick] [--runs N] [--records N] [--rounds N]``.
``--quick`` uses tiny sizes (seconds) so that a smoke test keeps the script working; its figures
mean little. Figures are printed, never asserted: exit 1 only when something went wrong.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog import Client  # noqa: E402
from tidelog.member_history import MemberProcess  # noqa: E402
from tidelog.testing import LocalCluster, wait_for  # noqa: E402

PARTITIONS = 12
HEARTBEAT_MS = 500


def _ready(members: list[MemberProcess]) -> None:
    wait_for(lambda: all(m.ready for m in members), 60, "members connected")


def _split(members: list[MemberProcess]) -> list[int]:
    return sorted(len(m.owned) for m in members)


def rebalance(cluster: LocalCluster, runs: int) -> list[float]:
    """Samples, in heartbeat intervals."""
    topic = "bench-rebalance"
    base = [MemberProcess(cluster.bootstrap, "bench-rb", topic, f"m{i}") for i in range(3)]
    samples: list[float] = []
    try:
        wait_for(lambda: _split(base) == [4, 4, 4], 180, "three members own four each")
        for run in range(runs):
            joiner = MemberProcess(cluster.bootstrap, "bench-rb", topic, f"j{run}",
                                   "--wait-for-go")
            try:
                _ready([joiner])
                go = time.time()
                joiner.send("go")
                everyone = [*base, joiner]
                try:
                    wait_for(lambda everyone=everyone: _split(everyone) == [3, 3, 3, 3], 60,
                             "four members own three each")
                except AssertionError:
                    for m in everyone:
                        print(m.name, [e for e in m.history() if e["ev"] != "count"][-6:])
                    raise
                done = max(e["t"] for m in everyone for e in m.history()
                           if e["ev"] == "assigned" and e["p"])
                samples.append((done - go) * 1000 / HEARTBEAT_MS)
            finally:
                joiner.close()
            wait_for(lambda: _split(base) == [4, 4, 4], 180, "three members own four each")
            print(f"  run {run + 1}: {samples[-1]:.2f} heartbeat intervals", flush=True)
    finally:
        for member in base:
            member.kill()
    return samples


def _read_all(cluster: LocalCluster, topic: str, records: int, group: str | None,
              processes: int) -> float:
    """Records/s of `processes` member processes of `group` (None: one assigned consumer)
    reading `topic` to its end."""
    extra = ["--quiet", "--wait-for-go", "--partition-fetch-bytes", str(64 * 1024)] + (
        ["--assign"] if group is None else [])
    members = [MemberProcess(cluster.bootstrap, group or "unused", topic, f"r{i}", *extra)
               for i in range(processes)]
    try:
        _ready(members)
        for member in members:
            member.send("go")

        def counts() -> list[dict[str, float]]:
            return [e for m in members for e in m.history() if e["ev"] == "count"]

        wait_for(lambda: sum(e["n"] for e in counts()) >= records, 300, "every record read")
        # From the first record any process returned to the last: joining is not timed.
        start = min(e["t"] for e in counts())
        end = max(e["t"] for e in counts())
        return records / max(end - start, 1e-3)
    finally:
        for member in members:
            member.kill()


def throughput(cluster: LocalCluster, client: Client, records: int, rounds: int
               ) -> tuple[float, float]:
    topic = "bench-throughput"
    client.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    producer = client.producer(acks="all", linger_ms=5)
    value = b"v" * 100
    for i in range(records):
        producer.send(topic, value, partition=i % PARTITIONS)
    producer.flush()
    producer.close()
    group_rates: list[float] = []
    single_rates: list[float] = []
    for round_ in range(rounds):
        single_rates.append(_read_all(cluster, topic, records, None, 1))
        # Each round's group is new, so it reads from the beginning.
        group_rates.append(_read_all(cluster, topic, records, f"bench-tp-{round_}", 3))
        print(f"  round {round_ + 1}: group {group_rates[-1]:,.0f} records/s, single "
              f"{single_rates[-1]:,.0f} records/s", flush=True)
    return statistics.median(group_rates), statistics.median(single_rates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny sizes")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs, records, rounds = (2, 2_000, 1) if args.quick else (args.runs, args.records,
                                                              args.rounds)
    print(f"bench/groups.py: {runs} rebalance runs, {records} records x {rounds} rounds, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    with LocalCluster(3, offsets_topic_num_partitions=3,
                      group_consumer_heartbeat_interval_ms=HEARTBEAT_MS,
                      group_consumer_session_timeout_ms=10 * HEARTBEAT_MS) as cluster, \
            Client(cluster.bootstrap) as client:
        client.create_topic("bench-rebalance", partitions=PARTITIONS, replication_factor=3)
        samples = rebalance(cluster, runs)
        print(f"rebalance p50: {statistics.median(samples):.2f} heartbeat intervals of "
              f"{HEARTBEAT_MS} ms over {len(samples)} runs (max {max(samples):.2f}; goal <= 2)",
              flush=True)
        group, single = throughput(cluster, client, records, rounds)
        print(f"ratio group/single records/s: {group / single:.3f} (group {group:,.0f}, "
              f"single {single:,.0f}; goal >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
