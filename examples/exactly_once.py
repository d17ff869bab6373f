"""Consume, transform, produce - exactly once (Kafka's transactional pattern, issue 16).

Reads records of ``--input`` as a member of ``--group`` (``subscribe()``: the group's
coordinator assigns the partitions, and moves them as members come and go) with
read_committed, upper-cases each value and writes it to ``--output``, one transaction per poll:
the output records and the group's new positions commit together or not at all. The positions
go in with ``send_offsets_to_transaction(offsets, consumer.group_metadata())`` (Kafka's
KIP-447): the coordinator takes them only from a current member at its current epoch, so a
member that a rebalance left behind cannot commit offsets of partitions it no longer owns; its
transaction fails and is aborted. A run killed at any point (SIGKILL included) and started
again neither loses nor repeats an output record: the restarted program begins at the group's
committed positions (once the killed member's session has timed out and its partitions are
reassigned), and whatever the killed one wrote after them was aborted (its transaction times
out, or the new producer's ``init_transactions()`` fences it and aborts it at once) and is
invisible to read_committed readers of the output.

Run against a cluster from ``tidelog cluster up --detach``::

    .venv/bin/python examples/exactly_once.py --demo-data 1000

``--demo-data N`` first writes N input records; the program stops once it has owned partitions
and had no input for ``--idle-s`` seconds, and prints how many records it transformed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep the repository's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog import Client, OffsetAndMetadata, TopicPartition  # noqa: E402
from tidelog.errors import ProducerFencedError, TidelogError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:7420")
    parser.add_argument("--input", default="eos-in")
    parser.add_argument("--output", default="eos-out")
    parser.add_argument("--group", default="eos-upper")
    parser.add_argument("--transactional-id", default="eos-upper-0",
                        help="stable across restarts: a restart fences the previous run")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--demo-data", type=int, default=0, metavar="N")
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--max-poll-records", type=int, default=500,
                        help="records per poll, so per transaction")
    args = parser.parse_args()

    with Client(args.bootstrap) as client:
        existing = set(client.admin.list_topics())
        for topic in (args.input, args.output):
            if topic not in existing:
                client.create_topic(topic, partitions=args.partitions)
        if args.demo_data:
            with client.producer() as seed:
                for n in range(args.demo_data):
                    seed.send(args.input, f"record {n}".encode())
            print(f"wrote {args.demo_data} records to {args.input}")

        consumer = client.consumer(group_id=args.group, isolation_level="read_committed",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   max_poll_records=args.max_poll_records)
        consumer.subscribe([args.input])
        producer = client.producer(transactional_id=args.transactional_id)
        producer.init_transactions()  # fences a previous run and aborts what it left open
        done = 0
        idle_since = time.monotonic()
        try:
            while time.monotonic() - idle_since < args.idle_s:
                records = consumer.poll(timeout_ms=500)
                if not consumer.assignment():
                    # Joining, or waiting for partitions a killed run still holds until its
                    # session times out: not idle.
                    idle_since = time.monotonic()
                if not records:
                    continue
                producer.begin_transaction()
                try:
                    for record in records:
                        producer.send(args.output, (record.value or b"").upper(), key=record.key)
                    polled = {TopicPartition(r.topic, r.partition) for r in records}
                    positions = {tp: OffsetAndMetadata(consumer.position(tp), "")
                                 for tp in polled}
                    producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                    producer.commit_transaction()
                except ProducerFencedError:
                    print("fenced by a newer run of this transactional id; stopping")
                    return 1
                except TidelogError as exc:
                    # Also a rebalance between poll() and the commit: the coordinator refuses
                    # the old member epoch (ILLEGAL_GENERATION), and the records go again.
                    print(f"transaction failed ({exc}); aborting and rewinding")
                    producer.abort_transaction()
                    assigned = consumer.assignment()
                    for tp, committed in consumer.committed(assigned).items():  # back to them
                        consumer.seek(tp, committed.offset if committed is not None else 0)
                else:
                    done += len(records)
                # Idle is time without input: a transaction that took long (elections, a
                # loaded machine) is work, and must not count towards --idle-s.
                idle_since = time.monotonic()
        finally:
            producer.close()
            consumer.close(autocommit=False)
        print(f"transformed {done} records from {args.input} to {args.output} exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
