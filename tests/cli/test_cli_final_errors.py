"""A record the cluster refuses for good ends the send at once with the refusal's cause, and
one it cannot take for now ends `tidelog produce` within `--timeout-ms`, or at Ctrl-C.

Before: a keyless record to a compacted topic was answered CORRUPT_MESSAGE, which the producer
retries, so `tidelog produce` printed "not delivered within 120000 ms" after two minutes
whatever `--timeout-ms` said, and Ctrl-C waited for those two minutes too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog import errors
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(240)

#: Far below the producer's default delivery timeout (120 s), far above what the commands need.
_SOON_S = 60
_COMPACTED = "final-compacted"

#: `python -m tidelog.cli` as a terminal runs it in the foreground, with Ctrl-C's default
#: action. A test run started in the background of a non-interactive shell (`.ci/run &`) has
#: SIGINT ignored, every child inherits that, and Python then leaves it ignored: the command
#: would not see the test's SIGINT at all, which is right for a background job and not what
#: the test is about.
_AS_A_FOREGROUND_COMMAND = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('tidelog.cli', run_name='__main__', alter_sys=True)"
)


def tidelog(*args: str, timeout: float = _SOON_S) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def compacted(raw: Raw) -> str:
    raw.create_topic(_COMPACTED, 1, 3, cleanup_policy="compact")
    raw.wait_leaders(_COMPACTED, 1)
    return _COMPACTED


@pytest.fixture
def leaderless(cluster: LocalCluster, raw: Raw) -> Iterator[str]:
    """A topic whose only replica's node is stopped (started again afterwards): every send
    to it fails with a retriable error until the node is back."""
    topic = f"final-leaderless-{time.monotonic_ns()}"
    raw.create_topic(topic, 1, 1)
    node = raw.wait_leaders(topic, 1)[0]
    cluster.stop(node)
    try:
        yield topic
    finally:
        cluster.restart(node)


def test_the_node_answers_invalid_record_to_a_keyless_record_in_a_compacted_topic(
    raw: Raw, compacted: str
) -> None:
    leader = raw.wait_leaders(compacted, 1)[0]
    answer = raw.produce(leader, compacted, 0,
                         build_batch([RecordInput(b"v", None, int(time.time() * 1000))]))
    assert answer.error_code == errors.InvalidRecordError.code, answer
    assert "Compacted topic cannot accept message without key" in answer.error_message
    assert not errors.InvalidRecordError.retriable


def test_the_producer_fails_a_keyless_record_to_a_compacted_topic_at_once(
    cluster: LocalCluster, compacted: str
) -> None:
    """Fails without retrying: the future's error is the node's INVALID_RECORD, well before
    the delivery timeout, and a keyed record after it is delivered."""
    from tidelog import Client

    with Client(cluster.bootstrap) as client:
        producer = client.producer(delivery_timeout_ms=_SOON_S * 1000)
        try:
            refused = producer.send(compacted, b"v")
            with pytest.raises(errors.InvalidRecordError, match="without key"):
                refused.result(timeout=_SOON_S / 2)
            assert producer.send(compacted, b"v", key=b"k").result(timeout=_SOON_S / 2)
        finally:
            producer.close(timeout_ms=0)


def test_produce_command_names_the_cause(cluster: LocalCluster, compacted: str) -> None:
    code, _, err = tidelog("produce", compacted, "v1", "--bootstrap", cluster.bootstrap)
    assert code == 2, err
    assert "INVALID_RECORD (87)" in err and "cannot accept message without key" in err, err
    assert "REQUEST_TIMED_OUT" not in err and "Traceback" not in err, err
    assert err.count("INVALID_RECORD") == 1, err  # the node's prefix is not repeated


def test_produce_timeout_bounds_a_record_the_cluster_cannot_take(
    cluster: LocalCluster, leaderless: str
) -> None:
    code, _, err = tidelog("produce", leaderless, "v1", "--bootstrap", cluster.bootstrap,
                           "--timeout-ms", "2000")
    assert code == 2, err
    assert "REQUEST_TIMED_OUT" in err and "last error" in err, err
    assert "Traceback" not in err, err


def test_ctrl_c_ends_produce_while_records_wait(
    cluster: LocalCluster, leaderless: str, tmp_path: Path
) -> None:
    """SIGINT while the command waits for acknowledgements that cannot come: it exits
    (130, no traceback) without waiting for the records' delivery timeout."""
    lines = tmp_path / "lines"
    lines.write_text("v\n" * 10_000)
    stderr = tmp_path / "stderr"
    with lines.open() as stdin, stderr.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", _AS_A_FOREGROUND_COMMAND, "produce", leaderless,
             "--bootstrap", cluster.bootstrap, "--timeout-ms", str(_SOON_S * 2 * 1000)],
            stdin=stdin, stdout=subprocess.DEVNULL, stderr=err_file,
            # A command still running when the test gives up is sent SIGABRT, and its threads'
            # stacks are written to its stderr, shown in the failure.
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
    try:
        # Every line is sent (the command says so at 10,000): it now waits in flush.
        wait_for(lambda: "sent 10000 records" in stderr.read_text(), timeout=_SOON_S,
                 what="the command to send its records")
        os.kill(proc.pid, signal.SIGINT)
        try:
            wait_for(lambda: proc.poll() is not None, timeout=20, what="exit after SIGINT")
        except AssertionError:
            os.kill(proc.pid, signal.SIGABRT)
            proc.wait(10)
            raise AssertionError(f"no exit 20 s after SIGINT:\n{stderr.read_text()}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr.read_text()
    assert "Traceback" not in stderr.read_text()
