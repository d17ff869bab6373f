"""No input ends the CLI in a traceback: every subcommand, found by walking the argparse tree of
`tidelog.cli`, is given bad values (garbage numbers, negative counts, an unreachable bootstrap
with a short connect timeout, a port out of range), and every subcommand that prints is run with
a reader that has gone away (``| head -1``); each ends with a message and a non-zero exit code
where the input was bad, quietly where the reader left.

The bad-value sweep calls `tidelog.cli.main` in this process (a subprocess per case would take
minutes on a loaded machine): an exception leaving `main` is what prints a traceback. The
broken-pipe cases are real processes whose stdout is a pipe with no reader, against one small
cluster."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog import cli
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(600)

#: Nothing listens here; the connect timeout keeps each case short.
_UNREACHABLE = ["--bootstrap", "127.0.0.1:1", "--connect-timeout-ms", "300"]
#: Options whose negative values mean something (a shift back, no throughput limit, a seed).
_NEGATIVE_ALLOWED = {"--shift-by", "--throughput", "--seed"}
#: Leaves not run by the broken-pipe cases, and why.
_NOT_PIPED = {
    ("node",): "runs a node until stopped",
    ("cluster", "up"): "starts a cluster of its own",
    ("demo",): "starts a cluster of its own",
    ("chaos", "run"): "a workload of minutes under faults",
    ("chaos", "lost-prepare"): "starts clusters of its own",
}


def leaves() -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every subcommand that takes no further subcommand, with its parser."""

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[
            tuple[tuple[str, ...], argparse.ArgumentParser]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not subs[0].required:  # `tidelog node` runs a node without one
            yield path, parser
        if not subs:
            return
        for name, child in subs[0].choices.items():
            yield from walk(child, (*path, name))

    yield from walk(cli.build_parser(), ())


def _takes_bootstrap(parser: argparse.ArgumentParser) -> bool:
    return any(a.dest == "bootstrap" for a in parser._actions)


def _prefix(path: tuple[str, ...]) -> list[str]:
    """The argv of a leaf; transactions takes its connection flags before the subcommand."""
    if path[0] == "transactions":
        return ["transactions", *_UNREACHABLE, *path[1:]]
    return list(path)


def _filled(parser: argparse.ArgumentParser) -> list[str]:
    """Values for what the parser requires (a name, a number), so that the bad value under test
    is the only thing wrong."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings and action.nargs not in ("?", "*"):
            argv.append("1" if action.type is int else "nosuch")
    for action in parser._actions:
        if action.option_strings and action.required:
            argv += [action.option_strings[0], "1" if action.type in (int, float) else "nosuch"]
    for group in parser._mutually_exclusive_groups:
        if group.required:
            first = group._group_actions[0]
            argv.append(first.option_strings[0])
            if first.nargs != 0:
                argv.append("1" if first.type is int else "nosuch")
    return argv


def bad_cases() -> Iterator[tuple[str, list[str]]]:
    for path, parser in leaves():
        base = _prefix(path) + _filled(parser)
        where = " ".join(path)
        if _takes_bootstrap(parser):
            yield f"{where} unreachable", base + _UNREACHABLE
            yield f"{where} port", [*base, "--bootstrap", "127.0.0.1:99999"]
        for action in parser._actions:
            if action.type not in (int, float) or not action.option_strings:
                continue
            flag = action.option_strings[0]
            rest = [] if path[0] == "transactions" else _UNREACHABLE
            rest = rest if _takes_bootstrap(parser) or path[0] == "transactions" else []
            yield f"{where} {flag} garbage", [*base, flag, "abc", *rest]
            if flag not in _NEGATIVE_ALLOWED:
                yield f"{where} {flag} negative", [*base, flag, "-5", *rest]


@pytest.mark.cluster  # the unreachable-bootstrap cases open channels (to nothing)
@pytest.mark.parametrize(("argv"), [pytest.param(argv, id=name) for name, argv in bad_cases()])
def test_bad_input_is_a_message_and_a_non_zero_exit(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # whatever a command writes by default lands here
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115 (closed with the test)
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    assert code != 0, err
    assert err.strip(), "no message"
    assert "Traceback" not in err


def test_the_sweep_reaches_every_subcommand() -> None:
    """The walk finds the subcommands the CLI lists, nested ones included."""
    found = {path for path, _ in leaves()}
    assert {path[0] for path in found} == set(cli.COMMANDS)
    assert {("topic", "create"), ("groups", "reset-offsets"), ("consume",)} <= found


# ---- a reader that has gone away ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def piped(cluster: LocalCluster) -> dict[tuple[str, ...], list[str]]:
    """A topic with records, a group with committed offsets, and the argv of each printing
    subcommand (connection flags added by the test)."""
    b = ["--bootstrap", cluster.bootstrap]
    for argv in (["topic", "create", "events", "--partitions", "2"],
                 ["topic", "create", "gone"], ["topic", "create", "grow"],
                 ["produce", "events", *map(str, range(50))],
                 ["consume", "events", "--group", "g", "--max-records", "5"]):
        assert cli.main([*argv, *b]) == 0, argv
    segment = next(cluster.data_dir.glob("node-*/**/events-0/*.log"))
    return {
        ("dump-log",): ["dump-log", str(segment)],
        ("storage-demo",): ["storage-demo", "--data-dir", "{tmp}"],
        ("sim",): ["sim", "--seed", "1", "--ticks", "200"],
        ("node", "decommission"): ["node", "decommission", "99", "--no-wait", *b],
        ("node", "unregister"): ["node", "unregister", "99", *b],
        ("cluster", "down"): ["cluster", "down", "--data-dir", "{tmp}"],
        ("cluster", "status"): ["cluster", "status", *b],
        ("topic", "create"): ["topic", "create", "--topic", "fresh", *b],
        ("topic", "list"): ["topic", "list", *b],
        ("topic", "describe"): ["topic", "describe", *b],
        ("topic", "alter"): ["topic", "alter", "grow", "--partitions", "2", *b],
        ("topic", "delete"): ["topic", "delete", "gone", *b],
        ("produce",): ["produce", "events", "x", *b],
        ("consume",): ["consume", "events", "--from", "earliest", *b],
        ("offsets",): ["offsets", "events", *b],
        ("groups", "list"): ["groups", "list", *b],
        ("groups", "describe"): ["groups", "describe", "g", *b],
        ("groups", "reset-offsets"): ["groups", "reset-offsets", "g", "--topic", "events",
                                      "--to-earliest", *b],
        ("groups", "delete"): ["groups", "delete", "nosuch", *b],
        ("groups", "delete-offsets"): ["groups", "delete-offsets", "g", "--topic", "events:1",
                                       *b],
        ("delete-records",): ["delete-records", "--topic", "events", "--partition", "1",
                              "--offset", "0", *b],
        ("log-dirs",): ["log-dirs", "--describe", *b],
        ("leader-election",): ["leader-election", "--preferred", "--all-topic-partitions",
                               *b],
        ("acls", "add"): ["acls", "add", "--topic", "events", "--allow-principal", "User:a",
                          "--operation", "Read", *b],
        ("acls", "list"): ["acls", "list", *b],
        ("acls", "remove"): ["acls", "remove", "--topic", "events", "--allow-principal",
                             "User:a", "--operation", "Read", "--force", *b],
        ("reassign",): ["reassign", "--list", *b],
        ("configs",): ["configs", "--describe", "--entity-type", "topics", "--entity-name",
                       "events", "--all", *b],
        ("transactions", "list"): ["transactions", *b, "list"],
        ("transactions", "describe"): ["transactions", *b, "describe", "--transactional-id",
                                       "t"],
        ("transactions", "find-hanging"): ["transactions", *b, "find-hanging", "--node", "1"],
        ("transactions", "abort"): ["transactions", *b, "abort", "--topic", "events",
                                    "--partition", "0", "--producer-id", "1"],
        ("perf", "produce"): ["perf", "produce", "--topic", "events", "--num-records", "20",
                              "--record-size", "10", "--throughput", "-1", *b],
        ("perf", "consume"): ["perf", "consume", "--topic", "events", "--messages", "20", *b],
    }


def test_every_printing_subcommand_has_a_broken_pipe_case(
    piped: dict[tuple[str, ...], list[str]]
) -> None:
    assert {path for path, _ in leaves()} == set(piped) | set(_NOT_PIPED)


@pytest.mark.parametrize("path", sorted(
    {path for path, _ in leaves()} - set(_NOT_PIPED)), ids=" ".join)
def test_a_reader_gone_away_ends_the_command_quietly(
    path: tuple[str, ...], piped: dict[tuple[str, ...], list[str]], tmp_path: Path
) -> None:
    """stdout is a pipe whose reader has closed it (what `| head -1` leaves once it has its
    line): the command ends without a traceback, with 141 (a writer killed by SIGPIPE) if it
    wrote, with its usual code if it did not get that far."""
    argv = [part.replace("{tmp}", str(tmp_path / "d")) for part in piped[path]]
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "tidelog.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              timeout=120)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode in (0, 2, 141), done.stderr
