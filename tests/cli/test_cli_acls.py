"""`tidelog acls` argument checks that need no cluster: bad input ends with a one-line message
and exit code 2 before anything is sent (the command runs on a real cluster in
test_acls_cluster.py)."""

from __future__ import annotations

import pytest

from tidelog.cli import main

# A port nothing listens on: a check that let the command reach the network would fail with
# a connection error instead of the message the test expects.
NOWHERE = ("--bootstrap", "127.0.0.1:1", "--timeout-ms", "2000")


@pytest.mark.parametrize("args, message", [
    (["add", "--allow-principal", "User:a"], "name a resource"),
    (["add", "--topic", "t"], "name a principal"),
    (["add", "--topic", "t", "--allow-principal", "User:a", "--operation", "reed"],
     "unknown Operation 'reed'"),
    (["add", "--cluster", "--resource-pattern-type", "prefixed", "--allow-principal", "User:a"],
     "--cluster takes no --resource-pattern-type prefixed"),
    (["remove", "--allow-principal", "User:a"], "name the resources"),
])
def test_bad_input_is_refused_before_anything_is_sent(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["acls", *args, *NOWHERE]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_add_takes_literal_or_prefixed_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["acls", "add", "--topic", "t", "--allow-principal", "User:a",
              "--resource-pattern-type", "match", *NOWHERE])
    assert exit_info.value.code == 2
    assert "invalid choice: 'match'" in capsys.readouterr().err
