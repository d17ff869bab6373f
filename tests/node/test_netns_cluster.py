"""Three nodes on three hosts: each node in its own network namespace, the namespaces joined by
a bridge, each node listening on its own namespace's address (10.77.0.N), and a client in a
fourth namespace running the main scenario (create, produce, consume, ListOffsets by time
under both isolation levels). Nothing but the bridge connects them, so anything that assumed
loopback or one host (an address published as 127.0.0.1, a listener on the wrong interface)
fails here.

The namespaces get names unique to the run, so parallel runs do not clash (their addresses
live inside them), and the fixture removes them whatever happens. The scenario runs in the
client namespace as this file run as a script (``ip netns exec NS python THIS_FILE ...``): the
launcher must reach the nodes, so LocalCluster runs there too, starting each node behind
``ip netns exec`` (its ``command_prefix``). Skipped where namespaces cannot be made (not root,
no ``ip``, a sandbox that forbids them).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(150)

REPO = Path(__file__).resolve().parents[2]
SUBNET = "10.77.0"
CLIENT_HOST = f"{SUBNET}.100"
BASE_PORT = 9092
_SCENARIO_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Hosts:
    """The namespaces of one run: node N's, the client's, and the bridge's."""

    nodes: dict[int, str]
    client: str
    bridge: str


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no ip command (iproute2) to make network namespaces"
    return None


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    reason = _unavailable()
    if reason is not None:
        pytest.skip(reason)
    tag = f"tl{os.getpid()}-{secrets.token_hex(3)}"
    made = Hosts({n: f"{tag}-n{n}" for n in (1, 2, 3)}, f"{tag}-client", f"{tag}-bridge")
    created: list[str] = []
    try:
        try:
            _ip("netns", "add", made.bridge)
        except OSError as exc:
            pytest.skip(f"cannot make a network namespace here: {exc}")
        created.append(made.bridge)
        _ip("-n", made.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", made.bridge, "link", "set", "br0", "up")
        members = [(ns, f"{SUBNET}.{n}") for n, ns in made.nodes.items()]
        for index, (ns, address) in enumerate([*members, (made.client, CLIENT_HOST)]):
            _ip("netns", "add", ns)
            created.append(ns)
            port = f"p{index}"
            # Both ends are made inside their namespaces: no name is ever taken in the root
            # namespace, so parallel runs cannot collide there either.
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
                "netns", made.bridge)
            _ip("-n", made.bridge, "link", "set", port, "master", "br0")
            _ip("-n", made.bridge, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield made
    finally:
        for ns in reversed(created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def test_three_namespaces_run_the_main_scenario(hosts: Hosts, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        ["ip", "netns", "exec", hosts.client, sys.executable, __file__, str(tmp_path),
         *(hosts.nodes[n] for n in (1, 2, 3))],
        capture_output=True, text=True, timeout=_SCENARIO_TIMEOUT_S, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    expected = {str(n): f"{SUBNET}.{n}:{BASE_PORT + n - 1}" for n in (1, 2, 3)}
    assert summary["metadata_nodes"] == expected, "Metadata publishes each host's own address"
    assert summary["consumed"] == summary["produced"] == 30
    assert summary["warned"] == [1, 2, 3], "every plaintext non-loopback node warns at start"
    assert not any(
        subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for ns in hosts.nodes.values()
    ), "no node process outlives the scenario"


def _scenario(data_dir: Path, namespaces: list[str]) -> dict[str, object]:
    """Runs inside the client namespace: a cluster of one node per namespace, then the main
    produce/consume/ListOffsets scenario against it through the client library."""
    from waiting_helpers import poll_records

    from tidelog import Client, IsolationLevel, OffsetSpec, TopicPartition
    from tidelog.clock import wall_clock_ms
    from tidelog.testing import LocalCluster

    with LocalCluster(
        3, data_dir, BASE_PORT,
        hosts={n: f"{SUBNET}.{n}" for n in (1, 2, 3)},
        command_prefix=lambda n: ["ip", "netns", "exec", namespaces[n - 1]],
        ready_timeout=60,
    ) as cluster, Client(cluster.bootstrap) as client:
        client.create_topic("events", partitions=3, replication_factor=3)
        producer = client.producer(acks="all")
        # Within retention (7 days): records stamped long ago are deleted by the retention
        # check (every 5 s) as Kafka deletes them, before or while they are consumed.
        base = wall_clock_ms() - 3_600_000
        sent = [
            producer.send("events", f"v{i}".encode(), key=f"k{i}".encode(),
                          timestamp_ms=base + i).result(timeout=30)
            for i in range(30)
        ]
        producer.close()
        by_partition: dict[int, list[int]] = {}
        for meta in sent:
            by_partition.setdefault(meta.partition, []).append(meta.offset)
        consumer = client.consumer()
        tps = [TopicPartition("events", p) for p in range(3)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek_to_beginning(tp)
        consumed = poll_records(consumer, len(sent), timeout=60)
        got = sorted((r.partition, r.offset) for r in consumed)
        assert got == sorted((m.partition, m.offset) for m in sent), (
            f"consumed {got}, positions {[consumer.position(tp) for tp in tps]}, sent "
            f"{sorted((m.partition, m.offset) for m in sent)}")
        consumer.close()
        for isolation in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
            latest = client.list_offsets({tp: OffsetSpec.latest() for tp in tps},
                                         isolation_level=isolation)
            assert {tp.partition: r.offset for tp, r in latest.items()} == {
                p: len(by_partition.get(p, [])) for p in range(3)}
            for meta in sent[::7]:
                tp = TopicPartition("events", meta.partition)
                found = client.list_offsets({tp: OffsetSpec.for_timestamp(meta.timestamp)},
                                            isolation_level=isolation)[tp]
                assert (found.offset, found.timestamp) == (meta.offset, meta.timestamp)
        nodes = client.admin.describe_cluster().nodes
        warned = [n for n in cluster.node_ids
                  if "is not a loopback address and has no TLS" in cluster.logs(n)]
        return {
            "metadata_nodes": {str(node_id): address for node_id, address in nodes.items()},
            "produced": len(sent),
            "consumed": len(consumed),
            "warned": warned,
        }


if __name__ == "__main__":
    print(json.dumps(_scenario(Path(sys.argv[1]), sys.argv[2:5])))
