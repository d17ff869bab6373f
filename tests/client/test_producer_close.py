"""A producer closed without waiting (``close(timeout_ms=0)``, what Ctrl-C in ``tidelog
produce`` does) returns at once and fails what is undelivered, even while its sender waits on
the cluster for a whole request timeout: here for a producer id from a node that is paused
(SIGSTOP), so the InitProducerId call would only end at its deadline.

Before: the forced close waited for the sender's round to end, so it lasted as long as the
request it waited on (the CLI did not exit 20 s after SIGINT under load)."""

from __future__ import annotations

import sys
import threading
import traceback

import pytest

from tidelog import Client, errors
from tidelog.testing import LocalCluster, Raw, wait_for

pytestmark = pytest.mark.timeout(120)

TOPIC = "closing"
#: Far longer than the test waits for close(): a close that waits for the request fails it.
_REQUEST_TIMEOUT_MS = 300_000


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {"nodes": 1}


def _running(function: str) -> bool:
    """Whether some thread of this process is inside `function` now."""
    for frame in sys._current_frames().values():
        for summary in traceback.extract_stack(frame):
            if summary.name == function:
                return True
    return False


def test_a_forced_close_ends_while_the_sender_waits_on_the_cluster(
    cluster: LocalCluster, raw: Raw
) -> None:
    raw.create_topic(TOPIC, 1, 1)
    raw.wait_leaders(TOPIC, 1)
    node = cluster.node_ids[0]
    client = Client(cluster.bootstrap, request_timeout_ms=_REQUEST_TIMEOUT_MS)
    producer = client.producer(enable_idempotence=True, delivery_timeout_ms=_REQUEST_TIMEOUT_MS,
                               max_block_ms=_REQUEST_TIMEOUT_MS)
    try:
        assert producer.partitions_for(TOPIC) == {0}  # metadata in hand: send() never blocks
        cluster.pause(node)
        try:
            future = producer.send(TOPIC, b"never", partition=0)
            # The sender now asks the paused node for a producer id, which hangs.
            wait_for(lambda: _running("_init_producer_id"), 30,
                     "the sender to ask for a producer id")
            closer = threading.Thread(target=producer.close, kwargs={"timeout_ms": 0},
                                      daemon=True)
            closer.start()
            closer.join(30)
            assert not closer.is_alive(), "close(timeout_ms=0) waited for the request"
            with pytest.raises(errors.TidelogError, match="closed before delivery"):
                future.result(timeout=10)
        finally:
            cluster.resume(node)
    finally:
        client.close()
