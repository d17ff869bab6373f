"""Consume-transform-produce with subscribe() (issue 27, Kafka's KIP-447): a transactional
producer commits a subscribed member's offsets with `consumer.group_metadata()`, which the
group's coordinator checks against the member's id and current epoch; a bare group id is
refused while the group has members (UNKNOWN_MEMBER_ID, as Kafka refuses it), and offsets sent
with a member epoch a rebalance has moved past are refused with ILLEGAL_GENERATION (the
transaction can only be aborted), so a member behind a rebalance cannot commit offsets of
partitions it may no longer own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tidelog import Client, ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition, errors
from tidelog.consumer import Consumer
from tidelog.testing import LocalCluster, wait_for

pytestmark = pytest.mark.timeout(180)

IN, OUT, GROUP = "ctp-in", "ctp-out", "ctp-group"
PARTITIONS = 2


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with (LocalCluster(1, group_consumer_heartbeat_interval_ms=250) as cluster,
          Client(cluster.bootstrap) as c):
        for topic in (IN, OUT):
            c.create_topic(topic, partitions=PARTITIONS)
        with c.producer() as seed:
            for n in range(10):
                seed.send(IN, f"record {n}".encode(), partition=n % PARTITIONS)
        yield c


def joined(consumer: Consumer, partitions: int) -> ConsumerGroupMetadata:
    """Poll until the member owns `partitions` partitions; its group metadata then."""
    wait_for(lambda: consumer.poll(50) is not None and len(consumer.assignment()) == partitions,
             60, f"the member to own {partitions} partitions")
    return consumer.group_metadata()


def committed_to(consumer: Consumer, tp: TopicPartition, offset: int) -> None:
    """Wait until `tp`'s committed offset is `offset` (a transaction's offsets become the
    group's once its marker is on the offsets partition)."""
    wait_for(lambda: (consumer.committed([tp])[tp] or OffsetAndMetadata(-1)).offset == offset,
             30, f"{tp} committed at {offset}")


def test_a_subscribed_member_commits_through_a_transaction_and_a_stale_epoch_is_fenced(
    client: Client,
) -> None:
    first = client.consumer(group_id=GROUP, enable_auto_commit=False,
                            auto_offset_reset="earliest")
    second = client.consumer(group_id=GROUP, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    producer = client.producer(transactional_id="ctp-txn", max_block_ms=30_000)
    try:
        assert first.group_metadata() == ConsumerGroupMetadata(GROUP)  # not joined yet
        first.subscribe([IN])
        metadata = joined(first, PARTITIONS)
        assert metadata.group_id == GROUP and metadata.member_id
        assert metadata.generation_id > 0
        producer.init_transactions()
        tp = TopicPartition(IN, 0)

        # A bare group id is a consumer outside the membership: the group has a member.
        producer.begin_transaction()
        with pytest.raises(errors.UnknownMemberIdError):
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(1)}, GROUP)
        producer.abort_transaction()

        # The member's metadata: the offsets commit with the transaction.
        producer.begin_transaction()
        producer.send(OUT, b"out")
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(3)}, metadata)
        producer.commit_transaction()
        committed_to(first, tp, 3)

        # Another member joins: the group's epoch moves on and the first member's with it
        # once it gives a partition up, so the metadata taken before is stale.
        second.subscribe([IN])
        wait_for(lambda: (first.poll(50), second.poll(50))
                 and first.group_metadata().generation_id > metadata.generation_id
                 and len(first.assignment()) == 1, 60, "the rebalance to move an epoch on")
        producer.begin_transaction()
        with pytest.raises(errors.IllegalGenerationError):
            producer.send_offsets_to_transaction({tp: OffsetAndMetadata(5)}, metadata)
        producer.abort_transaction()
        committed_to(first, tp, 3)

        # The current metadata commits again.
        owned = next(iter(first.assignment()))
        producer.begin_transaction()
        producer.send_offsets_to_transaction({owned: OffsetAndMetadata(4)},
                                             first.group_metadata())
        producer.commit_transaction()
        committed_to(first, owned, 4)
    finally:
        producer.close()
        second.close(autocommit=False)
        first.close(autocommit=False)


def test_group_metadata_needs_a_group_and_send_offsets_checks_it(client: Client) -> None:
    consumer = client.consumer()
    try:
        with pytest.raises(errors.InvalidGroupIdError):
            consumer.group_metadata()
    finally:
        consumer.close()
    producer = client.producer(transactional_id="ctp-checks", max_block_ms=30_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        offsets = {TopicPartition(IN, 0): OffsetAndMetadata(1)}
        for bad in (None, 7, ConsumerGroupMetadata(GROUP, generation_id="1"),  # type: ignore[arg-type]
                    ConsumerGroupMetadata(GROUP, member_id=None)):  # type: ignore[arg-type]
            with pytest.raises(errors.ConfigurationError):
                producer.send_offsets_to_transaction(offsets, bad)  # type: ignore[arg-type]
        producer.abort_transaction()
    finally:
        producer.close()
