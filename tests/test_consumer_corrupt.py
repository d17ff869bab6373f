"""A corrupt batch that is somehow in a log (written before validation existed, or damaged on
disk) reaches the consumer as CorruptRecordError naming the partition and offset, after the
records before it, and the consumer never moves past it on its own (Kafka's behaviour)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster_helpers import Raw, make_batch, wait_for
from record_helpers import forge_batch, forge_record

from tidelog import Client, TopicPartition
from tidelog.consumer import Consumer
from tidelog.errors import CorruptRecordError
from tidelog.records import assign_offsets
from tidelog.storage import Log
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

TOPIC = "damaged"


def _plant_corrupt_batches(partition_dir: Path) -> tuple[int, int]:
    """Append two bad batches behind the node's back; return their offsets. The first has a
    right CRC over records that lie (a key length past the record); the second is a good batch
    whose value byte is flipped on disk afterwards (a wrong CRC)."""
    log = Log.open(partition_dir)
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


def _poll_until(consumer: Consumer, what: str, timeout_s: float = 30.0) -> list[bytes | None]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = [r.value for r in consumer.poll(timeout_ms=500)]
        if got:
            return got
    raise AssertionError(f"no records for {what}")


def test_a_corrupt_batch_in_the_log_is_a_corrupt_record_error_at_its_offset(
    tmp_path: Path,
) -> None:
    """Before: poll() raised a raw struct.error for the lying batch, and silently returned
    the rotted value (no CRC check)."""
    with LocalCluster(1, data_dir=tmp_path / "cluster") as cluster:
        raw = Raw(cluster)
        try:
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
        finally:
            raw.close()
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
