"""Transaction verification (Kafka's KIP-890 part 1) on real node processes sharing one 3-node
cluster: a partition leader appends a transaction's first batch on a partition only once the
producer's transaction coordinator (another node, for most partitions) says the partition was
added to that producer's ongoing transaction. A stray transactional batch (an unknown producer,
a request without a transactional id) and a late batch of a transaction already committed are
refused, and the last stable offset goes on following the high watermark; a real transaction's
batches are verified and read as before.

Before: each stray or late batch was acknowledged with error 0 and opened a transaction that
nothing ended: the partition's last stable offset stayed there for good."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from waiting_helpers import poll_to

from tidelog import Client, TopicPartition, errors, wire
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(240)

TOPIC = "verified"
TPS = [TopicPartition(TOPIC, p) for p in range(3)]
#: A leader settling after an election, or a coordinator moving or loading (the verification
#: answers NOT_ENOUGH_REPLICAS then): the batch is sent again.
_AGAIN = (errors.NotLeaderOrFollowerError.code, errors.NotEnoughReplicasError.code)


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 3, "offsets_topic_num_partitions": 1,
            "transaction_state_log_num_partitions": 1}


@pytest.fixture(scope="module")
def client(cluster: LocalCluster, raw: Raw) -> Iterator[Client]:
    raw.create_topic(TOPIC, len(TPS), 3)
    with Client(cluster.bootstrap) as running:
        yield running


def produce(
    raw: Raw, tp: TopicPartition, batch: bytes, transactional_id: str | None
) -> pb.PartitionProduceResponse:
    """The batch at the partition's leader, in a request with `transactional_id` (None: the
    field left unset), sent again while the leader or coordinator is settling."""
    request = pb.ProduceRequest.FromString(
        wire.serialized_produce_request({tp: [batch]}, -1, 10_000)
    )
    if transactional_id is not None:
        request.transactional_id = transactional_id

    def answered() -> pb.PartitionProduceResponse | None:
        leader = raw.cluster.leader_of((tp.topic, tp.partition))
        if leader is None:
            return None
        answer: pb.PartitionProduceResponse = raw.stub(leader).Produce(
            request, timeout=15
        ).topics[0].partitions[0]
        return None if answer.error_code in _AGAIN else answer

    return wait_for(answered, 60, f"an answer from the leader of {tp}")


def transactional_batch(pid: int, epoch: int, sequence: int, value: bytes) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([RecordInput(value, None, now)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=sequence, transactional=True)


def assert_stable(client: Client, raw: Raw, tp: TopicPartition) -> None:
    """A plain write goes in, and the last stable offset is the high watermark after it."""
    plain = produce(raw, tp, make_batch([b"plain"]), None)
    assert plain.error_code == 0, plain
    committed = client.list_offsets({tp: -1}, "read_committed")[tp].offset
    uncommitted = client.list_offsets({tp: -1}, "read_uncommitted")[tp].offset
    assert committed == uncommitted == plain.base_offset + 1


def commit_one(
    client: Client, txn_id: str, values: dict[TopicPartition, list[bytes]]
) -> tuple[int, int]:
    """A transaction of `values` committed by a new producer of `txn_id`, which is closed
    after; its producer id and epoch."""
    with client.producer(transactional_id=txn_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        futures = [producer.send(tp.topic, v, partition=tp.partition)
                   for tp, vs in values.items() for v in vs]
        producer.commit_transaction()
        for future in futures:
            future.result(timeout=30)
        return producer.producer_id


def test_a_stray_transactional_batch_is_refused_and_the_lso_moves_on(
    client: Client, raw: Raw
) -> None:
    # A real transaction first: its FindCoordinator creates the coordinators' topic.
    commit_one(client, "real-0", {TPS[0]: [b"r"]})
    for tp in TPS:
        stray = transactional_batch(987_654, 0, 0, b"stray")
        # No transactional id to ask a coordinator with: refused as Kafka refuses it.
        answer = produce(raw, tp, stray, None)
        assert answer.error_code == errors.TransactionalIdAuthorizationFailedError.code, answer
        # An id the coordinator does not know, or one whose producer id differs.
        answer = produce(raw, tp, stray, "nobody")
        assert answer.error_code == errors.InvalidProducerIdMappingError.code, answer
        answer = produce(raw, tp, stray, "real-0")
        assert answer.error_code == errors.InvalidProducerIdMappingError.code, answer
        assert_stable(client, raw, tp)


def test_a_real_transaction_is_verified_and_its_late_batch_refused(
    client: Client, raw: Raw
) -> None:
    sent = {tp: [b"%d-%d" % (tp.partition, i) for i in range(4)] for tp in TPS}
    starts = {tp: client.list_offsets({tp: -1}, "read_committed")[tp].offset for tp in TPS}
    pid, epoch = commit_one(client, "real-1", sent)
    with client.consumer(auto_offset_reset="earliest",
                         isolation_level="read_committed") as consumer:
        consumer.assign(TPS)
        for tp in TPS:
            consumer.seek(tp, starts[tp])
        # EndTxn is answered once the decision is durable, as in Kafka; the markers follow, so
        # the last stable offset passes the records (and their marker) a little later.
        ends = {tp: starts[tp] + len(sent[tp]) + 1 for tp in TPS}
        wait_for(lambda: all(
            client.list_offsets({tp: -1}, "read_committed")[tp].offset >= ends[tp] for tp in TPS
        ), 60, f"the last stable offsets to pass {ends}")
        got = poll_to(consumer, ends)
        for tp in TPS:
            assert [r.value for r in got if r.partition == tp.partition] == sent[tp]
    # A batch of the committed transaction that arrives late (next sequence, same epoch): the
    # coordinator knows of no transaction of the producer on the partition now.
    for tp in TPS:
        late = transactional_batch(pid, epoch, len(sent[tp]), b"late")
        answer = produce(raw, tp, late, "real-1")
        assert answer.error_code == errors.InvalidTxnStateError.code, answer
        assert "not added to an ongoing transaction" in answer.error_message
        assert_stable(client, raw, tp)
    # The id's next producer goes on as usual.
    commit_one(client, "real-1", {TPS[1]: [b"next"]})
    assert_stable(client, raw, TPS[1])
