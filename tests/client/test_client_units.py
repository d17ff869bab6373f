"""Client pieces that need no cluster: the error categories as classes (each code against
Kafka's list: test_error_codes.py), the backoff formula, the metadata merge rules, and
pickling of configurations."""

from __future__ import annotations

import itertools
import pickle
from dataclasses import replace

import pytest

from tidelog import Client, ProducerConfig, RecordMetadata, TopicPartition, errors
from tidelog.consumer import ConsumerConfig
from tidelog.metadata import (
    ClusterMetadata,
    LeaderHint,
    MetadataSnapshot,
    PartitionInfo,
    TopicInfo,
    merge_snapshots,
)
from tidelog.records import RecordInput, batch_header, build_batch, encode_record
from tidelog.retry import Backoff


def test_error_categories_are_classes_as_in_kafka() -> None:
    assert issubclass(errors.NotLeaderOrFollowerError, errors.InvalidMetadataError)
    assert issubclass(errors.InvalidMetadataError, errors.RetriableError)
    assert issubclass(errors.NotControllerError, errors.RetriableError)
    assert not issubclass(errors.NotControllerError, errors.InvalidMetadataError)
    assert not issubclass(errors.OffsetOutOfRangeError, errors.RetriableError)
    for cls in (errors.TopicAuthorizationFailedError, errors.GroupAuthorizationFailedError,
                errors.ClusterAuthorizationFailedError):
        assert issubclass(cls, errors.AuthorizationError)
        assert issubclass(cls, errors.AuthError) and not issubclass(cls, errors.RetriableError)
    assert issubclass(errors.SaslAuthenticationFailedError, errors.AuthenticationError)
    with pytest.raises(errors.InvalidMetadataError):
        raise errors.for_code(6)("t-0: moved")


def test_the_retry_flags_are_the_categories_for_every_error_class() -> None:
    """No class, here or in another package, says it is retriable without being a
    RetriableError (behaviour goes by class; the flags are for display)."""
    import tidelog.retry
    import tidelog.spark.io
    import tidelog.spark.planning
    import tidelog.storage.errors
    import tidelog.testing  # noqa: F401  (their TidelogError subclasses join the walk)

    seen: set[type[errors.TidelogError]] = set()
    todo = [errors.TidelogError]
    while todo:
        cls = todo.pop()
        seen.add(cls)
        todo += [sub for sub in cls.__subclasses__() if sub not in seen]
    assert len(seen) > 140
    for cls in seen:
        assert cls.retriable == issubclass(cls, errors.RetriableError), cls
        assert cls.invalid_metadata == issubclass(cls, errors.InvalidMetadataError), cls


def test_transport_errors_are_retriable_and_invalidate_metadata() -> None:
    assert errors.NodeUnavailableError.retriable
    assert errors.NodeUnavailableError.invalid_metadata
    assert not errors.ConfigurationError.retriable


def test_backoff_is_exponential_capped_and_jittered_by_20_percent() -> None:
    backoff = Backoff(100, 1000, 0.2)
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (12, 1.0)]:
        delays = [backoff.delay_s(attempt) for _ in range(200)]
        assert all(base * 0.8 - 1e-9 <= d <= base * 1.2 + 1e-9 for d in delays)
        assert max(delays) - min(delays) > 0  # jittered


def _snapshot(leader: int, epoch: int, partitions: int = 2) -> MetadataSnapshot:
    parts = tuple(PartitionInfo(leader, epoch, (1, 2, 3)) for _ in range(partitions))
    return MetadataSnapshot(
        nodes={1: "h:1", 2: "h:2", 3: "h:3"},
        controller_id=1,
        topics={"t": TopicInfo("t", parts)},
    )


def test_metadata_keeps_newer_epochs_and_counts_versions() -> None:
    meta = ClusterMetadata()
    tp = TopicPartition("t", 0)
    assert meta.leader_for(tp) is None and meta.version == 0
    meta.update(_snapshot(leader=2, epoch=5))
    assert (meta.leader_for(tp), meta.leader_epoch(tp), meta.version) == (2, 5, 1)
    meta.update(_snapshot(leader=1, epoch=4))  # a node that missed the election
    assert (meta.leader_for(tp), meta.leader_epoch(tp), meta.version) == (2, 5, 2)
    meta.update(_snapshot(leader=3, epoch=6))
    assert meta.leader_for(tp) == 3
    assert meta.partition_count("t") == 2 and meta.partition_count("nope") is None


def test_leader_hints_apply_only_when_newer_and_invalidation_forgets_a_node() -> None:
    meta = ClusterMetadata()
    tp = TopicPartition("t", 1)
    meta.update(_snapshot(leader=2, epoch=5))
    assert not meta.apply_hint(tp, LeaderHint(1, 4, "h:1"))
    assert not meta.apply_hint(tp, LeaderHint(2, 5, "h:2"))
    assert not meta.apply_hint(tp, LeaderHint(-1, -1, ""))
    assert meta.apply_hint(tp, LeaderHint(3, 6, "h:3"))
    assert (meta.leader_for(tp), meta.leader_epoch(tp)) == (3, 6)
    assert meta.leader_for(TopicPartition("t", 0)) == 2  # the other partition is untouched
    meta.invalidate_node(3)
    assert meta.leader_for(tp) is None and meta.leader_epoch(tp) == 6
    assert meta.available_partitions("t") == [0]


def test_answers_of_several_nodes_merge_to_the_newest_leader_of_each_partition() -> None:
    """A node that missed the election (older epoch), one still electing (the new epoch, no
    leader yet) and one that has not heard of a topic are each outvoted, in any order."""
    stale = _snapshot(leader=1, epoch=4)
    electing = replace(_snapshot(leader=-1, epoch=5), controller_id=-1)
    elected = replace(_snapshot(leader=2, epoch=5), controller_id=2, topics={
        **_snapshot(leader=2, epoch=5).topics, "u": TopicInfo("u", (PartitionInfo(3, 1),)),
    })
    unknown = replace(_snapshot(leader=1, epoch=4), controller_id=2, topics={
        **stale.topics, "u": TopicInfo("u", error_code=3),
    })
    for order in itertools.permutations([stale, electing, elected, unknown]):
        merged = merge_snapshots(order)
        assert [(p.leader, p.leader_epoch) for p in merged.topics["t"].partitions] == [(2, 5)] * 2
        assert merged.topics["u"].error_code == 0 and merged.topics["u"].partitions[0].leader == 3
        assert merged.controller_id == 2  # two name it, one another, one none


def test_a_leader_has_moved_once_another_one_is_named_in_the_same_or_a_newer_epoch() -> None:
    meta = ClusterMetadata()
    tp = TopicPartition("t", 0)
    meta.update(_snapshot(leader=2, epoch=5))
    assert not meta.moved(tp, (2, 5))  # the nodes still name the leader that failed
    meta.invalidate_node(2)
    assert not meta.moved(tp, (2, 5))  # no leader known
    meta.update(_snapshot(leader=-1, epoch=6))
    assert not meta.moved(tp, (2, 5))  # an election under way
    meta.update(_snapshot(leader=3, epoch=6))
    assert meta.moved(tp, (2, 5)) and meta.moved(tp, (-1, 6))  # also after a leaderless send
    assert not meta.moved(tp, (3, 7)) and not meta.moved(TopicPartition("t", 9), (2, 5))


def test_configurations_pickle() -> None:
    client = Client("127.0.0.1:1,127.0.0.1:2", request_timeout_ms=1234)
    copy = pickle.loads(pickle.dumps(client))
    assert isinstance(copy, Client) and copy is not client
    assert copy.config == client.config and copy.config.bootstrap == ("127.0.0.1:1", "127.0.0.1:2")
    for config in (ProducerConfig(linger_ms=7), ConsumerConfig(group_id="g")):
        assert pickle.loads(pickle.dumps(config)) == config


@pytest.mark.parametrize(
    "kwargs",
    [{"acks": 2}, {"acks": 1, "idempotent": True}, {"max_in_flight": 6, "idempotent": True},
     {"batch_size": 0}],
)
def test_bad_producer_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(errors.ConfigurationError):
        ProducerConfig(**kwargs)  # type: ignore[arg-type]


def test_idempotence_defaults_on_only_with_acks_all() -> None:
    assert ProducerConfig().idempotence
    assert not ProducerConfig(acks=1).idempotence
    assert not ProducerConfig(idempotent=False).idempotence


def test_serialized_produce_request_equals_the_generated_encoding() -> None:
    from tidelog import wire
    from tidelog.v1 import tidelog_pb2 as pb

    first = build_batch([RecordInput(b"v" * 300, b"k", 1)])
    second = build_batch([RecordInput(bytes(range(256)) * 40, None, 2)] * 3)
    batches = {
        TopicPartition("a", 0): (first[:61], first[61:]),
        TopicPartition("a", 7): (second,),
        TopicPartition("b" * 200, 3): (second[:10], second[10:]),
    }
    data = wire.serialized_produce_request(batches, acks=-1, timeout_ms=30_000)
    expected = pb.ProduceRequest(acks=-1, timeout_ms=30_000, topics=[
        pb.TopicProduceData(name="a", partitions=[
            pb.PartitionProduceData(partition=0, records=first),
            pb.PartitionProduceData(partition=7, records=second),
        ]),
        pb.TopicProduceData(name="b" * 200, partitions=[
            pb.PartitionProduceData(partition=3, records=second),
        ]),
    ])
    assert pb.ProduceRequest.FromString(data) == expected
    assert data == expected.SerializeToString()


def test_producer_encoding_equals_build_batch() -> None:
    """The producer encodes each record at send() and frames the body later; the bytes must
    be those of `build_batch` for the same records, keyed, keyless and with headers."""
    records = [
        RecordInput(b"value", None, 1000),
        RecordInput(None, b"key", 1003),
        RecordInput(b"x" * 5000, b"k2", 999, (("h", b"1"), ("empty", None))),
    ]
    parts: list[bytes] = []
    sizes = [encode_record(parts, i, r.timestamp - 1000, r.key, r.value, r.headers)
             for i, r in enumerate(records)]
    body = b"".join(parts)
    assert sum(sizes) == len(body)
    header = batch_header(body, base_offset=0, partition_leader_epoch=-1, attributes=0,
                          last_offset_delta=2, first_timestamp=1000, max_timestamp=1003,
                          producer_id=5, producer_epoch=1, base_sequence=9, records_count=3)
    expected = build_batch(records, producer_id=5, producer_epoch=1, base_sequence=9)
    assert header + body == expected


def test_record_future_shares_its_batch_outcome() -> None:
    import threading

    from tidelog.producer import RecordFuture
    from tidelog.producer.accumulator import Batch

    batch = Batch(TopicPartition("t", 2), 0.0, 1.0, 0, threading.RLock())
    futures = [RecordFuture(batch, i, 100 + i) for i in range(3)]
    seen: list[object] = []
    futures[0].add_done_callback(seen.append)
    assert not futures[1].done() and futures[1].running() and not futures[1].cancel()
    with pytest.raises(TimeoutError):
        futures[1].result(timeout=0.01)
    batch.base_offset = 40
    batch.resolve()
    assert seen == [futures[0]]
    assert [f.result() for f in futures] == [
        RecordMetadata("t", 2, 40 + i, 100 + i) for i in range(3)
    ]
    futures[2].add_done_callback(seen.append)  # already done: runs at once
    assert seen == [futures[0], futures[2]]

    failed = Batch(TopicPartition("t", 0), 0.0, 1.0, 1, threading.RLock())
    failed.error = errors.RequestTimedOutError("t-0: not delivered")
    failed.resolve()
    future = RecordFuture(failed, 0, 5)
    assert isinstance(future.exception(), errors.RequestTimedOutError)
    with pytest.raises(errors.RequestTimedOutError):
        future.result()
