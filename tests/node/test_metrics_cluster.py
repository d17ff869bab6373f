"""Each node's Prometheus endpoint, scraped and parsed as Prometheus would: the numbers move as
records are produced and fetched, as requests fail, as a leader dies, as a follower stops
and comes back, and as a partition's only node dies."""

from __future__ import annotations

import functools
import urllib.request
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.offsets_helpers import Committed, commit, commit_request, committed, coordinator_of
from tidelog import errors
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for

pytestmark = pytest.mark.timeout(240)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    # A follower out of touch for a second is out of sync (the default is 30 s); one offsets
    # partition keeps the group coordinator cheap to start; leaders move only when a test
    # moves them (not back to the preferred replica a second after the first election).
    return {"replica_lag_max_ms": 1000, "offsets_topic_num_partitions": 1,
            "auto_leader_rebalance_enable": False}


def scrape(cluster: LocalCluster, node: int) -> Samples:
    address = cluster.metrics_address(node)
    assert address is not None, f"node {node} serves no metrics"
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, *, default: float | None = None, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    if key not in samples:
        assert default is not None, f"no sample {name}{labels}"
        return default
    return samples[key]


def partition_value(samples: Samples, name: str, topic: str, partition: int = 0) -> float:
    return value(samples, name, topic=topic, partition=str(partition))


def rpc_value(samples: Samples, name: str, rpc: str, **labels: str) -> float:
    return value(samples, name, default=0.0, service="tidelog.v1.Tidelog", rpc=rpc, **labels)


def test_partition_offsets_sizes_requests_and_bytes_move_with_produce_and_fetch(
    cluster: LocalCluster, raw: Raw
) -> None:
    raw.create_topic("moving", 1, 3)
    leader = raw.wait_leaders("moving")[0]
    before = {node: scrape(cluster, node) for node in cluster.node_ids}
    assert partition_value(before[leader], "tidelog_partition_leader", "moving") == 1
    assert partition_value(before[leader], "tidelog_partition_high_watermark", "moving") == 0

    acked = raw.produce_acknowledged("moving", 0, [[b"x" * 100] * 10 for _ in range(5)])
    end = max(acked) + 1
    after = scrape(cluster, leader)
    assert partition_value(after, "tidelog_partition_high_watermark", "moving") == end
    assert partition_value(after, "tidelog_partition_last_stable_offset", "moving") == end
    assert partition_value(after, "tidelog_partition_log_end_offset", "moving") == end
    assert partition_value(after, "tidelog_partition_log_start_offset", "moving") == 0
    assert partition_value(after, "tidelog_partition_size_bytes", "moving") > 5 * 10 * 100
    assert partition_value(after, "tidelog_partition_leader_epoch", "moving") >= 1
    assert (rpc_value(after, "tidelog_requests_total", "Produce", status="OK")
            - rpc_value(before[leader], "tidelog_requests_total", "Produce", status="OK")) >= 5
    assert (rpc_value(after, "tidelog_request_bytes_total", "Produce")
            - rpc_value(before[leader], "tidelog_request_bytes_total", "Produce")) > 5 * 1000
    assert (rpc_value(after, "tidelog_request_duration_seconds_count", "Produce")
            - rpc_value(before[leader], "tidelog_request_duration_seconds_count", "Produce")) >= 5

    # Followers catch up to the same offsets, and nobody is under-replicated.
    for node in cluster.node_ids:

        def at_end(node: int = node) -> bool:
            hw = partition_value(scrape(cluster, node), "tidelog_partition_high_watermark",
                                 "moving")
            return hw == end

        wait_for(at_end, 30, f"node {node}'s replica at the high watermark")
        samples = scrape(cluster, node)
        assert partition_value(samples, "tidelog_partition_log_end_offset", "moving") == end
        assert partition_value(samples, "tidelog_partition_leader", "moving") == int(
            node == leader)
    assert value(scrape(cluster, leader), "tidelog_under_replicated_partitions") == 0

    # Fetched bytes count on the node that answered.
    fetched_before = rpc_value(scrape(cluster, leader), "tidelog_response_bytes_total", "Fetch")
    assert len(raw.fetch_all(leader, "moving", 0)) > 5 * 10 * 100
    assert (rpc_value(scrape(cluster, leader), "tidelog_response_bytes_total", "Fetch")
            - fetched_before) > 5 * 10 * 100


def test_per_partition_error_codes_and_whole_call_statuses_are_counted(
    cluster: LocalCluster, raw: Raw
) -> None:
    raw.create_topic("errs", 1, 3)
    leader = raw.wait_leaders("errs")[0]
    follower = next(n for n in cluster.node_ids if n != leader)
    not_leader = errors.NotLeaderOrFollowerError
    labels = {"code": str(not_leader.code), "error": not_leader.name}
    before = rpc_value(scrape(cluster, follower), "tidelog_request_errors_total", "Produce",
                       **labels)
    for _ in range(3):
        answer = raw.produce(follower, "errs", 0, make_batch([b"v"]))
        assert answer.error_code == not_leader.code
    after = scrape(cluster, follower)
    assert rpc_value(after, "tidelog_request_errors_total", "Produce", **labels) - before == 3
    # The answer counts as OK: the error is inside it, per partition.
    assert rpc_value(after, "tidelog_requests_total", "Produce", status="OK") >= 3

    # OffsetCommit's handler counts its per-partition errors (the answer is not walked), at
    # the coordinator and at a node that forwarded the request to it; an all-OK answer
    # counts none.
    coordinator = coordinator_of(raw, "metrics-errs")
    committed(raw, coordinator, "metrics-errs", {("errs", 0): Committed(1)})
    forwarder = next(n for n in cluster.node_ids if n != coordinator)
    unknown = errors.UnknownTopicOrPartitionError
    unknown_labels = {"code": str(unknown.code), "error": unknown.name}
    request = commit_request("metrics-errs", {
        ("errs", 0): Committed(2), ("nope", 0): Committed(1), ("errs", 7): Committed(1),
    })
    for node in (coordinator, forwarder):
        before_commit = scrape(cluster, node)
        answer = commit(raw, node, request)
        assert answer == {("errs", 0): 0, ("nope", 0): unknown.code, ("errs", 7): unknown.code}
        after_commit = scrape(cluster, node)
        assert (rpc_value(after_commit, "tidelog_request_errors_total", "OffsetCommit",
                          **unknown_labels)
                - rpc_value(before_commit, "tidelog_request_errors_total", "OffsetCommit",
                            **unknown_labels)) == 2

    # Answers whose handler does not report its errors are walked for their codes.
    invalid = errors.InvalidTopicError
    created = raw.create_topic_once("bad/name", 1, 1, {})
    assert created.topics[0].error_code == invalid.code
    assert rpc_value(scrape(cluster, cluster.node_ids[0]), "tidelog_request_errors_total",
                     "CreateTopics", code=str(invalid.code), error=invalid.name) >= 1

    # A body that does not parse fails the whole call: counted by its gRPC status.
    channel = grpc.insecure_channel(cluster.address_of(follower))
    try:
        call = channel.unary_unary("/tidelog.v1.Tidelog/Produce")
        with pytest.raises(grpc.RpcError) as refused:
            call(b"\xff\xff\xff", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        channel.close()
    # (The status leaves with the abort, before the handler's end counts it.)
    wait_for(lambda: rpc_value(scrape(cluster, follower), "tidelog_requests_total", "Produce",
                               status="INVALID_ARGUMENT") == 1, 10, "the refusal counted")


def test_group_lag_on_the_coordinator(cluster: LocalCluster, raw: Raw) -> None:
    raw.create_topic("lagging", 1, 3)
    acked = raw.produce_acknowledged("lagging", 0, [[b"r"] * 10])
    end = max(acked) + 1
    coordinator = coordinator_of(raw, "lag-group")
    committed(raw, coordinator, "lag-group", {("lagging", 0): Committed(3)})

    def group_value(samples: Samples, name: str) -> float:
        return value(samples, name, default=-1, group="lag-group", topic="lagging",
                     partition="0")

    def with_lag() -> Samples | None:
        # The lag is counted from the coordinator's own replica of the partition, which may be
        # a follower: it learns the HW with the next append or heartbeat, not at the commit.
        samples = scrape(cluster, coordinator)
        return samples if group_value(samples, "tidelog_group_lag") == end - 3 else None

    samples = wait_for(with_lag, 30, "the group's lag at the end offset less 3")
    assert group_value(samples, "tidelog_group_committed_offset") == 3
    committed(raw, coordinator, "lag-group", {("lagging", 0): Committed(end)})
    wait_for(lambda: group_value(scrape(cluster, coordinator), "tidelog_group_lag") == 0,
             30, "the lag at 0 once the group committed the end")


def test_the_controller_counts_a_partition_offline_while_its_only_node_is_dead(
    cluster: LocalCluster, raw: Raw
) -> None:
    # The module's cluster, whole again at the end: the node killed here is restarted.
    raw.create_topic("single", len(cluster.node_ids), 1)
    leaders = raw.wait_leaders("single")

    def controller() -> int | None:
        return next((n for n in cluster.node_ids if cluster.is_running(n) and value(
            scrape(cluster, n), "tidelog_active_controller") == 1), None)

    active = wait_for(controller, 30, "an active controller")
    victim = next(n for n in leaders if n != active)
    on_victim = sum(n == victim for n in leaders)

    def offline() -> float:
        """Summed over the running nodes: only the active controller counts (should the
        controller move meanwhile, the new one counts)."""
        return sum(value(scrape(cluster, n), "tidelog_offline_partitions")
                   for n in cluster.node_ids if cluster.is_running(n))

    wait_for(lambda: offline() == 0, 30, "no partition offline")
    cluster.kill(victim)
    wait_for(lambda: offline() == on_victim, 30,
             f"the controller to count the {on_victim} partition(s) of the killed node offline")
    cluster.restart(victim)
    wait_for(lambda: offline() == 0, 60, "no partition offline once the node is back")


def test_a_killed_leader_moves_the_leader_gauges_and_counts_an_election(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    cluster, raw = fresh_cluster, fresh_raw
    raw.create_topic("failover", 1, 3)
    old = raw.wait_leaders("failover")[0]
    survivors = [n for n in cluster.node_ids if n != old]

    def won(node: int) -> tuple[float] | None:
        """(The elections `node` has won for the partition,); None until it has opened its
        replica (a leader is elected by a majority, and the third replica may open later)."""
        samples = scrape(cluster, node)
        if ("tidelog_partition_leader_elections_total",
                frozenset({"topic": "failover", "partition": "0"}.items())) not in samples:
            return None
        return (partition_value(samples, "tidelog_partition_leader_elections_total",
                                "failover"),)

    won_before = {
        n: wait_for(functools.partial(won, n), 30, f"node {n} to open its replica")[0]
        for n in survivors
    }
    cluster.kill(old)
    new = wait_for(lambda: next((n for n in survivors if partition_value(
        scrape(cluster, n), "tidelog_partition_leader", "failover") == 1), None),
        30, "a surviving node to report itself leader")
    samples = scrape(cluster, new)
    assert partition_value(samples, "tidelog_partition_leader_elections_total",
                           "failover") == won_before[new] + 1
    other = next(n for n in survivors if n != new)
    assert partition_value(scrape(cluster, other), "tidelog_partition_leader", "failover") == 0
    assert partition_value(samples, "tidelog_partition_leader_epoch", "failover") > 1


def test_a_stopped_follower_makes_the_leader_report_under_replication_until_it_returns(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    cluster, raw = fresh_cluster, fresh_raw
    raw.create_topic("isr", 1, 3)
    leader = raw.wait_leaders("isr")[0]
    follower = next(n for n in cluster.node_ids if n != leader)

    def under_replicated() -> tuple[float, float]:
        """(the node's count, the partition's gauge) on the leader."""
        samples = scrape(cluster, leader)
        return (value(samples, "tidelog_under_replicated_partitions"),
                partition_value(samples, "tidelog_partition_under_replicated", "isr"))

    wait_for(lambda: under_replicated() == (0, 0), 30, "every replica in sync")
    cluster.stop(follower)
    wait_for(lambda: under_replicated()[1] == 1, 30,
             "the leader to report the partition under-replicated")
    assert under_replicated()[0] >= 1  # the metadata partition, led there too, may count as well
    cluster.restart(follower)
    wait_for(lambda: under_replicated() == (0, 0), 60, "under-replication over once it returned")

