"""``tidelog demo``: the tour for a new user, on embedded defaults (contract §3).

It starts a real three-node cluster in a temporary directory, writes records stamped over the
past hour, looks offsets up by time under both isolation levels, holds a transaction open over
the partitions (the last stable offset stays below the high watermark until it commits), kills
a partition leader and shows the client finding the new one, commits a consumer group's
positions, kills the group's coordinator and reads the commit back from the new one, then shuts
everything down. Every step
prints what it does and what came back, so the output reads as a walkthrough.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidelog.types import OffsetAndMetadata

TOPIC = "demo-events"
PARTITIONS = 3
RECORDS_PER_PARTITION = 120
MINUTE_MS = 60_000


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3, help="cluster size (default 3)")
    parser.add_argument("--data-dir", default=None,
                        help="keep the cluster's files here (default: a temporary directory)")


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _offset(value: OffsetAndMetadata | None) -> str:
    return "none" if value is None else str(value.offset)


def run(args: argparse.Namespace) -> int:
    from tidelog.client import Client
    from tidelog.testing import LocalCluster
    from tidelog.types import IsolationLevel, OffsetSpec, TopicPartition

    _step(f"Starting a local cluster of {args.nodes} node processes")
    started = time.monotonic()
    # __transaction_state with a partition per node rather than Kafka's 50: the tour's one
    # transactional id needs one, and 150 more Raft groups slow a laptop's first lookup.
    with LocalCluster(args.nodes, data_dir=args.data_dir,
                      transaction_state_log_num_partitions=args.nodes) as cluster:
        print(f"ready in {time.monotonic() - started:.1f}s; bootstrap: {cluster.bootstrap}")
        client = Client(cluster.bootstrap)
        try:
            _step(f"Creating topic {TOPIC!r}: {PARTITIONS} partitions, replication factor "
                  f"{min(3, args.nodes)}")
            client.create_topic(TOPIC, partitions=PARTITIONS)
            for index, info in enumerate(client.describe_topics([TOPIC])[TOPIC].partitions):
                print(f"  partition {index}: leader node {info.leader} (epoch "
                      f"{info.leader_epoch}), replicas {list(info.replicas)}")

            _step("Producing records stamped one every 30 s over the past hour (acks=all)")
            now = int(time.time() * 1000)
            start_ms = now - 60 * MINUTE_MS
            producer = client.producer(acks="all")
            total = RECORDS_PER_PARTITION * PARTITIONS
            futures = []
            for i in range(RECORDS_PER_PARTITION):
                for p in range(PARTITIONS):
                    futures.append(producer.send(
                        TOPIC, f"reading {i} from sensor {p}".encode(), key=f"sensor-{p}".encode(),
                        partition=p, timestamp_ms=start_ms + i * MINUTE_MS // 2,
                    ))
                if (i + 1) % 40 == 0:
                    print(f"  [{'#' * ((i + 1) // 8):<15}] {(i + 1) * PARTITIONS}/{total} sent")
            producer.flush()
            for future in futures:
                future.result()
            producer.close()
            print(f"  all {total} records acknowledged by a majority")

            tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
            half_hour_ago = now - 30 * MINUTE_MS
            for isolation in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
                _step(f"ListOffsets with {isolation.name.lower()}")
                specs = {
                    "earliest": OffsetSpec.earliest(),
                    "latest": OffsetSpec.latest(),
                    "max timestamp": OffsetSpec.max_timestamp(),
                    "30 min ago": OffsetSpec.for_timestamp(half_hour_ago),
                }
                for label, spec in specs.items():
                    answers = client.list_offsets({tp: spec for tp in tps},
                                                  isolation_level=isolation)
                    cells = "  ".join(
                        f"p{tp.partition}={answers[tp].offset}" for tp in tps
                    )
                    print(f"  {label:<14} {cells}")
            print("  (no open transactions: the last stable offset equals the high watermark)")

            _step("A transaction over the 3 partitions: read_committed stops at it while open")
            latest_spec = OffsetSpec.latest()

            def stable_and_high() -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
                bounds = [
                    {tp: answer.offset for tp, answer in client.list_offsets(
                        dict.fromkeys(tps, latest_spec), isolation_level=isolation).items()}
                    for isolation in (IsolationLevel.READ_COMMITTED,
                                      IsolationLevel.READ_UNCOMMITTED)
                ]
                return bounds[0], bounds[1]

            def show(label: str) -> bool:
                lso, hw = stable_and_high()
                print(f"  {label:<10} " + "  ".join(
                    f"p{tp.partition}: LSO {lso[tp]} HW {hw[tp]}" for tp in tps))
                return lso == hw

            txn_producer = client.producer(transactional_id="demo-transfer")
            txn_producer.init_transactions()
            txn_producer.begin_transaction()
            for tp in tps:
                txn_producer.send(TOPIC, f"transfer leg {tp.partition}".encode(),
                                  partition=tp.partition)
            txn_producer.flush()
            show("open")
            txn_producer.commit_transaction()
            waited = time.monotonic() + 10
            while stable_and_high()[0] != stable_and_high()[1] and time.monotonic() < waited:
                time.sleep(0.05)  # the markers follow the commit's answer
            if show("committed"):
                print("  committed: the markers are written, LSO = HW, read_committed reads all")
            txn_producer.close()

            consumer = client.consumer()
            found = consumer.offsets_for_times({tps[0]: half_hour_ago})[tps[0]]
            assert found is not None
            consumer.assign([tps[0]])
            consumer.seek(tps[0], found.offset)
            first = consumer.poll(timeout_ms=2000)[0]
            print(f"\n  rewound partition 0 to 30 minutes ago: offset {first.offset}, "
                  f"value {first.value!r}")

            _step("Killing the leader of partition 0 (SIGKILL)")
            victim = client.describe_topics([TOPIC])[TOPIC].partitions[0].leader
            refreshes = client.metadata_refreshes
            cluster.kill(victim)
            print(f"  node {victim} killed; asking for the latest offset again...")
            asked = time.monotonic()
            latest = client.list_offsets({tps[0]: OffsetSpec.latest()})[tps[0]]
            after = client.describe_topics([TOPIC])[TOPIC].partitions[0]
            print(f"  answered in {time.monotonic() - asked:.2f}s by the new leader, node "
                  f"{after.leader} (epoch {after.leader_epoch}): latest offset {latest.offset}; "
                  f"{client.metadata_refreshes - refreshes} metadata refresh(es), no error")
            producer = client.producer(acks="all")
            meta = producer.send(TOPIC, b"written after the failover", partition=0).result()
            producer.close()
            print(f"  a new record went to offset {meta.offset}; nothing acknowledged was lost")
            cluster.restart(victim)
            print(f"  node {victim} restarted and rejoins as a follower")

            _step("Consumer offsets: commit, kill the coordinator, read the commit back")
            group = "demo-readers"
            reader = client.consumer(group_id=group, auto_offset_reset="earliest",
                                     enable_auto_commit=False)
            reader.assign(tps)
            print(f"  group {group!r} has no committed offsets yet, so its consumer starts at "
                  "the earliest offset (auto_offset_reset)")
            got = 0
            polls_until = time.monotonic() + 30
            while got < total // 2 and time.monotonic() < polls_until:
                got += len(reader.poll(timeout_ms=500))
            reader.commit()
            committed = reader.committed(tps)
            reader.close()
            cells = "  ".join(f"p{tp.partition}={_offset(committed[tp])}" for tp in tps)
            coordinator = client.admin.find_coordinator(group)
            print(f"  read {got} records and committed the positions: {cells}")
            print(f"  the group's coordinator is node {coordinator} (the leader of its "
                  "__consumer_offsets partition); killing it (SIGKILL)...")
            cluster.kill(coordinator)
            asked = time.monotonic()
            again = client.admin.list_consumer_group_offsets(group, tps)
            now_at = client.connections.coordinators.cached(group)
            same = all(again.get(tp) == committed[tp] for tp in tps)
            print(f"  read back in {time.monotonic() - asked:.2f}s from the new coordinator, "
                  f"node {now_at}: " + "  ".join(f"p{tp.partition}={_offset(again.get(tp))}"
                                                 for tp in tps))
            print("  the same offsets: nothing committed was lost" if same else
                  "  DIFFERENT offsets: a committed offset was lost")
            resumed = client.consumer(group_id=group, enable_auto_commit=False)
            resumed.assign(tps)
            print("  a new consumer of the group starts where the group left off: " + "  ".join(
                f"p{tp.partition}={resumed.position(tp)}" for tp in tps))
            resumed.close()
            cluster.restart(coordinator)
            print(f"  node {coordinator} restarted")
            if not same:
                return 1
        finally:
            client.close()
        _step("Shutting down (leaders move away before each node exits)")
    print("done: every node stopped")
    return 0
