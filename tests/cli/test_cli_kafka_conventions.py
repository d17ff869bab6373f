"""The CLI held against Kafka's tools: their flag names (--bootstrap-server, --topic,
--from-beginning, --max-messages), kafka-console-consumer's formatter properties and a kcat-like
format string, kafka-console-producer's parse.key/parse.headers and headers, options and
positionals in any order, a usage error shown with the subcommand's usage, messages that say an
error's code and subject once, booleans as Kafka prints them, and a terminal told what the
command waits for. Real processes against one small cluster."""

from __future__ import annotations

import os
import pty
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 1}


def tidelog(*args: str, stdin: str = "", env: dict[str, str] | None = None
            ) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *args], input=stdin, capture_output=True,
        text=True, timeout=120, env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def topic(cluster: LocalCluster) -> str:
    code, _, err = tidelog("topic", "create", "--topic", "conv", "--partitions", "1",
                           "--bootstrap-server", cluster.bootstrap)
    assert code == 0, err
    return "conv"


def test_kafka_flag_names_work_where_kafkas_tools_take_them(
    cluster: LocalCluster, topic: str
) -> None:
    b = cluster.bootstrap
    code, out, err = tidelog("produce", "--topic", topic, "p1", "p2", "--bootstrap-server", b)
    assert code == 0 and "2 record(s)" in out, err
    code, out, err = tidelog("consume", "--topic", topic, "--from-beginning",
                             "--max-messages", "1", "--bootstrap-server", b)
    assert code == 0 and out.split("\t")[-1].strip() == "p1", err
    code, out, err = tidelog("offsets", "--topic", topic, "--bootstrap-server", b)
    assert code == 0 and out.startswith(f"{topic}:0:"), err
    code, out, err = tidelog("topic", "describe", "--topic", topic, "--bootstrap-server", b)
    assert code == 0 and out.startswith(f"{topic}  partitions=1"), err
    # cluster status reads $TIDELOG_BOOTSTRAP as every other command does.
    code, out, err = tidelog("cluster", "status", env={"TIDELOG_BOOTSTRAP": b})
    assert code == 0 and "SERVING" in out, err


def test_positional_values_after_options(cluster: LocalCluster, topic: str) -> None:
    code, out, err = tidelog("produce", topic, "--key", "k", "late",
                             "--bootstrap", cluster.bootstrap)
    assert code == 0 and "1 record(s)" in out, err


def test_a_usage_error_shows_the_subcommands_usage() -> None:
    code, _, err = tidelog("produce", "t", "--no-such-flag")
    assert code == 2
    assert err.startswith("usage: tidelog produce "), err
    assert "unrecognized arguments: --no-such-flag" in err
    code, _, err = tidelog("topic", "create", "a", "--topic", "b")
    assert code == 2 and err.startswith("usage: tidelog topic create "), err


def test_console_producer_and_consumer_properties(cluster: LocalCluster) -> None:
    b = cluster.bootstrap
    assert tidelog("topic", "create", "props", "--bootstrap", b)[0] == 0
    code, _, err = tidelog(
        "produce", "props", "--property", "parse.key=true", "--property", "key.separator=:",
        "--property", "parse.headers=true", "--header", "src=cli", "--bootstrap", b,
        stdin="h1:x,h2:y\tk1:v1\n\tk2:v2\n",
    )
    assert code == 0, err
    code, out, err = tidelog(
        "consume", "props", "--bootstrap", b, "--property", "print.key=true",
        "--property", "print.headers=true", "--property", "print.partition=true",
        "--property", "print.offset=true", "--property", "print.timestamp=true",
    )
    assert code == 0, err
    first, second = out.splitlines()
    stamp, rest = first.split("\t", 1)
    assert stamp.startswith("CreateTime:") and stamp.removeprefix("CreateTime:").isdigit()
    assert rest == "Partition:0\tOffset:0\tsrc:cli,h1:x,h2:y\tk1\tv1"
    assert second.split("\t", 1)[1] == "Partition:0\tOffset:1\tsrc:cli\tk2\tv2"
    code, out, err = tidelog("consume", "props", "--bootstrap", b,
                             "--format", r"%t/%p@%o %k=%s [%h]\n")
    assert code == 0, err
    assert out.splitlines() == ["props/0@0 k1=v1 [src=cli,h1=x,h2=y]", "props/0@1 k2=v2 [src=cli]"]
    # Kafka's console producer refuses a line without the key separator it was told of.
    code, _, err = tidelog("produce", "props", "--property", "parse.key=true",
                           "--bootstrap", b, stdin="no separator\n")
    assert code == 2 and "no key separator" in err, err
    code, _, err = tidelog("consume", "props", "--property", "print.nothing=true")
    assert code == 2 and "print.nothing" in err and "Traceback" not in err


def test_an_error_says_its_code_and_subject_once(cluster: LocalCluster) -> None:
    code, _, err = tidelog("groups", "delete", "nosuch-group", "--bootstrap", cluster.bootstrap)
    assert code == 2
    assert err.count("GROUP_ID_NOT_FOUND") == 1, err
    assert err.count("'nosuch-group'") == 1, err
    code, _, err = tidelog("topic", "list", "--bootstrap", "127.0.0.1:1",
                           "--connect-timeout-ms", "500")
    assert code == 2 and err.count("CONNECTION_ERROR") == 1, err


def test_configs_print_booleans_as_kafka_does(cluster: LocalCluster) -> None:
    code, out, err = tidelog("configs", "--describe", "--entity-type", "nodes",
                             "--entity-name", str(cluster.node_ids[0]), "--all",
                             "--bootstrap", cluster.bootstrap)
    assert code == 0, err
    assert "auto.leader.rebalance.enable=true " in out
    assert "=True" not in out and "=False" not in out


def test_an_unreachable_bootstrap_fails_within_the_connect_timeout_naming_it() -> None:
    started = time.monotonic()
    code, _, err = tidelog("produce", "t", "v", "--bootstrap", "127.0.0.1:1",
                           "--connect-timeout-ms", "1000")
    assert code == 2 and "127.0.0.1:1" in err and "Traceback" not in err, err
    # Far less than the 30 s call deadline it took before, however loaded the machine.
    assert time.monotonic() - started < 25
    code, _, err = tidelog("topic", "list", "--bootstrap", "127.0.0.1:99999")
    assert code == 2 and "port from 1 to 65535" in err and "Traceback" not in err, err


def test_a_terminal_is_told_what_the_command_waits_for() -> None:
    """On a terminal, stderr says what the command waits for before the wait ends; piped, it
    carries only the error."""
    argv = [sys.executable, "-m", "tidelog.cli", "topic", "list", "--bootstrap",
            "127.0.0.1:1", "--connect-timeout-ms", "1000"]
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(argv, stderr=terminal, stdout=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, timeout=60)
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's other side is closed: everything was read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    assert done.returncode == 2
    assert b"waiting for metadata from 127.0.0.1:1..." in seen, seen
    _, _, err = tidelog(*argv[3:])
    assert "waiting for" not in err and "127.0.0.1:1" in err


_ROOT = Path(__file__).resolve().parents[2]
#: Commands with no Kafka tool to map to: tours, simulators and fault injection.
_NO_KAFKA_TOOL = {"storage-demo", "sim", "demo", "chaos"}


def test_the_readme_quick_start_uses_kafkas_names_and_parses() -> None:
    """The quick start is what a Kafka user copies first: it says --topic and
    --bootstrap-server, and every command in it is one the CLI accepts."""
    from tidelog.cli import build_parser

    readme = (_ROOT / "README.md").read_text()
    found = re.search(r"## A cluster and a client\n\n```sh\n(.*?)```", readme, flags=re.S)
    assert found is not None
    block = found.group(1)
    assert "--topic" in block and "--bootstrap-server" in block
    for line in block.splitlines():
        command = line.split("#")[0].split("| ")[-1]
        if command.startswith("tidelog "):
            build_parser().parse_args(shlex.split(command)[1:])


def test_the_kafka_tools_page_maps_every_command() -> None:
    """docs/operations/kafka-tools.md names every command that has a Kafka counterpart in its
    Tidelog column."""
    from tidelog.cli import COMMANDS

    rows = [line.split(" | ") for line in
            (_ROOT / "docs/operations/kafka-tools.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| Kafka tool")]
    tidelog_column = " ".join(row[-1] for row in rows)
    missing = [name for name in COMMANDS if name not in _NO_KAFKA_TOOL
               and f"`{name}" not in tidelog_column]
    assert not missing, missing
