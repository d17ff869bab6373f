"""``tidelog perf produce`` and ``tidelog perf consume``: Kafka's kafka-producer-perf-test and
kafka-consumer-perf-test, with their options and their output lines, so that figures and
scripts carry over.

``perf produce`` sends ``--num-records`` records of ``--record-size`` random uppercase letters
(one payload for all records, as Kafka's tool does) with the client library's producer, at most
``--throughput`` records/s (-1: as fast as it goes), and measures each record's latency from
``send()`` to its acknowledgement. Every 5 s it prints the window's figures, at the end the
whole run's with percentiles, in Kafka's formats::

    50001 records sent, 10000.2 records/sec (9.77 MB/sec), 12.3 ms avg latency, 80.0 ms max
    latency.
    100000 records sent, 9998.400256 records/sec (9.76 MB/sec), 11.92 ms avg latency, 80.00 ms
    max latency, 9 ms 50th, 25 ms 95th, 40 ms 99th, 75 ms 99.9th.

(each one line).

``perf consume`` reads ``--messages`` (or ``--num-records``) records with the consumer and prints
Kafka's CSV summary (``start.time, end.time, data.consumed.in.MB, MB.sec,
data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec,
fetch.nMsg.sec``); ``--show-detailed-stats`` prints a row per ``--reporting-interval`` as it
runs, otherwise a progress line goes to standard error. MB is 2**20 bytes, as in Kafka's tools.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.commands._common import add_bootstrap, checked_bootstrap, client_for
from tidelog.errors import ConfigurationError, RequestTimedOutError

if TYPE_CHECKING:
    from tidelog.producer import RecordFuture

MB = 1024 * 1024
_WINDOW_S = 5.0  # kafka-producer-perf-test's reporting interval


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="perf", metavar="{produce,consume}")
    sub.required = True
    produce = sub.add_parser("produce", help="kafka-producer-perf-test",
                             description="send records as fast as allowed; print throughput "
                                         "and latency as kafka-producer-perf-test does")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=None,
                         help="bytes per record (or --payload-file)")
    produce.add_argument("--payload-file", type=Path, default=None,
                         help="records from this file, one per line, sent in random order")
    produce.add_argument("--throughput", type=float, required=True,
                         help="records/s at most; -1 for no limit")
    produce.add_argument("--producer-props", nargs="+", default=[], metavar="PROP=VALUE",
                         help="producer settings by Kafka's names (acks, linger.ms, batch.size, "
                              "compression.type, ...; bootstrap.servers)")
    produce.add_argument("--producer.config", dest="producer_config", type=Path, default=None,
                         help="properties file of producer settings")
    add_bootstrap(produce)
    produce.set_defaults(_run=run_produce)

    consume = sub.add_parser("consume", help="kafka-consumer-perf-test",
                             description="read records as fast as possible; print throughput "
                                         "as kafka-consumer-perf-test does")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", "--num-records", dest="messages", type=int,
                         required=True, help="records to read")
    consume.add_argument("--group", default=None,
                         help="consume as a member of this group (default: assign every "
                              "partition, no group)")
    consume.add_argument("--from-latest", action="store_true",
                         help="start at the end of each partition (default: the beginning)")
    consume.add_argument("--timeout", type=int, default=10_000,
                         help="ms without a record before giving up (Kafka's default 10000)")
    consume.add_argument("--show-detailed-stats", action="store_true",
                         help="a row per --reporting-interval while it runs")
    consume.add_argument("--reporting-interval", type=int, default=5000, metavar="MS")
    consume.add_argument("--hide-header", action="store_true")
    consume.add_argument("--date-format", default="%Y-%m-%d %H:%M:%S:%f",
                         help="strftime format of the times (Kafka: yyyy-MM-dd HH:mm:ss:SSS)")
    add_bootstrap(consume)
    consume.set_defaults(_run=run_consume)


def run(args: argparse.Namespace) -> int:
    return int(args._run(args))


# ----------------------------------------------------------------------------------------------
# produce

#: Kafka producer settings -> (ProducerConfig field, parser).
_PRODUCER_PROPS: dict[str, tuple[str, Any]] = {
    "acks": ("acks", str),
    "linger.ms": ("linger_ms", int),
    "batch.size": ("batch_size", int),
    "buffer.memory": ("buffer_memory", int),
    "compression.type": ("compression_type", str),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "max.block.ms": ("max_block_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight", int),
    "enable.idempotence": ("idempotent", lambda v: {"true": True, "false": False}[v.lower()]),
}


def producer_settings(props: dict[str, str]) -> dict[str, Any]:
    """ProducerConfig keyword arguments from Kafka-named producer properties."""
    out: dict[str, Any] = {}
    for name, raw in props.items():
        if name not in _PRODUCER_PROPS:
            raise ConfigurationError(
                f"unknown producer property {name!r} (known: bootstrap.servers, "
                f"{', '.join(_PRODUCER_PROPS)})"
            )
        field_name, parse = _PRODUCER_PROPS[name]
        try:
            out[field_name] = parse(raw.strip())
        except (ValueError, KeyError):
            raise ConfigurationError(f"producer property {name}={raw!r} is not valid") from None
    return out


def _props(args: argparse.Namespace) -> dict[str, str]:
    from tidelog.properties import read_properties

    props = dict(read_properties(args.producer_config)) if args.producer_config else {}
    for item in args.producer_props:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigurationError(f"--producer-props takes PROP=VALUE, got {item!r}")
        props[name.strip()] = value
    bootstrap = props.pop("bootstrap.servers", None)
    if bootstrap is not None:
        args.bootstrap = checked_bootstrap(bootstrap, "bootstrap.servers")
    return props


@dataclass
class Stats:
    """Kafka's ProducerPerformance.Stats: every latency of the run, and the window's."""

    started: float
    count: int = 0
    bytes: int = 0
    max_ms: float = 0.0
    total_ms: float = 0.0
    latencies: list[float] = field(default_factory=list)
    window_start: float = 0.0
    window_count: int = 0
    window_bytes: int = 0
    window_max_ms: float = 0.0
    window_total_ms: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, latency_ms: float, size: int) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            self.total_ms += latency_ms
            self.max_ms = max(self.max_ms, latency_ms)
            self.latencies.append(latency_ms)
            self.window_count += 1
            self.window_bytes += size
            self.window_total_ms += latency_ms
            self.window_max_ms = max(self.window_max_ms, latency_ms)

    def window_line(self, now: float) -> str | None:
        """The progress line of the window ending now (None when nothing was acknowledged)."""
        with self.lock:
            if not self.window_count:
                return None
            elapsed = max(now - self.window_start, 1e-9)
            line = (f"{self.window_count} records sent, {self.window_count / elapsed:.1f} "
                    f"records/sec ({self.window_bytes / MB / elapsed:.2f} MB/sec), "
                    f"{self.window_total_ms / self.window_count:.1f} ms avg latency, "
                    f"{self.window_max_ms:.1f} ms max latency.")
            self.window_start = now
            self.window_count = self.window_bytes = 0
            self.window_total_ms = self.window_max_ms = 0.0
            return line

    def total_line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        ranked = sorted(self.latencies)
        p50, p95, p99, p999 = (_rank(ranked, q) for q in (0.5, 0.95, 0.99, 0.999))
        return (f"{self.count} records sent, {self.count / elapsed:f} records/sec "
                f"({self.bytes / MB / elapsed:.2f} MB/sec), "
                f"{self.total_ms / max(self.count, 1):.2f} ms avg latency, "
                f"{self.max_ms:.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, "
                f"{p99} ms 99th, {p999} ms 99.9th.")


def _rank(ranked: list[float], q: float) -> int:
    """Kafka's percentiles: the sample at rank q * n, as whole ms."""
    if not ranked:
        return 0
    return int(ranked[min(len(ranked) - 1, int(q * len(ranked)))])


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if (args.record_size is None) == (args.payload_file is None):
        raise ConfigurationError("give either --record-size or --payload-file")
    if args.payload_file is not None:
        lines = [line for line in args.payload_file.read_bytes().split(b"\n") if line]
        if not lines:
            raise ConfigurationError(f"--payload-file {args.payload_file} has no records")
        return lines
    if args.record_size < 0:
        raise ConfigurationError("--record-size must be >= 0")
    return [bytes(random.randrange(65, 91) for _ in range(args.record_size))]


def run_produce(args: argparse.Namespace) -> int:
    if args.num_records < 0:
        raise ConfigurationError("--num-records must be >= 0")
    settings = producer_settings(_props(args))
    payloads = _payloads(args)
    client = client_for(args)
    producer = client.producer(**settings)
    stats = Stats(started=time.monotonic())
    stats.window_start = stats.started
    next_report = stats.started + _WINDOW_S
    interval = 1.0 / args.throughput if args.throughput > 0 else 0.0
    clock = time.monotonic
    try:
        for i in range(args.num_records):
            now = clock()
            if interval:  # Kafka's ThroughputThrottler: no faster than the target on average
                ahead = stats.started + i * interval - now
                if ahead > 0:
                    time.sleep(ahead)
                    now = clock()
            if now >= next_report:
                _print_window(stats, now)
                next_report = now + _WINDOW_S
            value = payloads[0] if len(payloads) == 1 else random.choice(payloads)
            future = producer.send(args.topic, value)
            future.add_done_callback(_on_done(stats, now, len(value)))
        while True:  # the last acknowledgements, still reporting every window
            try:
                producer.flush(timeout_ms=max(1, int((next_report - clock()) * 1000)))
                break
            except RequestTimedOutError:
                now = clock()
                _print_window(stats, now)
                next_report = now + _WINDOW_S
    finally:
        producer.close()
        client.close()
    print(stats.total_line(clock()), flush=True)
    return 0


def _print_window(stats: Stats, now: float) -> None:
    line = stats.window_line(now)
    if line is not None:
        print(line, flush=True)


def _on_done(stats: Stats, sent_at: float, size: int) -> Any:
    def done(future: RecordFuture) -> None:
        if future.exception() is None:
            stats.record((time.monotonic() - sent_at) * 1000, size)
        else:
            print(f"error: {future.exception()}", file=sys.stderr)

    return done


# ----------------------------------------------------------------------------------------------
# consume

_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
           "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
_DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                    "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def _stamp(wall: float, fmt: str) -> str:
    text = datetime.fromtimestamp(wall).strftime(fmt)
    return text[:-3] if fmt.endswith("%f") else text  # milliseconds, as Kafka's SSS


def run_consume(args: argparse.Namespace) -> int:
    from tidelog.types import TopicPartition

    if args.messages < 0:
        raise ConfigurationError("--messages must be >= 0")
    client = client_for(args)
    consumer = client.consumer(group_id=args.group,
                               auto_offset_reset="latest" if args.from_latest else "earliest")
    header_shown = args.hide_header
    try:
        start_wall, start = time.time(), time.monotonic()
        count = nbytes = 0
        if args.group is not None:
            client.describe_topics([args.topic])
            consumer.subscribe([args.topic])
        else:
            partitions = len(client.describe_topics([args.topic])[args.topic].partitions)
            tps = [TopicPartition(args.topic, p) for p in range(partitions)]
            consumer.assign(tps)
            if args.from_latest:
                consumer.seek_to_end(*tps)
            else:
                consumer.seek_to_beginning(*tps)
        rebalance_ms = 0.0
        first_poll_done = False
        last_record = time.monotonic()
        report_at = last_record + args.reporting_interval / 1000
        last = (start, 0, 0)  # time, count, bytes at the previous report
        if args.show_detailed_stats and not header_shown:
            print(_DETAILED_HEADER, flush=True)
        while count < args.messages:
            records = consumer.poll(timeout_ms=100)
            now = time.monotonic()
            if args.group is not None and not first_poll_done and consumer.assignment():
                rebalance_ms = (now - start) * 1000
                first_poll_done = True
            for record in records:
                nbytes += len(record.value or b"") + len(record.key or b"")
            count += len(records)
            if records:
                last_record = now
            elif (now - last_record) * 1000 >= args.timeout:
                print(f"WARNING: Exiting before consuming the expected number of messages: "
                      f"timeout ({args.timeout} ms) exceeded. You can use the --timeout option "
                      "to increase the timeout.", file=sys.stderr)
                break
            if now >= report_at:
                _report(args, last, (now, count, nbytes), rebalance_ms)
                last = (now, count, nbytes)
                report_at = now + args.reporting_interval / 1000
        end, end_wall = time.monotonic(), time.time()
    finally:
        consumer.close()
        client.close()
    elapsed = max(end - start, 1e-9)
    fetch_s = max(elapsed - rebalance_ms / 1000, 1e-9)
    mb = nbytes / MB
    if not args.show_detailed_stats:
        if not header_shown:
            print(_HEADER)
        print(f"{_stamp(start_wall, args.date_format)}, {_stamp(end_wall, args.date_format)}, "
              f"{mb:.4f}, {mb / elapsed:.4f}, {count}, {count / elapsed:.4f}, "
              f"{rebalance_ms:.0f}, {fetch_s * 1000:.0f}, {mb / fetch_s:.4f}, "
              f"{count / fetch_s:.4f}", flush=True)
    return 0


def _report(
    args: argparse.Namespace, last: tuple[float, int, int], now: tuple[float, int, int],
    rebalance_ms: float,
) -> None:
    """A detailed-stats row (Kafka's printConsumerProgress), or a progress line on stderr."""
    elapsed = max(now[0] - last[0], 1e-9)
    mb, count = now[2] / MB, now[1]
    window_mb, window_count = (now[2] - last[2]) / MB, now[1] - last[1]
    if args.show_detailed_stats:
        print(f"{_stamp(time.time(), args.date_format)}, 0, {mb:.4f}, {window_mb / elapsed:.4f}, "
              f"{count}, {window_count / elapsed:.4f}, {rebalance_ms:.0f}, "
              f"{elapsed * 1000:.0f}, {window_mb / elapsed:.4f}, "
              f"{window_count / elapsed:.4f}", flush=True)
    else:
        print(f"{count} records consumed, {window_count / elapsed:.1f} records/sec "
              f"({window_mb / elapsed:.2f} MB/sec)", file=sys.stderr, flush=True)
