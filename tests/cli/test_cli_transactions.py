"""`tidelog transactions` (Kafka's KIP-664 tool) against real nodes: a hanging transaction, left
by a transactional batch the leader appended without verifying it (as data written before
leaders verified transactions, here with transaction.partition.verification.enable off), is
found by ``find-hanging`` and ended by ``abort``, after which the last stable offset follows
the high watermark again; ``list`` and ``describe`` show a real producer's transaction at its
coordinator, and ``find-hanging`` does not take it for a hanging one."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tidelog import Client, TopicPartition
from tidelog.cli import main
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for

pytestmark = pytest.mark.timeout(180)

TOPIC = "hung"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 1, "offsets_topic_num_partitions": 1,
            "transaction_state_log_num_partitions": 1,
            "transaction_partition_verification_enable": False}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster, raw: Raw) -> Iterator[Client]:
    raw.create_topic(TOPIC, 1, 1)
    with Client(cluster.bootstrap) as running:
        yield running


def tidelog(cluster: LocalCluster, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["transactions", "--bootstrap", cluster.bootstrap, *argv]) == 0
    return capsys.readouterr().out


def stable(client: Client) -> tuple[int, int]:
    return (client.list_offsets({TP: -1}, "read_committed")[TP].offset,
            client.list_offsets({TP: -1}, "read_uncommitted")[TP].offset)


def test_describe_before_any_transaction_answers_not_found(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """First in the module: no transaction has begun, so the transaction state topic does not
    exist. Before: COORDINATOR_NOT_AVAILABLE was retried until the 30 s request timeout."""
    capsys.readouterr()
    code = main(["transactions", "--bootstrap", cluster.bootstrap, "describe",
                 "--transactional-id", "nobody"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "TRANSACTIONAL_ID_NOT_FOUND" in err and "REQUEST_TIMED_OUT" not in err, err


def test_a_hanging_transaction_is_found_and_aborted(
    cluster: LocalCluster, raw: Raw, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    node = cluster.node_ids[0]
    # A real transaction left open: its coordinator knows it, so it is not hanging.
    producer = client.producer(transactional_id="alive")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"open", partition=0).result(timeout=30)
    listed = tidelog(cluster, capsys, "list")
    assert "alive" in listed and "Ongoing" in listed
    described = tidelog(cluster, capsys, "describe", "--transactional-id", "alive")
    assert "Ongoing" in described and f"{TOPIC}-0" in described
    producer.abort_transaction()
    producer.close()
    # A stray transactional batch, appended unverified: a transaction nothing will end.
    stray = build_batch([RecordInput(b"stray", None, int(time.time() * 1000))],
                        producer_id=424_242, producer_epoch=3, base_sequence=0,
                        transactional=True)
    answer = raw.produce(node, TOPIC, 0, stray)
    assert answer.error_code == 0, answer
    after = raw.produce(node, TOPIC, 0, make_batch([b"after"]))
    assert after.error_code == 0
    lso, hw = stable(client)
    assert lso == answer.base_offset < hw
    hanging = tidelog(cluster, capsys, "find-hanging", "--topic", TOPIC)
    rows = [line.split() for line in hanging.splitlines()[1:]]
    assert [row[:6] for row in rows] == [[TOPIC, "0", "424242", "3", "-1",
                                          str(answer.base_offset)]], hanging
    assert "no coordinator's transaction has it" in hanging
    by_node = tidelog(cluster, capsys, "find-hanging", "--node", str(node))
    assert [line.split()[:6] for line in by_node.splitlines()[1:]] == [row[:6] for row in rows]
    out = tidelog(cluster, capsys, "abort", "--topic", TOPIC, "--partition", "0",
                  "--producer-id", "424242")
    assert "aborted the transaction of producer 424242 epoch 3" in out
    wait_for(lambda: stable(client)[0] == stable(client)[1], 30, "the LSO to reach the HW")
    assert len(tidelog(cluster, capsys, "find-hanging", "--topic", TOPIC).splitlines()) == 1
