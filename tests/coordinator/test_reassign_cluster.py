"""Replica reassignment against real node processes, on one module cluster of three nodes: an
RF=2 partition moves to another pair under a producing and consuming load (every acknowledged
record readable from the new replicas, the old replica's files gone, `tidelog reassign
--verify` reporting completion), a move whose partition leader is SIGKILLed mid-change
completes once the group has a majority again, losing nothing acknowledged, the offsets topic
moves with its coordinator keeping every commit, and bench/reassign.py's measurement runs."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog import Client, OffsetAndMetadata, TopicPartition
from tidelog.cli import main
from tidelog.commands.reassign import read_reassignment
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    # One small offsets partition, so that moving it is one move.
    return {"offsets_topic_num_partitions": 1, "offsets_topic_replication_factor": 2}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as admin:
        yield admin


class Load:
    """A producer (acks=all, idempotent) writing numbered values until stopped, and a consumer
    reading them, each on a thread of its own: what was acknowledged, and what was read."""

    def __init__(self, client: Client, tp: TopicPartition) -> None:
        self.client, self.tp = client, tp
        self.acked: set[bytes] = set()
        self.read: set[bytes] = set()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _produce(self) -> None:
        producer = self.client.producer(acks="all", linger_ms=2)
        n = 0
        while not self._stop.is_set():
            values = [f"{self.tp.topic}-{n + i}".encode() for i in range(20)]
            n += len(values)
            futures = [(v, producer.send(self.tp.topic, v, partition=self.tp.partition))
                       for v in values]
            for value, future in futures:
                try:
                    future.result(timeout=30)
                    self.acked.add(value)
                except Exception:  # a failed send is simply not acknowledged
                    pass
        producer.close()

    def _consume(self) -> None:
        consumer = self.client.consumer()
        consumer.assign([self.tp])
        consumer.seek_to_beginning(self.tp)
        while not self._stop.is_set():
            self.read.update(r.value for r in consumer.poll(timeout_ms=200) if r.value)
        consumer.close()


def replicas_of(client: Client, tp: TopicPartition) -> tuple[int, ...]:
    return client.describe_topics([tp.topic])[tp.topic].partitions[tp.partition].replicas


def read_all(client: Client, tp: TopicPartition, wanted: set[bytes]) -> set[bytes]:
    """Every value of the partition from its beginning, polled until ``wanted`` are all
    there (or 60 s passed: the caller's assertion then shows what is missing)."""
    consumer = client.consumer()
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: set[bytes] = set()

    def complete() -> bool:
        got.update(r.value for r in consumer.poll(timeout_ms=500) if r.value)
        return wanted <= got

    try:
        wait_for(complete, 60, "every acknowledged value read back")
    except AssertionError:
        pass
    finally:
        consumer.close()
    return got


def replica_dir(cluster: LocalCluster, node: int, tp: TopicPartition) -> Path:
    return cluster.data_dir / f"node-{node}" / f"{tp.topic}-{tp.partition}"


def done(client: Client, tp: TopicPartition, target: list[int]) -> bool:
    return not client.admin.list_partition_reassignments([tp]) and \
        list(replicas_of(client, tp)) == target


def reassign(cluster: LocalCluster, *args: str) -> int:
    return main(["reassign", *args, "--bootstrap", cluster.bootstrap])


def test_a_replica_moves_under_load_and_the_old_one_is_deleted(
    cluster: LocalCluster, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tp = TopicPartition("moved", 0)
    client.create_topic(tp.topic, partitions=1, replication_factor=2)
    before = replicas_of(client, tp)
    (new,) = set(cluster.node_ids) - set(before)
    leaving = before[0]
    target = [before[1], new]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": 0, "replicas": target}]}))
    with Load(client, tp) as load:
        wait_for(lambda: len(load.read) > 100, 30, "the load to run")
        capsys.readouterr()
        assert reassign(cluster, "--execute", "--reassignment-json-file", str(plan)) == 0
        out = capsys.readouterr().out
        rollback = out.split("Current partition replica assignment")[1].split("Save this")[0]
        assert read_reassignment_text(tmp_path, rollback) == {tp: list(before)}
        assert f"Successfully started partition reassignment(s) for {tp.topic}-0" in out
        assert reassign(cluster, "--verify", "--wait", "--reassignment-json-file",
                        str(plan)) == 0
        assert f"Reassignment of partition {tp.topic}-0 is completed." in capsys.readouterr().out
        wait_for(lambda: done(client, tp, target), 30, f"{tp} to move to {target}")
        acked_at_move = len(load.acked)
        wait_for(lambda: len(load.acked) > acked_at_move + 100, 30,
                 "the load to go on after the move")
    wait_for(lambda: not replica_dir(cluster, leaving, tp).exists(), 30,
             f"node {leaving} to delete its replica")
    assert replica_dir(cluster, new, tp).exists()
    assert load.acked <= read_all(client, tp, load.acked)
    assert load.read  # consumed while the partition moved
    assert reassign(cluster, "--verify", "--reassignment-json-file", str(plan)) == 0
    assert reassign(cluster, "--list") == 0
    assert "No partition reassignments found." in capsys.readouterr().out
    # --generate proposes a placement over the given nodes and changes nothing.
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": tp.topic}], "version": 1}))
    assert reassign(cluster, "--generate", "--topics-to-move-json-file", str(topics),
                    "--broker-list", f"{leaving},{new}") == 0
    proposed = capsys.readouterr().out.split("Proposed partition reassignment configuration")[1]
    assert set(read_reassignment_text(tmp_path, proposed)[tp]) == {leaving, new}
    assert list(replicas_of(client, tp)) == target
    # Cancelling what is done, and moving to an unknown node, are refused with Kafka's codes.
    assert reassign(cluster, "--cancel", "--reassignment-json-file", str(plan)) == 1
    assert "NO_REASSIGNMENT_IN_PROGRESS" in capsys.readouterr().err
    assert client.admin.alter_partition_reassignments({tp: [new, 9]})[tp].code == 39


def read_reassignment_text(tmp_path: Path, text: str) -> dict[TopicPartition, list[int]]:
    path = tmp_path / "rollback.json"
    path.write_text(text.strip())
    return read_reassignment(path)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[1]", "at least one partition"),
        ('{"partitions": []}', "at least one partition"),
        ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', "index >= 0"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "distinct"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "non-empty"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}',
         "log_dirs"),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, '
         '{"topic": "t", "partition": 0, "replicas": [2]}]}', "listed twice"),
        ("{", "not JSON"),
    ],
)
def test_a_bad_reassignment_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str, message: str
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(document)
    assert main(["reassign", "--verify", "--reassignment-json-file", str(plan)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_move_whose_leader_is_killed_mid_change_completes_losing_nothing(
    cluster: LocalCluster, client: Client
) -> None:
    tp = TopicPartition("killed", 0)
    client.create_topic(tp.topic, partitions=1, replication_factor=2)
    before = replicas_of(client, tp)
    (new,) = set(cluster.node_ids) - set(before)
    target = [before[1], new]
    producer = client.producer(acks="all")
    for _ in range(20):  # a few MB, so that the new replica takes a moment to catch up
        for i in range(100):
            producer.send(tp.topic, bytes(2000) + f"{i}".encode(), partition=0)
        producer.flush()
    producer.close()
    with Load(client, tp) as load:
        wait_for(lambda: len(load.acked) > 50, 30, "the load to run")
        assert client.admin.alter_partition_reassignments({tp: target}) == {}
        wait_for(lambda: replica_dir(cluster, new, tp).exists(), 30,
                 f"node {new} to open its replica as a learner")
        # Frozen, the new replica cannot catch up: the change is certainly under way when the
        # leader dies (a learner added, or further along if it caught up first).
        cluster.pause(new)
        try:
            assert client.admin.list_partition_reassignments([tp]), "the move ended before the kill"
            leader = cluster.leader_of((tp.topic, 0))
            assert leader is not None
            cluster.kill(leader)
            # With the leader gone the group may have no majority (two voters, one dead):
            # the change then waits, and goes on once the node is back.
            cluster.restart(leader)
        finally:
            cluster.resume(new)
        wait_for(lambda: done(client, tp, target), 90, f"{tp} to move to {target}")
        acked_at_move = len(load.acked)
        wait_for(lambda: len(load.acked) > acked_at_move + 50, 30,
                 "the load to go on after the move")
    assert load.acked <= read_all(client, tp, load.acked)


def test_the_offsets_topic_moves_and_its_coordinator_keeps_the_commits(
    cluster: LocalCluster, client: Client
) -> None:
    """An internal topic moves the same way: the group coordinator follows its partition's
    leadership to the new replica set and keeps every commit."""
    data = TopicPartition("offsets-data", 0)
    client.create_topic(data.topic, partitions=1, replication_factor=1)
    client.admin.alter_consumer_group_offsets("movers", {data: OffsetAndMetadata(5, "before")})
    tp = TopicPartition("__consumer_offsets", 0)
    # The earlier tests' partitions stay where they were put (operators' plans hold), so the
    # balancer may be evening the nodes out by moving this one: start from where it settled.
    wait_for(lambda: not client.admin.list_partition_reassignments([tp]), 60,
             f"{tp} to have no move under way")
    before = replicas_of(client, tp)
    (new,) = set(cluster.node_ids) - set(before)
    target = [new, before[1]]  # the new replica leads it once the move is done
    assert client.admin.alter_partition_reassignments({tp: target}) == {}
    wait_for(lambda: done(client, tp, target), 60, f"{tp} to move to {target}")
    assert client.admin.list_consumer_group_offsets("movers")[data].offset == 5
    client.admin.alter_consumer_group_offsets("movers", {data: OffsetAndMetadata(7, "after")})
    committed = client.admin.list_consumer_group_offsets("movers")[data]
    assert (committed.offset, committed.metadata) == (7, "after")
    wait_for(lambda: not replica_dir(cluster, before[0], tp).exists(), 30,
             f"node {before[0]} to delete its replica")


def test_the_reassignment_benchmark_runs_on_the_modules_cluster(
    cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/reassign.py's measurement on 1 MiB, on this cluster (a cluster of its own would
    cost CI a start): it keeps working, and prints its lines. Its figures mean nothing here."""
    path = Path(__file__).resolve().parents[2] / "bench" / "reassign.py"
    spec = importlib.util.spec_from_file_location("bench_reassign", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with Raw(cluster, bench.CHANNEL_OPTIONS) as raw:
        assert bench.measure(cluster, raw, client, 1, topic="bench-moved") > 0
    out = capsys.readouterr().out
    assert "plain fetch from the leader:" in out and "ratio move/fetch:" in out
