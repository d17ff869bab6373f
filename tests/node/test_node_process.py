"""One node as a real process: config, health, reflection, Metadata, signals, refusals."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tidelog import wire
from tidelog.coordinator.controller import MetadataImage
from tidelog.errors import InvalidConfigError
from tidelog.node.config import NodeConfig, parse_peers, read_properties
from tidelog.testing import LocalCluster, wait_for
from tidelog.v1 import raft_pb2, raft_pb2_grpc, tidelog_pb2_grpc

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 20.0
TIDELOG_SERVICE = "tidelog.v1.Tidelog"
SERVING = health_pb2.HealthCheckResponse.SERVING


def spawn_node(*args: str, entry: tuple[str, ...] = ("tidelog.node",)) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", *entry, *args, "--exit-with-parent", str(os.getpid())],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Every process a test starts; killed at teardown whatever the outcome."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def while_running(proc: subprocess.Popen[str], condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition`` for wait_for, failing at once with the node's output if it exited."""

    def check() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"node exited ({proc.returncode}):\n"
                        + (proc.stdout.read() if proc.stdout else ""))
        return condition()

    return check


def health_status(address: str, service: str) -> int | None:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=1
            )
        except grpc.RpcError:
            return None
    return int(reply.status)


def start_serving_node(
    processes: list[subprocess.Popen[str]], data_dir: Path, *args: str
) -> tuple[subprocess.Popen[str], str]:
    """Starts a node on port 0 and returns it with the client address it published in
    node.addr."""
    proc = spawn_node("--data-dir", str(data_dir), *args)
    processes.append(proc)
    addr_file = data_dir / "node.addr"
    wait_for(while_running(proc, addr_file.exists), DEADLINE_S, "node.addr")
    address = addr_file.read_text().split()[0]
    wait_for(
        while_running(proc, lambda: health_status(address, TIDELOG_SERVICE) == SERVING),
        DEADLINE_S,
        "SERVING",
    )
    return proc, address


def test_node_serves_health_reflection_and_metadata(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    proc, address = start_serving_node(
        processes, tmp_path, "--node-id", "1", "--listen", "127.0.0.1:0"
    )
    assert address.startswith("127.0.0.1:") and not address.endswith(":0")
    assert health_status(address, "") == SERVING

    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=5)))
        services = {s.name for s in reply.list_services_response.service}
        assert {TIDELOG_SERVICE, "grpc.health.v1.Health"} <= services

        meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(
            wire.metadata_request(), timeout=5
        )
    # With port 0 and no --peers, the node publishes itself under the address it really bound.
    assert [(n.node_id, n.address) for n in meta.nodes] == [(1, address)]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE_S) == 0
    assert not (tmp_path / "node.addr").exists()


def test_the_node_to_node_service_is_served_on_its_own_listener_only(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """Whoever reaches the client port cannot speak Raft or pull the metadata log: the
    RaftTransport service answers UNIMPLEMENTED there, and the client service is not on the
    node-to-node listener either."""
    _, address = start_serving_node(
        processes, tmp_path, "--node-id", "1", "--listen", "127.0.0.1:0"
    )
    internal = (tmp_path / "node.addr").read_text().split()[1]
    assert internal != address and not internal.endswith(":0")
    pull = raft_pb2.FetchMetadataRequest(from_offset=0, node_id=2)

    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            raft_pb2_grpc.RaftTransportStub(channel).FetchMetadata(pull, timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as refused:
            raft_pb2_grpc.RaftTransportStub(channel).Stream(
                iter([raft_pb2.RaftEnvelope()]), timeout=5
            )
        assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED

    with grpc.insecure_channel(internal) as channel:
        answer = raft_pb2_grpc.RaftTransportStub(channel).FetchMetadata(pull, timeout=5)
        assert answer.error_code == 0
        with pytest.raises(grpc.RpcError) as refused:
            tidelog_pb2_grpc.TidelogStub(channel).Metadata(wire.metadata_request(), timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_config_file_with_flag_and_set_overrides(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    config_file = tmp_path / "node.properties"
    config_file.write_text(
        "# a Kafka-style properties file\n"
        "node.id = 7\n"
        "listen: 127.0.0.1:0\n"
        f"data.dir={tmp_path / 'ignored'}\n"
        "segment.bytes=1048576\n"
    )
    data_dir = tmp_path / "data"
    _, address = start_serving_node(
        processes, data_dir, "--config", str(config_file), "--node-id", "3",
        "--set", "segment.bytes=4096",
    )
    with grpc.insecure_channel(address) as channel:
        meta = tidelog_pb2_grpc.TidelogStub(channel).Metadata(
            wire.metadata_request(), timeout=5
        )
    assert [n.node_id for n in meta.nodes] == [3]
    assert not (tmp_path / "ignored").exists()

    config = NodeConfig.load(config_file, {"node.id": "3", "segment.bytes": "4096"})
    assert (config.node_id, config.segment_bytes, config.listen) == (3, 4096, "127.0.0.1:0")


@pytest.mark.parametrize(
    "entry", [("tidelog.node",), ("tidelog.cli", "node")], ids=["module", "cli"]
)
def test_node_refuses_a_wildcard_listen_without_an_advertised_address(
    tmp_path: Path, entry: tuple[str, ...]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *entry, "--node-id", "1", "--listen", "0.0.0.0:7420",
         "--data-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=DEADLINE_S,
    )
    assert result.returncode == 2
    assert "listen 0.0.0.0:7420 is a wildcard address: set advertised.address" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_node_refuses_a_held_data_dir_and_a_taken_port(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    _, address = start_serving_node(
        processes, tmp_path, "--node-id", "1", "--listen", "127.0.0.1:0"
    )
    same_dir = subprocess.run(
        [sys.executable, "-m", "tidelog.node", "--node-id", "2", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=DEADLINE_S,
    )
    assert same_dir.returncode == 2
    assert "is in use by another running node" in same_dir.stderr

    same_port = subprocess.run(
        [sys.executable, "-m", "tidelog.node", "--node-id", "2", "--listen", address,
         "--data-dir", str(tmp_path / "other")],
        cwd=REPO, capture_output=True, text=True, timeout=DEADLINE_S,
    )
    assert same_port.returncode == 2
    assert f"cannot listen on {address}" in same_port.stderr


def test_health_is_not_serving_until_the_runtime_has_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, with a runtime whose start() blocks until released, so the window between
    binding and serving is observable."""
    import tidelog.node.runtime
    from tidelog.node import server

    calls: list[str] = []
    released = asyncio.Event()

    class SlowRuntime:
        def __init__(self, config: NodeConfig, identity: object, epoch: int) -> None:
            # Only wired to the services by the server, never called before start().
            self.replicas = self.routing = self.offsets_topic = self.groups = None
            self.consumer_groups = self.txn_topic = self.txns = None
            self.txn_markers = SimpleNamespace(handle=None)
            self.balancer = SimpleNamespace(on_pass=None)
            self.txn_verification = SimpleNamespace(handle=None)
            self.registry = SimpleNamespace(register=None, heartbeat=None)
            self.controller = SimpleNamespace(
                fetch_metadata=None, reassignment_done=None, image=MetadataImage()
            )

        def on_envelope(self, env: object, payload: memoryview) -> None:
            pass

        async def start(self) -> None:
            await released.wait()
            calls.append("start")

        async def stop(self, graceful: bool) -> None:
            calls.append(f"stop graceful={graceful}")

    monkeypatch.setattr(tidelog.node.runtime, "NodeRuntime", SlowRuntime)

    async def scenario() -> int:
        config = NodeConfig(node_id=1, listen="127.0.0.1:0", data_dir=tmp_path)
        serving = asyncio.create_task(server.serve(config))
        addr_file = tmp_path / "node.addr"
        while not addr_file.exists():
            await asyncio.sleep(0.01)
        async with grpc.aio.insecure_channel(addr_file.read_text().split()[0]) as channel:
            stub = health_pb2_grpc.HealthStub(channel)

            async def status(service: str) -> int:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
                return int(reply.status)

            assert await status("") == health_pb2.HealthCheckResponse.NOT_SERVING
            assert await status(TIDELOG_SERVICE) == health_pb2.HealthCheckResponse.NOT_SERVING
            released.set()
            while await status(TIDELOG_SERVICE) != SERVING:
                await asyncio.sleep(0.01)
            assert await status("") == SERVING
        os.kill(os.getpid(), signal.SIGTERM)  # handled by serve()'s loop signal handler
        return await serving

    assert asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S)) == 0
    assert calls == ["start", "stop graceful=True"]


# ---- NodeConfig --------------------------------------------------------------------------------

BASE = {"node.id": "1", "listen": "127.0.0.1:7420", "data.dir": "/tmp/x"}


def test_config_defaults_and_kafka_keys() -> None:
    config = NodeConfig.from_properties(
        {**BASE, "peers": "1=127.0.0.1:7520,2=127.0.0.1:7521", "election.timeout.ms": "400",
         "client.addresses": "2=127.0.0.1:7421", "log.flush.policy": "never",
         "cleanup.policy": "compact"}
    )
    assert config.peers == {1: "127.0.0.1:7520", 2: "127.0.0.1:7521"}
    # The node-to-node listener binds this node's own entry in peers.
    assert config.internal_listen == "127.0.0.1:7520"
    assert (config.client_address_of(1), config.client_address_of(2)) == (
        "127.0.0.1:7420", "127.0.0.1:7421")
    assert (config.election_timeout_ms, config.election_timeout_max_ms) == (400, 800)
    assert config.log_flush_policy == "never"
    assert config.extra == {"cleanup.policy": "compact"}
    assert config.advertised_address == "127.0.0.1:7420"
    # Consumer groups (KIP-848): Kafka's 45 s sessions and 5 s heartbeats, both assignors.
    assert (config.group_consumer_session_timeout_ms,
            config.group_consumer_heartbeat_interval_ms) == (45_000, 5_000)
    assert config.group_consumer_assignors == ("uniform", "range")
    assert NodeConfig.from_properties(config.to_properties()) == config


def test_bound_config_publishes_the_real_port() -> None:
    config = NodeConfig.from_properties(
        {**BASE, "listen": "127.0.0.1:0", "peers": "2=h:1", "client.addresses": "2=h:2"}
    )
    assert config.internal_listen == "127.0.0.1:0"
    bound = config.bound(5555, 5556)
    assert (bound.listen, bound.advertised_address) == ("127.0.0.1:5555", "127.0.0.1:5555")
    assert bound.internal_listen == "127.0.0.1:5556"
    assert bound.peers == {1: "127.0.0.1:5556", 2: "h:1"}
    assert bound.client_address_of(1) == "127.0.0.1:5555"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"listen": "0.0.0.0:7420"}, "is a wildcard address: set advertised.address"),
        ({"listen": "[::]:7420", "advertised.address": "0.0.0.0:1"},
         "advertised.address 0.0.0.0:1 is a wildcard"),
        ({"internal.listen": "0.0.0.0:7520"}, "list this node's node-to-node address in peers"),
        ({"listen": "127.0.0.1"}, "expected HOST:PORT"),
        ({"node.id": "x"}, "node.id must be an integer"),
        ({"node.id": ""}, "missing required setting(s): node.id"),
        ({"segment.byte": "10"}, "did you mean 'segment.bytes'"),
        ({"log.flush.policy": "sometimes"}, "log.flush.policy must be 'always' or 'never'"),
        ({"election.timeout.ms": "50"}, "must be > heartbeat.interval.ms"),
        ({"retention.ms": "-2"}, "retention.ms must be >= -1"),
        ({"peers": "1:127.0.0.1:7420"}, "expected NODE_ID=HOST:PORT"),
        ({"offsets.topic.num.partitions": "0"}, "offsets.topic.num.partitions must be between"),
        ({"offsets.topic.replication.factor": "0"}, "offsets.topic.replication.factor"),
        ({"offsets.retention.minutes": "0"}, "offsets.retention.minutes must be > 0"),
        ({"offsets.retention.minutes": "nan"}, "offsets.retention.minutes must be > 0"),
        ({"offsets.retention.minutes": "soon"}, "offsets.retention.minutes must be a number"),
        ({"offsets.retention.check.interval.ms": "0"}, "offsets.retention.check.interval.ms"),
        ({"offset.metadata.max.bytes": "-1"}, "offset.metadata.max.bytes must be >= 0"),
        ({"offsets.commit.timeout.ms": "0"}, "offsets.commit.timeout.ms must be >= 1"),
        ({"offsets.topic.num.partition": "3"}, "did you mean 'offsets.topic.num.partitions'"),
        ({"group.consumer.heartbeat.interval.ms": "45000"},
         "group.consumer.heartbeat.interval.ms must be >= 1 and below"),
        ({"group.consumer.session.timeout.ms": "1000"},
         "group.consumer.heartbeat.interval.ms must be >= 1 and below"),
        ({"group.consumer.max.size": "0"}, "group.consumer.max.size must be >= 1"),
        ({"group.consumer.assignors": "sticky"}, "group.consumer.assignors must name uniform"),
        ({"peers": "1=127.0.0.1:7420"}, "internal.listen and listen are both 127.0.0.1:7420"),
        ({"internal.listen": "127.0.0.1:7420"}, "internal.listen and listen are both"),
        ({"peers": "1=127.0.0.1:7520,2=127.0.0.1:7521"}, "client.addresses has no address for "
                                                         "node(s) 2"),
        ({"security.protocol": "SASL_SSL"}, "security.protocol must be one of PLAINTEXT, SSL"),
        ({"security.protocol": "SSL"}, "an SSL listener needs ssl.certfile and ssl.keyfile"),
        ({"security.inter.broker.protocol": "ssl", "ssl.certfile": "c", "ssl.keyfile": "k"},
         "security.inter.broker.protocol=SSL is mutual TLS: it needs ssl.cafile"),
        ({"ssl.client.auth": "required"}, "ssl.client.auth=required needs security.protocol=SSL"),
        ({"security.inter.broker.protocol": "SSL", "ssl.certfile": "c", "ssl.keyfile": "k",
          "ssl.cafile": "ca"}, "security.inter.broker.protocol=SSL needs node.principals (or "
                               "super.users)"),
        ({"node.principals": "node-1"}, "node.principals: 'node-1' is not a principal"),
        ({"ssl.client.auth": "requested"}, "ssl.client.auth must be one of none, required"),
    ],
)
def test_config_refusals_name_the_setting(override: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        NodeConfig.from_properties({**BASE, **override})
    assert message in str(info.value)


def test_any_address_listens_and_plaintext_beyond_loopback_is_named() -> None:
    """Several hosts: a node binds whatever address it is given (its own peers entry for the
    node-to-node listener), and the listeners other hosts can reach without TLS are the ones
    the node warns about at start."""
    config = NodeConfig.from_properties({
        **BASE, "listen": "10.0.0.1:9092", "peers": "1=10.0.0.1:9093,2=10.0.0.2:9093",
        "client.addresses": "2=10.0.0.2:9092",
    })
    assert (config.listen, config.internal_listen) == ("10.0.0.1:9092", "10.0.0.1:9093")
    exposures = config.plaintext_exposures()
    assert len(exposures) == 2
    assert exposures[0].startswith("listen 10.0.0.1:9092 is not a loopback address and has no "
                                   "TLS (security.protocol=PLAINTEXT)")
    assert exposures[1].startswith("internal.listen 10.0.0.1:9093 is not a loopback")
    wildcard = NodeConfig.from_properties({
        **BASE, "listen": "0.0.0.0:9092", "advertised.address": "h1.example:9092",
        "internal.listen": "0.0.0.0:9093", "peers": "1=h1.example:9093",
    })
    assert wildcard.advertised_address == "h1.example:9092"
    assert wildcard.bound(9092, 9093).peers == {1: "h1.example:9093"}
    assert NodeConfig.from_properties(BASE).plaintext_exposures() == []
    tls = {"ssl.certfile": "c", "ssl.keyfile": "k", "ssl.cafile": "ca"}
    secured = NodeConfig.from_properties({
        **BASE, **tls, "listen": "10.0.0.1:9092", "security.protocol": "SSL",
        "security.inter.broker.protocol": "SSL", "node.principals": "User:CN=node-1",
    })
    assert secured.plaintext_exposures() == []


def test_housekeeping_intervals_are_settings() -> None:
    """Retention and checkpoint passes ran every 5 s whatever the node was told; now they are
    Kafka's settings (their 5 s kept as the defaults)."""
    config = NodeConfig.from_properties(BASE)
    assert config.log_retention_check_interval_ms == 5000
    assert config.replica_high_watermark_checkpoint_interval_ms == 5000
    tuned = NodeConfig.from_properties({
        **BASE, "log.retention.check.interval.ms": "250",
        "replica.high.watermark.checkpoint.interval.ms": "1000"})
    assert (tuned.log_retention_check_interval_ms,
            tuned.replica_high_watermark_checkpoint_interval_ms) == (250, 1000)
    with pytest.raises(InvalidConfigError, match=r"log\.retention\.check\.interval\.ms must be"):
        NodeConfig.from_properties({**BASE, "log.retention.check.interval.ms": "0"})


def test_offsets_settings_have_kafkas_names_and_defaults() -> None:
    config = NodeConfig.from_properties(BASE)
    assert (config.offsets_topic_num_partitions, config.offsets_topic_replication_factor) == (
        50, 3)
    assert config.offsets_retention_minutes == 7 * 24 * 60
    assert config.offsets_retention_check_interval_ms == 600_000
    assert (config.offset_metadata_max_bytes, config.offsets_commit_timeout_ms) == (4096, 5000)
    props = {"offsets.topic.num.partitions": "4", "offset.metadata.max.bytes": "10"}
    tuned = NodeConfig.from_properties({**BASE, **props})
    assert (tuned.offsets_topic_num_partitions, tuned.offset_metadata_max_bytes) == (4, 10)
    assert tuned.to_properties().items() >= props.items()


def test_properties_file_errors_point_at_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("node.id=1\nthis line has no separator\n")
    with pytest.raises(InvalidConfigError, match=r"bad\.properties:2"):
        read_properties(path)
    with pytest.raises(InvalidConfigError, match="cannot read config file"):
        read_properties(tmp_path / "missing.properties")
    with pytest.raises(InvalidConfigError, match="listed twice"):
        parse_peers("1=a:1,1=b:2")



def test_sigterm_leaves_no_traceback_in_the_log() -> None:
    """A SIGTERMed node whose peers still stream to it stops without gRPC logging the
    cancelled inbound streams as unhandled errors."""
    from tidelog import Client

    with LocalCluster(3) as cluster:
        client = Client(cluster.bootstrap)
        try:
            client.create_topic("t", partitions=3, replication_factor=3)
            producer = client.producer(acks="all")
            for i in range(50):
                producer.send("t", b"%d" % i)
            producer.flush()
            producer.close()
        finally:
            client.close()
        node = cluster.node_ids[0]
        wait_for(lambda: "serving" in cluster.logs(node), what="the node log")
        assert cluster.stop(node) == 0
        logs = cluster.logs(node)
        assert "stopped" in logs
        assert "Traceback" not in logs, logs


def test_the_produce_test_hook_draws_from_a_seeded_generator(tmp_path: Path) -> None:
    """`test.drop.produce.response.rate` decides with a generator seeded by `test.seed` and the
    node id, so a run that drops answers replays; the global generator is left alone."""
    from tidelog.node.api.servicer import TidelogServicer

    def draws(seed: int, node_id: int) -> list[float]:
        config = NodeConfig.from_properties({
            **BASE, "node.id": str(node_id), "data.dir": str(tmp_path), "test.seed": str(seed),
        })
        # Only the controller's image is read at construction (the ACLs to authorize with).
        controller = SimpleNamespace(image=MetadataImage())
        servicer = TidelogServicer(
            config, None, None, controller, None, None, None, None, lambda rpc, code: None  # type: ignore[arg-type]
        )
        return [servicer.data_plane._test_rng.random() for _ in range(5)]

    random.seed(3)
    state = random.getstate()
    assert draws(7, 1) == draws(7, 1)
    assert draws(7, 1) != draws(8, 1) and draws(7, 1) != draws(7, 2)
    assert random.getstate() == state
