"""A real 3-node cluster over loopback: replication, leadership, bounds and bad input.

Every test talks raw gRPC to node processes started by `tidelog.testing.LocalCluster`, and each
cluster is torn down (processes and ports) even when a test fails.
"""

from __future__ import annotations

import contextlib
import threading
import time

import grpc
import pytest
from record_helpers import values_of

from tidelog.errors import CoordinatorNotAvailableError, OffsetNotAvailableError, for_code
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(180)

NOT_LEADER = 6


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    # No automatic leader rebalancing: these tests pin a partition's leader and talk raw
    # protocol to it (test_preferred_leaders_take_leadership_back covers the balancing). The
    # cleaner (with retention) runs every 200 ms rather than every 5 s: the compaction test
    # waits for it.
    return {"auto_leader_rebalance_enable": False, "log_retention_check_interval_ms": 200}


def test_produce_acks_all_then_fetch_back_from_every_partition(raw: Raw) -> None:
    raw.create_topic("events", 3, 3)
    leaders = raw.wait_leaders("events", 3)
    for p, leader in enumerate(leaders):
        values = [f"p{p}-{i}".encode() for i in range(50)]
        first = raw.produce(leader, "events", p, make_batch(values[:20]))
        second = raw.produce(leader, "events", p, make_batch(values[20:]))
        assert (first.error_code, first.base_offset) == (0, 0)
        assert (second.error_code, second.base_offset) == (0, 20)
        fetched = values_of(raw.fetch_all(leader, "events", p))
        assert fetched == list(enumerate(values))
    md = raw.metadata(leaders[0], "events")
    assert all(sorted(p.replicas) == [1, 2, 3] for p in md.partitions)
    assert len({p.replicas[0] for p in md.partitions}) == 3, "preferred leaders are spread"


def test_preferred_leaders_take_leadership_back() -> None:
    with LocalCluster(3, leader_imbalance_check_interval_ms=500) as cluster, Raw(cluster) as raw:
        raw.create_topic("balanced", 3, 3)
        preferred = [p.replicas[0] for p in raw.metadata(1, "balanced").partitions]
        assert sorted(preferred) == [1, 2, 3]
        wait_for(
            lambda: raw.wait_leaders("balanced", 3) == preferred,
            timeout=60,
            what="leadership to move to the preferred replicas",
        )
        victim = preferred[0]
        cluster.kill(victim)
        wait_for(lambda: raw.wait_leaders("balanced", 3)[0] != victim, timeout=60,
                 what="a new leader for partition 0")
        cluster.restart(victim)
        wait_for(
            lambda: raw.wait_leaders("balanced", 3) == preferred,
            timeout=60,
            what="the restarted preferred replica to lead again",
        )


def test_a_follower_answers_not_leader_with_the_leaders_hint(raw: Raw) -> None:
    raw.create_topic("hinted", 1, 3)
    leader, epoch = raw.wait_leader_epoch("hinted")
    for follower in (n for n in (1, 2, 3) if n != leader):
        answers = [
            raw.produce(follower, "hinted", 0, make_batch([b"x"])),
            raw.fetch(follower, "hinted", 0, 0),
            raw.list_offset(follower, "hinted", 0, -1),
        ]
        for answer in answers:
            assert answer.error_code == NOT_LEADER
            assert answer.current_leader.leader_id == leader
            assert answer.current_leader.leader_epoch == epoch
            assert answer.current_leader.leader_address == raw.cluster.address_of(leader)


def test_leader_epoch_fencing_comes_before_the_leadership_check(raw: Raw) -> None:
    raw.create_topic("fenced", 1, 3)
    leader, epoch = raw.wait_leader_epoch("fenced")
    follower = next(n for n in (1, 2, 3) if n != leader)
    for node in (leader, follower):
        assert raw.list_offset(node, "fenced", 0, -1, epoch=epoch - 1).error_code == 74
        assert raw.list_offset(node, "fenced", 0, -1, epoch=epoch + 1).error_code == 75
        assert raw.fetch(node, "fenced", 0, 0, epoch=epoch + 1).error_code == 75
    ok = raw.list_offset(leader, "fenced", 0, -1, epoch=epoch)
    assert (ok.error_code, ok.leader_epoch) == (0, epoch)


def test_legacy_lookup_lists_segment_bases_over_several_segments(raw: Raw) -> None:
    raw.create_topic("legacy", 1, 3, segment_bytes="2048")
    leader = raw.wait_leaders("legacy", 1)[0]
    for _ in range(8):
        assert raw.produce(leader, "legacy", 0, make_batch([bytes(300)] * 2)).error_code == 0
    answer = raw.list_offset(leader, "legacy", 0, -1, max_num_offsets=100)
    offsets = list(answer.old_style_offsets)
    assert offsets == sorted(offsets, reverse=True)
    assert offsets[0] == 16 and offsets[-1] == 0 and len(offsets) >= 3
    earliest = raw.list_offset(leader, "legacy", 0, -2, max_num_offsets=10)
    assert list(earliest.old_style_offsets) == [0]


def test_bad_input_gets_error_codes_and_the_node_keeps_serving(raw: Raw) -> None:
    raw.create_topic("strict", 2, 3)
    leader = raw.wait_leaders("strict", 2)[0]
    stub = raw.stub(leader)
    assert raw.produce(leader, "strict", -1, make_batch([b"x"])).error_code == 3
    assert raw.produce(leader, "strict", 7, make_batch([b"x"])).error_code == 3
    assert raw.produce(leader, "missing", 0, make_batch([b"x"])).error_code == 3
    assert raw.produce(leader, "strict", 0, b"\x00garbage").error_code == 2
    assert raw.produce(leader, "strict", 0, make_batch([b"x"]), acks=5).error_code == 21
    huge = build_batch([RecordInput(bytes(2 << 20), None, int(time.time() * 1000))])
    assert raw.produce(leader, "strict", 0, huge).error_code == 10
    created = stub.CreateTopics(
        pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(name="", num_partitions=1, replication_factor=1),
                pb.CreatableTopic(name="zero", num_partitions=0, replication_factor=1),
                pb.CreatableTopic(name="wide", num_partitions=1, replication_factor=4),
                pb.CreatableTopic(name="strict", num_partitions=1, replication_factor=1),
                pb.CreatableTopic(
                    name="badcfg", num_partitions=1, replication_factor=1,
                    configs={"retention.m": "5"},
                ),
            ],
            timeout_ms=10_000,
        ),
        timeout=15,
    )
    assert [t.error_code for t in created.topics] == [17, 37, 38, 36, 40]
    assert all(t.error_message for t in created.topics)
    for bad in (
        pb.FetchRequest(replica_id=5, max_bytes=100),
        pb.FetchRequest(replica_id=-1, max_bytes=-1),
        pb.FetchRequest(replica_id=-1, isolation_level=9),
    ):
        with pytest.raises(grpc.RpcError) as info:
            stub.Fetch(bad, timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    absurd = raw.fetch(leader, "strict", 0, 0, max_bytes=2**31 - 1)
    assert absurd.error_code == 0
    assert raw.fetch(leader, "strict", 0, 10**9).error_code == 1
    assert raw.list_offset(leader, "strict", 0, -9).error_code == 35
    duplicated = stub.ListOffsets(
        pb.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                pb.ListOffsetsTopic(
                    name="strict",
                    partitions=[
                        pb.ListOffsetsPartition(partition=0, timestamp=-1, current_leader_epoch=-1),
                        pb.ListOffsetsPartition(partition=0, timestamp=-2, current_leader_epoch=-1),
                    ],
                )
            ],
        ),
        timeout=5,
    )
    assert [p.error_code for p in duplicated.topics[0].partitions] == [42]
    # Before any transactional id was looked up there is no coordinator (15), and nothing is
    # created by it: only FindCoordinator creates __transaction_state.
    no_coordinator = stub.EndTxn(pb.EndTxnRequest(transactional_id="t"), timeout=5)
    assert no_coordinator.error_code == CoordinatorNotAvailableError.code
    still = raw.produce(leader, "strict", 0, make_batch([b"fine"]))
    assert (still.error_code, still.base_offset) == (0, 0)


def test_restarted_follower_catches_up_to_an_identical_log(raw: Raw) -> None:
    cluster = raw.cluster
    raw.create_topic("catchup", 1, 3)
    leader = raw.wait_leaders("catchup", 1)[0]
    follower = next(n for n in (1, 2, 3) if n != leader)
    raw.produce(leader, "catchup", 0, make_batch([b"before"] * 10))
    cluster.kill(follower)
    for i in range(20):
        assert raw.produce(leader, "catchup", 0, make_batch([b"during%d" % i] * 5)).error_code == 0
    cluster.restart(follower)
    # The restarted node may win leadership back (it can be the preferred replica), so ask
    # whoever leads now; what matters is that every replica ends identical up to the HW.
    leader = raw.wait_leaders("catchup", 1)[0]
    hw = raw.list_offset(leader, "catchup", 0, -1).offset
    assert hw == 110

    def caught_up() -> bool:
        return all(
            raw.list_offset(n, "catchup", 0, -1, replica_id=-2).offset >= hw
            for n in cluster.node_ids
        )

    wait_for(caught_up, what="the restarted follower to reach the HW")
    logs = {n: raw.fetch_all(n, "catchup", 0, replica_id=-2) for n in cluster.node_ids}
    assert logs[follower] == logs[leader]
    assert len(set(logs.values())) == 1, "replicas differ"
    assert len(values_of(logs[leader])) == 110


def test_sigkill_of_the_leader_under_load_loses_nothing_acknowledged(raw: Raw) -> None:
    cluster = raw.cluster
    raw.create_topic("load", 1, 3)
    first_leader = raw.wait_leaders("load", 1)[0]
    first_epoch = raw.metadata(first_leader, "load").partitions[0].leader_epoch
    acked: dict[int, bytes] = {}
    latest_seen: list[tuple[int, int]] = []  # (answering epoch, offset)
    not_available: list[int] = []  # epochs that answered OFFSET_NOT_AVAILABLE
    stop = threading.Event()
    errors: list[BaseException] = []

    def current_leader() -> int:
        for node in cluster.node_ids:
            if not cluster.is_running(node):
                continue
            try:
                with_leader = raw.metadata(node, "load").partitions[0].leader_id
            except grpc.RpcError:  # the node died between the check and the call
                continue
            if with_leader >= 0 and cluster.is_running(with_leader):
                return with_leader
        return -1

    def producer() -> None:
        i = 0
        try:
            while not stop.is_set():
                value = f"v{i}".encode()
                leader = current_leader()
                if leader < 0:
                    continue
                try:
                    result = raw.produce(leader, "load", 0, make_batch([value]), timeout_ms=3000)
                except grpc.RpcError:
                    continue
                if result.error_code == 0:
                    acked[result.base_offset] = value
                    i += 1
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    def watcher() -> None:
        try:
            while not stop.is_set():
                leader = current_leader()
                if leader < 0:
                    continue
                try:
                    answer = raw.list_offset(leader, "load", 0, -1)
                except grpc.RpcError:
                    continue
                if answer.error_code == 0:
                    latest_seen.append((answer.leader_epoch, answer.offset))
                elif for_code(answer.error_code) is OffsetNotAvailableError:
                    with contextlib.suppress(grpc.RpcError):
                        md = raw.metadata(leader, "load")
                        not_available.append(md.partitions[0].leader_epoch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=producer), threading.Thread(target=watcher)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 50, what="writes before the kill")
        cluster.kill(first_leader)
        new_leader = wait_for(
            lambda: (lambda n: n if n not in (-1, first_leader) else None)(current_leader()),
            what="a new leader",
        )
        count_at_kill = len(acked)
        wait_for(lambda: len(acked) >= count_at_kill + 50, what="writes after the election")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors
    new_epoch = raw.metadata(new_leader, "load").partitions[0].leader_epoch
    assert new_epoch > first_epoch
    cluster.restart(first_leader)
    # The restarted node is the preferred replica and may take leadership back: read from
    # whoever leads once things settle.
    leader_now = raw.wait_leaders("load", 1)[0]
    final = dict(values_of(raw.fetch_all(leader_now, "load", 0)))
    missing = {o: v for o, v in acked.items() if final.get(o) != v}
    assert not missing, f"acknowledged writes lost: {sorted(missing)[:10]}"
    offsets = [o for _, o in latest_seen]
    assert offsets == sorted(offsets), "a consumer saw the latest offset go backwards"
    assert all(epoch > first_epoch for epoch in not_available), not_available


def test_records_not_yet_committed_are_invisible_to_consumers() -> None:
    # Long election timeouts: with both followers paused the leader must stay leader (check-
    # quorum would depose it after one election timeout) while the test looks at it.
    options = {"election_timeout_ms": 4000, "auto_leader_rebalance_enable": False}
    with LocalCluster(3, **options) as cluster, Raw(cluster) as raw:
        raw.create_topic("pending", 1, 3)
        leader = raw.wait_leaders("pending", 1)[0]
        assert raw.produce(leader, "pending", 0, make_batch([b"a"] * 5)).error_code == 0
        followers = [n for n in cluster.node_ids if n != leader]
        for f in followers:
            cluster.pause(f)
        try:
            written = raw.produce(leader, "pending", 0, make_batch([b"b"] * 3), acks=1)
            assert (written.error_code, written.base_offset) == (0, 5)
            consumer = raw.list_offset(leader, "pending", 0, -1)
            committed = raw.list_offset(leader, "pending", 0, -1, isolation=1)
            debug = raw.list_offset(leader, "pending", 0, -1, replica_id=-2)
            replica = raw.list_offset(leader, "pending", 0, -1, replica_id=followers[0])
            assert (consumer.offset, committed.offset) == (5, 5)
            assert (debug.offset, replica.offset) == (8, 8)
            by_time = raw.list_offset(leader, "pending", 0, 0)
            assert by_time.offset == 0
            assert [o for o, _ in values_of(raw.fetch_all(leader, "pending", 0))] == list(
                range(5)
            )
            debug_view = values_of(raw.fetch_all(leader, "pending", 0, replica_id=-2))
            assert [o for o, _ in debug_view] == list(range(8))
        finally:
            for f in followers:
                cluster.resume(f)
        wait_for(
            lambda: raw.list_offset(leader, "pending", 0, -1).offset == 8,
            what="the HW to pass the written records once followers return",
        )


@pytest.mark.timeout(240)
def test_whole_cluster_restart_keeps_topics_and_committed_data(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "cluster"
    options = {"data_dir": data_dir, "auto_leader_rebalance_enable": False}
    with LocalCluster(3, **options) as cluster, Raw(cluster) as raw:
        raw.create_topic("durable", 2, 3)
        leaders = raw.wait_leaders("durable", 2)
        for p, leader in enumerate(leaders):
            assert raw.produce(leader, "durable", p, make_batch([b"d%d" % p] * 7)).error_code == 0
    with LocalCluster(3, **options) as cluster, Raw(cluster) as raw:
        leaders = raw.wait_leaders("durable", 2)
        for p, leader in enumerate(leaders):
            # A restarted leader learns the high watermark again when the first batch of its
            # epoch commits: until then it serves nothing, not less.
            def committed(p: int = p, leader: int = leader) -> list[bytes | None]:
                return [v for _, v in values_of(raw.fetch_all(leader, "durable", p))]

            values = wait_for(committed, what=f"the committed records of durable-{p}")
            assert values == [b"d%d" % p] * 7
            assert raw.produce(leader, "durable", p, make_batch([b"more"])).error_code == 0


def test_cluster_status_shows_offsets_per_replica(raw: Raw) -> None:
    import subprocess
    import sys

    raw.create_topic("statused", 1, 3)
    leader = raw.wait_leaders("statused", 1)[0]
    assert raw.produce(leader, "statused", 0, make_batch([b"s"] * 4)).error_code == 0
    wait_for(
        lambda: all(
            raw.list_offset(n, "statused", 0, -1, replica_id=-2).offset == 4
            for n in raw.cluster.node_ids
        ),
        what="every replica to hold the records",
    )
    out = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "cluster", "status",
         "--bootstrap", raw.cluster.bootstrap],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    rows = [cols for cols in (line.split() for line in out.splitlines())
            if cols[:1] == ["statused"]]
    per_replica = [r for r in rows if r[3] in ("leader", "in-sync", "out-of-sync")]
    assert sorted(int(r[2]) for r in per_replica) == [1, 2, 3]
    assert [r[3] for r in per_replica].count("leader") == 1
    # START HW LSO LEO LAG of every replica
    assert all(r[4:] == ["0", "4", "4", "4", "0"] for r in per_replica), out


def test_compacted_topic_keeps_the_newest_value_per_key_at_its_offset(raw: Raw) -> None:
    raw.create_topic("compacted", 1, 3, cleanup_policy="compact", segment_bytes="600")
    leader = raw.wait_leaders("compacted", 1)[0]
    written: dict[bytes, tuple[int, bytes]] = {}
    now = int(time.time() * 1000)
    for i in range(60):
        key, value = b"k%d" % (i % 5), b"v%d" % i
        batch = build_batch([RecordInput(value, key, now)])
        result = raw.produce(leader, "compacted", 0, batch)
        assert result.error_code == 0
        written[key] = (result.base_offset, value)

    def compacted() -> list[tuple[int, bytes | None]] | None:
        records = values_of(raw.fetch_all(leader, "compacted", 0))
        return records if len(records) < 30 else None

    records = wait_for(compacted, timeout=30, what="the cleaner to compact closed segments")
    by_offset = dict(records)
    for offset, value in written.values():
        assert by_offset.get(offset) == value, "the newest value of a key moved or vanished"
    offsets = [o for o, _ in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    keyless = build_batch([RecordInput(b"no key", None, now)])
    assert raw.produce(leader, "compacted", 0, keyless).error_code == 87  # INVALID_RECORD
