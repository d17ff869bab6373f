"""Kafka's operator tools and flags on a real cluster: kafka-consumer-groups' --all-groups,
--all-topics, --to-current, --by-duration, --from-file, --export, --delete-offsets,
--members and --state; kafka-delete-records (and the admin client's delete_records), each
replica's log start offset moved; kafka-log-dirs --describe (and describe_log_dirs);
kafka-leader-election (and elect_leaders); and kafka-topics' --under-replicated-partitions and
--unavailable-partitions (the node stopped for them is the module's last test)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting_helpers import poll_records

from tidelog import Client, OffsetAndMetadata, TopicPartition, errors
from tidelog.cli import main
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.types import DEBUGGING_REPLICA_ID, EARLIEST_TIMESTAMP
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    # Leaders stay where they are unless asked to move (the election test moves them).
    return {"offsets_topic_num_partitions": 3, "auto_leader_rebalance_enable": False}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as shared:
        yield shared


def run(capsys: pytest.CaptureFixture[str], cluster: LocalCluster, *args: str,
        code: int = 0) -> str:
    """`tidelog ARGS --bootstrap ...`: its stdout, once it exited with `code`."""
    capsys.readouterr()
    exit_code = main([*args, "--bootstrap", cluster.bootstrap])
    out, err = capsys.readouterr()
    assert exit_code == code, err
    assert "Traceback" not in err
    return out


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def _produce(client: Client, topic: str, partitions: int, per_partition: int,
             timestamp_ms: int | None = None) -> None:
    client.create_topic(topic, partitions=partitions)
    producer = client.producer(acks="all")
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, f"{p}-{i}".encode(), partition=p,
                          timestamp_ms=None if timestamp_ms is None else timestamp_ms + i)
    producer.flush()
    producer.close()


def _committed(client: Client, group: str) -> dict[TopicPartition, int]:
    return {tp: v.offset for tp, v in client.admin.list_consumer_group_offsets(group).items()}


def test_reset_offsets_all_topics_to_current_by_duration_export_and_from_file(
    cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    now = int(time.time() * 1000)
    # Records an hour old (record i stamped an hour ago + i ms) in kt-a, fresh ones in kt-b.
    _produce(client, "kt-a", 2, 10, timestamp_ms=now - 3_600_000)
    _produce(client, "kt-b", 1, 10)
    a0, a1, b0 = (TopicPartition("kt-a", 0), TopicPartition("kt-a", 1),
                  TopicPartition("kt-b", 0))
    for group in ("kt-g1", "kt-g2"):
        client.admin.alter_consumer_group_offsets(
            group, {a0: OffsetAndMetadata(3), a1: OffsetAndMetadata(4)})

    # --all-topics: every partition the group committed, and nothing else (not kt-b).
    out = run(capsys, cluster, "groups", "reset-offsets", "--group", "kt-g1", "--all-topics",
              "--to-latest")
    assert ["kt-g1", "kt-a", "0", "3", "10"] in rows(out)
    assert ["kt-g1", "kt-a", "1", "4", "10"] in rows(out)
    assert "kt-b" not in out and "dry run" in out
    assert _committed(client, "kt-g1") == {a0: 3, a1: 4}

    # --to-current: the committed offset, and the log end where there is none (kt-b).
    out = run(capsys, cluster, "groups", "reset-offsets", "kt-g1", "--topic", "kt-a",
              "--topic", "kt-b", "--to-current", "--execute")
    assert _committed(client, "kt-g1") == {a0: 3, a1: 4, b0: 10}

    # --by-duration: from 30 min ago, the hour-old records are all before it: the log end;
    # from 2 h ago, the first record.
    run(capsys, cluster, "groups", "reset-offsets", "kt-g1", "--topic", "kt-a:0",
        "--by-duration", "PT30M", "--execute")
    assert _committed(client, "kt-g1")[a0] == 10
    run(capsys, cluster, "groups", "reset-offsets", "kt-g1", "--topic", "kt-a:0",
        "--by-duration", "PT2H", "--execute")
    assert _committed(client, "kt-g1")[a0] == 0

    # --export for two groups writes GROUP,TOPIC,PARTITION,OFFSET lines, nothing else, and
    # --from-file reads them back (out-of-range offsets clamped as any other target).
    out = run(capsys, cluster, "groups", "reset-offsets", "kt-g1", "kt-g2", "--topic", "kt-a",
              "--shift-by", "2", "--export")
    assert sorted(out.split()) == sorted(["kt-g1,kt-a,0,2", "kt-g1,kt-a,1,6",
                                          "kt-g2,kt-a,0,5", "kt-g2,kt-a,1,6"])
    plan = tmp_path / "plan.csv"
    plan.write_text(out + "kt-g2,kt-a,1,99\n")
    run(capsys, cluster, "groups", "reset-offsets", "--group", "kt-g1", "--group", "kt-g2",
        "--from-file", str(plan), "--execute")
    assert _committed(client, "kt-g1") == {a0: 2, a1: 6, b0: 10}
    assert _committed(client, "kt-g2") == {a0: 5, a1: 10}
    # One group: TOPIC,PARTITION,OFFSET lines.
    out = run(capsys, cluster, "groups", "reset-offsets", "kt-g2", "--topic", "kt-a:1",
              "--to-offset", "7", "--export", "--execute")
    assert out.split() == ["kt-a,1,7"]
    single = tmp_path / "single.csv"
    single.write_text("kt-a,0,1\n")
    run(capsys, cluster, "groups", "reset-offsets", "kt-g2", "--from-file", str(single),
        "--execute")
    assert _committed(client, "kt-g2") == {a0: 1, a1: 7}

    # --all-groups: every group of the cluster.
    out = run(capsys, cluster, "groups", "reset-offsets", "--all-groups", "--topic", "kt-a:0",
              "--to-earliest")
    assert {"kt-g1", "kt-g2"} <= {row[0] for row in rows(out)[1:-1]}

    # Mistakes are one-line messages, and nothing is committed.
    bad = tmp_path / "bad.csv"
    bad.write_text("kt-a,zero,1\n")
    for args, message in [
        (["kt-g1", "--from-file", str(bad)], "line 1: expected"),
        (["kt-g1", "--topic", "kt-a", "--all-topics", "--to-latest"], "one of them"),
        (["kt-g1", "--to-latest"], "--all-topics"),
        (["kt-g1", "--all-groups", "--topic", "kt-a", "--to-latest"], "not both"),
        (["kt-g1", "--topic", "kt-a", "--by-duration", "1h"], "ISO-8601 duration"),
    ]:
        capsys.readouterr()
        assert main(["groups", "reset-offsets", *args, "--bootstrap", cluster.bootstrap]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (args, err)


def test_describe_members_state_all_groups_and_delete_offsets(
    cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    _produce(client, "kt-m", 2, 5)
    consumer = client.consumer(group_id="kt-members", auto_offset_reset="earliest",
                               enable_auto_commit=False)
    try:
        consumer.subscribe(["kt-m"])
        assert len(poll_records(consumer, 10)) == 10
        consumer.commit()
        wait_for(lambda: "Stable" in run(capsys, cluster, "groups", "describe", "kt-members",
                                         "--state"), timeout=60, what="a stable group")
        out = run(capsys, cluster, "groups", "describe", "kt-members", "--state")
        [header, line] = rows(out)
        assert header[:3] == ["GROUP", "COORDINATOR", "(ID)"]
        assert line[0] == "kt-members" and line[-2:] == ["Stable", "1"]
        coordinator = client.admin.find_coordinator("kt-members")
        assert line[2] == f"({coordinator})"

        out = run(capsys, cluster, "groups", "describe", "kt-members", "--members",
                  "--verbose")
        [header, line] = rows(out)
        assert header[:5] == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST",
                              "#PARTITIONS"]
        assert line[0] == "kt-members" and line[4] == "2" and line[-2] == "kt-m:0,1"

        out = run(capsys, cluster, "groups", "describe", "kt-members", "--offsets")
        assert rows(out)[0][0] == "GROUP" and len(rows(out)) == 3  # no members' summary

        out = run(capsys, cluster, "groups", "list", "--state")
        assert ["kt-members", "Stable"] in rows(out)
        out = run(capsys, cluster, "groups", "list", "--state", "empty")
        assert "kt-members" not in out
    finally:
        consumer.close()

    client.admin.alter_consumer_group_offsets("kt-simple", {
        TopicPartition("kt-m", 0): OffsetAndMetadata(1),
        TopicPartition("kt-m", 1): OffsetAndMetadata(2)})
    out = run(capsys, cluster, "groups", "describe", "--all-groups", "--state")
    assert {"kt-members", "kt-simple"} <= {row[0] for row in rows(out)}
    out = run(capsys, cluster, "groups", "describe", "kt-simple", "--members")
    assert "no active members" in out

    out = run(capsys, cluster, "groups", "delete-offsets", "kt-simple", "--topic", "kt-m:1")
    assert rows(out) == [["TOPIC", "PARTITION", "STATUS"], ["kt-m", "1", "Successful"]]
    assert _committed(client, "kt-simple") == {TopicPartition("kt-m", 0): 1}
    # A partition the coordinator refuses comes back with its error; the others go.
    client.create_topic("kt-gone")
    client.admin.delete_topic("kt-gone")
    failed = client.admin.delete_consumer_group_offsets(
        "kt-simple", [TopicPartition("kt-gone", 0), TopicPartition("kt-m", 0)])
    assert list(failed) == [TopicPartition("kt-gone", 0)]
    assert failed[TopicPartition("kt-gone", 0)].code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert _committed(client, "kt-simple") == {}
    capsys.readouterr()
    assert main(["groups", "describe", "kt-nosuch", "--members",
                 "--bootstrap", cluster.bootstrap]) == 2
    assert "does not exist" in capsys.readouterr().err


def _log_starts(raw: Raw, tp: TopicPartition, nodes: Iterable[int]) -> dict[int, int]:
    """Each replica's log start offset, asked of that node (a debug lookup, which a follower
    answers from its own log)."""
    starts = {}
    for node in nodes:
        answer = raw.stub(node).ListOffsets(pb.ListOffsetsRequest(
            replica_id=DEBUGGING_REPLICA_ID, topics=[pb.ListOffsetsTopic(
                name=tp.topic, partitions=[pb.ListOffsetsPartition(
                    partition=tp.partition, timestamp=EARLIEST_TIMESTAMP)])]), timeout=10)
        result = answer.topics[0].partitions[0]
        assert result.error_code == 0, result
        starts[node] = result.offset
    return starts


def test_delete_records_moves_the_log_start_of_every_replica(
    cluster: LocalCluster, client: Client, raw: Raw, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    _produce(client, "kt-del", 2, 20)
    tp0, tp1 = TopicPartition("kt-del", 0), TopicPartition("kt-del", 1)
    replicas = client.describe_topics(["kt-del"])["kt-del"].partitions[0].replicas
    assert len(replicas) == 3

    out = run(capsys, cluster, "delete-records", "--topic", "kt-del", "--partition", "0",
              "--offset", "5")
    assert rows(out) == [["TOPIC", "PARTITION", "LOW-WATERMARK"], ["kt-del", "0", "5"]]
    # The followers take the leader's new log start from its announcements.
    wait_for(lambda: set(_log_starts(raw, tp0, replicas).values()) == {5}, timeout=30,
             what="every replica of kt-del-0 starting at 5")
    consumer = client.consumer(auto_offset_reset="earliest")
    consumer.assign([tp0])
    records = poll_records(consumer, 15)
    consumer.close()
    assert [r.offset for r in records] == list(range(5, 20))

    # Kafka's file; -1 deletes everything a consumer could read.
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "kt-del", "partition": 0, "offset": 7},
        {"topic": "kt-del", "partition": 1, "offset": -1}]}))
    out = run(capsys, cluster, "delete-records", "--offset-json-file", str(plan))
    assert ["kt-del", "0", "7"] in rows(out) and ["kt-del", "1", "20"] in rows(out)
    assert client.admin.delete_records({tp0: 3}) == {tp0: 7}  # never back
    wait_for(lambda: set(_log_starts(raw, tp1, replicas).values()) == {20}, timeout=30,
             what="every replica of kt-del-1 starting at its end")

    # What cannot be deleted: above the high watermark, a compacted topic, an unknown one.
    with pytest.raises(errors.OffsetOutOfRangeError, match="kt-del-0"):
        client.admin.delete_records({tp0: 21})
    client.create_topic("kt-compacted", config={"cleanup.policy": "compact"})
    with pytest.raises(errors.PolicyViolationError):
        client.admin.delete_records({TopicPartition("kt-compacted", 0): 0})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        client.admin.delete_records({TopicPartition("kt-nosuch", 0): 0})
    with pytest.raises(errors.InvalidTopicError):
        client.admin.delete_records({TopicPartition("__consumer_offsets", 0): 0})
    for args, message in [
        (["--topic", "kt-del", "--offset", "21"], "OFFSET_OUT_OF_RANGE"),
        (["--topic", "kt-del", "--offset", "-2"], "--offset -2"),
        (["--topic", "kt-del"], "--offset"),
        (["--offset-json-file", str(tmp_path / "missing.json")], "missing.json"),
    ]:
        capsys.readouterr()
        assert main(["delete-records", *args, "--bootstrap", cluster.bootstrap]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (args, err)


def test_log_dirs_describe_sizes_per_partition_and_node(
    cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    _produce(client, "kt-dirs", 2, 30)
    nodes = sorted(client.admin.describe_cluster().nodes)

    # Kafka's JSON: every node, its one directory, the topic's replicas with their sizes
    # (every replica holds the 30 records of each partition once the followers caught up).
    def described() -> dict[int, dict[str, int]]:
        out = run(capsys, cluster, "log-dirs", "--describe", "--topic-list", "kt-dirs")
        document = json.loads(out)
        assert document["version"] == 1
        return {broker["broker"]: {p["partition"]: p["size"]
                                   for d in broker["logDirs"] for p in d["partitions"]}
                for broker in document["brokers"]}

    def alike() -> dict[int, dict[str, int]] | None:
        got = described()
        return got if len({tuple(sorted(v.items())) for v in got.values()}) == 1 else None

    sizes = wait_for(alike, timeout=30, what="every replica of kt-dirs the same size")
    assert sorted(sizes) == nodes
    assert set(sizes[nodes[0]]) == {"kt-dirs-0", "kt-dirs-1"}
    assert all(size > 30 for size in sizes[nodes[0]].values())

    dirs = client.admin.describe_log_dirs([nodes[0]], ["kt-dirs"])
    [(path, description)] = dirs[nodes[0]].items()
    assert Path(path).is_absolute(), path
    assert description.error is None and description.total_bytes >= description.usable_bytes > 0
    assert {tp: info.size for tp, info in description.replica_infos.items()} == {
        TopicPartition("kt-dirs", p): sizes[nodes[0]][f"kt-dirs-{p}"] for p in (0, 1)}

    out = run(capsys, cluster, "log-dirs", "--describe", "--broker-list", str(nodes[1]),
              "--topic-list", "kt-dirs", "--table")
    assert rows(out)[0] == ["NODE", "LOG-DIR", "TOPIC", "PARTITION", "SIZE", "OFFSET-LAG"]
    assert {(row[0], row[2], row[3]) for row in rows(out)[1:]} == {
        (str(nodes[1]), "kt-dirs", "0"), (str(nodes[1]), "kt-dirs", "1")}
    capsys.readouterr()
    assert main(["log-dirs", "--describe", "--broker-list", "1,x",
                 "--bootstrap", cluster.bootstrap]) == 2
    assert "--broker-list '1,x'" in capsys.readouterr().err


def test_leader_election_preferred_and_unclean(
    cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    client.create_topic("kt-elect", partitions=2, replication_factor=3)
    tp0, tp1 = TopicPartition("kt-elect", 0), TopicPartition("kt-elect", 1)
    preferred = client.describe_topics(["kt-elect"])["kt-elect"].partitions[0].replicas[0]

    def partition(tp: TopicPartition) -> Any:
        return client.describe_topics(["kt-elect"])["kt-elect"].partitions[tp.partition]

    # Move kt-elect-0's leadership away from its preferred replica: stop that node until
    # another leads, then bring it back in sync.
    cluster.stop(preferred)
    wait_for(lambda: partition(tp0).leader not in (-1, preferred), timeout=60,
             what="another leader of kt-elect-0")
    cluster.restart(preferred)
    wait_for(lambda: preferred in partition(tp0).isr, timeout=60,
             what="the preferred replica of kt-elect-0 back in sync")
    assert partition(tp0).leader != preferred

    def elected() -> bool:
        # Under a loaded run the restarted replica can fall out of the ISR again before the
        # election reaches the leader, which then answers PREFERRED_LEADER_NOT_AVAILABLE with
        # the ISR it holds: the election is asked again, as an operator would.
        try:
            out = run(capsys, cluster, "leader-election", "--preferred", "--topic", "kt-elect",
                      "--partition", "0")
        except AssertionError as exc:
            if "PREFERRED_LEADER_NOT_AVAILABLE" in str(exc):
                return False
            raise
        assert out == "Successfully completed leader election (PREFERRED) for partitions " \
                      "kt-elect-0\n"
        return True

    wait_for(elected, timeout=60, what="the preferred election of kt-elect-0")
    wait_for(lambda: partition(tp0).leader == preferred, timeout=30,
             what="the preferred replica leading kt-elect-0 in metadata")
    plan = tmp_path / "elect.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "kt-elect", "partition": 0}]}))
    out = run(capsys, cluster, "leader-election", "--election-type", "preferred",
              "--path-to-json-file", str(plan))
    assert out == "Valid replica already elected for partitions kt-elect-0\n"
    # Raft never elects outside a majority: a partition with a leader needs no election.
    out = run(capsys, cluster, "leader-election", "--unclean", "--topic", "kt-elect")
    assert out == "Valid replica already elected for partitions kt-elect-0, kt-elect-1\n"

    outcomes = client.admin.elect_leaders("PREFERRED", [tp1, TopicPartition("kt-nosuch", 0)])
    assert isinstance(outcomes[TopicPartition("kt-nosuch", 0)],
                      errors.UnknownTopicOrPartitionError)
    assert outcomes[tp1] is None or isinstance(outcomes[tp1], errors.ElectionNotNeededError)
    for args, message in [(["--preferred", "--partition", "0", "--all-topic-partitions"],
                           "--partition goes with --topic"),
                          (["--preferred", "--topic", "kt-elect", "--partition", "-1"],
                           "--partition -1")]:
        capsys.readouterr()
        assert main(["leader-election", *args, "--bootstrap", cluster.bootstrap]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (args, err)


def test_topic_describe_under_replicated_and_unavailable_partitions(
    cluster: LocalCluster, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last in the module: it stops a node for good."""
    client.create_topic("kt-spread", partitions=3, replication_factor=3)
    client.create_topic("kt-single", partitions=3, replication_factor=1)
    # A new topic's followers join its in-sync replicas once they caught up.
    wait_for(lambda: run(capsys, cluster, "topic", "describe",
                         "--under-replicated-partitions") == "",
             timeout=60, what="no partition under-replicated")
    assert run(capsys, cluster, "topic", "describe", "--unavailable-partitions") == ""
    single = client.describe_topics(["kt-single"])["kt-single"]
    victim = single.partitions[0].leader
    alone = {i for i, p in enumerate(single.partitions) if p.replicas == (victim,)}
    cluster.stop(victim)

    def troubled(flag: str, topic: str) -> set[int]:
        out = run(capsys, cluster, "topic", "describe", topic, flag)
        return {int(row[2].rstrip(":")) for row in rows(out)}

    wait_for(lambda: troubled("--under-replicated-partitions", "kt-spread") == {0, 1, 2},
             timeout=90, what="every kt-spread partition under-replicated")
    wait_for(lambda: troubled("--unavailable-partitions", "kt-single") == alone,
             timeout=90, what="the partitions of the stopped node unavailable")
    assert troubled("--unavailable-partitions", "kt-spread") == set()
