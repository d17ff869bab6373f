"""Balancing and decommissioning against real node processes, on one module cluster (three
static nodes, two that join) under a producing and consuming load over every partition of a
topic: the two nodes that join get their share of the replicas and of the preferred leaders
(moved a bounded number at a time, every acknowledged record readable after), and a node
decommissioned with `tidelog node decommission` is drained and may then be stopped with
nothing lost and no partition left under-replicated; stopped, `tidelog node unregister` removes
it from the nodes (refused before, while it is alive, and for a controller voter), and started
again it registers afresh. A controller voter decommissioned hands its seat of the controller's
own quorum to another node first (learner, promotion, removal), deletes its metadata replica,
never takes the seat back at a restart, and is then unregistered like any drained node.

"No partition unavailable for longer than an election" is held by the producer: its delivery
timeout is a few election rounds (`_OUTAGE_BOUND_MS`), so a partition that could not take
writes for longer would fail a send, and the test requires that none failed. The longest gap
between two acknowledgements of one partition is printed (a figure, not a check)."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog import Client, TopicPartition
from tidelog.cli import main
from tidelog.commands import cluster_status
from tidelog.configs import AlterConfigOp, ConfigResource, ConfigResourceType, ConfigSource
from tidelog.errors import BrokerIdNotRegisteredError, InvalidConfigError, InvalidRequestError
from tidelog.testing import LocalCluster, probe, wait_for
from tidelog.transport import Security

pytestmark = pytest.mark.timeout(240)

_PARTITIONS = 6
#: How long a send may wait for its partition to take it: the longest election timeout is
#: 2 x 300 ms; a leader's loss is noticed within one, the election takes one or two more, and
#: the client then learns the new leader. Fifteen seconds leaves room for a machine loaded by
#: a whole suite (five were missed once, in a leadership transfer at load 8), and is still far
#: below what a partition without a leader until a node came back would take.
_OUTAGE_BOUND_MS = 15_000


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 3}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as admin:
        yield admin


class Load:
    """A producer (acks=all, idempotent) writing numbered values round the topic's partitions
    until stopped, and a consumer reading every partition, each on a thread of its own: what
    was acknowledged, what failed, what was read, and per partition the longest wait between
    two acknowledgements."""

    def __init__(self, client: Client, topic: str) -> None:
        self.client, self.topic = client, topic
        self.acked: set[bytes] = set()
        self.failed: list[str] = []
        self.read: set[bytes] = set()
        self.longest_gap_s: dict[int, float] = {}
        self._last_ack: dict[int, float] = {}
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

    def wait_for_more(self, count: int, what: str) -> None:
        start = len(self.acked)
        wait_for(lambda: len(self.acked) >= start + count and len(self.read) > 0, 60, what)

    def _produce(self) -> None:
        producer = self.client.producer(acks="all", linger_ms=2,
                                        delivery_timeout_ms=_OUTAGE_BOUND_MS)
        n = 0
        while not self._stop.is_set():
            sent = []
            for i in range(n, n + 4 * _PARTITIONS):
                value = f"{self.topic}-{i}".encode()
                partition = i % _PARTITIONS
                sent.append((value, partition,
                             producer.send(self.topic, value, partition=partition)))
            n += len(sent)
            for value, partition, future in sent:
                try:
                    future.result(timeout=2 * _OUTAGE_BOUND_MS / 1000)
                except Exception as exc:  # every failure is a finding
                    self.failed.append(f"{value!r}: {exc!r}")
                    continue
                self.acked.add(value)
                now = time.monotonic()
                last = self._last_ack.get(partition)
                if last is not None:
                    self.longest_gap_s[partition] = max(
                        self.longest_gap_s.get(partition, 0.0), now - last)
                self._last_ack[partition] = now
        producer.close()

    def _consume(self) -> None:
        consumer = self.client.consumer()
        tps = [TopicPartition(self.topic, p) for p in range(_PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek_to_beginning(tp)
        while not self._stop.is_set():
            self.read.update(r.value for r in consumer.poll(timeout_ms=200) if r.value)
        consumer.close()


def read_all(client: Client, topic: str, wanted: set[bytes]) -> set[bytes]:
    """Every value of the topic from the beginning, polled until ``wanted`` are all there (or
    60 s passed: the caller's assertion then shows what is missing)."""
    consumer = client.consumer()
    tps = [TopicPartition(topic, p) for p in range(_PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek_to_beginning(tp)
    got: set[bytes] = set()

    def complete() -> bool:
        got.update(r.value for r in consumer.poll(timeout_ms=500) if r.value)
        return wanted <= got

    with contextlib.suppress(AssertionError):
        wait_for(complete, 60, "every acknowledged value read back")
    consumer.close()
    return got


def replica_counts(client: Client) -> Counter[int]:
    """How many replicas each node holds, over every topic (internal ones included)."""
    return Counter(node for topic in client.describe_topics().values()
                   for p in topic.partitions for node in p.replicas)


def balanced(client: Client, nodes: list[int]) -> bool:
    """Every node holds and leads (as preferred leader) within one of every other, and no
    move is under way."""
    topics = client.describe_topics().values()
    replicas = Counter(n for t in topics for p in t.partitions for n in p.replicas)
    leaders = Counter(p.replicas[0] for t in topics for p in t.partitions)
    return (not client.admin.list_partition_reassignments()
            and max(replicas[n] for n in nodes) - min(replicas[n] for n in nodes) <= 1
            and max(leaders[n] for n in nodes) - min(leaders[n] for n in nodes) <= 1)


def test_two_nodes_join_under_load_and_get_their_share(
    cluster: LocalCluster, client: Client
) -> None:
    topic = "grown"
    client.create_topic(topic, partitions=_PARTITIONS, replication_factor=3)
    # The bound on moves is a dynamic node config: every node's default, read by the
    # controller leader, refused when a properties file would refuse it.
    every_node = ConfigResource(ConfigResourceType.BROKER, "")
    key = "partition.autobalancing.max.moves"
    with pytest.raises(InvalidConfigError, match="must be >= 1"):
        client.admin.incremental_alter_configs({every_node: [AlterConfigOp(key, "0")]})
    client.admin.incremental_alter_configs({every_node: [AlterConfigOp(key, "3")]})
    node_1 = ConfigResource(ConfigResourceType.BROKER, "1")
    entry = client.admin.describe_configs([node_1], keys=[key])[node_1][key]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
    with Load(client, topic) as load:
        load.wait_for_more(100, "the load to run")
        joined = [cluster.join(), cluster.join()]
        nodes = cluster.node_ids
        assert len(nodes) == 5
        wait_for(lambda: balanced(client, nodes), 120,
                 "the replicas and leaders to spread over the five nodes")
        load.wait_for_more(100, "the load to go on after the moves")
    assert all(replica_counts(client)[n] >= 3 for n in joined)
    assert not load.failed, load.failed[:5]
    assert load.acked <= read_all(client, topic, load.acked)
    print(f"longest wait between acknowledgements per partition: "
          f"{ {p: round(s, 2) for p, s in sorted(load.longest_gap_s.items())} }")


def fully_replicated(client: Client, leaving: int) -> bool:
    """Every partition led, in sync on all its replicas, none of them on `leaving`."""
    return all(p.leader >= 0 and set(p.isr) == set(p.replicas) and leaving not in p.replicas
               for topic in client.describe_topics().values() for p in topic.partitions)


def test_a_decommissioned_node_is_drained_under_load_then_stopped_losing_nothing(
    cluster: LocalCluster, client: Client
) -> None:
    topic = "drained"
    while len(cluster.node_ids) < 4:  # run alone: a node to leave that is not a controller
        cluster.join()
    client.create_topic(topic, partitions=_PARTITIONS, replication_factor=3)
    leaving = max(cluster.node_ids)
    assert replica_counts(client)[leaving] > 0
    with pytest.raises(BrokerIdNotRegisteredError):
        client.admin.decommission_node(99)
    # Started and cancelled: a node like the others again.
    assert client.admin.decommission_node(leaving).decommissioning
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["node", "decommission", str(leaving), "--cancel",
                     "--bootstrap", cluster.bootstrap]) == 0
    assert f"node {leaving} re-commissioned" in out.getvalue()
    assert not client.admin.describe_decommission(leaving).decommissioning
    with Load(client, topic) as load:
        load.wait_for_more(100, "the load to run")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["node", "decommission", str(leaving), "--bootstrap", cluster.bootstrap])
        assert code == 0, out.getvalue()
        assert f"node {leaving} holds no replica and no controller seat: it may be stopped" \
            in out.getvalue()
        # The controller said so; the node answering Metadata may apply it a moment later.
        wait_for(lambda: replica_counts(client)[leaving] == 0, 10,
                 f"Metadata to show node {leaving} drained")
        with pytest.raises(InvalidRequestError, match="alive"):
            client.admin.unregister_node(leaving)
        with pytest.raises(InvalidRequestError, match="controller's quorum"):
            client.admin.unregister_node(1)
        cluster.stop(leaving)
        load.wait_for_more(100, "the load to go on once the node is stopped")
    wait_for(lambda: fully_replicated(client, leaving), 60,
             "every partition fully replicated without the stopped node")
    assert not load.failed, load.failed[:5]
    assert load.acked <= read_all(client, topic, load.acked)
    print(f"longest wait between acknowledgements per partition: "
          f"{ {p: round(s, 2) for p, s in sorted(load.longest_gap_s.items())} }")
    # Stopped, it is fenced and shown so for ever, until it is unregistered.
    wait_for(lambda: status_liveness(cluster).get(leaving) == "fenced", 30,
             f"node {leaving} to be fenced")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["node", "unregister", str(leaving), "--bootstrap", cluster.bootstrap]) == 0
    assert f"node {leaving} unregistered" in out.getvalue()
    with pytest.raises(BrokerIdNotRegisteredError):
        client.admin.describe_decommission(leaving)
    wait_for(lambda: leaving not in status_liveness(cluster), 10,
             f"cluster status to leave node {leaving} out")
    cluster.restart(leaving)  # its data dir keeps its id and incarnation: it registers afresh
    wait_for(lambda: status_liveness(cluster).get(leaving) == "alive", 30,
             f"node {leaving} to be a node again")
    assert not client.admin.describe_decommission(leaving).decommissioning


def status_liveness(cluster: LocalCluster) -> dict[int, str]:
    """`tidelog cluster status`'s nodes, fenced ones included, with their liveness."""
    state = cluster_status.gather(cluster.bootstrap, Security())
    assert state is not None
    return {node.node_id: node.liveness for node in state.nodes}


def metadata_dir(cluster: LocalCluster, node_id: int) -> Path:
    return cluster.node_dir(node_id) / "__cluster_metadata-0"


def test_a_decommissioned_controller_voter_hands_its_seat_over_and_leaves(
    cluster: LocalCluster, client: Client
) -> None:
    """Fails without the quorum's reconfiguration: the drain of a voter never ends (its
    controller seat stays), and unregistering it is refused."""
    topic = "seat"
    while len([n for n in cluster.node_ids if cluster.is_running(n)]) < 4:
        cluster.join()
    voter = 1
    assert client.admin.describe_decommission(voter).controller_voter
    client.create_topic(topic, partitions=_PARTITIONS, replication_factor=3)
    with Load(client, topic) as load:
        load.wait_for_more(100, "the load to run")
        out = io.StringIO()
        started = time.monotonic()
        with contextlib.redirect_stdout(out):
            code = main(["node", "decommission", str(voter), "--bootstrap", cluster.bootstrap])
        assert code == 0, out.getvalue()
        assert f"node {voter} holds no replica and no controller seat" in out.getvalue()
        print(f"voter {voter} drained, its seat moved, in {time.monotonic() - started:.1f}s")
        status = client.admin.describe_decommission(voter)
        assert not status.controller_voter and status.replicas_left == 0
        wait_for(lambda: not metadata_dir(cluster, voter).exists(), 10,
                 f"node {voter} to delete its metadata replica")
        wait_for(lambda: replica_counts(client)[voter] == 0, 10,
                 f"Metadata to show node {voter} drained")
        # The controller works on its new quorum: a topic is created, written and read.
        client.create_topic("after-seat", partitions=_PARTITIONS, replication_factor=3)
        with client.producer(acks="all") as producer:
            producer.send("after-seat", b"one", partition=0).result(timeout=10)
        assert read_all(client, "after-seat", {b"one"}) == {b"one"}
        # Restarted, the old voter does not take its seat back from its static peers list,
        # and a voter that stays restarts into the new quorum (side by side: a start is
        # seconds of imports).
        staying = next(n for n in (2, 3) if metadata_dir(cluster, n).exists())
        cluster.restart(voter, wait=False)
        cluster.restart(staying)
        # Hosting nothing, it learns the controller from the leader's announcements alone.
        wait_for(lambda: probe(cluster.address_of(voter)).controller_id >= 0, 30,
                 f"node {voter} to serve again and name the controller")
        load.wait_for_more(100, "the load to go on after the restarts")
        assert not metadata_dir(cluster, voter).exists()
        assert not client.admin.describe_decommission(voter).controller_voter
        client.create_topic("after-restart", partitions=1, replication_factor=3)
        cluster.stop(voter)
    assert not load.failed, load.failed[:5]
    assert load.acked <= read_all(client, topic, load.acked)
    wait_for(lambda: status_liveness(cluster).get(voter) == "fenced", 30,
             f"node {voter} to be fenced")
    client.admin.unregister_node(voter)
    wait_for(lambda: voter not in status_liveness(cluster), 10,
             f"cluster status to leave node {voter} out")
