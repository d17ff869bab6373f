"""examples/exactly_once.py as a real process (issues 16 and 27: a subscribed member that
commits its offsets with group_metadata()): SIGKILLed after it committed part of the work, with
the leader of an output partition SIGKILLed (and restarted) under the next run, and restarted
until the group's committed offsets cover the input; a read_committed reader of the output then
sees each input record transformed exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from waiting_helpers import poll_to

from tidelog import Client, TopicPartition
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(120)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "exactly_once.py"
N = 120
PARTITIONS = 3
IN, OUT, GROUP = "eos-in", "eos-out", "eos-upper"


#: The killed run's member holds its partitions until its session times out; a short session
#: lets the next run take them over within the test's waits.
SESSION_MS = 6000


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, group_consumer_session_timeout_ms=SESSION_MS,
                      group_consumer_heartbeat_interval_ms=500) as c:
        yield c


def test_survives_sigkill_of_program_and_of_an_output_leader(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    client = Client(cluster.bootstrap, request_timeout_ms=30_000)
    running: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        log = (tmp_path / f"run{len(running)}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--bootstrap", cluster.bootstrap,
             "--input", IN, "--output", OUT, "--group", GROUP,
             "--partitions", str(PARTITIONS), "--idle-s", "1", "--max-poll-records", "5"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ},
        )
        log.close()
        running.append(proc)
        return proc

    in_tps = [TopicPartition(IN, p) for p in range(PARTITIONS)]
    with client:
        probe = client.consumer(group_id=GROUP)

        def committed() -> int:
            return sum(o.offset for o in probe.committed(in_tps).values() if o is not None)

        try:
            for topic in (IN, OUT):
                client.create_topic(topic, partitions=PARTITIONS)
            with client.producer() as seed:
                for n in range(N):
                    seed.send(IN, f"record {n}".encode())

            first = start()
            wait_for(lambda: committed() >= N // 4, 30, "the first run to commit a quarter")
            first.kill()
            first.wait()
            assert committed() < N, "the first run finished before it could be killed"

            second = start()
            done_before = committed()
            wait_for(lambda: committed() > done_before, 30, "the second run to commit")
            leader = cluster.leader_of((OUT, 0))
            assert leader is not None
            cluster.kill(leader)
            cluster.restart(leader)
            proc = second
            for _ in range(5):  # each run exits when idle; one may idle out during elections
                logs = sorted(p.read_text() for p in tmp_path.glob("*.log"))
                assert proc.wait(timeout=60) == 0, logs
                if committed() >= N:
                    break
                proc = start()
            assert committed() == N

            reader = client.consumer(isolation_level="read_committed",
                                     auto_offset_reset="earliest")
            out_tps = [TopicPartition(OUT, p) for p in range(PARTITIONS)]
            reader.assign(out_tps)
            ends = reader.end_offsets(out_tps)
            values = Counter(r.value or b"" for r in poll_to(reader, ends, 30))
            reader.close()
            expected = Counter(f"RECORD {n}".encode() for n in range(N))
            assert values - expected == Counter(), "duplicates or foreign records"
            assert expected - values == Counter(), "missing records"
        finally:
            for proc in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            probe.close()
