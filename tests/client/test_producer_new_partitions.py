"""A send to a partition another client has just added (issue 27): the producer refreshes its
metadata and waits for the partition up to max_block_ms, as Kafka's producer does, where it
used to refuse it at once ("topic 'grow' has no partition 1"); a partition that never appears
fails after max_block_ms with an error naming the topic, the partition and the count known.
`tidelog consume --partition N` of a partition the topic does not have is an error, not a
silent wait."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tidelog import Client, errors
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

TOPIC = "grow"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(1) as c:
        yield c


def test_a_partition_another_client_added_is_waited_for_and_delivered(
    cluster: LocalCluster,
) -> None:
    with Client(cluster.bootstrap) as first, Client(cluster.bootstrap) as second:
        first.create_topic(TOPIC, partitions=1)
        producer = first.producer(max_block_ms=30_000)
        try:
            assert producer.send(TOPIC, b"before").result(30).partition == 0
            second.admin.create_partitions({TOPIC: 2})
            assert first.metadata.partition_count(TOPIC) == 1  # not refreshed yet
            metadata = producer.send(TOPIC, b"after", partition=1).result(30)
            assert (metadata.partition, metadata.offset) == (1, 0)
        finally:
            producer.close(10_000)


def test_a_partition_that_never_appears_fails_after_max_block_ms(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap) as client:
        client.create_topic("fixed", partitions=1)
        # Long enough for a Metadata round under a loaded run's CPU (300 ms once was not:
        # the answer then names the unanswered Metadata instead of the missing partition).
        producer = client.producer(max_block_ms=2000)
        try:
            with pytest.raises(errors.RequestTimedOutError,
                               match=r"partition 5 of topic 'fixed' with partition count 1 "
                                     r"is not present in metadata after 2000 ms"):
                producer.send("fixed", b"v", partition=5)
            assert producer.send("fixed", b"v", partition=0).result(30).offset == 0
        finally:
            producer.close(10_000)


def test_consume_of_a_partition_that_does_not_exist_is_an_error(cluster: LocalCluster) -> None:
    with Client(cluster.bootstrap) as client:
        client.create_topic("few", partitions=1)
    done = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "consume", "few", "--partition", "99",
         "--bootstrap", cluster.bootstrap, "--timeout-ms", "10000"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "topic 'few' has no partition 99 (partitions 0..0)" in done.stderr
    assert "Traceback" not in done.stderr
