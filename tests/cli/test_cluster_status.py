"""``tidelog cluster status``: the tables' numbers against a real cluster, an under-replicated
partition shown as such, ``--watch`` ended by Ctrl-C, and the highlighting."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tidelog.commands.cluster_status import (
    ClusterState,
    NodeState,
    PartitionState,
    ReplicaState,
    render,
)
from tidelog.testing import LocalCluster, Raw, make_batch, stop_cluster, wait_for

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
ROLES = ("leader", "in-sync", "out-of-sync")


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    # Leaders stay where they were elected; a stopped follower is out of sync after a second.
    return {"auto_leader_rebalance_enable": False, "replica_lag_max_ms": 1000}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidelog.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def status(cluster: LocalCluster, *extra: str) -> str:
    done = cli("cluster", "status", "--bootstrap", cluster.bootstrap, *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout


def rows(out: str, topic: str) -> tuple[list[list[str]], list[list[str]]]:
    """(partition rows, replica rows) of `topic`, as whitespace-split cells."""
    lines = [cols for cols in (line.split() for line in out.splitlines()) if cols[:1] == [topic]]
    return [c for c in lines if c[3] not in ROLES], [c for c in lines if c[3] in ROLES]


def test_offsets_lag_and_an_under_replicated_partition_against_a_cluster(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    cluster, raw = fresh_cluster, fresh_raw
    raw.create_topic("shown", 1, 3)
    leader = raw.wait_leaders("shown")[0]
    acked = raw.produce_acknowledged("shown", 0, [[b"v"] * 7])
    end = max(acked) + 1
    wait_for(lambda: all(raw.list_offset(n, "shown", 0, -1, replica_id=-2).offset == end
                         for n in cluster.node_ids), 30, "every replica at the end")

    def settled() -> tuple[list[list[str]], list[list[str]]] | None:
        partitions, replicas = rows(status(cluster), "shown")
        # Every follower's HW reaches the end with the next heartbeat.
        if all(r[5] == str(end) for r in replicas):
            return partitions, replicas
        return None

    partitions, replicas = wait_for(settled, 30, "every replica's HW at the end")
    assert partitions == [["shown", "0", str(leader), partitions[0][3], "1,2,3", "1,2,3", "ok"]]
    assert sorted(int(r[2]) for r in replicas) == [1, 2, 3]
    for r in replicas:
        assert r[3] == ("leader" if int(r[2]) == leader else "in-sync")
        assert r[4:] == ["0", str(end), str(end), str(end), "0"]  # START HW LSO LEO LAG

    follower = next(n for n in cluster.node_ids if n != leader)
    cluster.stop(follower)

    def under_replicated() -> tuple[list[list[str]], list[list[str]]] | None:
        partitions, replicas = rows(status(cluster), "shown")
        return (partitions, replicas) if partitions[0][-1] == "under-replicated" else None

    partitions, replicas = wait_for(under_replicated, 60, "the partition under-replicated")
    assert str(follower) not in partitions[0][5].split(",")
    stopped = next(r for r in replicas if int(r[2]) == follower)
    assert stopped[3:] == ["out-of-sync", "unreachable"]


def test_watch_redraws_until_ctrl_c_and_exits_cleanly(cluster: LocalCluster, raw: Raw) -> None:
    raw.create_topic("watched", 1, 3)
    watch = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli", "cluster", "status", "--bootstrap",
         cluster.bootstrap, "--watch", "--interval", "0.2"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # Its first round is done once it asked every node for offsets: then interrupt it.
        leader = raw.wait_leaders("watched")[0]
        assert raw.produce(leader, "watched", 0, make_batch([b"w"])).error_code == 0
        wait_for(lambda: watch.poll() is None and _asked_all(cluster), 30, "a round of --watch")
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == 0, err
    assert "Traceback" not in err, err
    _, replicas = rows(out, "watched")
    assert replicas, out


def _asked_all(cluster: LocalCluster) -> bool:
    """Whether every node answered a debug Fetch (the last request of a status round), as its
    metrics count them."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    for node in cluster.node_ids:
        with urllib.request.urlopen(f"http://{cluster.metrics_address(node)}/metrics") as page:
            text = page.read().decode()
        fetches = [s for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "tidelog_requests_total" and s.labels.get("rpc") == "Fetch"]
        if not fetches:
            return False
    return True


def test_under_replicated_and_out_of_sync_rows_are_highlighted_with_the_lag() -> None:
    state = ClusterState(
        nodes=[NodeState(1, "127.0.0.1:1", "SERVING", True),
               NodeState(2, "127.0.0.1:2", "SERVING", False)],
        controller_id=1,
        partitions=[
            PartitionState("t", 0, 1, 3, (1, 2), (1,), 0,
                           (ReplicaState(1, (0, 90, 90, 100)), ReplicaState(2, (0, 60, 60, 70)))),
            PartitionState("t", 1, 2, 1, (2, 1), (2, 1), 0,
                           (ReplicaState(2, (5, 8, 8, 8)), ReplicaState(1, None))),
        ],
    )
    console = Console(force_terminal=True, color_system="standard", width=200)
    with console.capture() as captured:
        console.print(render(state))
    lines = captured.get().splitlines()
    under = next(line for line in lines if "under-replicated" in line)
    assert "\x1b[1;33m" in under  # bold yellow
    lagging = next(line for line in lines if "out-of-sync" in line)
    assert "\x1b[1;33m" in lagging
    plain = Console(width=200, color_system=None)
    with plain.capture() as captured:
        plain.print(render(state))
    _, replicas = rows(captured.get(), "t")
    assert [r[2:] for r in replicas] == [
        ["1", "leader", "0", "90", "90", "100", "0"],
        ["2", "out-of-sync", "0", "60", "60", "70", "30"],  # lag: 100 - 70
        ["2", "leader", "5", "8", "8", "8", "0"],
        ["1", "in-sync", "unreachable"],
    ]


def test_cluster_up_tls_prints_the_flags_that_status_then_connects_with(tmp_path: Path) -> None:
    """`cluster up --tls` is the whole secure setup: a throwaway CA, TLS with client
    certificates required on both listeners, the authorizer on, the client flags printed (and
    written as a --command-config file) for the other commands, and what the listeners accept
    and who is a node or a super user; status without the flags is one clear line."""
    data_dir = tmp_path / "tls-cluster"
    try:
        up = cli("cluster", "up", "--tls", "--nodes", "1", "--data-dir", str(data_dir),
                 "--base-port", "0", "--detach")
        assert up.returncode == 0, up.stderr
        bootstrap = up.stdout.strip()
        properties = data_dir / "tls" / "client.properties"
        assert "security.protocol=SSL" in properties.read_text()
        assert f"--command-config {properties}" in up.stderr
        # The short version of README's Security section: listeners, nodes, the authorizer.
        security = up.stderr[up.stderr.index("Security (docs/security.md):"):].splitlines()
        assert "client certificate" in security[1] and "required" in security[1]
        assert "nodes only: User:CN=node-1" in security[2]
        assert "authorizer acl: what no ACL allows is denied" in security[3]
        assert "User:CN=client" in security[3] and "User:CN=node-1" in security[3]
        printed = next(line for line in up.stderr.splitlines() if line.strip().startswith("CLI:"))
        flags = printed.split("topic list", 1)[1].split()
        assert flags[:2] == ["--bootstrap", bootstrap] and "--ssl-certfile" in flags
        created = cli("topic", "create", "secret", "--replication-factor", "1", "--bootstrap",
                      bootstrap, "--command-config", str(properties))
        assert created.returncode == 0, created.stderr

        def secret_led() -> str | None:
            done = cli("cluster", "status", *flags)
            assert done.returncode == 0, done.stderr
            return done.stdout if rows(done.stdout, "secret")[1] else None

        out = wait_for(secret_led, 60, "the topic's leader in the status table")
        _, replicas = rows(out, "secret")
        assert [r[3:] for r in replicas] == [["leader", "0", "0", "0", "0", "0"]], out
        plaintext = cli("cluster", "status", "--bootstrap", bootstrap)
        assert plaintext.returncode == 2
        assert "no node reachable" in plaintext.stderr and "Traceback" not in plaintext.stderr
    finally:
        stop_cluster(data_dir, timeout=5)
