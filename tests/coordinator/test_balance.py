"""The replica planner alone (`coordinator.balance`): what each plan may and may not do, and
where repeated plans end, on chosen clusters and on clusters hypothesis draws; and the
decommission record and the autobalancing settings it is driven by."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from fuzz_helpers import FUZZ_TIMEOUT_S, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from tidelog.configs import ConfigResourceType
from tidelog.coordinator.balance import (
    BALANCE_LEADERS,
    BALANCE_REPLICAS,
    DRAIN,
    DrainProgress,
    Plan,
    drain_progress,
    plan_moves,
)
from tidelog.coordinator.controller import MetadataImage, assign_replicas
from tidelog.coordinator.metadata_records import (
    ConfigRecord,
    DecommissionRecord,
    MetadataRecordError,
    PartitionChangeRecord,
    PartitionHoldRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from tidelog.errors import (
    BrokerIdNotRegisteredError,
    InvalidConfigError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from tidelog.node.cluster.balancer import settings
from tidelog.node.config import NodeConfig
from tidelog.types import TopicPartition

pytestmark = pytest.mark.timeout(FUZZ_TIMEOUT_S)

Assignments = dict[TopicPartition, tuple[int, ...]]


def topic(name: str, partitions: int, factor: int, nodes: Sequence[int]) -> Assignments:
    return {TopicPartition(name, p): replicas
            for p, replicas in enumerate(assign_replicas(partitions, factor, nodes, {}))}


def counts(
    assignments: Mapping[TopicPartition, Sequence[int]]
) -> tuple[Counter[int], Counter[int]]:
    replicas = Counter(n for rs in assignments.values() for n in rs)
    leaders = Counter(rs[0] for rs in assignments.values())
    return replicas, leaders


def settle(assignments: Assignments, live: set[int], leaving: set[int], max_moves: int,
           balance: bool = True) -> tuple[Assignments, list[Plan]]:
    """Plan and complete moves until the planner has none left."""
    current = dict(assignments)
    plans = []
    for _ in range(10_000):
        plan = plan_moves(current, live, leaving, {}, max_moves, balance=balance)
        check_plan(current, live, leaving, {}, max_moves, plan)
        plans.append(plan)
        if not plan.moves:
            return current, plans
        for move in plan.moves:
            current[move.partition] = move.replicas
    raise AssertionError("the planner never settled")


def check_plan(assignments: Mapping[TopicPartition, Sequence[int]], live: set[int],
               leaving: set[int], in_flight: Mapping[TopicPartition, Sequence[int]],
               max_moves: int, plan: Plan) -> None:
    """What every plan must satisfy, whatever the cluster."""
    assert len(plan.moves) <= max(0, max_moves - len(in_flight))
    moved = [move.partition for move in plan.moves]
    assert len(set(moved)) == len(moved), "a partition moved twice in one plan"
    assert not set(moved) & set(in_flight), "a partition whose move is in flight moved again"
    for move in plan.moves:
        old = tuple(in_flight.get(move.partition, assignments[move.partition]))
        new = move.replicas
        assert len(new) == len(old) and len(set(new)) == len(new), move
        added = set(new) - set(old)
        assert all(n in live and n not in leaving for n in added), move
        if move.reason == DRAIN:
            # Exactly the replicas on leaving nodes are replaced; a majority was live.
            assert set(old) - set(new) == set(old) & leaving, move
            assert sum(n in live for n in old) * 2 > len(old)
        elif move.reason == BALANCE_REPLICAS:
            assert len(added) == 1 and all(n in live and n not in leaving for n in old), move
            assert new.index(added.pop()) == next(
                i for i, n in enumerate(old) if n not in new)
        else:
            assert move.reason == BALANCE_LEADERS and set(new) == set(old), move
            assert new[0] != old[0] and [n for n in new if n != new[0]] == [
                n for n in old if n != new[0]], move
    assert not {tp for tp, _ in plan.stuck} & set(moved)


# ---- chosen clusters ---------------------------------------------------------------------------


def test_two_joining_nodes_take_their_share_a_bounded_number_of_moves_at_a_time() -> None:
    before = {**topic("events", 12, 3, [1, 2, 3]), **topic("__consumer_offsets", 3, 3, [1, 2, 3])}
    live = {1, 2, 3, 4, 5}
    first = plan_moves(before, live, set(), {}, 2)
    assert len(first.moves) == 2
    assert all(move.reason == BALANCE_REPLICAS for move in first.moves)
    assert {n for move in first.moves for n in move.replicas} & {4, 5}

    after, plans = settle(before, live, set(), 2)
    replicas, leaders = counts(after)
    assert sorted(replicas.values()) == [9, 9, 9, 9, 9]  # 45 replicas over 5 nodes
    assert max(leaders.values()) - min(leaders.values()) <= 1 and set(leaders) == live
    assert all(len(plan.moves) <= 2 for plan in plans)
    # Internal topics are balanced like the others.
    offsets = [TopicPartition("__consumer_offsets", p) for p in range(3)]
    assert any(n in (4, 5) for tp in offsets for n in after[tp])
    # Settled means settled: nothing more to do, and a second settle moves nothing.
    assert settle(after, live, set(), 2)[1] == [Plan(())]


def test_a_balanced_cluster_plans_nothing() -> None:
    assignments = topic("t", 30, 3, [1, 2, 3, 4, 5])
    assert plan_moves(assignments, {1, 2, 3, 4, 5}, set(), {}, 5) == Plan(())


def test_decommission_drains_the_node_and_balances_the_rest() -> None:
    before = topic("t", 8, 3, [1, 2, 3, 4])
    after, plans = settle(before, {1, 2, 3, 4}, {2}, 2)
    replicas, leaders = counts(after)
    assert 2 not in replicas
    assert sorted(replicas.values()) == [8, 8, 8]
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert plans[0].moves and all(move.reason == DRAIN for move in plans[0].moves)


def test_decommission_moves_leadership_to_the_replica_that_leads_least() -> None:
    assignments = {TopicPartition("a", 0): (1, 2, 3), TopicPartition("a", 1): (2, 3, 1),
                   TopicPartition("a", 2): (2, 1, 3)}
    (move,) = plan_moves(assignments, {1, 2, 3, 4}, {1}, {}, 1).moves
    # Node 4 takes node 1's place; 2 leads two partitions, 3 and 4 none: the first of those
    # in the list (4, in the leaving leader's place) leads.
    assert move.partition == TopicPartition("a", 0) and move.replicas == (4, 2, 3)
    assignments[TopicPartition("a", 3)] = (4, 2, 3)
    (move,) = plan_moves(assignments, {1, 2, 3, 4}, {1}, {}, 1).moves
    assert move.replicas == (3, 4, 2)  # 3 to the front, the others in their order


def test_decommission_works_with_balancing_off_and_balancing_needs_it_on() -> None:
    before = topic("t", 6, 2, [1, 2, 3])
    live = {1, 2, 3, 4}
    assert plan_moves(before, live, set(), {}, 4, balance=False) == Plan(())
    after, _ = settle(before, live, {3}, 4, balance=False)
    assert 3 not in counts(after)[0]


def test_what_cannot_drain_is_reported_not_planned() -> None:
    assignments = {TopicPartition("t", 0): (1, 2, 3), TopicPartition("u", 0): (3, 4, 5)}
    # Three nodes left for a partition of three replicas on 1, 2, 3: no room.
    plan = plan_moves(assignments, {1, 2, 3}, {3}, {}, 5)
    assert plan.moves == ()
    assert [tp for tp, _ in plan.stuck] == [TopicPartition("t", 0), TopicPartition("u", 0)]
    assert "no node can take" in plan.stuck[0][1]
    # u-0's majority (4, 5) is down: it cannot move even with room.
    plan = plan_moves(assignments, {1, 2, 3, 6, 7}, {3}, {}, 5)
    assert [m.partition for m in plan.moves] == [TopicPartition("t", 0)]
    assert plan.stuck == ((TopicPartition("u", 0), "a majority of its replicas [3, 4, 5] is down"),)
    # A dead node being decommissioned drains while its partitions' majorities are live.
    plan = plan_moves(assignments, {1, 2, 4, 5, 6}, {3}, {}, 5)
    assert {m.partition: m.replicas for m in plan.moves} == {
        TopicPartition("t", 0): (1, 2, 6), TopicPartition("u", 0): (2, 4, 5)}


def test_moves_in_flight_count_against_the_bound_and_are_planned_around() -> None:
    before = topic("t", 12, 3, [1, 2, 3])
    live = {1, 2, 3, 4}
    in_flight = {TopicPartition("t", 0): (4, 2, 3)}
    plan = plan_moves(before, live, set(), in_flight, 2)
    check_plan(before, live, set(), in_flight, 2, plan)
    assert len(plan.moves) == 1
    assert plan_moves(before, live, set(), {**in_flight, TopicPartition("t", 1): (2, 4, 1)},
                      2) == Plan(())
    # A drain in flight: the node is not drained twice, the rest of it is.
    plan = plan_moves(before, live, {1}, in_flight, 20)
    assert all(1 not in move.replicas for move in plan.moves)
    assert {move.partition for move in plan.moves} == {
        tp for tp, rs in before.items() if 1 in rs and tp not in in_flight}


def test_a_degraded_partition_is_not_balanced() -> None:
    assignments = {TopicPartition("t", p): (1, 2) for p in range(4)}
    assert plan_moves(assignments, {1, 3, 4}, set(), {}, 4).moves == ()
    # Node 2 back: both nodes' replicas spread to 3 and 4.
    assert len(plan_moves(assignments, {1, 2, 3, 4}, set(), {}, 4).moves) == 4


def test_a_cancelled_decommission_gets_the_node_its_share_back() -> None:
    drained, _ = settle(topic("t", 10, 3, [1, 2, 3, 4, 5]), {1, 2, 3, 4, 5}, {5}, 3)
    assert 5 not in counts(drained)[0]
    back, _ = settle(drained, {1, 2, 3, 4, 5}, set(), 3)
    assert sorted(counts(back)[0].values()) == [6, 6, 6, 6, 6]


def test_partitions_an_operator_placed_are_not_balanced_but_still_drained() -> None:
    # An operator put all four partitions on node 1: balancing would spread them at once.
    piled = {TopicPartition("t", p): (1,) for p in range(4)}
    live = {1, 2, 3}
    assert plan_moves(piled, live, set(), {}, 4).moves
    assert plan_moves(piled, live, set(), {}, 4, held=set(piled)) == Plan(())
    # The held ones count in node 1's load: the one partition not held moves off it.
    free = TopicPartition("t", 3)
    partly = plan_moves(piled, live, set(), {}, 4, held=set(piled) - {free})
    assert [move.partition for move in partly.moves] == [free]
    # A decommission is the operator's newer word: node 1 is drained, held or not.
    drained = plan_moves(piled, live, {1}, {}, 4, held=set(piled))
    assert {move.partition for move in drained.moves} == set(piled)
    assert all(move.reason == DRAIN for move in drained.moves)


def test_no_room_to_move_to_plans_nothing() -> None:
    assignments = topic("t", 4, 2, [1, 2])
    assert plan_moves(assignments, {1, 2}, {1, 2}, {}, 3).moves == ()
    assert plan_moves(assignments, set(), set(), {}, 3) == Plan(())
    assert plan_moves({}, {1, 2, 3}, {2}, {}, 3) == Plan(())
    assert plan_moves(assignments, {1, 2, 3}, set(), {}, 0) == Plan(())


# ---- drawn clusters ----------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Assignments, set[int], set[int], int]:
    nodes = list(range(1, draw(st.integers(1, 7)) + 1))
    assignments: Assignments = {}
    for t in range(draw(st.integers(0, 4))):
        factor = draw(st.integers(1, min(3, len(nodes))))
        for p in range(draw(st.integers(1, 8))):
            replicas = draw(st.permutations(nodes))[:factor]
            assignments[TopicPartition(f"t{t}", p)] = tuple(replicas)
    # Nodes that joined since (no replica yet) and nodes that are down.
    everyone = nodes + list(range(8, 8 + draw(st.integers(0, 3))))
    live = set(draw(st.lists(st.sampled_from(everyone), unique=True)))
    leaving = set(draw(st.lists(st.sampled_from(everyone), unique=True, max_size=2)))
    return assignments, live, leaving, draw(st.integers(1, 5))


@fuzz_settings(150)
@given(clusters(), st.data())
def test_every_plan_keeps_the_rules(
    cluster: tuple[Assignments, set[int], set[int], int], data: st.DataObject
) -> None:
    assignments, live, leaving, max_moves = cluster
    targets = sorted(live - leaving)
    in_flight: Assignments = {}
    for tp in data.draw(st.lists(st.sampled_from(sorted(assignments)), unique=True, max_size=3)
                        if assignments else st.just([])):
        factor = len(assignments[tp])
        if len(targets) >= factor:
            in_flight[tp] = tuple(data.draw(st.permutations(targets))[:factor])
    held = set(data.draw(st.lists(st.sampled_from(sorted(assignments)), unique=True)
                         if assignments else st.just([])))
    plan = plan_moves(assignments, live, leaving, in_flight, max_moves, held=held)
    check_plan(assignments, live, leaving, in_flight, max_moves, plan)
    assert all(move.reason == DRAIN for move in plan.moves if move.partition in held), plan
    assert plan == plan_moves(dict(reversed(assignments.items())), sorted(live, reverse=True),
                              sorted(leaving), dict(reversed(in_flight.items())), max_moves,
                              held=sorted(held))


@fuzz_settings(100)
@given(clusters())
def test_repeated_plans_settle_drained_and_balanced(
    cluster: tuple[Assignments, set[int], set[int], int]
) -> None:
    assignments, live, leaving, max_moves = cluster
    final, _ = settle(assignments, live, leaving, max_moves)
    targets = live - leaving
    for tp, replicas in final.items():
        drainable = (sum(n in live for n in assignments[tp]) * 2 > len(replicas)
                     and len(targets) >= len(replicas))
        if drainable:
            assert not set(replicas) & leaving, (tp, replicas)
    healthy = {tp: rs for tp, rs in final.items() if all(n in targets for n in rs)}
    if len(healthy) == len(final):
        # Every replica on a node that takes replicas: counts within one of each other.
        replicas, leaders = counts(final)
        spread = [replicas.get(n, 0) for n in targets]
        assert not spread or max(spread) - min(spread) <= 1, replicas
        for rs in final.values():
            assert all(leaders[rs[0]] - leaders[n] < 2 for n in rs), (rs, leaders)


# ---- the decommission record and the settings ------------------------------------------------


@pytest.mark.parametrize("record", [DecommissionRecord(3, True), DecommissionRecord(0, False)])
def test_decommission_records_round_trip(record: DecommissionRecord) -> None:
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-1], "ends inside a field"),
    (lambda b: b + b"\x00", "left over"),
    (lambda b: b[:-1] + b"\x02", "flag 2 is not 0 or 1"),
    (lambda b: b[:2] + b"\xff\xff\xff\xff" + b[6:], "decommission record of node -1"),
])
def test_damaged_decommission_records_are_refused_by_name(damage: Any, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_record(damage(encode_record(DecommissionRecord(3, True))))


def test_decommissioning_is_a_state_of_the_image_that_new_replicas_avoid() -> None:
    image = MetadataImage()
    image.apply(0, TopicRecord("t", 1, ((1, 2, 3),)))
    nodes = [1, 2, 3, 4]
    with pytest.raises(BrokerIdNotRegisteredError):
        image.plan_decommission(5, True, nodes)
    assert image.plan_decommission(2, False, nodes) == []  # not decommissioning: nothing to do
    (record,) = image.plan_decommission(2, True, nodes)
    image.apply(1, record)
    assert image.decommissioning == {2}
    assert image.plan_decommission(2, True, nodes) == []
    # Three replicas per partition: a second node leaving would leave two.
    with pytest.raises(InvalidRequestError, match="would leave 2 node"):
        image.plan_decommission(3, True, nodes)
    created = image.plan_create("u", 6, 3, {}, nodes)
    assert all(2 not in replicas for replicas in created.assignment)
    with pytest.raises(InvalidReplicationFactorError):
        image.plan_create("v", 1, 4, {}, nodes)
    grown = image.plan_create_partitions("t", 4, None, nodes)
    assert all(2 not in record.replicas for record in grown)
    with pytest.raises(InvalidReplicaAssignmentError, match="being decommissioned"):
        image.plan_create_partitions("t", 2, [[1, 2, 3]], nodes)
    # Re-commissioned: a node like the others again.
    (record,) = image.plan_decommission(2, False, nodes)
    image.apply(2, record)
    assert image.decommissioning == set()
    assert any(2 in r for r in image.plan_create("u", 6, 3, {}, nodes).assignment)


def test_autobalancing_settings_are_node_settings_that_may_change_at_run_time(
    tmp_path: Path,
) -> None:
    config = NodeConfig.from_properties(
        {"node.id": "1", "listen": "127.0.0.1:0", "data.dir": str(tmp_path),
         "partition.autobalancing.max.moves": "5"})
    assert config.partition_autobalancing_enable is True
    assert config.partition_autobalancing_max_moves == 5
    # Every node's default, then the node's own on top; other keys are topic defaults.
    dynamic = config.with_dynamic(
        {"partition.autobalancing.enable": "false", "partition.autobalancing.max.moves": "3"},
        {"partition.autobalancing.max.moves": "7", "retention.ms": "10"},
    )
    assert (dynamic.partition_autobalancing_enable, dynamic.partition_autobalancing_max_moves) \
        == (False, 7)
    assert config.with_dynamic({"retention.ms": "10"}) is config
    for bad in ({"partition.autobalancing.max.moves": "0"},
                {"partition.autobalancing.max.moves": "many"},
                {"partition.autobalancing.enable": "yes"}):
        with pytest.raises(InvalidConfigError):
            config.with_dynamic(bad)


def test_drain_progress_counts_what_still_lists_the_node() -> None:
    assignments = {TopicPartition("t", 0): (1, 2, 3), TopicPartition("t", 1): (4, 2, 3, 1),
                   TopicPartition("t", 2): (2, 3, 4), TopicPartition("u", 0): (1, 5)}
    removing = {TopicPartition("t", 1): (1,)}
    plan = plan_moves(assignments, {1, 2, 3, 4}, {1}, {TopicPartition("t", 1): (4, 2, 3)}, 5)
    progress = drain_progress(assignments, removing, 1, plan)
    assert (progress.replicas_left, progress.moving) == (3, 1)
    assert progress.stuck == (
        (TopicPartition("u", 0), "a majority of its replicas [1, 5] is down"),)
    assert drain_progress(assignments, removing, 5, plan) == DrainProgress(1, 0, progress.stuck)
    assert drain_progress(assignments, removing, 9, plan) == DrainProgress(0, 0, ())


def test_the_controller_reads_the_autobalancing_settings_from_the_dynamic_node_configs(
    tmp_path: Path,
) -> None:
    config = NodeConfig.from_properties(
        {"node.id": "2", "listen": "127.0.0.1:0", "data.dir": str(tmp_path)})
    image = MetadataImage()
    assert settings(config, image) is config
    broker = ConfigResourceType.BROKER
    for offset, record in enumerate([
        ConfigRecord(broker, "", "partition.autobalancing.enable", "false"),
        ConfigRecord(broker, "", "partition.autobalancing.max.moves", "4"),
        ConfigRecord(broker, "2", "partition.autobalancing.max.moves", "6"),
        ConfigRecord(broker, "3", "partition.autobalancing.enable", "true"),
    ]):
        image.apply(offset, record)
    now = settings(config, image)
    assert (now.partition_autobalancing_enable, now.partition_autobalancing_max_moves) \
        == (False, 6)


# ---- operators' holds ------------------------------------------------------------------------


@pytest.mark.parametrize("record", [PartitionHoldRecord("t", 1, 0, 1_700_000_000_000),
                                    PartitionHoldRecord("t.x", 9, 41, -1)])
def test_hold_records_round_trip(record: PartitionHoldRecord) -> None:
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize("record, message", [
    (PartitionHoldRecord("", 1, 0, 5), "lacks a topic"),
    (PartitionHoldRecord("t", 0, 0, 5), "lacks a topic"),
    (PartitionHoldRecord("t", 1, -1, 5), "lacks a topic"),
    (PartitionHoldRecord("t", 1, 0, -2), "since -2 ms"),
])
def test_bad_hold_records_are_refused_by_name(record: PartitionHoldRecord, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_record(encode_record(record))


def test_a_hold_is_decided_from_the_log_and_the_time_passed_in() -> None:
    """The hold is what the records say and the clock the caller passes: two images that
    applied the same records (a new controller leader's and the old one's) hold the same
    partitions at the same time, and only the time passed in ends a hold."""
    hour = 3_600_000
    records = [
        TopicRecord("t", 1, ((1,), (2,), (3,))),
        PartitionChangeRecord("t", 1, 0, (2, 1), adding=(2,), removing=(1,)),
    ]
    image = MetadataImage()
    for offset, record in enumerate(records):
        image.apply(offset, record)
    assert image.held(10_000, hour) == (frozenset(), None)
    with pytest.raises(UnknownTopicOrPartitionError):
        image.plan_hold("t", 3, 5)
    with pytest.raises(UnknownTopicOrPartitionError):
        image.plan_hold("nope", 0, 5)
    with pytest.raises(InvalidRequestError):
        image.plan_hold("t", 0, -5)
    records += [image.plan_hold("t", 0, 1_000), image.plan_hold("t", 2, 5_000)]
    copy = MetadataImage()
    for offset, record in enumerate(records):
        image.apply(offset, record)
        copy.apply(offset, record)
    both = {TopicPartition("t", 0), TopicPartition("t", 2)}
    for each in (image, copy):
        assert each.held(1_000, hour) == (both, 1_000 + hour)
        assert each.held(500, hour) == (both, 1_000 + hour)  # a clock behind the record's
        assert each.held(1_000 + hour, hour) == ({TopicPartition("t", 2)}, 5_000 + hour)
        assert each.held(5_000 + hour, hour) == (frozenset(), None)
        assert each.held(1_000, 0) == (frozenset(), None)  # 0: no hold at all
    # Renewed (the operator reassigned again, or the move completed), then released.
    image.apply(4, image.plan_hold("t", 0, 9_000))
    assert image.held(1_000 + hour, hour)[0] == both
    image.apply(5, image.plan_hold("t", 0, None))
    assert image.held(1_000, hour) == ({TopicPartition("t", 2)}, 5_000 + hour)
    # A record for another incarnation of the topic holds nothing; deleting it ends its holds.
    image.apply(6, PartitionHoldRecord("t", 7, 1, 1_000))
    assert TopicPartition("t", 1) not in image.held(1_000, hour)[0]
    image.apply(7, RemoveTopicRecord("t", 1))
    image.apply(8, TopicRecord("t", 2, ((1,), (2,), (3,))))
    assert image.held(1_000, hour) == (frozenset(), None)


def test_the_hold_time_is_a_dynamic_node_setting(tmp_path: Path) -> None:
    config = NodeConfig.from_properties(
        {"node.id": "1", "listen": "127.0.0.1:0", "data.dir": str(tmp_path)})
    assert config.balancer_operator_hold_ms == 3_600_000
    image = MetadataImage()
    image.apply(0, ConfigRecord(ConfigResourceType.BROKER, "", "balancer.operator.hold.ms", "0"))
    assert settings(config, image).balancer_operator_hold_ms == 0
    for bad in ("-1", "soon"):
        with pytest.raises(InvalidConfigError):
            config.with_dynamic({"balancer.operator.hold.ms": bad})
    with pytest.raises(InvalidConfigError):
        NodeConfig.from_properties({"node.id": "1", "listen": "127.0.0.1:0",
                                    "data.dir": str(tmp_path),
                                    "partition.autobalancing.tick.interval.ms": "0"})
