"""The client library against a real 3-node cluster (one per module): admin, produce and
consume, offset lookups under both isolation levels, errors, and leader kills in the middle of
loops of list_offsets, send and poll that no caller may notice."""

from __future__ import annotations

import contextlib
import itertools
import pickle
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from waiting_helpers import poll_records

from tidelog import Client, IsolationLevel, OffsetSpec, TopicPartition, errors
from tidelog.hashing import partition_for_key
from tidelog.records import ATTR_COMPRESSION, HEADER_SIZE, iter_batches, record_size
from tidelog.testing import LocalCluster, Raw, wait_for
from tidelog.types import DEBUGGING_REPLICA_ID, ConsumerRecord

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.bootstrap, request_timeout_ms=30_000) as c:
        yield c


def test_admin_create_describe_delete(client: Client, cluster: LocalCluster) -> None:
    client.create_topic(
        "admin-t", partitions=2, replication_factor=3, config={"segment.bytes": 1 << 20}
    )
    info = client.describe_topics(["admin-t"])["admin-t"]
    assert len(info.partitions) == 2 and all(p.leader in cluster.node_ids for p in info.partitions)
    assert info.configs.get("segment.bytes") == str(1 << 20)
    assert "admin-t" in client.admin.list_topics()
    with pytest.raises(errors.TopicAlreadyExistsError, match="admin-t"):
        client.create_topic("admin-t", partitions=2, replication_factor=3)
    with pytest.raises(errors.InvalidReplicationFactorError):
        client.create_topic("admin-bad", partitions=1, replication_factor=5)
    described = client.admin.describe_cluster()
    assert sorted(described.nodes) == cluster.node_ids
    assert described.controller_id in cluster.node_ids
    client.admin.delete_topic("admin-t")
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        client.describe_topics(["admin-t"])


def test_produce_and_consume_keep_keys_headers_timestamps_and_order(client: Client) -> None:
    client.create_topic("roundtrip", partitions=3, replication_factor=3)
    base_ts = int(time.time() * 1000)
    with client.producer(linger_ms=2, batch_size=2048) as producer:
        futures = [
            producer.send(
                "roundtrip", b"v%d" % i, key=b"k%d" % (i % 11), timestamp_ms=base_ts + i,
                headers=[("h", b"%d" % i), ("none", None)],
            )
            for i in range(600)
        ]
        null_keyed = [producer.send("roundtrip", b"n%d" % i) for i in range(50)]
        producer.flush()
    metas = [f.result() for f in futures]
    for i, meta in enumerate(metas):
        assert meta.partition == partition_for_key(b"k%d" % (i % 11), 3)
        assert meta.timestamp == base_ts + i and meta.offset >= 0
    assert all(f.result().offset >= 0 for f in null_keyed)
    consumer = client.consumer()
    tps = [TopicPartition("roundtrip", p) for p in range(3)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    records = poll_records(consumer, 650)
    assert len(records) == 650
    by_value = {r.value: r for r in records}
    for i, meta in enumerate(metas):
        record = by_value[b"v%d" % i]
        assert (record.partition, record.offset, record.timestamp) == (
            meta.partition, meta.offset, meta.timestamp
        )
        assert record.key == b"k%d" % (i % 11)
        assert record.headers == (("h", b"%d" % i), ("none", None))
    for tp in tps:
        offsets = [r.offset for r in records if r.partition == tp.partition]
        assert offsets == sorted(offsets)
        assert consumer.position(tp) == client.list_offsets({tp: OffsetSpec.latest()})[tp].offset


def test_send_takes_any_bytes_like_and_rejects_the_rest(client: Client) -> None:
    """send() has a fast path for keyless bytes values; the other forms take the general one
    and must come back the same."""
    client.create_topic("bytes-like", partitions=2, replication_factor=3)
    with client.producer(linger_ms=1, max_block_ms=2000) as producer:
        sent = [
            producer.send("bytes-like", bytearray(b"ba"), key=memoryview(b"mk")),
            producer.send("bytes-like", memoryview(b"mv"), partition=1),
            producer.send("bytes-like", b"plain", partition=0),
            producer.send("bytes-like", None, key=b"tombstone"),
            producer.send("bytes-like", b"sticky"),
        ]
        with pytest.raises(errors.ConfigurationError, match="value must be bytes"):
            producer.send("bytes-like", "text")  # type: ignore[arg-type]
        with pytest.raises(errors.ConfigurationError, match="key must be bytes"):
            producer.send("bytes-like", b"v", key=7)  # type: ignore[arg-type]
        # A partition beyond the known count is waited for (another client may have just
        # added it), up to max_block_ms.
        with pytest.raises(errors.RequestTimedOutError, match="partition 2 of topic 'bytes-like'"):
            producer.send("bytes-like", b"v", partition=2)
        producer.flush()
        # The producer still works after the refusals (no lock left held).
        assert producer.send("bytes-like", b"after").result(timeout=30).offset >= 0
    metas = [f.result() for f in sent]
    assert metas[1].partition == 1 and metas[2].partition == 0
    consumer = client.consumer()
    consumer.assign([TopicPartition("bytes-like", p) for p in range(2)])
    consumer.seek_to_beginning()
    got = {(r.key, r.value) for r in poll_records(consumer, 6)}
    assert got == {(b"mk", b"ba"), (None, b"mv"), (None, b"plain"), (b"tombstone", None),
                   (None, b"sticky"), (None, b"after")}


def test_non_idempotent_acks_1_producer(client: Client) -> None:
    client.create_topic("acks1", partitions=1, replication_factor=3)
    with client.producer(acks=1) as producer:
        assert producer.producer_id == (-1, -1)
        offsets = [producer.send("acks1", b"x%d" % i).result(timeout=30).offset for i in range(20)]
    assert offsets == list(range(20))


def test_offset_lookups_and_consumer_positions(client: Client) -> None:
    client.create_topic("lookups", partitions=2, replication_factor=3)
    base_ts = int(time.time() * 1000) - 60_000
    with client.producer() as producer:
        for i in range(100):
            producer.send("lookups", b"%d" % i, partition=i % 2, timestamp_ms=base_ts + i * 10)
    tps = [TopicPartition("lookups", p) for p in range(2)]
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = client.consumer(isolation_level=isolation)
        level = IsolationLevel.parse(isolation)
        earliest = client.list_offsets(dict.fromkeys(tps, OffsetSpec.earliest()), level)
        latest = client.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()), level)
        assert consumer.beginning_offsets(tps) == {tp: r.offset for tp, r in earliest.items()}
        assert consumer.end_offsets(tps) == {tp: r.offset for tp, r in latest.items()}
        assert consumer.end_offsets(tps) == dict.fromkeys(tps, 50)
        found = consumer.offsets_for_times({tps[0]: base_ts + 15, tps[1]: base_ts + 10**9})
        assert found[tps[0]] is not None
        assert (found[tps[0]].offset, found[tps[0]].timestamp) == (1, base_ts + 20)
        assert found[tps[1]] is None
    assert client.admin.legacy_offsets_before(tps[0], -1, 10) == [50, 0]
    # A debug lookup (replica_id -2) is bounded by the log end offset; all 50 are written.
    debug = client.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()), replica_id=-2)
    assert {tp: r.offset for tp, r in debug.items()} == dict.fromkeys(tps, 50)
    consumer = client.consumer(auto_offset_reset="earliest")
    consumer.assign(tps[:1])
    assert consumer.position(tps[0]) == 0
    consumer.seek(tps[0], 40)
    assert [r.offset for r in poll_records(consumer, 10)] == list(range(40, 50))
    consumer.seek_to_end(tps[0])
    assert consumer.position(tps[0]) == 50
    latest_consumer = client.consumer()
    latest_consumer.assign(tps[1:])
    assert latest_consumer.poll(timeout_ms=200) == []
    assert latest_consumer.position(tps[1]) == 50


def test_errors_name_their_partition_and_raise_at_once(client: Client) -> None:
    client.create_topic("errs", partitions=1, replication_factor=3)
    tp = TopicPartition("errs", 0)
    with pytest.raises(errors.UnsupportedVersionError, match="errs-0"):
        client.list_offsets({tp: OffsetSpec(-7)})
    consumer = client.consumer(auto_offset_reset="none")
    consumer.assign([tp])
    with pytest.raises(errors.OffsetOutOfRangeError, match="errs-0"):
        consumer.poll(timeout_ms=100)
    consumer.seek(tp, 1000)
    with pytest.raises(errors.OffsetOutOfRangeError, match="errs-0"):
        consumer.poll(timeout_ms=1000)
    with pytest.raises(errors.InvalidGroupIdError, match="group_id"):
        consumer.commit()  # a consumer without a group has nowhere to commit
    with pytest.raises(errors.InvalidGroupIdError, match="group_id"):
        consumer.committed([tp])
    with pytest.raises(errors.RequestTimedOutError, match="no-such-topic"):
        client.list_offsets({TopicPartition("no-such-topic", 0): -1}, timeout_ms=500)


def test_a_pickled_client_works_on_its_own_connections(client: Client) -> None:
    client.create_topic("pickled", partitions=1, replication_factor=3)
    with pickle.loads(pickle.dumps(client)) as copy:
        assert copy.config == client.config
        tp = TopicPartition("pickled", 0)
        assert copy.list_offsets({tp: OffsetSpec.latest()})[tp].offset == 0


def test_leader_kills_during_lookups_sends_and_polls_reach_no_caller(
    client: Client, cluster: LocalCluster
) -> None:
    """Every call in the loops succeeds across two elections; refreshes stay bounded."""
    topic = "failover"
    client.create_topic(topic, partitions=3, replication_factor=3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer = client.consumer(auto_offset_reset="earliest")
    consumer.assign(tps)
    refreshes_before = client.metadata_refreshes
    producer = client.producer(linger_ms=1)
    sent = received = 0
    seen: list[ConsumerRecord] = []
    for victim_partition in (0, 1):
        victim = cluster.leader_of((topic, victim_partition))
        assert victim is not None
        cluster.kill(victim)
        epoch_before = client.metadata.leader_epoch(tps[victim_partition])
        rounds_after_election = 0
        while rounds_after_election < 5:
            offsets = client.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()))
            assert all(r.offset >= 0 for r in offsets.values())
            futures = [producer.send(topic, b"%d" % (sent + i), partition=i % 3) for i in range(30)]
            producer.flush()
            assert all(f.result().offset >= 0 for f in futures)
            sent += len(futures)
            polled = consumer.poll(timeout_ms=300)
            seen += polled
            received += len(polled)
            if client.metadata.leader_epoch(tps[victim_partition]) > epoch_before:
                rounds_after_election += 1
        cluster.restart(victim)
    producer.close()
    seen += poll_records(consumer, sent - received)
    assert sorted(int(r.value or b"") for r in seen) == list(range(sent))
    refreshes = client.metadata_refreshes - refreshes_before
    assert 1 <= refreshes <= 100, refreshes


def test_a_paused_leader_and_controller_stall_neither_a_lookup_nor_a_new_producer(
    cluster: LocalCluster,
) -> None:
    """SIGSTOP keeps a node's sockets open, so its calls fail only by timing out. The paused
    node is the controller and leads the partition; a lookup with a 60 s timeout and a new
    idempotent producer (its InitProducerId goes to the paused controller, its Produce to
    the paused leader) both complete long before their first attempt's slice of 15 s would
    end: the client's HTTP/2 pings go unanswered, the connection fails, the node is suspect,
    and the retries reach the nodes the others elected. Without pings, both waited out the
    slice (and a Produce its request_timeout_ms plus slack)."""
    with Client(cluster.bootstrap, request_timeout_ms=60_000) as client:
        client.create_topic("paused", partitions=3, replication_factor=3)
        controller = client.admin.describe_cluster().controller_id

        def led_by_controller() -> TopicPartition | None:
            return next((TopicPartition("paused", p) for p in range(3)
                         if cluster.leader_of(("paused", p)) == controller), None)

        tp = wait_for(led_by_controller, timeout=60, what="a partition led by the controller")
        assert client.list_offsets({tp: OffsetSpec.latest()})[tp].offset == 0
        assert client.metadata.leader_for(tp) == controller
        cluster.pause(controller)
        try:
            with client.producer(idempotent=True) as producer, ThreadPoolExecutor(2) as pool:
                lookup = pool.submit(client.list_offsets, {tp: OffsetSpec.latest()},
                                     timeout_ms=60_000)
                sent = producer.send("paused", b"after", partition=tp.partition)
                wait_for(lambda: lookup.done() and sent.done(), timeout=12,
                         what="the lookup and the send, well within a 15 s attempt")
                # 0, or 1 once the new leader's leader-change marker is committed.
                assert lookup.result()[tp].offset in (0, 1)
                assert sent.result().offset >= 0
                assert client.metadata.leader_for(tp) not in (None, controller)
        finally:
            cluster.resume(controller)


def test_after_a_leader_dies_retries_follow_the_election_not_the_backoff(
    client: Client, cluster: LocalCluster,
) -> None:
    """With a 20 s retry backoff, a retry that waited for it would come 16 s after the kill at
    the earliest. The producer's send, a consumer's poll (of a record committed before the
    kill) and a lookup all complete long before: each spends its backoff polling the nodes'
    metadata and goes as soon as one names a leader other than the one that died."""
    # Created by a client with the usual backoff: the creation waits for a leader.
    client.create_topic("watched", partitions=1, replication_factor=3)
    tp = TopicPartition("watched", 0)
    with Client(cluster.bootstrap, retry_backoff_ms=20_000,
                retry_backoff_max_ms=20_000) as patient:
        producer = patient.producer(linger_ms=0)
        consumer = patient.consumer()
        victim: int | None = None
        try:
            producer.send("watched", b"first").result()
            pending = producer.send("watched", b"pending").result().offset
            consumer.assign([tp])
            consumer.seek(tp, pending)
            victim = patient.metadata.leader_for(tp)
            assert victim is not None
            cluster.kill(victim)

            def polled() -> bool:
                """Polls as long as a backoff (short polls would refresh at each return)."""
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if any(r.offset == pending for r in consumer.poll(timeout_ms=30_000)):
                        return True
                return False

            with ThreadPoolExecutor(3) as pool:
                calls = [
                    pool.submit(lambda: producer.send("watched", b"after").result()),
                    pool.submit(polled),
                    pool.submit(patient.list_offsets, {tp: OffsetSpec.latest()}),
                ]
                wait_for(lambda: all(c.done() for c in calls), timeout=12,
                         what="send, poll and lookup, long before a 16 s backoff ends")
            assert calls[0].result().offset > pending and calls[1].result()
            assert calls[2].result()[tp].offset > pending
            assert patient.metadata.leader_for(tp) not in (None, victim)
        finally:
            producer.close()
            consumer.close()
            if victim is not None:
                cluster.restart(victim)


def test_sticky_partitioner_fills_a_batch_then_moves(client: Client) -> None:
    """Keyless records fill one partition's batch; the record that would open a second batch
    there moves to another partition instead (KIP-480), so no stray one-record batches."""
    client.create_topic("sticky", partitions=4, replication_factor=3)
    per_batch = 10
    # Room for 10 records even when their timestamp deltas take two varint bytes, not 11.
    batch_size = HEADER_SIZE + per_batch * (record_size(0, 0, None, bytes(100)) + 1)
    with client.producer(linger_ms=60_000, batch_size=batch_size) as producer:
        futures = [producer.send("sticky", bytes(100)) for _ in range(95)]
        producer.flush()
    metas = [f.result() for f in futures]
    runs = [metas[i:i + per_batch] for i in range(0, len(metas), per_batch)]
    for run in runs:
        assert len({m.partition for m in run}) == 1, [m.partition for m in metas]
        assert [m.offset for m in run] == list(range(run[0].offset, run[0].offset + len(run)))
    for before, after in itertools.pairwise(runs):
        assert before[0].partition != after[0].partition


def test_a_full_batch_leaves_without_waiting_for_linger(client: Client) -> None:
    """A batch the next record does not fit is sent at once, even when linger_ms has long to
    run and the sticky partitioner has moved on: the first batch is acknowledged within a
    timeout shorter than the linger, with no flush()."""
    client.create_topic("full-leaves", partitions=2, replication_factor=3)
    per_batch = 10
    # Room for 10 records and a half: the batch is never filled to the byte.
    batch_size = HEADER_SIZE + per_batch * (record_size(0, 0, None, bytes(100)) + 1) + 50
    with client.producer(linger_ms=120_000, batch_size=batch_size) as producer:
        futures = [producer.send("full-leaves", bytes(100)) for _ in range(per_batch + 1)]
        assert futures[0].result(timeout=60).offset == 0
        assert futures[per_batch - 1].done()
        assert not futures[per_batch].done()  # the next batch lingers
        producer.flush()
        assert futures[per_batch].result().offset >= 0


def test_concurrent_refreshes_merge_into_one_metadata_call(cluster: LocalCluster) -> None:
    """Threads that all saw the same metadata version and ask for a refresh at once share one
    Metadata call: those that come while it runs wait for it, those that come after it find
    the newer version."""
    with Client(cluster.bootstrap) as client:
        client.admin.list_topics()  # metadata loaded
        seen = client.metadata.version
        before = client.metadata_refreshes
        barrier = threading.Barrier(8)
        errors_seen: list[BaseException] = []

        def refresh() -> None:
            try:
                barrier.wait(timeout=30)
                client.connections.metadata.refresh(client.connections.deadline(), seen)
            except BaseException as exc:  # reported by the assertion below
                errors_seen.append(exc)

        threads = [threading.Thread(target=refresh) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors_seen
        assert client.metadata_refreshes - before == 1
        assert client.metadata.version > seen


def test_compressed_batches_from_producer_to_disk_to_consumer(
    client: Client, cluster: LocalCluster
) -> None:
    """Every codec through the client's producer, the leader's checks, replication and the
    consumer; a topic with compression.type=producer keeps each producer's codec on every
    replica, one with compression.type=gzip gets gzip whatever was sent."""
    client.create_topic("codecs", partitions=1, replication_factor=3)
    client.create_topic("to-gzip", partitions=1, replication_factor=3,
                        config={"compression.type": "gzip"})
    sent = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        with client.producer(compression_type=codec, linger_ms=50) as producer:
            values = [b'{"codec": "%s", "n": %d}' % (codec.encode(), i) for i in range(100)]
            for topic in ("codecs", "to-gzip"):
                for i, value in enumerate(values):
                    producer.send(topic, value, key=b"k%d" % i, headers=[("c", codec.encode())])
            producer.flush()
        sent += values
    for topic in ("codecs", "to-gzip"):
        consumer = client.consumer()
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        records = poll_records(consumer, len(sent))
        assert [r.value for r in records] == sent
        assert all(r.key == b"k%d" % (n % 100) for n, r in enumerate(records))
    with Raw(cluster) as raw:
        for node in cluster.node_ids:
            kept = wait_for(lambda n=node: _codecs_on(raw, n, "codecs", len(sent)), 30)
            assert kept[0] == 0 and set(kept) == {0, 1, 2, 3, 4}, kept
            assert set(wait_for(lambda n=node: _codecs_on(raw, n, "to-gzip", len(sent)))) == {1}


def _codecs_on(raw: Raw, node: int, topic: str, records: int) -> list[int] | None:
    """The codec of every data batch of partition 0 as the node's replica holds it, once it
    holds `records` records."""
    data = raw.fetch(node, topic, 0, 0, replica_id=DEBUGGING_REPLICA_ID, max_bytes=8 << 20)
    batches = [h for _, h in iter_batches(data.records) if not h.is_control]
    if sum(h.records_count for h in batches) < records:
        return None
    return [h.attributes & ATTR_COMPRESSION for h in batches]


class SlowToGreet:
    """A loopback proxy to `upstream` that holds back the first bytes the node sends on each
    connection (its SETTINGS, or its part of a TLS handshake) for `delay_s`, then passes
    everything through as it comes: a node slow to set a connection up, quick after."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._delay_s = delay_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                node = socket.create_connection(self._upstream)
                self._sockets += [client, node]
                threading.Thread(target=self._pipe, args=(client, node, 0.0), daemon=True).start()
                threading.Thread(target=self._pipe, args=(node, client, self._delay_s),
                                 daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, first_delay_s: float) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                time.sleep(first_delay_s)
                first_delay_s = 0.0
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


def test_a_node_slower_to_set_up_a_connection_than_the_backoff_is_still_reached(
    cluster: LocalCluster,
) -> None:
    """gRPC gives a connection attempt at least grpc.min_reconnect_backoff_ms before it
    abandons it; at the 100 ms the client once set, a node whose first bytes took longer than
    the reconnect backoff (1 s at most) was never reached, as TLS handshakes on a loaded
    machine were not ("connection attempt timed out before receiving SETTINGS frame")."""
    proxy = SlowToGreet(cluster.address_of(1), 1.4)
    try:
        with Client(proxy.address, request_timeout_ms=20_000) as slow:
            assert slow.admin.describe_cluster().nodes.keys() == set(cluster.node_ids)
    finally:
        proxy.close()
