"""`tidelog groups` argument checks that need no cluster: bad input ends with a one-line
message and exit code 2 before anything is sent (the command itself is exercised on a real
cluster in test_offsets_client_cluster.py)."""

from __future__ import annotations

import pytest

from tidelog.cli import main
from tidelog.commands.groups import parse_duration_ms

# A port nothing listens on: a check that let the command reach the network would fail with
# a connection error instead of the message the test expects.
NOWHERE = ("--bootstrap", "127.0.0.1:1", "--timeout-ms", "2000")


@pytest.mark.parametrize("args, message", [
    (["reset-offsets", "g", "--topic", "t"], "one of the arguments --to-earliest"),
    (["reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"], "not allowed"),
    (["reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute", "--dry-run"],
     "not allowed"),
    (["reset-offsets", "g", "--topic", "t", "--to-offset", "x"], "invalid int"),
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
    (["--by-duration", "1h"], "--by-duration '1h': expected an ISO-8601 duration"),
    (["--by-duration", "PT"], "--by-duration 'PT': expected"),
    (["--to-latest", "--all-topics"], "--all-topics, one of them"),
    (["--from-file", "plan.csv"], "--from-file names its partitions"),
])
def test_bad_targets_are_refused_before_anything_is_sent(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["groups", "reset-offsets", "g", "--topic", "t", *args, *NOWHERE]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["delete"], "no group: give GROUP, --group GROUP or --all-groups"),
    (["describe"], "no group"),
    (["describe", "g", "--all-groups"], "not both"),
    (["delete-offsets", "--topic", "t"], "no group: give GROUP or --group GROUP"),
    (["delete-offsets", "g", "h", "--topic", "t"], "one group only"),
    (["reset-offsets", "g", "--to-earliest"], "--topic TOPIC[:P,P...]"),
])
def test_groups_named_wrongly_are_refused_before_anything_is_sent(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["groups", *args, *NOWHERE]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("text, ms", [
    ("PT1H30M", 5_400_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("p2dt3m", 172_980_000),
])
def test_by_duration_reads_iso_8601_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
