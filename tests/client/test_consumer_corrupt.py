"""A corrupt batch that is somehow in a log (written before validation existed, or damaged on
disk) reaches the consumer as CorruptRecordError naming the partition and offset, after the
records before it, and the consumer never moves past it on its own (Kafka's behaviour); in a
compacted topic it stops the cleaning of that partition only, not the node's chores."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from record_helpers import forge_batch, forge_record

from tidelog import Client, TopicPartition
from tidelog.clock import wall_clock_ms
from tidelog.consumer import Consumer
from tidelog.errors import CorruptRecordError
from tidelog.records import RecordInput, assign_offsets, build_batch
from tidelog.storage import Log
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.wire import FetchAnswer

pytestmark = pytest.mark.timeout(120)

TOPIC = "damaged"


def _plant_corrupt_batches(partition_dir: Path) -> tuple[int, int]:
    """Append two bad batches behind the node's back; return their offsets. The first has a
    right CRC over records that lie (a key length past the record); the second is a good batch
    whose value byte is flipped on disk afterwards (a wrong CRC)."""
    log = Log.open(partition_dir, clock=wall_clock_ms)
    try:
        epoch = log.latest_epoch
        lying_at = log.log_end_offset
        now = int(time.time() * 1000)
        lying = forge_batch(
            forge_record(key=b"k", key_len=1 << 20), first_timestamp=now, max_timestamp=now
        )
        log.append_as_follower(assign_offsets(lying, lying_at, epoch))
        flipped_at = log.log_end_offset
        log.append_as_follower(assign_offsets(make_batch([b"will rot"]), flipped_at, epoch))
        segment = log.active_segment.log_path
        log.close()
    except BaseException:
        log.close()
        raise
    data = bytearray(segment.read_bytes())
    data[-8] ^= 0xFF  # inside the last batch's value: only its CRC can tell
    segment.write_bytes(bytes(data))
    return lying_at, flipped_at


def _poll_until(consumer: Consumer, what: str) -> list[bytes | None]:
    """The values of the first poll that returns records."""
    return wait_for(lambda: [r.value for r in consumer.poll(timeout_ms=500)], what=what)


def test_a_corrupt_batch_in_the_log_is_a_corrupt_record_error_at_its_offset(
    tmp_path: Path,
) -> None:
    """Before: poll() raised a raw struct.error for the lying batch, and silently returned
    the rotted value (no CRC check)."""
    with LocalCluster(1, data_dir=tmp_path / "cluster") as cluster, Raw(cluster) as raw:
        raw.create_topic(TOPIC, 1, 1)
        node = cluster.node_ids[0]
        for value in (b"a", b"b"):
            assert raw.produce(node, TOPIC, 0, make_batch([value])).error_code == 0
        cluster.stop(node)
        lying_at, flipped_at = _plant_corrupt_batches(
            cluster.data_dir / f"node-{node}" / f"{TOPIC}-0"
        )
        cluster.restart(node)
        raw.wait_leaders(TOPIC, 1)
        wait_for(  # a restarted leader answers NOT_ENOUGH_REPLICAS while it settles
            lambda: raw.produce(node, TOPIC, 0, make_batch([b"after"])).error_code == 0,
            what="a produce after the restart",
        )
        tp = TopicPartition(TOPIC, 0)
        with Client(cluster.bootstrap) as client:
            consumer = client.consumer(auto_offset_reset="earliest")
            consumer.assign([tp])
            # The records before the bad batch come first, in the same fetch.
            assert _poll_until(consumer, "a, b") == [b"a", b"b"]
            for _ in range(2):  # and the consumer does not move past it on its own
                with pytest.raises(CorruptRecordError) as err:
                    consumer.poll(timeout_ms=5000)
                assert (err.value.topic, err.value.partition, err.value.offset) == (
                    TOPIC, 0, lying_at
                )
                assert "malformed record 0" in str(err.value)
                assert f"seek to {flipped_at} to skip" in str(err.value)
                assert consumer.position(tp) == lying_at
            consumer.seek(tp, flipped_at)
            with pytest.raises(CorruptRecordError, match="CRC") as err:
                consumer.poll(timeout_ms=5000)
            assert err.value.offset == flipped_at
            consumer.seek(tp, flipped_at + 1)
            assert _poll_until(consumer, "after") == [b"after"]
        assert "Traceback" not in cluster.logs(node)


def test_a_corrupt_batch_in_a_compacted_log_stops_only_its_cleaning(tmp_path: Path) -> None:
    """Before: the cleaner's struct.error ended the node's housekeeping loop, and with it the
    node (a driver loop that fails exits the process), again within seconds of every restart.
    The cleaner and retention pass runs every 200 ms rather than every 5 s: the test waits for
    two of them."""
    with LocalCluster(1, data_dir=tmp_path / "cluster",
                      log_retention_check_interval_ms=200) as cluster, Raw(cluster) as raw:
        node = cluster.node_ids[0]
        raw.create_topic("keyed", 1, 1, cleanup_policy="compact")
        raw.create_topic("timed", 1, 1, retention_ms="1000", segment_bytes="200")
        keyed = build_batch([RecordInput(b"v", b"k", int(time.time() * 1000))])
        assert raw.produce(node, "keyed", 0, keyed).error_code == 0
        cluster.stop(node)
        log = Log.open(cluster.data_dir / f"node-{node}" / "keyed-0", clock=wall_clock_ms)
        try:
            now = int(time.time() * 1000)
            lying = forge_batch(forge_record(key=b"k", key_len=1 << 20),
                                first_timestamp=now, max_timestamp=now)
            log.append_as_follower(assign_offsets(lying, log.log_end_offset, log.latest_epoch))
            log.roll()  # the lying batch in a closed segment: the cleaner reads it
            log.append_as_follower(assign_offsets(keyed, log.log_end_offset, log.latest_epoch))
        finally:
            log.close()
        cluster.restart(node)
        raw.wait_leaders("keyed", 1)
        wait_for(lambda: "compaction stopped until restart" in cluster.logs(node),
                 what="the cleaner to meet the corrupt batch")
        old = int(time.time() * 1000) - 60_000
        for n in range(5):  # segments of old records that retention must delete
            wait_for(lambda n=n: raw.produce(node, "timed", 0, make_batch(
                [b"%d" % n], timestamp_ms=old)).error_code == 0, what="a produce")
        wait_for(lambda: raw.list_offset(node, "timed", 0, -2).offset > 0,
                 what="retention to go on after the cleaner's failure")
        assert cluster.is_running(node)
        assert "Traceback" not in cluster.logs(node)


def test_batches_are_decoded_as_poll_needs_them_and_a_lying_one_stops_there() -> None:
    """A fetched answer is buffered as batches (CRC checked) and each is checked and decoded
    only when poll() reaches it, as Kafka's CompletedFetch does: records are built just
    before they are handed out. A batch whose records lie still stops its partition at its
    offset, after the records before it. Before: every batch was decoded when the answer
    came, a fetch's worth of records waiting in the buffer."""
    tp = TopicPartition(TOPIC, 0)
    good = build_batch([RecordInput(b"a%d" % i, None, 1000) for i in range(4)])
    lying = forge_batch(forge_record(key=b"k", key_len=1 << 20))
    data = b"".join(assign_offsets(batch, base, 1) for batch, base in
                    ((good, 0), (lying, 4), (good, 5)))
    with Client("127.0.0.1:9") as client:  # never connected: the answer is handed in here
        consumer = client.consumer(max_poll_records=3)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        consumer._fetcher.take(tp, 0, FetchAnswer(data, 9, 9, 0, ()))
        buffered = consumer._fetcher.buffer[tp]
        assert buffered.records == [] and len(buffered.batches) == 3
        assert consumer._fetcher.position(tp) == 0
        assert [r.value for r in consumer._fetcher.drain(3)] == [b"a0", b"a1", b"a2"]
        assert len(buffered.batches) == 2 and consumer._fetcher.position(tp) == 3
        assert [r.value for r in consumer._fetcher.drain(3)] == [b"a3"]
        assert consumer._fetcher.position(tp) == 4 and tp not in consumer._fetcher.buffer
        with pytest.raises(CorruptRecordError) as err:
            consumer._fetcher.raise_corrupt()
        assert err.value.offset == 4 and "seek to 5 to skip" in str(err.value)
        consumer.close()
