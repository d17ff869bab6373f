"""A node restarted on a data dir an earlier version wrote (records in the fixed-width format,
every partition: a topic's, the internal topics', the cluster metadata's) converts it before it
serves, and reads back the same records, transaction outcome and committed offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from legacy_records import to_fixed_width
from waiting_helpers import poll_records

from tidelog import Client
from tidelog.records import iter_batches
from tidelog.storage.record_format import RECORD_FORMAT_FILE
from tidelog.testing import LocalCluster
from tidelog.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.timeout(180)

TOPIC = "before-upgrade"


def _rewrite_as_fixed_width(node_dir: Path) -> int:
    """Every segment of the stopped node's data dir in the fixed-width record format, as an
    earlier version wrote it, and no record-format file; returns the batches rewritten."""
    rewritten = 0
    for path in sorted(node_dir.glob("*/*.log")):
        data = path.read_bytes()
        batches = [to_fixed_width(data[pos : pos + h.size]) for pos, h in iter_batches(data)]
        path.write_bytes(b"".join(batches))
        rewritten += sum(1 for b in batches if len(b) > 61)
    (node_dir / RECORD_FORMAT_FILE).unlink(missing_ok=True)
    return rewritten


def _read_all(client: Client) -> list[tuple[object, ...]]:
    consumer = client.consumer(auto_offset_reset="earliest", isolation_level="read_committed")
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        return [(r.offset, r.timestamp, r.key, r.value, r.headers)
                for r in poll_records(consumer, 21)]
    finally:
        consumer.close()


def test_a_node_converts_a_fixed_width_data_dir_and_serves_the_same_records(
    fresh_cluster: LocalCluster,
) -> None:
    cluster, node = fresh_cluster, fresh_cluster.node_ids[0]
    tp = TopicPartition(TOPIC, 0)
    with Client(cluster.bootstrap) as client:
        client.create_topic(TOPIC, partitions=1, replication_factor=1)
        with client.producer() as producer:
            for i in range(20):
                producer.send(TOPIC, b"value-%d" % i, key=b"k%d" % (i % 4),
                              headers=[("n", b"%d" % i)] if i % 3 else None)
        with client.producer(transactional_id="upgrade-txn") as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(TOPIC, b"aborted")
            producer.flush()  # written, then aborted: its marker is what is read back
            producer.abort_transaction()
            producer.begin_transaction()
            producer.send(TOPIC, b"committed")
            producer.commit_transaction()
        before = _read_all(client)
        assert [r[3] for r in before][-1] == b"committed" and len(before) == 21
        group = client.consumer(group_id="upgrade-group", enable_auto_commit=False)
        group.commit({tp: OffsetAndMetadata(17)})
        group.close()

    cluster.stop(node)
    assert _rewrite_as_fixed_width(cluster.node_dir(node)) > 5
    cluster.restart(node)

    assert (cluster.node_dir(node) / RECORD_FORMAT_FILE).read_text() == "2\n"
    converted = cluster.logs(node)
    assert f"batches of {TOPIC}-0 to Kafka's v2 records" in converted
    assert "of __consumer_offsets-" in converted
    with Client(cluster.bootstrap) as client:
        assert _read_all(client) == before
        group = client.consumer(group_id="upgrade-group", enable_auto_commit=False)
        try:
            committed = group.committed([tp])[tp]
            assert committed is not None and committed.offset == 17
        finally:
            group.close()
