"""Consumer offsets from the client's side on a real cluster (contract §4, §8): commit and
committed, the leader epoch of the last consumed record, commit_async, auto-commit, a group's
consumer starting from its committed offsets, the admin calls, a coordinator failover, and the
`tidelog groups` command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from waiting_helpers import poll_records

from tidelog import Client, OffsetAndMetadata, TopicPartition, errors
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"offsets_topic_num_partitions": 5}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap) as shared:
        yield shared


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


def test_commit_then_committed_carries_the_epoch_of_the_last_record(client: Client) -> None:
    _produce(client, "oc-commit", 2, 10)
    tps = [TopicPartition("oc-commit", p) for p in (0, 1)]
    consumer = client.consumer(group_id="oc-g1", auto_offset_reset="earliest",
                               enable_auto_commit=False)
    consumer.assign(tps)
    records = poll_records(consumer, 20)
    assert len(records) == 20
    consumer.commit()
    last_epoch = {tp: max(r.leader_epoch for r in records if r.partition == tp.partition)
                  for tp in tps}
    assert consumer.committed(tps) == {tp: OffsetAndMetadata(10, "", last_epoch[tp])
                                       for tp in tps}
    consumer.commit({tps[0]: OffsetAndMetadata(4, "halfway")})
    assert consumer.committed(tps)[tps[0]] == OffsetAndMetadata(4, "halfway", None)
    assert consumer.committed([TopicPartition("oc-commit", 0), TopicPartition("nope", 0)])[
        TopicPartition("nope", 0)] is None


def test_metadata_too_large_fails_its_partition_while_the_other_commits(client: Client) -> None:
    client.create_topic("oc-large", partitions=2)
    tp0, tp1 = TopicPartition("oc-large", 0), TopicPartition("oc-large", 1)
    consumer = client.consumer(group_id="oc-g2", enable_auto_commit=False)
    with pytest.raises(errors.OffsetMetadataTooLargeError, match="oc-large-1"):
        consumer.commit({tp0: OffsetAndMetadata(3, "x" * 4096),
                         tp1: OffsetAndMetadata(5, "x" * 4097)})
    assert consumer.committed([tp0, tp1]) == {tp0: OffsetAndMetadata(3, "x" * 4096, None),
                                              tp1: None}


def test_a_group_consumer_starts_from_the_committed_offset(client: Client) -> None:
    _produce(client, "oc-start", 1, 30)
    tp = TopicPartition("oc-start", 0)
    client.admin.alter_consumer_group_offsets("oc-g3", {tp: OffsetAndMetadata(25)})
    consumer = client.consumer(group_id="oc-g3", auto_offset_reset="earliest")
    consumer.assign([tp])
    assert [r.offset for r in poll_records(consumer, 5)] == list(range(25, 30))
    fresh = client.consumer(group_id="oc-g3-other", auto_offset_reset="earliest")
    fresh.assign([tp])
    assert fresh.position(tp) == 0  # no committed offset: auto_offset_reset


def test_auto_commit_runs_inside_poll_and_on_close(client: Client) -> None:
    _produce(client, "oc-auto", 1, 12)
    tp = TopicPartition("oc-auto", 0)
    consumer = client.consumer(group_id="oc-g4", auto_offset_reset="earliest",
                               auto_commit_interval_ms=0)
    consumer.assign([tp])
    assert len(poll_records(consumer, 12)) == 12

    def committed_12() -> bool:
        consumer.poll(timeout_ms=100)  # auto-commit is due at every poll
        found = consumer.committed([tp])[tp]
        return found is not None and found.offset == 12

    wait_for(committed_12, 30, "the auto-commit of offset 12")
    consumer.seek(tp, 7)
    consumer.close()  # commits the position on the way out
    assert client.admin.list_consumer_group_offsets("oc-g4")[tp].offset == 7


def test_commit_async_reports_through_future_and_callback(client: Client) -> None:
    client.create_topic("oc-async", partitions=1)
    tp = TopicPartition("oc-async", 0)
    consumer = client.consumer(group_id="oc-g5", enable_auto_commit=False)
    seen: list[tuple[Any, BaseException | None]] = []
    future = consumer.commit_async({tp: OffsetAndMetadata(8, "a")},
                                   lambda offsets, error: seen.append((offsets, error)))
    assert future.result(timeout=30) == {tp: OffsetAndMetadata(8, "a")}
    assert consumer.committed([tp])[tp] == OffsetAndMetadata(8, "a", None)
    assert seen == [({tp: OffsetAndMetadata(8, "a")}, None)]


def test_admin_calls_list_alter_and_delete_groups(client: Client) -> None:
    client.create_topic("oc-admin", partitions=3)
    tps = [TopicPartition("oc-admin", p) for p in range(3)]
    client.admin.alter_consumer_group_offsets("oc-admin-a", {tps[0]: OffsetAndMetadata(1, "m")})
    client.admin.alter_consumer_group_offsets("oc-admin-b",
                                              {tp: OffsetAndMetadata(2) for tp in tps})
    groups = {g.group_id: g for g in client.admin.list_consumer_groups()}
    assert {"oc-admin-a", "oc-admin-b"} <= set(groups)
    assert groups["oc-admin-a"].coordinator_id == client.admin.find_coordinator("oc-admin-a")
    assert client.admin.list_consumer_group_offsets("oc-admin-a") == {
        tps[0]: OffsetAndMetadata(1, "m", None)
    }
    assert client.admin.list_consumer_group_offsets("oc-admin-b", tps[1:]) == {
        tp: OffsetAndMetadata(2, "", None) for tp in tps[1:]
    }
    client.admin.delete_consumer_groups(["oc-admin-a", "oc-admin-b"])
    listed = {g.group_id for g in client.admin.list_consumer_groups()}
    assert not {"oc-admin-a", "oc-admin-b"} & listed
    assert client.admin.list_consumer_group_offsets("oc-admin-b") == {}
    with pytest.raises(errors.GroupIdNotFoundError, match="oc-admin-a"):
        client.admin.delete_consumer_groups(["oc-admin-a"])


def tidelog(*args: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "tidelog.cli", *args],
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_groups_command(cluster: LocalCluster, client: Client) -> None:
    b = ("--bootstrap", cluster.bootstrap)
    start = int(time.time() * 1000) - 100_000
    _produce(client, "oc-cli", 2, 20, timestamp_ms=start)  # record i stamped start + i
    tp0, tp1 = TopicPartition("oc-cli", 0), TopicPartition("oc-cli", 1)
    client.admin.alter_consumer_group_offsets("oc-cli-g", {tp0: OffsetAndMetadata(5),
                                                     tp1: OffsetAndMetadata(20)})
    code, out, err = tidelog("groups", "list", *b)
    assert code == 0, err
    assert "oc-cli-g" in out.split()

    code, out, err = tidelog("groups", "describe", "oc-cli-g", *b)
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                        "CONSUMER-ID"]
    assert ["oc-cli-g", "oc-cli", "0", "5", "20", "15", "-"] in lines  # no members: no owner
    assert ["oc-cli-g", "oc-cli", "1", "20", "20", "0", "-"] in lines

    code, out, err = tidelog("groups", "reset-offsets", "oc-cli-g", "--topic", "oc-cli",
                             "--to-earliest", *b)
    assert code == 0, err
    assert "dry run" in out and ["oc-cli-g", "oc-cli", "0", "5", "0"] in [
        line.split() for line in out.splitlines()]
    assert client.admin.list_consumer_group_offsets("oc-cli-g")[tp0].offset == 5  # unchanged

    moment = datetime.fromtimestamp((start + 12) / 1000, UTC).isoformat(timespec="milliseconds")
    code, out, err = tidelog("groups", "reset-offsets", "oc-cli-g", "--topic", "oc-cli:0",
                             "--to-datetime", moment, "--execute", *b)
    assert code == 0, err
    assert client.admin.list_consumer_group_offsets("oc-cli-g")[tp0].offset == 12
    assert client.admin.list_consumer_group_offsets("oc-cli-g")[tp1].offset == 20  # not named

    for target, expected in [(("--shift-by", "-3"), 9), (("--shift-by", "100"), 20),
                             (("--to-offset", "2"), 2), (("--to-latest",), 20)]:
        code, out, err = tidelog("groups", "reset-offsets", "oc-cli-g", "--topic", "oc-cli:0",
                                 *target, "--execute", *b)
        assert code == 0, err
        assert client.admin.list_consumer_group_offsets("oc-cli-g")[tp0].offset == expected, target

    code, out, err = tidelog("groups", "reset-offsets", "oc-cli-g", "--topic", "no-such-topic",
                             "--to-earliest", *b)
    assert code == 2 and "no-such-topic" in err and "Traceback" not in err
    code, out, err = tidelog("groups", "describe", "oc-no-such-group", *b)
    assert code == 2 and "does not exist" in err and "Traceback" not in err

    code, out, err = tidelog("groups", "delete", "oc-cli-g", *b)
    assert code == 0 and "deleted group oc-cli-g" in out, err
    code, out, err = tidelog("groups", "delete", "oc-cli-g", *b)
    assert code == 2 and "GROUP_ID_NOT_FOUND" in err and "Traceback" not in err


def test_committed_offsets_survive_a_coordinator_kill(fresh_cluster: LocalCluster) -> None:
    """Commit, SIGKILL the group's coordinator, and read the commit back: the client finds the
    new coordinator by itself (the cached one fails, FindCoordinator names the new leader).
    With a 20 s retry backoff, a retry that waited for it would come 16 s after the kill at
    the earliest; the read comes long before, as the client spends its backoff asking
    FindCoordinator until a node names another coordinator."""
    with Client(fresh_cluster.bootstrap) as client, \
            Client(fresh_cluster.bootstrap, retry_backoff_ms=20_000,
                   retry_backoff_max_ms=20_000) as patient:
        client.create_topic("oc-kill", partitions=3)
        tps = [TopicPartition("oc-kill", p) for p in range(3)]
        offsets = {tp: OffsetAndMetadata(10 + tp.partition, f"m{tp.partition}", 1) for tp in tps}
        client.consumer(group_id="oc-kill-g", enable_auto_commit=False).commit(offsets)
        consumer = patient.consumer(group_id="oc-kill-g", enable_auto_commit=False)
        assert consumer.committed(tps) == offsets
        coordinator = patient.connections.coordinators.cached("oc-kill-g")
        assert coordinator is not None
        fresh_cluster.kill(coordinator)
        with ThreadPoolExecutor(1) as pool:
            committed = pool.submit(consumer.committed, tps)
            wait_for(committed.done, timeout=12,
                     what="the committed offsets, long before a 16 s backoff ends")
        assert committed.result() == offsets
        assert patient.connections.coordinators.cached("oc-kill-g") not in (None, coordinator)
        consumer.commit({tps[0]: OffsetAndMetadata(50)})
        assert client.admin.list_consumer_group_offsets("oc-kill-g")[tps[0]].offset == 50


def test_committing_after_every_message_from_threads(client: Client) -> None:
    """Several consumers of one group commit concurrently through one client (each on its own
    partitions); every last commit is what the group holds."""
    client.create_topic("oc-threads", partitions=4)
    tps = [TopicPartition("oc-threads", p) for p in range(4)]

    def commit_all(tp: TopicPartition) -> None:
        consumer = client.consumer(group_id="oc-threads-g", enable_auto_commit=False)
        for offset in range(1, 21):
            consumer.commit({tp: OffsetAndMetadata(offset)})

    threads = [threading.Thread(target=commit_all, args=(tp,)) for tp in tps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert client.admin.list_consumer_group_offsets("oc-threads-g") == {
        tp: OffsetAndMetadata(20, "", None) for tp in tps
    }
