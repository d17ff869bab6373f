"""Transactions end to end on real node processes sharing one 3-node cluster (contract §9,
kafka-mapping §8): the transactional producer against the transaction coordinator and the
partitions' producer state. A transaction over 3 partitions on 3 leaders commits or aborts
whole for read_committed consumers, with LSO < HW while it is open; a second producer of the
same transactional id fences the first (its open transaction aborted, its sends and commit
refused); a coordinator SIGKILLed between PrepareCommit and CompleteCommit is replaced by one
that writes the markers; a transaction left open past its timeout is aborted, its producer
fenced, and the LSO moves on.

The cluster's coordinator waits `MARKERS_DELAY_MS` before writing markers (a test option), so
that a transaction is observably prepared and not yet complete after commit_transaction()."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from waiting_helpers import poll_to

from tidelog import Client, TopicPartition, errors, wire
from tidelog.coordinated import TRANSACTION
from tidelog.coordinator.controller import TRANSACTION_STATE_TOPIC
from tidelog.coordinator.txn_records import TxnState, decode_key, decode_value
from tidelog.producer import Producer
from tidelog.records import decode_records, iter_batches
from tidelog.retry import Deadline
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(240)

TOPIC = "pay"
TPS = [TopicPartition(TOPIC, p) for p in range(3)]
MARKERS_DELAY_MS = 1000


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {
        "nodes": 3, "offsets_topic_num_partitions": 1,
        "transaction_state_log_num_partitions": 1,
        "transaction_abort_timed_out_transaction_cleanup_interval_ms": 200,
        "test_txn_markers_delay_ms": MARKERS_DELAY_MS,
    }


@pytest.fixture(scope="module")
def client(cluster: LocalCluster, raw: Raw) -> Iterator[Client]:
    """A client of the cluster once the topic's 3 partitions have 3 different leaders."""
    raw.create_topic(TOPIC, len(TPS), 3)
    wait_for(lambda: len(set(raw.wait_leaders(TOPIC, len(TPS)))) == len(TPS), timeout=60,
             what="a leader per node for the topic's partitions")
    with Client(cluster.bootstrap) as running:
        yield running


def offsets(client: Client, isolation: str) -> dict[TopicPartition, int]:
    found = client.list_offsets(dict.fromkeys(TPS, -1), isolation)
    return {tp: result.offset for tp, result in found.items()}


def stable(client: Client) -> dict[TopicPartition, int]:
    """The LSO of every partition once it has caught up with the HW (no transaction open)."""
    def caught_up() -> dict[TopicPartition, int] | None:
        lso, hw = offsets(client, "read_committed"), offsets(client, "read_uncommitted")
        return hw if lso == hw else None

    return wait_for(caught_up, timeout=60, what="LSO = HW on every partition")


def read(client: Client, isolation: str, start: dict[TopicPartition, int],
         end: dict[TopicPartition, int]) -> list[bytes]:
    with client.consumer(isolation_level=isolation) as consumer:
        consumer.assign(TPS)
        for tp in TPS:
            consumer.seek(tp, start[tp])
        return sorted(r.value or b"" for r in poll_to(consumer, end))


def send_all(producer: Producer, tag: bytes) -> list[bytes]:
    values = [b"%s-%d-%d" % (tag, tp.partition, n) for tp in TPS for n in range(2)]
    for value in values:
        producer.send(TOPIC, value, partition=int(value.split(b"-")[1]))
    producer.flush()
    return sorted(values)


def state_batches(cluster: LocalCluster, raw: Raw, txn_id: str) -> list[list[TxnState]]:
    """The states of `txn_id`'s records in `__transaction_state`, batch by batch."""
    leader = cluster.leader_of((TRANSACTION_STATE_TOPIC, 0))
    assert leader is not None
    data = raw.fetch_all(leader, TRANSACTION_STATE_TOPIC, 0)
    batches = []
    for pos, header in iter_batches(data):
        states = [
            decode_value(r.value).state for r in ([] if header.is_control else
                                                  decode_records(data, pos, header))
            if r.key is not None and r.value is not None and decode_key(r.key) == txn_id
        ]
        if states:
            batches.append(states)
    return batches


def add_side_by_side(client: Client, producer: Producer,
                     partitions: list[set[TopicPartition]]) -> list[object]:
    """AddPartitionsToTxn of each set of `partitions` for `producer`'s transactional id, all
    sent at once; their answers (a retriable refusal is raised, not retried)."""
    async def both() -> list[object]:
        return list(await asyncio.gather(*(
            client.connections.coordinators.call(
                "pay-1", "AddPartitionsToTxn",
                wire.add_partitions_to_txn_request("pay-1", *producer.producer_id, tps),
                wire.parse_add_partitions_to_txn, Deadline(30_000), retry=False,
                key_type=TRANSACTION,
            ) for tps in partitions
        )))

    answers: list[object] = client.connections.run(both())
    return answers


def test_commit_and_abort_are_all_or_nothing_and_a_new_producer_fences_the_old(
    cluster: LocalCluster, raw: Raw, client: Client,
) -> None:
    start = stable(client)
    producer = client.producer(transactional_id="pay-1")
    producer.init_transactions()
    producer.begin_transaction()
    committed = send_all(producer, b"c")
    # Open: read_committed stops at the transaction's first offsets, read_uncommitted does not.
    assert offsets(client, "read_committed") == start
    assert all(hw > start[tp] for tp, hw in offsets(client, "read_uncommitted").items())
    producer.commit_transaction()
    # The markers are still delayed: the next AddPartitionsToTxn requests of the id (two side
    # by side, as a producer whose sends raced its sender asks) are held at the coordinator
    # instead of being refused with CONCURRENT_TRANSACTIONS, and once the markers are written
    # one Ongoing record with both partitions goes in the batch of the CompleteCommit record.
    assert add_side_by_side(client, producer, [{TPS[0]}, {TPS[1]}]) == [
        {TPS[0]: None}, {TPS[1]: None}]
    assert state_batches(cluster, raw, "pay-1")[-2:] == [
        [TxnState.PREPARE_COMMIT], [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]]
    # With no markers under way, the second waits for the first's Ongoing record (no refusal).
    assert add_side_by_side(client, producer, [{TPS[2]}, {TPS[2]}]) == [{TPS[2]: None}] * 2
    assert state_batches(cluster, raw, "pay-1")[-1:] == [[TxnState.ONGOING]]
    # The internal topic as FindCoordinator created it: the configured partitions, RF
    # min(3, nodes), compacted (each id's newest record is its state).
    state_topic = raw.metadata(cluster.node_ids[0], TRANSACTION_STATE_TOPIC)
    assert len(state_topic.partitions) == 1 and state_topic.is_internal
    assert all(len(p.replicas) == 3 for p in state_topic.partitions)
    assert state_topic.configs["cleanup.policy"] == "compact"
    after_commit = stable(client)
    assert read(client, "read_committed", start, after_commit) == committed

    producer.begin_transaction()
    aborted = send_all(producer, b"a")
    assert offsets(client, "read_committed") == after_commit
    producer.abort_transaction()
    after_abort = stable(client)
    assert read(client, "read_committed", after_commit, after_abort) == []
    assert read(client, "read_uncommitted", after_commit, after_abort) == aborted

    # A second producer of the id fences the first, whose open transaction is aborted first.
    producer.begin_transaction()
    zombie = send_all(producer, b"z")
    newer = client.producer(transactional_id="pay-1")
    newer.init_transactions()
    with pytest.raises(errors.ProducerFencedError):
        producer.commit_transaction()
    with pytest.raises(errors.ProducerFencedError):  # fenced for good: sends are refused
        producer.send(TOPIC, b"late", partition=0)
    newer.begin_transaction()
    kept = send_all(newer, b"n")
    newer.commit_transaction()
    end = stable(client)
    assert read(client, "read_committed", after_abort, end) == kept
    assert read(client, "read_uncommitted", after_abort, end) == sorted(zombie + kept)
    producer.close()
    newer.close()


def test_a_record_aborted_before_it_was_sent_leaves_the_next_transaction_whole(
    client: Client
) -> None:
    """abort_transaction() fails the records still queued; the batch they were in must take
    no more records. Before: the next transaction's send() went into that failed batch, so
    its record failed with TransactionAbortedError although commit_transaction() returned."""
    start = stable(client)
    with client.producer(transactional_id="pay-4", linger_ms=60_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        # No partition named: send() appends to the topic's open batch (its fast path).
        dropped = producer.send(TOPIC, b"dropped")  # lingers: never sent
        producer.abort_transaction()
        with pytest.raises(errors.TransactionAbortedError):
            dropped.result(timeout=30)
        producer.begin_transaction()
        kept = producer.send(TOPIC, b"kept")
        producer.commit_transaction()
        kept.result(timeout=30)
    end = stable(client)
    assert read(client, "read_committed", start, end) == [b"kept"]


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(client: Client) -> None:
    start = stable(client)
    producer = client.producer(transactional_id="pay-3", transaction_timeout_ms=500)
    producer.init_transactions()
    producer.begin_transaction()
    aborted = send_all(producer, b"t")
    end = stable(client)  # aborted by the coordinator: the LSO moved on
    assert read(client, "read_committed", start, end) == []
    assert read(client, "read_uncommitted", start, end) == aborted
    with pytest.raises(errors.ProducerFencedError):
        producer.commit_transaction()
    producer.close()


def test_a_new_coordinator_completes_what_a_killed_one_prepared(
    cluster: LocalCluster, client: Client
) -> None:
    """Last in the module: the killed node stays down (the cluster goes on with two)."""
    start = stable(client)
    producer = client.producer(transactional_id="pay-2")
    producer.init_transactions()
    producer.begin_transaction()
    values = send_all(producer, b"k")
    leader = cluster.leader_of((TRANSACTION_STATE_TOPIC, 0))
    assert leader is not None
    producer.commit_transaction()  # PrepareCommit is durable; the markers wait
    assert offsets(client, "read_committed") == start  # prepared, not complete
    cluster.kill(leader)
    end = stable(client)  # the new coordinator wrote the markers
    assert read(client, "read_committed", start, end) == values
    producer.begin_transaction()  # the id is usable again: CompleteCommit was written
    producer.send(TOPIC, b"after", partition=0)
    producer.commit_transaction()
    producer.close()
