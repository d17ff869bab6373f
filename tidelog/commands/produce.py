"""``tidelog produce TOPIC``: send records from arguments or standard input (one per line)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from tidelog.commands._common import add_bootstrap, client_for
from tidelog.producer import RecordFuture


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic")
    parser.add_argument("values", nargs="*",
                        help="record values; none means read lines from standard input")
    parser.add_argument("--key", default=None, help="the key of every record")
    parser.add_argument("--key-separator", default=None, metavar="SEP",
                        help="split each line into KEY SEP VALUE (like kafka-console-producer)")
    parser.add_argument("--partition", type=int, default=None)
    parser.add_argument("--timestamp", type=int, default=None, help="CreateTime in ms")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="all")
    add_bootstrap(parser)


def _records(args: argparse.Namespace) -> Iterator[tuple[bytes | None, bytes]]:
    lines = args.values or (line.rstrip("\n") for line in sys.stdin)
    for line in lines:
        key = args.key
        value = line
        if args.key_separator is not None and args.key_separator in line:
            key, value = line.split(args.key_separator, 1)
        yield (None if key is None else key.encode()), value.encode()


def run(args: argparse.Namespace) -> int:
    """Send every record, then wait for their acknowledgements.

    ``--timeout-ms`` bounds each record's delivery (the producer's delivery timeout, retries
    included) and the wait for the last acknowledgements once the input ends, so a record the
    cluster keeps refusing with a retriable error ends the command with that error rather than
    after the producer's two-minute default. On any failure, Ctrl-C included, the producer is
    closed without waiting: what is not delivered yet fails at once, and the command ends."""
    client = client_for(args)
    futures: list[RecordFuture] = []
    try:
        producer = client.producer(
            acks=args.acks, delivery_timeout_ms=args.timeout_ms, max_block_ms=args.timeout_ms
        )
    except BaseException:
        client.close()
        raise
    try:
        for key, value in _records(args):
            futures.append(producer.send(
                args.topic, value, key=key, partition=args.partition,
                timestamp_ms=args.timestamp,
            ))
            if len(futures) % 10_000 == 0:
                print(f"sent {len(futures)} records...", file=sys.stderr)
        producer.flush(args.timeout_ms)
        per_partition: dict[int, list[int]] = {}
        for future in futures:
            meta = future.result()
            per_partition.setdefault(meta.partition, []).append(meta.offset)
    except BaseException:
        producer.close(timeout_ms=0)
        raise
    else:
        producer.close()
    finally:
        client.close()
    for partition, offsets in sorted(per_partition.items()):
        print(f"{args.topic}:{partition}: {len(offsets)} record(s) at offsets "
              f"{min(offsets)}..{max(offsets)}")
    if not futures:
        print("nothing to send", file=sys.stderr)
    return 0
