"""The operator commands as a user runs them: real processes, real cluster, exit codes and
output, and a one-line message (never a traceback) for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]


def tidelog(*args: str, stdin: str = "", env_bootstrap: str | None = None) -> tuple[int, str, str]:
    env = dict(os.environ)
    if env_bootstrap is not None:
        env["TIDELOG_BOOTSTRAP"] = env_bootstrap
    done = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *args],
        input=stdin, capture_output=True, text=True, timeout=120, env=env,
    )
    return done.returncode, done.stdout, done.stderr


def test_topic_lifecycle(cluster: LocalCluster) -> None:
    b = cluster.bootstrap
    code, out, err = tidelog("topic", "create", "cli-t", "--partitions", "2",
                             "--config", "retention.ms=60000", "--bootstrap", b)
    assert code == 0, err
    assert "created topic cli-t" in out
    code, out, _ = tidelog("topic", "list", "--bootstrap", b)
    assert code == 0 and "cli-t" in out.split()
    code, out, _ = tidelog("topic", "describe", "cli-t", "--bootstrap", b)
    assert code == 0
    assert "retention.ms=60000" in out
    assert out.count("partition ") == 2
    code, out, err = tidelog("topic", "create", "cli-t", "--bootstrap", b)
    assert code == 2 and "TOPIC_ALREADY_EXISTS" in err and "Traceback" not in err
    code, out, _ = tidelog("topic", "delete", "cli-t", "--bootstrap", b)
    assert code == 0
    code, out, _ = tidelog("topic", "list", "--bootstrap", b)
    assert "cli-t" not in out.split()


def test_produce_consume_and_offsets(cluster: LocalCluster) -> None:
    import time
    from datetime import UTC, datetime

    b = cluster.bootstrap
    # Recent timestamps: records older than retention.ms (7 days) would be deleted, as Kafka's
    # time retention does.
    t1 = (int(time.time()) - 600) * 1000
    t2 = t1 + 4000
    assert tidelog("topic", "create", "cli-p", "--bootstrap", b)[0] == 0
    code, out, err = tidelog("produce", "cli-p", "a", "b", "--partition", "0",
                             "--timestamp", str(t1), "--bootstrap", b)
    assert code == 0, err
    assert "cli-p:0: 2 record(s) at offsets 0..1" in out
    code, out, err = tidelog("produce", "cli-p", "--partition", "0", "--timestamp", str(t2),
                             "--key-separator", ":", stdin="k1:c\nk2:d\n", env_bootstrap=b)
    assert code == 0, err
    code, out, err = tidelog("consume", "cli-p", "--from", "earliest", "--max-records", "4",
                             "--bootstrap", b)
    assert code == 0, err
    rows = [line.split("\t") for line in out.splitlines()]
    assert [(r[1], r[3], r[4]) for r in rows] == [
        ("0", "", "a"), ("1", "", "b"), ("2", "k1", "c"), ("3", "k2", "d")
    ]
    code, out, _ = tidelog("consume", "cli-p", "--from", str(t1 + 2000), "--max-records", "1",
                           "--bootstrap", b)
    assert code == 0 and out.split("\t")[1] == "2"
    iso = datetime.fromtimestamp(t1 / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    expected = {
        "earliest": "cli-p:0:0",
        "latest": "cli-p:0:4",
        "max": f"cli-p:0:2 (timestamp {t2})",
        str(t1 + 2000): f"cli-p:0:2 (timestamp {t2})",
        iso: f"cli-p:0:0 (timestamp {t1})",
        str(t2 + 1): "cli-p:0:none",
    }
    for spec, line in expected.items():
        code, out, err = tidelog("offsets", "cli-p", "--time", spec,
                                 "--isolation", "read_committed", "--bootstrap", b)
        assert code == 0, err
        assert out.strip() == line, spec


@pytest.mark.parametrize(
    "args",
    [
        ("offsets", "cli-none", "--time", "yesterday"),
        ("offsets", "cli-none", "--time", "-5"),
        ("topic", "create", "bad name!"),
        ("topic", "create", "x", "--config", "novalue"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cluster: LocalCluster, args: tuple[str, ...]) -> None:
    code, _, err = tidelog(*args, "--bootstrap", cluster.bootstrap, "--timeout-ms", "3000")
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_unreachable_bootstrap_is_a_clear_error() -> None:
    code, _, err = tidelog("topic", "list", "--bootstrap", "127.0.0.1:1", "--timeout-ms", "1500")
    assert code == 2
    assert "Traceback" not in err and err.strip()


def test_perf_produce_and_consume_print_kafkas_lines(cluster: LocalCluster) -> None:
    """kafka-producer-perf-test's final line (throughput and latency percentiles), then
    kafka-consumer-perf-test's header and CSV row over the same records; the producer's
    Kafka-named properties reach the producer (compression.type, linger.ms)."""
    import re

    b = cluster.bootstrap
    assert tidelog("topic", "create", "cli-perf", "--partitions", "2", "--bootstrap", b)[0] == 0
    code, out, err = tidelog("perf", "produce", "--topic", "cli-perf", "--num-records", "1000",
                             "--record-size", "100", "--throughput", "-1", "--producer-props",
                             "acks=all", "linger.ms=5", "compression.type=lz4",
                             "--bootstrap-server", b)
    assert code == 0, err
    final = out.strip().splitlines()[-1]
    assert re.fullmatch(
        r"1000 records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg "
        r"latency, \d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms "
        r"99\.9th\.", final), final
    code, out, err = tidelog("perf", "consume", "--topic", "cli-perf", "--messages", "1000",
                             "--timeout", "20000", "--bootstrap-server", b)
    assert code == 0, err
    header, row = out.strip().splitlines()
    assert header == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                      "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    fields = row.split(", ")
    assert len(fields) == 10 and fields[4] == "1000" and fields[2] == "0.0954", row
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", fields[0]), row


def test_perf_kafka_drives_the_kafka_listener_with_the_same_lines(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """``--kafka``: confluent-kafka produces to and consumes from the Kafka listeners (found
    by --kafka-bootstrap, or bootstrap.servers among the producer properties) and the lines
    are the gRPC path's; without confluent-kafka installed, one line says how to install it."""
    import re

    b, k = cluster.bootstrap, cluster.kafka_bootstrap
    assert tidelog("topic", "create", "cli-perf-kafka", "--partitions", "2", "--bootstrap",
                   b)[0] == 0
    code, out, err = tidelog("perf", "produce", "--kafka", "--topic", "cli-perf-kafka",
                             "--num-records", "500", "--record-size", "100", "--throughput",
                             "-1", "--producer-props", "acks=all", "linger.ms=5",
                             "compression.type=lz4", f"bootstrap.servers={k}")
    assert code == 0, err
    assert re.fullmatch(r"500 records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), .* "
                        r"\d+ ms 99\.9th\.", out.strip().splitlines()[-1]), out
    code, out, err = tidelog("perf", "consume", "--kafka", "--kafka-bootstrap", k, "--topic",
                             "cli-perf-kafka", "--messages", "500", "--timeout", "20000")
    assert code == 0, err
    header, row = out.strip().splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB"), out
    fields = row.split(", ")
    assert len(fields) == 10 and fields[4] == "500" and fields[2] == "0.0477", row
    (tmp_path / "confluent_kafka.py").write_text("raise ImportError('not installed')\n")
    done = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "perf", "consume", "--kafka", "--topic", "t",
         "--messages", "1"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])},
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "pip install 'confluent-kafka==" in done.stderr, done.stderr
