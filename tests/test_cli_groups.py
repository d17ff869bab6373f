"""`tidelog groups` argument checks that need no cluster: bad input ends with a one-line
message and exit code 2 before anything is sent (the command itself is exercised on a real
cluster in test_offsets_client_cluster.py)."""

from __future__ import annotations

import pytest

from tidelog.cli import main

# A port nothing listens on: a check that let the command reach the network would fail with
# a connection error instead of the message the test expects.
NOWHERE = ("--bootstrap", "127.0.0.1:1", "--timeout-ms", "2000")


@pytest.mark.parametrize("args, message", [
    (["reset-offsets", "g", "--topic", "t"], "one of the arguments --to-earliest"),
    (["reset-offsets", "g", "--to-earliest"], "--topic"),
    (["reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"], "not allowed"),
    (["reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute", "--dry-run"],
     "not allowed"),
    (["reset-offsets", "g", "--topic", "t", "--to-offset", "x"], "invalid int"),
    (["delete"], "GROUP"),
    (["describe"], "group"),
])
def test_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["groups", *args, *NOWHERE])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--to-offset", "-4"], "--to-offset -4: an offset is >= 0"),
    (["--to-datetime", "yesterday"], "--to-datetime 'yesterday': expected"),
    (["--to-datetime", "latest"], "use --to-earliest or --to-latest"),
])
def test_bad_targets_are_refused_before_anything_is_sent(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["groups", "reset-offsets", "g", "--topic", "t", *args, *NOWHERE]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
