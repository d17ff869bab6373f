"""LocalCluster and ``tidelog cluster``: real node processes, and none left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest

from tidelog import wire
from tidelog.errors import ConfigurationError, InvalidConfigError
from tidelog.testing import (
    LISTEN_PORTS_ENV,
    ClusterError,
    LocalCluster,
    _free_ports,
    listen_port_room,
    probe,
    stop_cluster,
    wait_for,
)
from tidelog.v1 import tidelog_pb2_grpc

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 20.0


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie does not (an orphan's reaper may be slow or absent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # it exited between open and read
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def metadata_node_ids(address: str) -> list[int]:
    with grpc.insecure_channel(address) as channel:
        meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(wire.metadata_request(), timeout=5)
    return [n.node_id for n in meta.nodes]


def _accepts(address: str) -> bool:
    """Whether something listens at `address` (a connection is accepted)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=DEADLINE_S).close()
    except OSError:
        return False
    return True


def test_three_nodes_kill_restart_pause_resume_stop() -> None:
    with LocalCluster(nodes=3) as cluster:
        assert cluster.node_ids == [1, 2, 3]
        addresses = [cluster.address_of(n) for n in cluster.node_ids]
        assert cluster.bootstrap == ",".join(addresses)
        for address in addresses:
            assert metadata_node_ids(address) == [1, 2, 3]
        pids = [cluster.pid_of(n) for n in cluster.node_ids]
        kafka = cluster.kafka_address_of(2)

        cluster.kill(2)
        assert cluster.pid_of(2) is None and not alive(pids[1] or 0)
        assert not probe(addresses[1]).serving
        cluster.restart(2)
        assert cluster.address_of(2) == addresses[1]
        assert probe(addresses[1], with_metadata=False).serving
        assert cluster.pid_of(2) not in pids
        # The Kafka listener too comes back where it was (as a Kafka broker's does), killed
        # or stopped: a Kafka client that knew the node reaches it again.
        assert cluster.kafka_address_of(2) == kafka
        assert _accepts(kafka)
        cluster.stop(2)
        cluster.restart(2)
        assert cluster.kafka_address_of(2) == kafka
        assert _accepts(kafka)

        cluster.pause(3)
        assert not probe(addresses[2], with_metadata=False).serving  # frozen: the call times out
        cluster.wait_ready(DEADLINE_S)  # a paused node is not waited for
        cluster.resume(3)
        assert probe(addresses[2], with_metadata=False).serving

        assert cluster.stop(1) == 0
        assert cluster.pid_of(1) is None
        assert "stopping (graceful)" in cluster.logs(1)
        data_dir = cluster.data_dir
        live = [p for p in (cluster.pid_of(n) for n in cluster.node_ids) if p is not None]
    assert not any(alive(pid) for pid in live)
    assert not data_dir.exists()


def test_no_process_survives_an_exception_in_the_block() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="test failure"), LocalCluster(nodes=2) as cluster:
        cluster.pause(2)  # a stopped process must die too
        pids = [p for p in (cluster.pid_of(n) for n in cluster.node_ids) if p is not None]
        raise RuntimeError("test failure")
    assert len(pids) == 2
    assert not any(alive(pid) for pid in pids)


def test_a_start_failure_reports_the_log_and_leaves_nothing(tmp_path: Path) -> None:
    cluster = LocalCluster(nodes=2, data_dir=tmp_path)
    with pytest.raises(InvalidConfigError, match=r"election\.timeout\.ms"), LocalCluster(
        nodes=1, data_dir=tmp_path / "bad", election_timeout_ms=10
    ):
        pass
    with cluster:
        pids = [cluster.pid_of(n) for n in cluster.node_ids]
        with pytest.raises(ClusterError, match="held by a running cluster"), LocalCluster(
            nodes=2, data_dir=tmp_path
        ):
            pass
        assert all(alive(pid or 0) for pid in pids)
    assert not any(alive(pid or 0) for pid in pids)


def test_same_data_dir_resumes_with_same_ids_and_addresses(tmp_path: Path) -> None:
    with LocalCluster(nodes=2, data_dir=tmp_path) as first:
        bootstrap = first.bootstrap
    with LocalCluster(nodes=2, data_dir=tmp_path) as second:
        assert second.bootstrap == bootstrap
    assert tmp_path.exists()
    with pytest.raises(ConfigurationError, match="holds a 2-node cluster"):
        LocalCluster(nodes=3, data_dir=tmp_path).start()


def test_a_launcher_killed_with_sigkill_leaves_no_node(tmp_path: Path) -> None:
    launcher = textwrap.dedent(
        f"""
        import json, sys
        from tidelog.testing import LocalCluster
        cluster = LocalCluster(nodes=3, data_dir={str(tmp_path)!r})
        cluster.__enter__()
        cluster.pause(3)  # a frozen node cannot watch its parent: the kernel must kill it
        print(json.dumps([cluster.pid_of(n) for n in cluster.node_ids]), flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher], cwd=REPO, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        proc.kill()
        proc.wait()
        wait_for(lambda: not any(alive(pid) for pid in pids), DEADLINE_S, "every node to exit")
    finally:
        proc.kill()
        proc.wait()
        stop_cluster(tmp_path, timeout=1)  # only if the assertion failed: nothing runs otherwise


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog.cli", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )


def test_cluster_up_detach_status_and_down(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    try:
        up = run_cli("cluster", "up", "--nodes", "3", "--data-dir", str(data_dir),
                     "--base-port", "0", "--detach")
        assert up.returncode == 0, up.stderr
        bootstrap = up.stdout.strip()
        addresses = bootstrap.split(",")
        assert len(addresses) == 3
        for node_id in (1, 2, 3):  # each node's endpoints, told on stderr
            metrics = (data_dir / f"node-{node_id}" / "metrics.addr").read_text().strip()
            assert f"node {node_id}: metrics on http://{metrics}/metrics" in up.stderr
            kafka = (data_dir / f"node-{node_id}" / "node.addr").read_text().splitlines()[2]
            assert (f"node {node_id}: gRPC {addresses[node_id - 1]}, Kafka protocol {kafka}"
                    in up.stderr)
        assert all(probe(a, with_metadata=False).serving for a in addresses)
        pids = json.loads((data_dir / "cluster.json").read_text())["pids"].values()
        assert all(alive(pid) for pid in pids)

        with grpc.insecure_channel(addresses[0]) as channel:
            stub = tidelog_pb2_grpc.TidelogStub(channel)
            created = stub.CreateTopics(
                wire.create_topics_request("events", 2, 3, {}, timeout_ms=10_000), timeout=15
            )
            assert [t.error_code for t in created.topics] == [0], created

            def leaders() -> dict[int, int]:
                meta = stub.Metadata(wire.metadata_request(["events"]), timeout=5)
                return {p.partition: p.leader_id for t in meta.topics for p in t.partitions}

            wait_for(lambda: all(leader >= 0 for leader in leaders().values()), DEADLINE_S,
                     "leaders")
        status = run_cli("cluster", "status", "--bootstrap", bootstrap)
        assert status.returncode == 0, status.stderr
        for address in addresses:
            assert address in status.stdout
        assert "(controller)" in status.stdout
        # The quorum's other two seats, one line each.
        assert status.stdout.count("(controller voter)") == 2, status.stdout
        # The partition table (leader, epoch, replicas, ISR), before the per-replica one.
        roles = ("leader", "in-sync", "out-of-sync")
        partition_lines = [cols for cols in (line.split() for line in status.stdout.splitlines())
                           if cols[:1] == ["events"] and cols[3] not in roles]
        assert [(int(cols[1]), int(cols[2]) >= 0) for cols in partition_lines] == [
            (0, True), (1, True)
        ]

        again = run_cli("cluster", "up", "--data-dir", str(data_dir), "--base-port", "0",
                        "--detach")
        assert again.returncode == 2
        assert "held by a running cluster" in again.stderr and "Traceback" not in again.stderr

        down = run_cli("cluster", "down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stderr
        assert "stopped node(s) 1, 2, 3" in down.stdout
        wait_for(lambda: not any(alive(pid) for pid in pids), DEADLINE_S, "every node to exit")
        for node_id in (1, 2, 3):
            assert "stopping (graceful)" in (data_dir / f"node-{node_id}.log").read_text()
    finally:
        if (data_dir / "cluster.json").exists():
            stop_cluster(data_dir, timeout=1)


def cluster_up_detached(data_dir: Path, nodes: int) -> list[str]:
    up = run_cli("cluster", "up", "--nodes", str(nodes), "--data-dir", str(data_dir),
                 "--base-port", "0", "--detach")
    assert up.returncode == 0, up.stderr
    return up.stdout.strip().split(",")


def kill_node(data_dir: Path, node_id: int) -> None:
    """SIGKILL the node as `cluster up` launched it, and wait until its data dir is free."""
    from tidelog.node.server import data_dir_in_use

    pid = json.loads((data_dir / "cluster.json").read_text())["pids"][str(node_id)]
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not data_dir_in_use(data_dir / f"node-{node_id}"), DEADLINE_S,
             f"node {node_id} to release its data dir")


def test_cluster_down_stops_a_node_restarted_by_hand(tmp_path: Path) -> None:
    """A node restarted by hand (the launcher's command line, from a shell: no session of its
    own) holds its data dir under another pid than the one `cluster up` recorded: `cluster
    down` finds it by its lock, stops it with the others and tells of each as it exits."""
    from tidelog.node.server import data_dir_in_use

    data_dir = tmp_path / "cluster"
    by_hand = None
    try:
        addresses = cluster_up_detached(data_dir, 3)
        kill_node(data_dir, 2)
        with (data_dir / "node-2.log").open("ab") as log:
            by_hand = subprocess.Popen(
                [sys.executable, "-m", "tidelog.node",
                 "--config", str(data_dir / "node-2" / "node.properties")],
                cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )
        wait_for(lambda: data_dir_in_use(data_dir / "node-2")
                 and probe(addresses[1], with_metadata=False).serving, DEADLINE_S,
                 "node 2 to serve again")

        down = run_cli("cluster", "down", "--data-dir", str(data_dir), "--timeout", "30")
        assert down.returncode == 0, down.stderr
        for node_id in (1, 2, 3):
            assert f"node {node_id} stopped" in down.stdout, down.stdout
        assert "stopped node(s) 1, 2, 3" in down.stdout
        assert by_hand.wait(DEADLINE_S) == 0  # it had exited: gracefully
        assert "stopping (graceful)" in (data_dir / "node-2.log").read_text()
    finally:
        if (data_dir / "cluster.json").exists():
            stop_cluster(data_dir, timeout=1)
        if by_hand is not None and by_hand.poll() is None:
            by_hand.kill()
            by_hand.wait()


# Holds a data dir's lock as a node does, and ignores SIGTERM: a node that will not stop.
_STUBBORN = """
import fcntl, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)
lock.truncate(0)
lock.write(f"{os.getpid()}\\n")
lock.flush()
print("held", flush=True)
time.sleep(600)
"""


def test_cluster_down_ends_in_its_timeout_naming_a_node_that_does_not_stop(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "cluster"
    stubborn = None
    try:
        cluster_up_detached(data_dir, 2)
        kill_node(data_dir, 2)
        stubborn = subprocess.Popen(
            [sys.executable, "-c", _STUBBORN, str(data_dir / "node-2" / "node.lock")],
            stdout=subprocess.PIPE, text=True, start_new_session=True,
        )
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "held\n"

        down = run_cli("cluster", "down", "--data-dir", str(data_dir), "--timeout", "15")
        assert down.returncode == 1, (down.stdout, down.stderr)
        assert "node 1 stopped" in down.stdout and "node 2 stopped" not in down.stdout
        assert "node(s) 2 did not stop within 15 s; --force kills them" in down.stderr
        assert stubborn.poll() is None

        forced = run_cli("cluster", "down", "--data-dir", str(data_dir), "--timeout", "1",
                         "--force")
        assert forced.returncode == 0, forced.stderr
        assert "node 2 stopped" in forced.stdout
        assert stubborn.wait(DEADLINE_S) == -signal.SIGKILL
    finally:
        if (data_dir / "cluster.json").exists():
            stop_cluster(data_dir, timeout=1)
        if stubborn is not None and stubborn.poll() is None:
            stubborn.kill()
            stubborn.wait()


def test_cluster_status_without_a_reachable_node_is_one_line() -> None:
    result = run_cli("cluster", "status", "--bootstrap", "127.0.0.1:1")
    assert result.returncode == 2
    assert result.stderr.strip().endswith("no node reachable at 127.0.0.1:1")
    assert result.stderr.count("\n") == 1


def test_sigterm_to_cluster_up_stops_every_node_gracefully(tmp_path: Path) -> None:
    up = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli", "cluster", "up", "--nodes", "2", "--data-dir",
         str(tmp_path), "--base-port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert up.stdout is not None
        assert len(up.stdout.readline().strip().split(",")) == 2  # printed once ready
        pids = json.loads((tmp_path / "cluster.json").read_text())["pids"].values()
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=DEADLINE_S) == 0
        assert not any(alive(pid) for pid in pids)
        for node_id in (1, 2):
            assert "stopping (graceful)" in (tmp_path / f"node-{node_id}.log").read_text()
    finally:
        up.kill()
        up.wait()


def test_a_cluster_listens_below_the_ephemeral_ports_its_own_connections_take() -> None:
    """A listening port taken from the kernel's ephemeral range could be taken first as the
    source port of a connection (a node dialling a peer still starting), and that node then
    exits with "address in use" (seen in runs beside other suites)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low < 20_000 + 16 * 8:
        pytest.skip(f"the ephemeral range starts at {low}: no room below it")
    with LocalCluster(1, require_controller=False) as cluster:
        ports = [int(a.rpartition(":")[2]) for n in cluster.node_ids
                 for a in (cluster.address_of(n), cluster.internal_address_of(n))]
    assert len(set(ports)) == 2 and all(port < low for port in ports), (ports, low)


def _free_block(count: int) -> int:
    """The first of `count` consecutive loopback ports that are free now."""
    for base in range(21_000, 30_000, 97):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError(f"no {count} consecutive free ports")


def test_a_base_port_puts_the_kafka_listener_after_the_node_to_node_one() -> None:
    """With a base port every listener's port is known before the cluster starts (the Kafka
    quick start names them): client, node-to-node, then Kafka."""
    base = _free_block(3)
    with LocalCluster(nodes=1, base_port=base) as cluster:
        assert cluster.address_of(1) == f"127.0.0.1:{base}"
        assert cluster.internal_address_of(1) == f"127.0.0.1:{base + 1}"
        assert cluster.kafka_address_of(1) == f"127.0.0.1:{base + 2}"


@pytest.mark.cluster  # it binds sockets to find free ports
def test_listening_ports_come_from_the_range_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parallel test workers each name their own range (tests/conftest.py), so that one
    worker's cluster never picks the port of another's node that is down for a restart."""
    monkeypatch.setenv(LISTEN_PORTS_ENV, "23000-23099")
    assert listen_port_room() == range(23_000, 23_100)
    assert all(23_000 <= port <= 23_099 for port in _free_ports(6))
    for bad in ("23000", "x-y", "23100-23000", "0-10", "60000-70000"):
        monkeypatch.setenv(LISTEN_PORTS_ENV, bad)
        with pytest.raises(ConfigurationError, match=LISTEN_PORTS_ENV):
            listen_port_room()
