"""Operator plans win over continuous balancing, against real node processes (three nodes, the
balancer ticking every 100 ms): partitions an operator piles on one node with `tidelog
reassign --execute` stay there pass after pass of the balancer (counted by its metric, not
slept through), `--verify` then exits 0, and once the operator releases them (`reassign
--release`) the balancer spreads them again; a plan that is not in effect makes `--verify`
exit 1, with and without `--wait`.

Before the hold, the balancer moved such partitions back within one pass of the move's
completion, and `--verify` exited 0 while saying the replicas were not the plan's."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tidelog import Client, TopicPartition
from tidelog.cli import main
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(180)

#: Balancer passes the plan must outlive: the old balancer undid it in the first.
_PASSES = 20


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"partition.autobalancing.tick.interval.ms": 100, "offsets_topic_num_partitions": 1}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as admin:
        yield admin


def reassign(cluster: LocalCluster, *args: str) -> int:
    return main(["reassign", *args, "--bootstrap", cluster.bootstrap])


def plan_file(tmp_path: Path, plan: dict[TopicPartition, list[int]]) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": replicas}
        for tp, replicas in plan.items()]}))
    return str(path)


def replicas(client: Client, topic: str) -> dict[TopicPartition, list[int]]:
    info = client.describe_topics([topic])[topic]
    return {TopicPartition(topic, p): list(partition.replicas)
            for p, partition in enumerate(info.partitions)}


def balancer_passes(cluster: LocalCluster) -> float:
    """The balancer passes every node made while it led the controller, summed (a failover
    moves the counting to another node)."""
    total = 0.0
    for node in cluster.node_ids:
        address = cluster.metrics_address(node)
        if address is None:
            continue
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        total += sum(sample.value for family in text_string_to_metric_families(text)
                     for sample in family.samples if sample.name == "tidelog_balancer_passes_total")
    return total


def test_partitions_an_operator_placed_stay_until_released(
    cluster: LocalCluster, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "piled"
    client.create_topic(topic, partitions=4, replication_factor=1)
    plan = {TopicPartition(topic, p): [1] for p in range(4)}
    path = plan_file(tmp_path, plan)
    assert reassign(cluster, "--execute", "--reassignment-json-file", path, "--wait") == 0
    # `--wait` saw the plan through the node it asked; the node this client asks may apply
    # the metadata a moment later (once, under the whole suite's load, it named the old one).
    wait_for(lambda: replicas(client, topic) == plan, 30, "every node to name the plan's replicas")

    start = balancer_passes(cluster)
    wait_for(lambda: balancer_passes(cluster) >= start + _PASSES, 60,
             f"{_PASSES} balancer passes")
    assert replicas(client, topic) == plan, "the balancer moved partitions an operator placed"
    assert not client.admin.list_partition_reassignments([*plan])
    capsys.readouterr()
    assert reassign(cluster, "--verify", "--reassignment-json-file", path) == 0
    assert "is completed" in capsys.readouterr().out

    # Released, they are the balancer's again: it spreads them over the nodes.
    assert reassign(cluster, "--release", "--reassignment-json-file", path) == 0
    wait_for(lambda: any(r != [1] for r in replicas(client, topic).values())
             and not client.admin.list_partition_reassignments([*plan]), 60,
             "the balancer to move a released partition")
    capsys.readouterr()
    assert reassign(cluster, "--verify", "--reassignment-json-file", path) == 1
    assert "The plan is not in effect" in capsys.readouterr().err


def test_verify_exits_non_zero_when_the_plan_is_not_in_effect(
    cluster: LocalCluster, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "elsewhere"
    client.create_topic(topic, partitions=1, replication_factor=1)
    (tp, (current,)), = replicas(client, topic).items()
    other = next(n for n in cluster.node_ids if n != current)
    path = plan_file(tmp_path, {tp: [other]})
    for wait in ((), ("--wait",)):
        capsys.readouterr()
        assert reassign(cluster, "--verify", "--reassignment-json-file", path, *wait) == 1
        out = capsys.readouterr()
        assert f"its replicas are [{current}], not [{other}]" in out.out
        assert f"The plan is not in effect for 1 partition(s): {topic}-0" in out.err
