"""Bursts of large Produce requests against a real 3-node cluster.

Each request is within every limit, but together they make the leader queue more to a follower
than one gRPC message may carry, and make each node's fsync of a round slow. The cluster must
take them without noticing: every request acknowledged, no election, followers caught up,
acknowledged records still there.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from record_helpers import values_of

from tidelog.records import MAX_MESSAGE_BYTES
from tidelog.testing import Raw, make_batch, wait_for
from tidelog.types import DEBUGGING_REPLICA_ID, LATEST_TIMESTAMP
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(240)

KiB = 1024
MiB = 1024 * KiB
MESSAGE_TOO_LARGE = 10
#: Bursts per case, one after the other: whether one burst overflows a message depends on
#: how the leader's rounds fall, so the test gives it several chances.
ROUNDS = 4


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    # No leader rebalancing: a leader change here can only be an election the burst caused.
    return {"auto_leader_rebalance_enable": False}


def _burst_values(request: int, batch_bytes: int) -> list[bytes]:
    """Records of ~64 KiB whose values name their request, together `batch_bytes`."""
    record = 64 * KiB
    count = max(1, batch_bytes // record)
    return [b"%d-%d:" % (request, i) + bytes(record - 16) for i in range(count)]


def _epochs(raw: Raw, topic: str) -> list[tuple[int, int]]:
    """(leader, leader epoch) of partition 0 as each node reports it."""
    return [
        (p.leader_id, p.leader_epoch)
        for node in raw.cluster.node_ids
        for p in raw.metadata(node, topic).partitions
    ]


def _warnings(raw: Raw) -> list[str]:
    """What the nodes logged above INFO: why a burst failed, when one does."""
    return [
        line for node in raw.cluster.node_ids for line in raw.cluster.logs(node).splitlines()
        if " WARNING " in line or " ERROR " in line
    ]


def _log_end_offsets(raw: Raw, topic: str) -> list[int]:
    return [
        raw.list_offset(node, topic, 0, LATEST_TIMESTAMP, replica_id=DEBUGGING_REPLICA_ID).offset
        for node in raw.cluster.node_ids
    ]


def _send_burst(
    raw: Raw, topic: str, leader: int, requests: int, batch_bytes: int, acks: int
) -> list[tuple[list[bytes], pb.PartitionProduceResponse]]:
    """All requests built first, then released together."""
    batches = [_burst_values(i, batch_bytes) for i in range(requests)]
    encoded = [make_batch(values) for values in batches]
    start = threading.Barrier(requests)

    def produce(batch: bytes) -> pb.PartitionProduceResponse:
        start.wait()
        return raw.produce(leader, topic, 0, batch, acks=acks, timeout_ms=30_000)

    with ThreadPoolExecutor(max_workers=requests) as pool:
        answers = list(pool.map(produce, encoded))
    return list(zip(batches, answers, strict=True))


@pytest.mark.parametrize(
    ("requests", "batch_bytes", "acks"),
    [(24, 450 * KiB, -1), (12, 900 * KiB, 1)],
    ids=["24x450KiB-acks-all", "12x900KiB-acks-1"],
)
def test_a_burst_of_large_produces_is_acknowledged_without_an_election(
    raw: Raw, requests: int, batch_bytes: int, acks: int
) -> None:
    topic = f"burst-{requests}-{acks}"
    raw.create_topic(topic, 1, 3)
    leader = raw.wait_leaders(topic, 1)[0]
    before = wait_for(lambda: len(set(_epochs(raw, topic))) == 1 and _epochs(raw, topic),
                      what="every node to agree on the leader")
    sent: list[tuple[list[bytes], pb.PartitionProduceResponse]] = []
    for _ in range(ROUNDS):
        burst = _send_burst(raw, topic, leader, requests, batch_bytes, acks)
        assert [answer.error_code for _, answer in burst] == [0] * requests, (
            [(answer.error_code, answer.error_message) for _, answer in burst],
            _warnings(raw),
        )
        sent += burst
        # Every follower keeps up: all replicas reach the same log end offset.
        total = sum(len(values) for values, _ in sent)
        expected = [total] * len(raw.cluster.node_ids)
        wait_for(lambda: _log_end_offsets(raw, topic) == expected,  # noqa: B023 (called here)
                 timeout=60, what=f"every replica of {topic} to hold {total} records")
    assert _epochs(raw, topic) == before, ("a burst caused a leader election", _warnings(raw))
    # Every acknowledged record is readable, at the offset its answer gave.
    fetched = dict(values_of(raw.fetch_all(leader, topic, 0)))
    for values, answer in sent:
        for i, value in enumerate(values):
            assert fetched.get(answer.base_offset + i) == value


def test_a_topic_for_10_mib_batches_takes_a_5_mib_one(raw: Raw) -> None:
    """The client listener takes what the topic's max.message.bytes allows (gRPC's default
    would refuse anything over 4 MiB), refuses more with MESSAGE_TOO_LARGE, and the batch
    reaches every replica, though it is larger than a node-to-node message usually is."""
    topic = "ten-mib"
    raw.create_topic(topic, 1, 3, max_message_bytes=str(10 * MiB))
    leader = raw.wait_leaders(topic, 1)[0]
    values = _burst_values(0, 5 * MiB)
    answer = raw.produce(leader, topic, 0, make_batch(values), timeout_ms=30_000)
    assert (answer.error_code, answer.error_message) == (0, "")
    too_large = raw.produce(leader, topic, 0, make_batch(_burst_values(1, 11 * MiB)))
    assert too_large.error_code == MESSAGE_TOO_LARGE, too_large
    wait_for(lambda: _log_end_offsets(raw, topic) == [len(values)] * 3, timeout=60,
             what="every replica to hold the 5 MiB batch")
    # A Fetch returns one batch whole, larger than its default size: a client reading such a
    # topic raises its receive limit, as tidelog's client does.
    with Raw(raw.cluster, [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]) as big:
        fetched = big.stub(leader).Fetch(
            _fetch_request(topic, [0], answer.base_offset), timeout=30
        )
    part = fetched.topics[0].partitions[0]
    assert [v for _, v in values_of(part.records)] == values


def test_a_fetch_without_max_bytes_fits_a_client_with_default_options(raw: Raw) -> None:
    """An unset max_bytes bounds the whole answer (records and the fields around them) by
    gRPC's default receive limit, however much the partitions hold."""
    topic = "default-fetch"
    raw.create_topic(topic, 3, 3)
    leaders = raw.wait_leaders(topic, 3)
    for p, leader in enumerate(leaders):
        for i in range(6):
            answer = raw.produce(leader, topic, p, make_batch(_burst_values(i, 900 * KiB)))
            assert answer.error_code == 0, answer
    for leader in set(leaders):
        led = [p for p, node in enumerate(leaders) if node == leader]
        # Raw's channels keep gRPC's defaults: a 4 MiB receive limit.
        response = raw.stub(leader).Fetch(_fetch_request(topic, led), timeout=30)
        assert response.ByteSize() <= 4 * MiB
        parts = response.topics[0].partitions
        assert [p.error_code for p in parts] == [0] * len(led)
        assert parts[0].records, "the first partition returns at least one batch"


def _fetch_request(topic: str, partitions: list[int], offset: int = 0) -> pb.FetchRequest:
    """A Fetch from `offset` that leaves max_bytes unset."""
    return pb.FetchRequest(topics=[pb.FetchTopic(
        name=topic,
        partitions=[pb.FetchPartition(partition=p, fetch_offset=offset) for p in partitions],
    )])
