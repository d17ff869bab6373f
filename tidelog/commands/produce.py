"""``tidelog produce TOPIC``: send records from arguments or standard input (one per line).

Keys and headers as kafka-console-producer reads them: ``--property parse.key=true`` (with
``key.separator``, a tab by default) splits each line into key and value, and
``--property parse.headers=true`` reads headers first (``h1:v1,h2:v2``, then
``headers.delimiter``, a tab by default); ``--header K=V`` gives every record a header."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from tidelog.commands._common import add_bootstrap, add_topic, client_for, status, status_done
from tidelog.errors import ConfigurationError
from tidelog.producer import RecordFuture

#: kafka-console-producer's line-reader properties and their defaults.
_PROPERTIES = {
    "parse.key": "false", "key.separator": "\t", "parse.headers": "false",
    "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":",
    "null.marker": None,
}

Header = tuple[str, bytes | None]
Record = tuple[bytes | None, bytes | None, list[Header]]


def configure(parser: argparse.ArgumentParser) -> None:
    add_topic(parser, rest="values")
    parser.add_argument("values", nargs="*",
                        help="record values; none means read lines from standard input")
    parser.add_argument("--key", default=None, help="the key of every record")
    parser.add_argument("--key-separator", default=None, metavar="SEP",
                        help="split each line into KEY SEP VALUE where SEP occurs (with "
                             "--property parse.key=true every line must hold it)")
    parser.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                        help="a header of every record (repeatable)")
    parser.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                        help="kafka-console-producer's reader properties: parse.key=true, "
                             "key.separator, parse.headers=true, headers.delimiter, "
                             "headers.separator, headers.key.separator, null.marker "
                             "(repeatable)")
    parser.add_argument("--partition", type=int, default=None)
    parser.add_argument("--timestamp", type=int, default=None, help="CreateTime in ms")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="all")
    add_bootstrap(parser)


def _properties(args: argparse.Namespace) -> dict[str, str | None]:
    props = dict(_PROPERTIES)
    for item in args.property:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in _PROPERTIES:
            raise ConfigurationError(
                f"--property {item!r}: expected NAME=VALUE, NAME one of {', '.join(_PROPERTIES)}"
            )
        if name.startswith("parse.") and value.strip().lower() not in ("true", "false"):
            raise ConfigurationError(f"--property {item!r}: {name} is true or false")
        props[name] = value.strip().lower() if name.startswith("parse.") else (
            value.replace("\\t", "\t"))
    if args.key_separator is not None:  # the flag is the property under another name
        props["key.separator"] = args.key_separator
    return props


def _fixed_headers(args: argparse.Namespace) -> list[Header]:
    headers: list[Header] = []
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"--header {item!r}: expected KEY=VALUE")
        headers.append((key, value.encode()))
    return headers


def _records(
    args: argparse.Namespace, props: dict[str, str | None], fixed: list[Header]
) -> Iterator[Record]:
    """Each line as kafka-console-producer's line reader reads it, with the flags' key and
    headers; a line that lacks a separator a property asks for is an error naming it."""
    null = props["null.marker"]
    key_sep = str(props["key.separator"])
    lines = args.values or (line.rstrip("\n") for line in sys.stdin)

    def data(text: str) -> bytes | None:
        return None if null is not None and text == null else text.encode()

    for number, line in enumerate(lines, 1):
        headers = list(fixed)
        if props["parse.headers"] == "true":
            text, sep, line = line.partition(str(props["headers.delimiter"]))
            if not sep:
                raise ConfigurationError(f"line {number}: no headers delimiter "
                                         f"{props['headers.delimiter']!r}")
            for pair in filter(None, text.split(str(props["headers.separator"]))):
                name, _, value = pair.partition(str(props["headers.key.separator"]))
                headers.append((name, data(value)))
        key: bytes | None = None if args.key is None else args.key.encode()
        value = line
        if key_sep in line and (props["parse.key"] == "true" or args.key_separator is not None):
            text, value = line.split(key_sep, 1)
            key = data(text)
        elif props["parse.key"] == "true":
            raise ConfigurationError(f"line {number}: no key separator {key_sep!r}")
        yield key, data(value), headers


def run(args: argparse.Namespace) -> int:
    """Send every record, then wait for their acknowledgements.

    ``--timeout-ms`` bounds each record's delivery (the producer's delivery timeout, retries
    included) and the wait for the last acknowledgements once the input ends, so a record the
    cluster keeps refusing with a retriable error ends the command with that error rather than
    after the producer's two-minute default. On any failure, Ctrl-C included, the producer is
    closed without waiting: what is not delivered yet fails at once, and the command ends."""
    props, fixed = _properties(args), _fixed_headers(args)
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
        if not args.values and sys.stdin.isatty():
            print("type records, one per line; Ctrl-D ends", file=sys.stderr)
        for key, value, headers in _records(args, props, fixed):
            futures.append(producer.send(
                args.topic, value, key=key, partition=args.partition,
                timestamp_ms=args.timestamp, headers=headers,
            ))
            if len(futures) % 10_000 == 0:
                print(f"sent {len(futures)} records...", file=sys.stderr)
        status(f"waiting for the acknowledgements of {len(futures)} record(s)...")
        producer.flush(args.timeout_ms)
        status_done()
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
