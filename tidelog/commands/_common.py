"""What the operator commands share: the --bootstrap and TLS options, a client, and time
parsing."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.errors import ConfigurationError

if TYPE_CHECKING:
    from tidelog.client import Client
    from tidelog.transport import Security

DEFAULT_BOOTSTRAP = "127.0.0.1:7420"


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("TIDELOG_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        help="HOST:PORT[,HOST:PORT...] of any nodes (default: $TIDELOG_BOOTSTRAP or "
        f"{DEFAULT_BOOTSTRAP}, the address `tidelog cluster up` prints)",
    )
    parser.add_argument(
        "--timeout-ms", type=int, default=30_000, help="overall deadline of each call"
    )
    add_security(parser)


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
    from tidelog.client import Client

    security = security_for(args)
    return Client(
        args.bootstrap, request_timeout_ms=args.timeout_ms,
        security_protocol=security.security_protocol, ssl_cafile=security.ssl_cafile,
        ssl_certfile=security.ssl_certfile, ssl_keyfile=security.ssl_keyfile,
    )


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
