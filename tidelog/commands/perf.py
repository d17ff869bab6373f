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

With ``--kafka`` either drives the nodes' Kafka listeners instead, with confluent-kafka
(librdkafka; an optional dependency, in the dev extra) as a Kafka user's client would: the same
options, Kafka-named producer properties passed to librdkafka as they are, and the same lines.
Its addresses are ``--kafka-bootstrap`` (default: $TIDELOG_KAFKA_BOOTSTRAP or 127.0.0.1:7426,
the first Kafka listener `tidelog cluster up` starts) or ``bootstrap.servers`` among the
producer properties, found as the gRPC path finds its own; the TLS options apply to it too. The
producer is idempotent unless ``enable.idempotence=false`` is given, as Tidelog's is.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.commands._common import (
    add_bootstrap,
    checked_bootstrap,
    client_for,
    security_for,
)
from tidelog.errors import (
    ConfigurationError,
    NodeUnavailableError,
    RequestTimedOutError,
    for_code,
)

if TYPE_CHECKING:
    from tidelog.producer import RecordFuture

MB = 1024 * 1024
_WINDOW_S = 5.0  # kafka-producer-perf-test's reporting interval
#: The Kafka listener of node 1 of `tidelog cluster up` (its fixed Kafka ports start here).
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:7426"


def _add_kafka(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", action="store_true",
                        help="drive the nodes' Kafka listeners with confluent-kafka instead of "
                             "Tidelog's gRPC client")
    parser.add_argument(
        "--kafka-bootstrap", metavar="HOST:PORT[,HOST:PORT...]",
        default=os.environ.get("TIDELOG_KAFKA_BOOTSTRAP", DEFAULT_KAFKA_BOOTSTRAP),
        help="Kafka listeners of any nodes, with --kafka (default: $TIDELOG_KAFKA_BOOTSTRAP or "
             f"{DEFAULT_KAFKA_BOOTSTRAP}, node 1's as `tidelog cluster up` prints it)")


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
    _add_kafka(produce)
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
    _add_kafka(consume)
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
    if bootstrap is not None:  # the Kafka listeners' addresses with --kafka
        setattr(args, "kafka_bootstrap" if args.kafka else "bootstrap",
                checked_bootstrap(bootstrap, "bootstrap.servers"))
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
    props = _props(args)
    settings = producer_settings(props)  # the names and values checked on either path
    payloads = _payloads(args)
    sender = KafkaSender(args, props) if args.kafka else TidelogSender(args, settings)
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
            sender.send(args.topic, value, stats, now)
        # The last acknowledgements, still reporting every window.
        while not sender.flush(max(1, int((next_report - clock()) * 1000))):
            now = clock()
            _print_window(stats, now)
            next_report = now + _WINDOW_S
    finally:
        sender.close()
    print(stats.total_line(clock()), flush=True)
    return 0


class TidelogSender:
    """`run_produce`'s records through Tidelog's producer (gRPC)."""

    def __init__(self, args: argparse.Namespace, settings: dict[str, Any]) -> None:
        self._client = client_for(args)
        try:
            self._producer = self._client.producer(**settings)
        except BaseException:
            self._client.close()
            raise

    def send(self, topic: str, value: bytes, stats: Stats, sent_at: float) -> None:
        future = self._producer.send(topic, value)
        future.add_done_callback(_on_done(stats, sent_at, len(value)))

    def flush(self, timeout_ms: int) -> bool:
        """Whether every record sent is answered (False: the timeout came first)."""
        try:
            self._producer.flush(timeout_ms=timeout_ms)
        except RequestTimedOutError:
            return False
        return True

    def close(self) -> None:
        try:
            self._producer.close()
        finally:
            self._client.close()


class KafkaSender:
    """`run_produce`'s records through confluent-kafka's producer to the Kafka listeners."""

    def __init__(self, args: argparse.Namespace, props: dict[str, str]) -> None:
        confluent_kafka = _confluent_kafka()
        config = {"enable.idempotence": "true", **_kafka_config(args),
                  **{name: value.strip() for name, value in props.items()}}
        try:
            self._producer = confluent_kafka.Producer(config)
        except confluent_kafka.KafkaException as exc:
            raise ConfigurationError(f"librdkafka refuses the producer properties: "
                                     f"{exc.args[0].str()}") from None
        _reach(self._producer, args)

    def send(self, topic: str, value: bytes, stats: Stats, sent_at: float) -> None:
        done = _on_delivery(stats, sent_at, len(value))
        while True:
            try:
                self._producer.produce(topic, value, on_delivery=done)
                break
            except BufferError:  # librdkafka's queue is full: serve acknowledgements, retry
                self._producer.poll(0.01)
        self._producer.poll(0)  # the acknowledgements come as the records are sent

    def flush(self, timeout_ms: int) -> bool:
        return int(self._producer.flush(timeout_ms / 1000)) == 0

    def close(self) -> None:
        self._producer.flush(0)


def _confluent_kafka() -> Any:
    """confluent-kafka, or a clear error when it is not installed (it is optional)."""
    try:
        import confluent_kafka
    except ImportError:
        raise ConfigurationError(
            "--kafka drives the Kafka listener with confluent-kafka, which is not installed: "
            "pip install 'confluent-kafka==2.16.1' (or Tidelog's dev extra: pip install "
            "'tidelog[dev]')"
        ) from None
    return confluent_kafka


def _kafka_config(args: argparse.Namespace) -> dict[str, Any]:
    """librdkafka's settings for the Kafka listeners: their addresses and the TLS options."""
    security = security_for(args)
    config: dict[str, Any] = {
        "bootstrap.servers": checked_bootstrap(args.kafka_bootstrap, "--kafka-bootstrap"),
        "security.protocol": security.security_protocol, "log_level": 0,
        "socket.connection.setup.timeout.ms": args.connect_timeout_ms,
    }
    for option, name in (("ssl.ca.location", security.ssl_cafile),
                         ("ssl.certificate.location", security.ssl_certfile),
                         ("ssl.key.location", security.ssl_keyfile)):
        if name is not None:
            config[option] = name
    return config


def _reach(client: Any, args: argparse.Namespace, topic: str | None = None) -> Any:
    """The cluster's metadata (of `topic`, or of every topic) through `client`, asked within
    ``--connect-timeout-ms``: a Kafka client retries an address where nothing answers until
    each record's own timeout, so an unreachable listener is found here, as the gRPC path finds
    it when it connects."""
    confluent_kafka = _confluent_kafka()
    try:
        return client.list_topics(topic, timeout=args.connect_timeout_ms / 1000)
    except confluent_kafka.KafkaException as exc:
        raise NodeUnavailableError(
            f"no Kafka listener at {args.kafka_bootstrap} answered within "
            f"{args.connect_timeout_ms} ms ({exc.args[0].str()})"
        ) from None


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


def _on_delivery(stats: Stats, sent_at: float, size: int) -> Any:
    """`_on_done` for confluent-kafka, which calls back with (error, message)."""
    def done(error: Any, _message: Any) -> None:
        if error is None:
            stats.record((time.monotonic() - sent_at) * 1000, size)
        else:
            print(f"error: {error.str()}", file=sys.stderr)

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
    if args.messages < 0:
        raise ConfigurationError("--messages must be >= 0")
    reader = KafkaReader(args) if args.kafka else TidelogReader(args)
    header_shown = args.hide_header
    try:
        start_wall, start = time.time(), time.monotonic()
        count = nbytes = 0
        reader.start()
        rebalance_ms = 0.0
        first_poll_done = False
        last_record = time.monotonic()
        report_at = last_record + args.reporting_interval / 1000
        last = (start, 0, 0)  # time, count, bytes at the previous report
        if args.show_detailed_stats and not header_shown:
            print(_DETAILED_HEADER, flush=True)
        while count < args.messages:
            records, size = reader.poll()
            now = time.monotonic()
            if args.group is not None and not first_poll_done and reader.assigned():
                rebalance_ms = (now - start) * 1000
                first_poll_done = True
            nbytes += size
            count += records
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
        reader.close()
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


class TidelogReader:
    """`run_consume`'s records through Tidelog's consumer (gRPC)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._client = client_for(args)
        self._consumer = self._client.consumer(
            group_id=args.group, auto_offset_reset="latest" if args.from_latest else "earliest")

    def start(self) -> None:
        """Joins the group, or assigns every partition at its beginning (or end)."""
        from tidelog.types import TopicPartition

        args = self._args
        if args.group is not None:
            self._client.describe_topics([args.topic])
            self._consumer.subscribe([args.topic])
            return
        partitions = len(self._client.describe_topics([args.topic])[args.topic].partitions)
        tps = [TopicPartition(args.topic, p) for p in range(partitions)]
        self._consumer.assign(tps)
        if args.from_latest:
            self._consumer.seek_to_end(*tps)
        else:
            self._consumer.seek_to_beginning(*tps)

    def poll(self) -> tuple[int, int]:
        """(records, bytes of their keys and values) of one poll."""
        records = self._consumer.poll(timeout_ms=100)
        return len(records), sum(len(r.value or b"") + len(r.key or b"") for r in records)

    def assigned(self) -> bool:
        return bool(self._consumer.assignment())

    def close(self) -> None:
        try:
            self._consumer.close()
        finally:
            self._client.close()


class KafkaReader:
    """`run_consume`'s records through confluent-kafka's consumer from the Kafka listeners;
    without ``--group`` every partition is assigned (librdkafka still needs a group id, which
    then only names it: nothing is joined or committed)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._kafka = _confluent_kafka()
        config = {
            **_kafka_config(args), "group.id": args.group or "tidelog-perf-consume",
            "enable.auto.commit": args.group is not None,
            "auto.offset.reset": "latest" if args.from_latest else "earliest",
            # Once its queue of prefetched records is full librdkafka stops fetching for this
            # long (1 s by default), which this loop drains much sooner: the Java consumer
            # Kafka's tool measures fetches again as soon as there is room.
            "fetch.queue.backoff.ms": 10,
        }
        self._consumer = self._kafka.Consumer(config)

    def start(self) -> None:
        args = self._args
        topic = _reach(self._consumer, args, args.topic).topics[args.topic]
        if topic.error is not None:
            raise for_code(topic.error.code())(f"topic {args.topic!r}: {topic.error.str()}")
        if args.group is not None:
            self._consumer.subscribe([args.topic])
            return
        offset = self._kafka.OFFSET_END if args.from_latest else self._kafka.OFFSET_BEGINNING
        self._consumer.assign([self._kafka.TopicPartition(args.topic, p, offset)
                               for p in sorted(topic.partitions)])

    def poll(self) -> tuple[int, int]:
        records = size = 0
        for message in self._consumer.consume(num_messages=500, timeout=0.1):
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise for_code(error.code())(error.str())
                print(f"error: {error.str()}", file=sys.stderr)
                continue
            records += 1
            size += len(message.value() or b"") + len(message.key() or b"")
        return records, size

    def assigned(self) -> bool:
        return bool(self._consumer.assignment())

    def close(self) -> None:
        self._consumer.close()


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
