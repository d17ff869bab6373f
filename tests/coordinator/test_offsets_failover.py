"""Consumer offsets across failures, on real node processes (contract §8): a new coordinator loads
the committed offsets after the old one is SIGKILLed, commits of many partitions stay whole
across it, a restart of the whole cluster keeps them,
an old coordinator paused past its leadership never answers a stale offset, and offsets of a
group that stopped committing expire. One cluster per test: each leaves nodes killed, paused or
restarted."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest
from offsets_helpers import (
    NOT_COORDINATOR,
    RETRIABLE,
    Committed,
    commit,
    commit_request,
    committed,
    coordinator,
    fetched,
    find,
    forwarded,
    offsets_keys,
)

from tidelog.hashing import group_partition
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3
TOPIC = "events"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 3, "offsets_topic_num_partitions": PARTITIONS}


def start(raw: Raw) -> None:
    wait_for(lambda: find(raw, 1, "warm-up").error_code == 0, 60, "the offsets topic")
    raw.create_topic(TOPIC, 4, 3)


def test_a_new_coordinator_answers_the_committed_offsets_after_a_sigkill(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    raw = fresh_raw
    start(raw)
    groups = ["loaded-a", "loaded-b", "loaded-c"]
    same = [g for g in (f"same-{i}" for i in range(100))
            if group_partition(g, PARTITIONS) == group_partition(groups[0], PARTITIONS)]
    groups += same[:3]
    for i, group in enumerate(groups):
        committed(raw, 1, group, {(TOPIC, p): Committed(100 * i + p, 2, f"m{p}")
                                  for p in range(4)})
    old = coordinator(raw, groups[0], fresh_cluster.node_ids)
    fresh_cluster.kill(old)
    alive = [n for n in fresh_cluster.node_ids if n != old]
    coordinator(raw, groups[0], alive, but=old)
    for i, group in enumerate(groups):
        expected = {(TOPIC, p): Committed(100 * i + p, 2, f"m{p}") for p in range(4)}
        for node in alive:
            assert fetched(raw, node, group) == expected, (group, node)


def test_offsets_survive_a_restart_of_the_whole_cluster(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    raw = fresh_raw
    start(raw)
    committed(raw, 2, "durable", {(TOPIC, 0): Committed(5, 1, "kept"), (TOPIC, 3): Committed(9)})
    committed(raw, 3, "durable", {(TOPIC, 3): Committed(10)})  # the newer value wins
    fresh_cluster.stop_all()
    fresh_cluster.start()
    fresh_cluster.wait_ready(60)
    for node in fresh_cluster.node_ids:
        assert fetched(raw, node, "durable") == {
            (TOPIC, 0): Committed(5, 1, "kept"), (TOPIC, 3): Committed(10),
        }


def test_a_paused_old_coordinator_never_answers_a_stale_offset(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    """SIGSTOP the coordinator, commit a newer offset through its successor, and ask the old
    one, as forwarded requests (so it answers itself): some sent while it is still stopped,
    so they wait in its socket for the moment it wakes believing it leads, the rest after
    SIGCONT. It may say it is not (or not yet) the coordinator, or give the new offset; never
    the old one."""
    raw = fresh_raw
    cluster = fresh_cluster
    start(raw)
    group = "watched"
    committed(raw, 1, group, {(TOPIC, 0): Committed(1)})
    old = coordinator(raw, group, cluster.node_ids)
    others = [n for n in cluster.node_ids if n != old]
    request = pb.OffsetFetchRequest(group_id=group)
    with grpc.insecure_channel(cluster.internal_address_of(old)) as channel:
        cluster.pause(old)
        try:
            coordinator(raw, group, others, but=old)
            committed(raw, others[0], group, {(TOPIC, 0): Committed(2)})
            waiting = [forwarded(channel, "OffsetFetch", request, 30) for _ in range(20)]
        finally:
            cluster.resume(old)
        answers = [future.result() for future in waiting]
        answers += [forwarded(channel, "OffsetFetch", request, 30).result()
                    for _ in range(20)]
    for answer in answers:
        assert answer.error_code in RETRIABLE | {0}, answer
        if answer.error_code == 0:
            assert [p.committed_offset for t in answer.topics for p in t.partitions] == [2]
    assert any(a.error_code in (0, NOT_COORDINATOR) for a in answers)


def test_offsets_of_a_group_that_stopped_committing_expire() -> None:
    """offsets.retention.minutes after a group's newest commit, its offsets are tombstoned;
    a group that commits meanwhile keeps its own. One node with Kafka's 50 partitions, whose
    placement the §7.3 vectors check in the log."""
    with LocalCluster(1, offsets_retention_minutes=0.05,
                      offsets_retention_check_interval_ms=100) as cluster, Raw(cluster) as raw:
        wait_for(lambda: find(raw, 1, "warm-up").error_code == 0, 60, "the offsets topic")
        raw.create_topic(TOPIC, 1, 1)
        vectors = {"": 0, "grp": 29, "foo": 24, "my-group": 12, "test-group": 12,
                   "polygenelubricants": 0}
        for group in vectors:
            committed(raw, 1, group, {(TOPIC, 0): Committed(3)})
        for group, partition in vectors.items():
            assert any(g == group for _, _, g, _, _ in offsets_keys(raw, partition)), group
        committed(raw, 1, "active", {(TOPIC, 0): Committed(1)})

        def expired() -> bool:
            committed(raw, 1, "active", {(TOPIC, 0): Committed(1)})
            return fetched(raw, 1, "grp") == {}

        # Each offsets partition expires its groups in its own bounded steps, so the groups
        # of the other partitions may go a little after 'grp'.
        wait_for(expired, 150, "the offsets of 'grp' to expire", interval=0.1)
        wait_for(lambda: expired() and all(fetched(raw, 1, group) == {} for group in vectors),
                 30, "the offsets of every idle group to expire", interval=0.2)
        assert fetched(raw, 1, "active") == {(TOPIC, 0): Committed(1)}
        tombstoned = [k for k in offsets_keys(raw, 29) if k[2] == "grp"]
        assert len(tombstoned) >= 2  # the commit and its tombstone (read before compaction)
        answer = commit(raw, 1, commit_request("grp", {(TOPIC, 0): Committed(4)}))
        assert answer == {(TOPIC, 0): 0}


def test_the_cleaner_compacts_the_offsets_topic() -> None:
    """The offsets topic is compacted in normal operation, so that a new leader replays little
    more than what the cleaner left (the topic's segments are small for it, see
    node/offsets_topic.py); the newest commit of every key stays. (Replaying a compacted log:
    tests/coordinator/test_group_coordinator.py.)"""
    with LocalCluster(1, segment_bytes=8192, offsets_topic_num_partitions=1) as cluster, \
            Raw(cluster) as raw:
        wait_for(lambda: find(raw, 1, "warm-up").error_code == 0, 60, "the offsets topic")
        raw.create_topic("wide", 50, 1)
        sets = 10  # 500 records of 50 keys, a batch of ~4.2 KiB each: 5 segments
        for n in range(sets):
            committed(raw, 1, "g", {("wide", p): Committed(n) for p in range(50)})
        wait_for(lambda: len(offsets_keys(raw, 0)) < sets * 50 // 2, 60, "a cleaner pass")
        assert fetched(raw, 1, "g") == {("wide", p): Committed(sets - 1) for p in range(50)}


def test_commits_of_many_partitions_stay_whole_across_a_sigkill_of_the_coordinator(
    fresh_cluster: LocalCluster, fresh_raw: Raw
) -> None:
    """Committers write 100-partition sets (every partition the set's number) while the
    coordinator is SIGKILLed; after the failover each group's offsets are one whole set, never
    a mix, and no older than the last set acknowledged."""
    raw = fresh_raw
    cluster = fresh_cluster
    start(raw)
    raw.create_topic("wide", 100, 1)
    groups = [f"whole-{i}" for i in range(4)]
    acknowledged = dict.fromkeys(groups, -1)
    stop = threading.Event()
    failures: list[BaseException] = []

    def committer(group: str) -> None:
        number = 0
        try:
            while not stop.is_set():
                offsets = {("wide", p): Committed(number) for p in range(100)}
                for node in cluster.node_ids:  # any live node forwards to the coordinator
                    if not cluster.is_running(node):
                        continue
                    try:
                        answer = commit(raw, node, commit_request(group, offsets))
                    except grpc.RpcError:
                        continue
                    assert not set(answer.values()) - RETRIABLE - {0}, answer
                    if set(answer.values()) == {0}:
                        acknowledged[group] = number
                    break
                number += 1
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=committer, args=(g,)) for g in groups]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: min(acknowledged.values()) >= 3, 60, "commits before the kill")
        old = coordinator(raw, groups[0], cluster.node_ids)
        cluster.kill(old)
        before = dict(acknowledged)
        alive = [n for n in cluster.node_ids if n != old]
        coordinator(raw, groups[0], alive, but=old)
        wait_for(lambda: all(acknowledged[g] > before[g] for g in groups), 90,
                 "commits after the failover")
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not failures, failures
    for group in groups:
        values = fetched(raw, alive[0], group)
        numbers = {value.offset for value in values.values()}
        assert len(values) == 100 and len(numbers) == 1, (group, numbers)
        assert numbers.pop() >= acknowledged[group]
