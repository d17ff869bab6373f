"""What the operator commands share: the parser (options and positionals in any order, a
usage error shown with the subcommand's usage), the --bootstrap and TLS options, Kafka's
--topic beside a positional topic, a client that reaches the cluster within the connect
timeout, the status line, and time parsing."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.errors import ConfigurationError, NodeUnavailableError, RequestTimedOutError

if TYPE_CHECKING:
    from tidelog.client import Client
    from tidelog.transport import Security

DEFAULT_BOOTSTRAP = "127.0.0.1:7420"
#: Kafka's socket.connection.setup.timeout.ms: how long a command tries the bootstrap nodes
#: before it says none answers.
DEFAULT_CONNECT_TIMEOUT_MS = 10_000


class Parser(argparse.ArgumentParser):
    """The CLI's parser. A command's own parser (one without subcommands) takes options and
    positionals in any order (``produce events --key k v1``: argparse's intermixed parsing), and
    reports a usage error, an unknown argument included, with its own usage rather than the
    top-level one. It also settles Kafka's ``--topic`` against the positional (`add_topic`)."""

    #: Set by `add_topic`: the positional's dest, whether it takes several names, and the
    #: positional list that follows it, if any.
    topic_positional: tuple[str, bool, str | None] | None = None
    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._subparsers is not None or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # the intermixed parse calls this method again
        try:
            parsed, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        if self.topic_positional is not None:
            self._settle_topic(parsed, *self.topic_positional)
        return parsed, []

    def _settle_topic(
        self, parsed: argparse.Namespace, dest: str, many: bool, rest: str | None
    ) -> None:
        flag: list[str] = parsed.topic_flag or []
        given = getattr(parsed, dest)
        positional = list(given or []) if many else ([given] if given else [])
        if flag and positional and rest is not None:
            # `produce --topic t v1 v2`: the first argument was a value, not the topic.
            setattr(parsed, rest, positional + getattr(parsed, rest))
            positional = []
        if flag and positional:
            self.error("give the topic either as an argument or with --topic, not both")
        names = flag or positional
        if many:
            setattr(parsed, dest, names)
        elif len(names) != 1:
            self.error("the topic is missing (an argument, or --topic TOPIC)" if not names
                       else "one topic only")
        else:
            setattr(parsed, dest, names[0])


def add_topic(parser: argparse.ArgumentParser, dest: str = "topic", *, many: bool = False,
              rest: str | None = None, help: str = "the topic") -> None:
    """The topic as an argument, or by Kafka tools' ``--topic`` (either, not both). With
    `many`, several topics (or none). `rest` is the dest of a list of arguments that follows
    the topic (produce's values), which takes the first argument when --topic names the
    topic; add it after this one."""
    if not isinstance(parser, Parser):
        raise TypeError("add_topic needs the CLI's Parser")
    parser.add_argument(dest, nargs="*" if many else "?", help=help, metavar="TOPIC")
    parser.add_argument("--topic", dest="topic_flag", action="append", metavar="TOPIC",
                        help="the same as the argument (kafka-topics' and the console "
                             "tools' flag)" + ("; repeatable" if many else ""))
    parser.topic_positional = (dest, many, rest)


def checked_bootstrap(text: str, where: str = "--bootstrap") -> str:
    """HOST:PORT[,HOST:PORT...], each port 1..65535, checked where it enters (`where` names
    it), so that a typo is a usage error rather than a failure deep in a connection."""
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(
                f"{where}: {address!r} is not HOST:PORT with a port from 1 to 65535"
            )
    if not addresses:
        raise ConfigurationError(f"{where}: expected HOST:PORT[,HOST:PORT...]")
    return ",".join(addresses)


def _bootstrap_type(text: str) -> str:
    try:
        return checked_bootstrap(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(exc.args[0].removeprefix("--bootstrap: ")) from None


def add_bootstrap_servers(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap`` (Kafka tools' ``--bootstrap-server`` too), defaulting to
    $TIDELOG_BOOTSTRAP."""
    parser.add_argument(
        "--bootstrap", "--bootstrap-server", dest="bootstrap", type=_bootstrap_type,
        default=os.environ.get("TIDELOG_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        help="HOST:PORT[,HOST:PORT...] of any nodes (default: $TIDELOG_BOOTSTRAP or "
        f"{DEFAULT_BOOTSTRAP}, the address `tidelog cluster up` prints)",
    )


def positive_int(text: str) -> int:
    """An argparse type: an integer above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not above 0")
    return value


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_servers(parser)
    parser.add_argument(
        "--timeout-ms", type=positive_int, default=30_000, help="overall deadline of each call"
    )
    parser.add_argument(
        "--connect-timeout-ms", type=positive_int, default=DEFAULT_CONNECT_TIMEOUT_MS,
        help="how long to try the bootstrap nodes before giving up (default "
             f"{DEFAULT_CONNECT_TIMEOUT_MS}; at most --timeout-ms)",
    )
    add_security(parser)


def status(text: str) -> None:
    """Say what the command waits for, on one line of a terminal's stderr that the next status
    (or `status_done`) rewrites; nothing when stderr is a pipe or a file, whose reader wants
    only the command's messages."""
    if sys.stderr.isatty():
        print(f"\r{text}\033[K", end="", file=sys.stderr, flush=True)


def status_done() -> None:
    """Clear the status line."""
    status("")


def add_security(parser: argparse.ArgumentParser) -> None:
    """How to reach TLS listeners: kafka-python's names as flags, or Kafka tools'
    ``--command-config`` properties file (flags win over it)."""
    parser.add_argument("--security-protocol", choices=["PLAINTEXT", "SSL"], type=str.upper,
                        help="PLAINTEXT (default) or SSL")
    parser.add_argument("--ssl-cafile",
                        help="PEM file of the CA that signed the nodes' certificates")
    parser.add_argument("--ssl-certfile", help="PEM file of this client's certificate "
                        "(listeners with ssl.client.auth=required)")
    parser.add_argument("--ssl-keyfile", help="PEM file of that certificate's private key")
    parser.add_argument(
        "--command-config", type=Path, metavar="FILE",
        help="properties file with security.protocol, ssl.cafile, ssl.certfile, ssl.keyfile",
    )


def security_for(args: argparse.Namespace) -> Security:
    from tidelog.properties import read_properties
    from tidelog.transport import SECURITY_SETTINGS, Security

    settings: dict[str, str] = {}
    if args.command_config is not None:
        for key, value in read_properties(args.command_config).items():
            if key not in SECURITY_SETTINGS:
                raise ConfigurationError(
                    f"--command-config {args.command_config}: unknown setting {key!r} (known: "
                    f"{', '.join(SECURITY_SETTINGS)})"
                )
            settings[SECURITY_SETTINGS[key]] = value.strip()
    for name in SECURITY_SETTINGS.values():
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    return Security(**settings)


def client_for(args: argparse.Namespace) -> Client:
    """A client that has reached the cluster: the first metadata is asked for within
    ``--connect-timeout-ms``, so a bootstrap where nothing answers fails then, naming the
    addresses it tried, rather than at the end of the first call's deadline; meanwhile a
    terminal shows what the command waits for."""
    from tidelog.client import Client
    from tidelog.retry import Deadline

    security = security_for(args)
    client = Client(
        args.bootstrap, request_timeout_ms=args.timeout_ms,
        security_protocol=security.security_protocol, ssl_cafile=security.ssl_cafile,
        ssl_certfile=security.ssl_certfile, ssl_keyfile=security.ssl_keyfile,
    )
    connect_ms = min(args.connect_timeout_ms, args.timeout_ms)
    status(f"waiting for metadata from {args.bootstrap}...")
    try:
        client.connections.metadata.ensure(Deadline(connect_ms))
    except (NodeUnavailableError, RequestTimedOutError) as exc:
        client.close()
        cause: Any = exc.__cause__ or exc
        detail = cause.args[0] if cause.args else str(cause)
        raise NodeUnavailableError(
            f"no node answered at {args.bootstrap} within {connect_ms} ms "
            f"(--connect-timeout-ms): {detail}"
        ) from None
    except BaseException:
        client.close()
        raise
    finally:
        status_done()
    return client


def parse_time(text: str, option: str = "--time") -> int:
    """A ListOffsets spec from the command line (`option`): earliest, latest, max, epoch
    milliseconds, or an ISO-8601 time (a time without a zone is UTC)."""
    specials = {"earliest": -2, "latest": -1, "max": -3}
    lowered = text.strip().lower()
    if lowered in specials:
        return specials[lowered]
    if lowered.lstrip("-").isdigit():
        value = int(lowered)
        if value < 0:
            raise ConfigurationError(
                f"{option} {text}: use earliest, latest or max instead of negative numbers"
            )
        return value
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"{option} {text!r}: expected earliest, latest, max, milliseconds since the epoch "
            "or an ISO-8601 time such as 2026-11-22T10:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_configs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"--config {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Columns as wide as their widest cell, numbers right-aligned (as kafka-consumer-groups
    prints them); no table library is a dependency, and this is all the CLI needs."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    numeric = [all(_is_number(row[i]) for row in rows) for i in range(len(headers))]
    for line in [headers, *rows]:
        cells = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(line, widths, numeric, strict=True)
        ]
        print("  ".join(cells).rstrip())


def _is_number(cell: str) -> bool:
    return cell == "-" or cell.lstrip("-").isdigit()
