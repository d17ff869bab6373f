"""Follower catch-up on a real 3-node cluster, against a fresh Fetch of the same bytes.

One follower is stopped (SIGSTOP) while ``--mb`` MB of 200-byte records in batches of 1000 are
committed by the two others (acks=all, default node settings: fsync before acknowledging).
Baseline: a consumer's Fetch of those bytes from the leader, from offset 0 to the end, 8 MiB a
request, nothing decoded (the bytes a follower needs, moved once over gRPC by the same node).
Figure: SIGCONT to the moment the follower's log end offset reaches the leader's, polled every
20 ms. Goal: catch-up / fetch <= 5.

Run: ``.venv/bin/python bench/catchup.py [--mb 100] [--quick]``. ``--quick`` moves 4 MB so a
smoke test keeps the script working; its ratio means little. The figures are printed, never
asserted: exit 1 only when something went wrong.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path, where bench/storage.py would
# shadow the storage package the nodes' code imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog.clock import wall_clock_ms  # noqa: E402
from tidelog.records import RecordInput, build_batch, iter_batches  # noqa: E402
from tidelog.testing import LocalCluster, Raw, wait_for  # noqa: E402
from tidelog.types import DEBUGGING_REPLICA_ID, LATEST_TIMESTAMP  # noqa: E402

MIB = 1024 * 1024
TOPIC = "catchup"
RECORD = b"c" * 200
RECORDS_PER_BATCH = 1000
FETCH_BYTES = 8 * MIB
GOAL = 5.0
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 * MIB),
    ("grpc.max_receive_message_length", 64 * MIB),
]


def produce(raw: Raw, node: int, batch: bytes) -> None:
    part = raw.produce(node, TOPIC, 0, batch, timeout_ms=30_000)
    if part.error_code:
        raise SystemExit(f"produce failed: {part}")


def log_end(raw: Raw, node: int) -> int:
    return raw.list_offset(node, TOPIC, 0, LATEST_TIMESTAMP,
                           replica_id=DEBUGGING_REPLICA_ID).offset


def fetch_all(raw: Raw, node: int, end: int) -> int:
    """Fetch from 0 to `end` as a consumer, FETCH_BYTES a request; the bytes moved."""
    offset = moved = 0
    while offset < end:
        part = raw.fetch(node, TOPIC, 0, offset, max_bytes=FETCH_BYTES)
        if part.error_code:
            raise SystemExit(f"fetch failed: {part}")
        if not part.records:
            raise SystemExit(f"fetch at {offset} returned nothing before {end}")
        moved += len(part.records)
        for _, header in iter_batches(part.records):
            offset = header.next_offset
    return moved


def run(mb: int) -> float:
    with (
        LocalCluster(3, auto_leader_rebalance_enable=False) as cluster,
        Raw(cluster, CHANNEL_OPTIONS) as raw,
    ):
        raw.create_topic(TOPIC, 1, 3)
        leader_id = raw.wait_leaders(TOPIC, 1)[0]
        stopped = next(n for n in cluster.node_ids if n != leader_id)
        now_ms = wall_clock_ms()  # retention (7 days) would delete records stamped 0
        batch = build_batch([RecordInput(RECORD, None, now_ms)] * RECORDS_PER_BATCH)
        cluster.pause(stopped)
        try:
            started = time.monotonic()
            while log_end(raw, leader_id) * len(RECORD) < mb * 1_000_000:
                produce(raw, leader_id, batch)
            produce_s = time.monotonic() - started
            end = log_end(raw, leader_id)
            started = time.monotonic()
            moved = fetch_all(raw, leader_id, end)
            fetch_s = time.monotonic() - started
        finally:
            cluster.resume(stopped)
        started = time.monotonic()
        wait_for(lambda: log_end(raw, stopped) >= end, 600, f"node {stopped} to catch up")
        catchup_s = time.monotonic() - started
        if raw.metadata(leader_id, TOPIC).partitions[0].leader_id != leader_id:
            raise SystemExit("leadership moved during the run")
    ratio = catchup_s / fetch_s
    print(f"records committed while node {stopped} was stopped: {end} "
          f"({moved / MIB:.1f} MiB in {produce_s:.1f} s)")
    print(f"fresh fetch of them from the leader: {fetch_s:.2f} s "
          f"({moved / MIB / fetch_s:.1f} MiB/s)")
    print(f"follower catch-up after SIGCONT:     {catchup_s:.2f} s "
          f"({moved / MIB / catchup_s:.1f} MiB/s)")
    print(f"ratio catch-up/fetch: {ratio:.2f} (goal <= {GOAL:g})")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MB committed while stopped")
    parser.add_argument("--quick", action="store_true", help="4 MB: a smoke run")
    args = parser.parse_args()
    run(4 if args.quick else args.mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
