"""Transactions as partitions see them (contract §9, kafka-mapping §8.9-8.10), on real nodes that
share one 3-node cluster: transactional batches produced straight to leaders and ended with the
node-to-node WriteTxnMarkers RPC, as a transaction coordinator would, so the partition side is
tested on its own. The last stable offset stops at an open transaction in ListOffsets, Fetch,
`cluster status` and the metrics; read_committed sees a committed transaction on all of its
partitions or on none, never an aborted record; markers are fenced by producer and coordinator
epochs; a leader killed while markers are written loses none of them."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from offsets_helpers import coordinator as offsets_coordinator
from waiting_helpers import poll_records

from tidelog import Client, TopicPartition, errors
from tidelog.commands import cluster_status
from tidelog.coordinator.controller import METADATA_TP
from tidelog.node.cluster.routing import Routing
from tidelog.node.config import NodeConfig
from tidelog.node.coordinators.txn_markers import TxnMarkers
from tidelog.node.edge.security import PeerDialer
from tidelog.records import RecordInput, build_batch, iter_batches
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.transport import Security
from tidelog.v1 import raft_pb2 as rpb
from tidelog.v1 import tidelog_pb2

pytestmark = pytest.mark.timeout(240)

TOPIC = "txn"
PARTITIONS = 3
_METHOD = "/tidelog.v1.RaftTransport/WriteTxnMarkers"


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    # The batches come with no transaction coordinator: the leaders append them unverified.
    return {"nodes": 3, "offsets_topic_num_partitions": 1,
            "transaction_partition_verification_enable": False}


@pytest.fixture(scope="module")
def raw(raw: Raw) -> Raw:
    raw.create_topic(TOPIC, PARTITIONS, 3)
    return raw


class Coordinator:
    """What a transaction coordinator does to partitions: WriteTxnMarkers to a node's
    internal listener."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._channels: dict[int, grpc.Channel] = {}

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def write(
        self, node: int, pid: int, epoch: int, commit: bool, partitions: list[int],
        coordinator_epoch: int = 0, topic: str = TOPIC,
    ) -> dict[int, int]:
        """One WriteTxnMarkers call; the error code of each partition."""
        channel = self._channels.get(node)
        if channel is None:
            channel = grpc.insecure_channel(self.cluster.internal_address_of(node))
            self._channels[node] = channel
        call = channel.unary_unary(
            _METHOD,
            request_serializer=rpb.WriteTxnMarkersRequest.SerializeToString,
            response_deserializer=rpb.WriteTxnMarkersResponse.FromString,
        )
        marker = rpb.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[rpb.WritableTxnMarkerTopic(name=topic, partition_indexes=partitions)],
        )
        response = call(rpb.WriteTxnMarkersRequest(markers=[marker]), timeout=15)
        [result] = response.markers
        assert result.producer_id == pid
        return {p.partition_index: p.error_code for t in result.topics for p in t.partitions}

    def end(self, pid: int, epoch: int, commit: bool, partitions: list[int],
            coordinator_epoch: int = 0, topic: str = TOPIC) -> None:
        """Markers on every partition, each at its leader, retried as Kafka's coordinator
        retries (NOT_LEADER_OR_FOLLOWER, timeouts, a node that is down) until all are
        written."""
        pending = set(partitions)

        def written() -> bool:
            for p in sorted(pending):
                leader = self.cluster.leader_of((topic, p))
                if leader is None or not self.cluster.is_running(leader):
                    continue
                try:
                    code = self.write(leader, pid, epoch, commit, [p], coordinator_epoch,
                                      topic)[p]
                except grpc.RpcError:
                    continue
                if code == 0:
                    pending.discard(p)
                else:
                    assert code in (6, 7, 19, 3), code
            return not pending

        wait_for(written, 60, f"markers of producer {pid} on {partitions}")


def send_markers(
    cluster: LocalCluster, raw: Raw, *markers: rpb.WritableTxnMarker
) -> list[dict[TopicPartition, int]]:
    """`markers` sent together as a node's transaction coordinator sends them
    (`TxnMarkers.send`, one call a transaction, all started in one turn of the loop as the
    markers tasks of one coordinator write are), from a node of this process (id 99, no
    partitions) whose routing learns the leaders from Metadata while it sends, as a node
    learns them from its peers' announcements."""
    config = NodeConfig(
        node_id=99, listen="127.0.0.1:0", data_dir=cluster.data_dir / "markers-sender",
        peers={n: cluster.internal_address_of(n) for n in cluster.node_ids},
        client_addresses={n: cluster.address_of(n) for n in cluster.node_ids},
    )
    routing = Routing(config, {}, METADATA_TP)

    def learn() -> None:
        for topic in {t.name for marker in markers for t in marker.topics}:
            for p in raw.metadata(cluster.node_ids[0], topic).partitions:
                routing.learn(p.leader_id, [rpb.LeaderAnnouncement(
                    group=rpb.GroupId(topic=topic, partition=p.partition),
                    epoch=p.leader_epoch,
                )])

    async def send() -> list[dict[TopicPartition, int]]:
        loop = asyncio.get_running_loop()

        async def follow_leaders() -> None:
            while True:
                await loop.run_in_executor(None, learn)
                await asyncio.sleep(0.2)

        learn()
        follower = asyncio.create_task(follow_leaders())
        sender = TxnMarkers(config, {}, routing, PeerDialer(config))
        try:
            return list(await asyncio.gather(*(sender.send(m, 30) for m in markers)))
        finally:
            follower.cancel()
            await sender.close()

    return asyncio.run(send())


@pytest.fixture(scope="module")
def coordinator(cluster: LocalCluster) -> Iterator[Coordinator]:
    c = Coordinator(cluster)
    yield c
    c.close()


_SEQUENCES: dict[tuple[int, int], int] = {}
#: A group coordinator that is moving, loading or busy (a loaded machine): ask again.
_COORDINATOR_MOVING = (
    errors.CoordinatorLoadInProgressError.code, errors.CoordinatorNotAvailableError.code,
    errors.NotCoordinatorError.code,
)
#: A leader that moved or is settling its log after an election: ask again.
_SETTLING = (errors.NotLeaderOrFollowerError.code, errors.NotEnoughReplicasError.code)


def produce(raw: Raw, partition: int, values: list[bytes], pid: int = -1, epoch: int = 0,
            transactional: bool = True) -> tuple[int, int]:
    """One batch at the partition's leader; (error code, base offset)."""
    seq = _SEQUENCES.get((pid, partition), 0) if pid >= 0 else -1
    now = int(time.time() * 1000)
    batch = build_batch(
        [RecordInput(v, None, now) for v in values], producer_id=pid,
        producer_epoch=epoch if pid >= 0 else -1, base_sequence=seq,
        transactional=transactional,
    )

    def answered() -> tidelog_pb2.PartitionProduceResponse | None:
        leader = raw.cluster.leader_of((TOPIC, partition))
        if leader is None:
            return None
        answer = raw.produce(leader, TOPIC, partition, batch)
        return None if answer.error_code in _SETTLING else answer

    answer = wait_for(answered, 30, f"an answer from the leader of {partition}")
    if answer.error_code == 0 and pid >= 0:
        _SEQUENCES[(pid, partition)] = seq + len(values)
    return answer.error_code, answer.base_offset


def offsets(raw: Raw, partition: int) -> tuple[int, int]:
    """(read_committed latest, read_uncommitted latest) = (LSO, HW) from ListOffsets."""
    leader = wait_for(lambda: raw.cluster.leader_of((TOPIC, partition)), 30, "a leader")
    committed = raw.list_offset(leader, TOPIC, partition, -1, isolation=1)
    uncommitted = raw.list_offset(leader, TOPIC, partition, -1, isolation=0)
    assert committed.error_code == uncommitted.error_code == 0
    return committed.offset, uncommitted.offset


def committed_values(cluster: LocalCluster, partition: int, until: int) -> list[bytes | None]:
    """What a read_committed consumer reads of the partition below `until` (an LSO)."""
    with Client(cluster.bootstrap) as client:
        consumer = client.consumer(auto_offset_reset="earliest", isolation_level="read_committed")
        consumer.assign([TopicPartition(TOPIC, partition)])
        got: list[bytes | None] = []

        def done() -> bool:
            got.extend(r.value for r in consumer.poll(timeout_ms=200))
            return consumer.position(TopicPartition(TOPIC, partition)) >= until

        wait_for(done, 30, f"read_committed up to {until}")
        return got


def test_lso_stops_at_open_transactions_and_markers_decide_them(
    cluster: LocalCluster, raw: Raw, coordinator: Coordinator
) -> None:
    all_parts = list(range(PARTITIONS))
    for p in all_parts:  # some data before, from a plain producer
        assert produce(raw, p, [b"plain-%d" % p], transactional=False)[0] == 0
    # A transaction over three partitions (three leaders' worth of partitions), left open.
    firsts = {}
    for p in all_parts:
        code, base = produce(raw, p, [b"c1-%d-a" % p, b"c1-%d-b" % p], pid=1000)
        assert code == 0
        firsts[p] = base
    for p in all_parts:
        assert produce(raw, p, [b"after-%d" % p], transactional=False)[0] == 0
        lso, hw = offsets(raw, p)
        assert lso == firsts[p] < hw, (p, lso, hw)
        leader = raw.cluster.leader_of((TOPIC, p))
        assert leader is not None
        fetched = raw.fetch(leader, TOPIC, p, 0, isolation=1)
        assert fetched.last_stable_offset == firsts[p] < fetched.high_watermark
        assert all(h.last_offset < firsts[p] for _, h in iter_batches(fetched.records))
        uncommitted = raw.fetch(leader, TOPIC, p, 0, isolation=0)
        assert any(h.producer_id == 1000 for _, h in iter_batches(uncommitted.records))
    # The producer cannot leave its transaction with a plain batch (INVALID_TXN_STATE).
    code = produce(raw, 0, [b"x"], pid=1000, transactional=False)[0]
    assert code == errors.InvalidTxnStateError.code

    # cluster status shows LSO < HW on every replica (followers too, once they hold it
    # all), and the leader's metrics too.
    def status_shows_open() -> bool:
        state = cluster_status.gather(cluster.bootstrap, Security())
        assert state is not None
        return all(
            r.offsets is not None and r.offsets[2] <= firsts[x.partition] < r.offsets[1]
            for x in state.partitions if x.topic == TOPIC for r in x.states
        )

    wait_for(status_shows_open, 30, "every replica's LSO below its HW")
    leader0 = cluster.leader_of((TOPIC, 0))
    assert leader0 is not None
    with urllib.request.urlopen(f"http://{cluster.metrics_address(leader0)}/metrics") as page:
        text = page.read().decode()
    labels = f'{{partition="0",topic="{TOPIC}"}}'
    gauges = {name: float(line.split()[-1]) for line in text.splitlines()
              for name in ("high_watermark", "last_stable_offset")
              if line.startswith(f"tidelog_partition_{name}{labels}")}
    assert gauges["last_stable_offset"] == firsts[0] < gauges["high_watermark"], gauges

    # A non-leader refuses the marker; the coordinator's sender (TxnMarkers.send) writes it
    # (commit) at each leader, which answers once it is committed.
    other = next(n for n in cluster.node_ids if n != leader0)
    assert coordinator.write(other, 1000, 0, True, [0], 5) == {0: 6}
    (codes,) = send_markers(cluster, raw, rpb.WritableTxnMarker(
        producer_id=1000, producer_epoch=0, transaction_result=True, coordinator_epoch=5,
        topics=[rpb.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=all_parts)],
    ))
    assert codes == {TopicPartition(TOPIC, p): 0 for p in all_parts}, codes
    for p in all_parts:
        lso, hw = offsets(raw, p)
        assert lso == hw, (p, lso, hw)
        got = committed_values(cluster, p, hw)
        assert got == [b"plain-%d" % p, b"c1-%d-a" % p, b"c1-%d-b" % p, b"after-%d" % p]

    # Fencing: an older coordinator epoch, then an older producer epoch.
    assert coordinator.write(cluster.leader_of((TOPIC, 0)) or 0, 1000, 0, True, [0], 4) == {0: 52}
    _SEQUENCES[(1000, 1)] = 0  # a new epoch starts at sequence 0
    assert produce(raw, 1, [b"e1"], pid=1000, epoch=1)[0] == 0
    assert coordinator.write(cluster.leader_of((TOPIC, 1)) or 0, 1000, 0, False, [1], 5) == {1: 47}
    coordinator.end(1000, 1, False, [1], coordinator_epoch=5)

    # An aborted transaction, interleaved with a committed one of another producer.
    for p in all_parts:
        assert produce(raw, p, [b"abort-%d" % p], pid=2000)[0] == 0
        assert produce(raw, p, [b"keep-%d" % p], pid=3000)[0] == 0
        assert produce(raw, p, [b"abort2-%d" % p], pid=2000)[0] == 0
    coordinator.end(2000, 0, False, all_parts)
    for p in all_parts:
        lso, hw = offsets(raw, p)
        assert lso < hw  # 3000's transaction is still open
    coordinator.end(3000, 0, True, all_parts)
    for p in all_parts:
        lso, hw = offsets(raw, p)
        assert lso == hw
        leader = cluster.leader_of((TOPIC, p))
        assert leader is not None
        fetched = raw.fetch(leader, TOPIC, p, 0, isolation=1)
        aborted = [2000] if p != 1 else [1000, 2000]  # 1000's epoch 1 aborted on 1
        assert [a.producer_id for a in fetched.aborted_transactions] == aborted
        got = committed_values(cluster, p, hw)
        assert not any(v is not None and v.startswith(b"abort") for v in got), got
        assert b"keep-%d" % p in got
    with Client(cluster.bootstrap) as client:  # read_uncommitted sees everything
        consumer = client.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition(TOPIC, 2)])
        values = [r.value for r in poll_records(consumer, 7)]
        assert b"abort-2" in values and b"abort2-2" in values


def marker_requests(cluster: LocalCluster) -> dict[int, float]:
    """WriteTxnMarkers requests each node has answered (its metrics)."""
    counts = {}
    for node in cluster.node_ids:
        with urllib.request.urlopen(f"http://{cluster.metrics_address(node)}/metrics") as page:
            counts[node] = sum(
                float(line.split()[-1]) for line in page.read().decode().splitlines()
                if line.startswith("tidelog_requests_total{") and 'rpc="WriteTxnMarkers"' in line
            )
    return counts


def test_markers_of_transactions_ending_together_share_one_request_a_leader(
    cluster: LocalCluster, raw: Raw
) -> None:
    """A coordinator write commits the Prepare records of many producers at once and starts
    their markers together: each leader gets them in one WriteTxnMarkers (Kafka's channel
    manager drains a broker's queue into one request), and each transaction still gets its own
    partitions' answers, a fenced one among them included."""
    pids = [5000, 5001, 5002, 5003]
    all_parts = list(range(PARTITIONS))
    for pid in pids:
        for p in all_parts:
            assert produce(raw, p, [b"together-%d-%d" % (pid, p)], pid=pid)[0] == 0
    _SEQUENCES.update({(5003, p): 0 for p in all_parts})  # 5003 moves on to epoch 1
    for p in all_parts:
        assert produce(raw, p, [b"together-5003-e1-%d" % p], pid=5003, epoch=1)[0] == 0
    leaders = {cluster.leader_of((TOPIC, p)) for p in all_parts}
    before = marker_requests(cluster)
    # 5000 and 5002 commit, 5001 aborts, 5003's epoch-0 marker is fenced (47) everywhere.
    results = send_markers(cluster, raw, *(rpb.WritableTxnMarker(
        producer_id=pid, producer_epoch=0, transaction_result=pid != 5001,
        coordinator_epoch=5,
        topics=[rpb.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=all_parts)],
    ) for pid in pids))
    requests = {n: c - before[n] for n, c in marker_requests(cluster).items()}
    expected = [0, 0, 0, errors.InvalidProducerEpochError.code]
    assert results == [{TopicPartition(TOPIC, p): code for p in all_parts} for code in expected]
    # One request each leader (a leader that moved meanwhile would take a retry: checked to
    # have stayed), where one a transaction made it len(pids).
    if leaders == {cluster.leader_of((TOPIC, p)) for p in all_parts}:
        assert requests == {n: float(n in leaders) for n in cluster.node_ids}, requests
    coordinator_end = rpb.WritableTxnMarker(
        producer_id=5003, producer_epoch=1, transaction_result=False, coordinator_epoch=5,
        topics=[rpb.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=all_parts)],
    )
    assert send_markers(cluster, raw, coordinator_end) == [
        {TopicPartition(TOPIC, p): 0 for p in all_parts}]
    for p in all_parts:
        lso, hw = offsets(raw, p)
        assert lso == hw, (p, lso, hw)
        got = committed_values(cluster, p, hw)
        assert b"together-5000-%d" % p in got and b"together-5002-%d" % p in got
        assert not any(v is not None and v.startswith((b"together-5001", b"together-5003"))
                       for v in got), got


def test_txn_offset_commit_is_pending_until_its_commit_marker(
    cluster: LocalCluster, raw: Raw, coordinator: Coordinator
) -> None:
    """KIP-447 on the group coordinator: offsets committed in a transaction are invisible to
    OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable) until the producer's COMMIT marker
    lands on the group's __consumer_offsets partition; an ABORT drops them."""
    group = "txn-group"
    node = offsets_coordinator(raw, group, cluster.node_ids)  # creates __consumer_offsets

    def txn_commit(pid: int, offset: int, epoch: int = 0) -> int:
        request = tidelog_pb2.TxnOffsetCommitRequest(
            transactional_id=f"t{pid}", group_id=group, producer_id=pid, producer_epoch=epoch,
            topics=[tidelog_pb2.OffsetCommitTopic(name=TOPIC, partitions=[
                tidelog_pb2.OffsetCommitPartition(partition=0, committed_offset=offset)])],
        )

        def answered() -> tuple[int] | None:
            answer = raw.stub(cluster.node_ids[0]).TxnOffsetCommit(request, timeout=30)
            [code] = [p.error_code for t in answer.topics for p in t.partitions]
            return None if code in _COORDINATOR_MOVING else (code,)

        return wait_for(answered, 60, "a TxnOffsetCommit answer")[0]

    def committed(require_stable: bool) -> tuple[int, int]:
        request = tidelog_pb2.OffsetFetchRequest(
            group_id=group, require_stable=require_stable,
            topics=[tidelog_pb2.OffsetFetchTopic(name=TOPIC, partitions=[0])],
        )

        def answered() -> tidelog_pb2.OffsetFetchResponse | None:
            answer = raw.stub(cluster.node_ids[0]).OffsetFetch(request, timeout=30)
            return None if answer.error_code in _COORDINATOR_MOVING else answer

        answer = wait_for(answered, 60, "an OffsetFetch answer")
        assert answer.error_code == 0, answer
        [part] = [p for t in answer.topics for p in t.partitions]
        return part.error_code, part.committed_offset

    # An epoch no batch header can hold is refused (before, building the batch failed in the
    # coordinator's Ready loop, which ended the node).
    assert txn_commit(6000, 1, epoch=40_000) == errors.InvalidRequestError.code
    assert coordinator.write(node, 6000, 40_000, True, [0], 0, "__consumer_offsets") == {
        0: errors.InvalidRequestError.code
    }
    assert txn_commit(6000, 3) == 0  # through node 1, forwarded to the coordinator
    assert committed(require_stable=True) == (errors.UnstableOffsetCommitError.code, -1)
    assert committed(require_stable=False) == (0, -1)
    coordinator.end(6000, 0, True, [0], topic="__consumer_offsets")
    assert committed(require_stable=True) == (0, 3)
    assert txn_commit(6001, 9) == 0
    coordinator.end(6001, 0, False, [0], topic="__consumer_offsets")
    assert committed(require_stable=True) == (0, 3)


def test_a_leader_killed_while_markers_are_written_loses_none(
    cluster: LocalCluster, raw: Raw, coordinator: Coordinator
) -> None:
    """The new leader, a follower until then, knows the open transaction from its own log
    (its producer state follows every append), so the retried marker ends it there. (Last in
    the module: the killed node stays down.)"""
    all_parts = list(range(PARTITIONS))
    expected: dict[int, list[bytes]] = {}
    for p in all_parts:
        values = [b"k-%d-%d" % (p, i) for i in range(3)]
        assert produce(raw, p, values, pid=4000)[0] == 0
        expected[p] = values
    victim = cluster.leader_of((TOPIC, 0))
    assert victim is not None
    writer = threading.Thread(target=coordinator.end, args=(4000, 0, True, all_parts))
    writer.start()
    cluster.kill(victim)
    writer.join(90)
    assert not writer.is_alive()
    for p in all_parts:
        lso, hw = offsets(raw, p)
        assert lso == hw, (p, lso, hw)
        got = committed_values(cluster, p, hw)
        assert got[-3:] == expected[p], got
