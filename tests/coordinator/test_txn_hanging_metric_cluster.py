"""The ``tidelog_hanging_transactions`` gauge against a real node: transactional batches appended
unverified (transaction.partition.verification.enable off, as data written before leaders
verified transactions) open transactions no coordinator knows of. Once one has been open longer
than transaction.max.timeout.ms the leader's gauge counts it, and ``tidelog transactions abort``
takes it off again. A transaction whose first batch is stamped later than now (a client clock
ahead) has not been open that long, so it is never counted, whatever the time the test takes."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tidelog.cli import main
from tidelog.records import RecordInput, build_batch
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(180)

TOPIC = "late"
MAX_TIMEOUT_MS = 1000
#: Producer ids of the stray transactions: one stamped now, one a day ahead.
STALE, AHEAD = 515_151, 626_262
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 1, "offsets_topic_num_partitions": 1,
            "transaction_state_log_num_partitions": 1,
            "transaction_partition_verification_enable": False,
            "transaction_max_timeout_ms": MAX_TIMEOUT_MS}


def hanging(cluster: LocalCluster, node: int) -> float:
    """The node's tidelog_hanging_transactions, as Prometheus would scrape it."""
    address = cluster.metrics_address(node)
    assert address is not None, f"node {node} serves no metrics"
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = [sample.value for family in text_string_to_metric_families(text)
             for sample in family.samples if sample.name == "tidelog_hanging_transactions"]
    assert len(found) == 1, found
    return found[0]


def stray(cluster: LocalCluster, raw: Raw, producer_id: int, timestamp_ms: int) -> None:
    """A transactional batch of `producer_id` that no transaction of a coordinator holds."""
    batch = build_batch([RecordInput(b"stray", None, timestamp_ms)], producer_id=producer_id,
                        producer_epoch=0, base_sequence=0, transactional=True)
    answer = raw.produce(cluster.node_ids[0], TOPIC, 0, batch)
    assert answer.error_code == 0, answer


def abort(cluster: LocalCluster, producer_id: int) -> None:
    assert main(["transactions", "--bootstrap", cluster.bootstrap, "abort", "--topic", TOPIC,
                 "--partition", "0", "--producer-id", str(producer_id)]) == 0


def test_a_transaction_open_past_the_max_timeout_is_counted_until_aborted(
    cluster: LocalCluster, raw: Raw
) -> None:
    node = cluster.node_ids[0]
    raw.create_topic(TOPIC, 1, 1)
    assert hanging(cluster, node) == 0
    now_ms = int(time.time() * 1000)
    stray(cluster, raw, AHEAD, now_ms + DAY_MS)
    stray(cluster, raw, STALE, now_ms)
    wait_for(lambda: hanging(cluster, node) == 1, 30,
             "the gauge to count the transaction open past transaction.max.timeout.ms")
    abort(cluster, STALE)
    wait_for(lambda: hanging(cluster, node) == 0, 30, "the aborted transaction to leave the gauge")
    abort(cluster, AHEAD)
    assert hanging(cluster, node) == 0
