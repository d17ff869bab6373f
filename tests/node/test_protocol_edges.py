"""The protocol's sharp edges, seen as a client in another language sees them: raw tidelog.v1
requests that leave fields unset, name a partition twice, or are not protobuf at all; error
answers and what they carry; both reflection versions; and the producer's word for a topic
that does not exist.

One 3-node cluster serves the module, with node defaults for new topics that differ from
Kafka's (so that using them shows) and an election timeout long enough that a leader keeps
leading while its only follower is paused for a moment.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from record_helpers import values_of

from tidelog import Client, errors, wire
from tidelog.node.config import NodeConfig
from tidelog.retry import Deadline
from tidelog.testing import Raw, make_batch, wait_for
from tidelog.types import IsolationLevel, TopicPartition
from tidelog.v1 import raft_pb2
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
NUM_PARTITIONS = 3
DEFAULT_REPLICATION_FACTOR = 2
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REQUEST = 37, 38, 42
FENCED, UNKNOWN_EPOCH, NOT_LEADER, UNKNOWN_TOPIC, TIMED_OUT = 74, 75, 6, 3, 7


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    return {
        "auto_leader_rebalance_enable": False,
        "election_timeout_ms": 2000,
        "num_partitions": NUM_PARTITIONS,
        "default_replication_factor": DEFAULT_REPLICATION_FACTOR,
    }


def _list_offsets(raw: Raw, node: int, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
    return raw.stub(node).ListOffsets(request, timeout=10)


def _lookup(topic: str, timestamp: int = -1, **part: int) -> pb.ListOffsetsRequest:
    """A ListOffsets of partition 0 that sets only what it is given."""
    return pb.ListOffsetsRequest(
        topics=[pb.ListOffsetsTopic(name=topic, partitions=[
            pb.ListOffsetsPartition(partition=0, timestamp=timestamp, **part)
        ])]
    )


def _fetch(topic: str, *, partitions: tuple[int, ...] = (0,), **request: int) -> pb.FetchRequest:
    """A Fetch from offset 0 that sets only what it is given."""
    return pb.FetchRequest(
        topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=p)
                                                      for p in partitions])],
        **request,
    )


# ---- unset fields mean "a consumer, no epoch check, acks=all, the node's defaults" ------------


def test_unset_leader_epochs_skip_the_check(raw: Raw) -> None:
    raw.create_topic("unset-epoch", 1, 3)
    leader, epoch = raw.wait_leader_epoch("unset-epoch")
    assert epoch > 0, "an epoch-0 leader would not tell unset from 0"
    produced = raw.produce(leader, "unset-epoch", 0, make_batch([b"a", b"b"]))
    assert produced.error_code == 0
    end = produced.base_offset + 2
    latest = _list_offsets(raw, leader, _lookup("unset-epoch")).topics[0].partitions[0]
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, end, epoch)
    fetched = raw.stub(leader).Fetch(_fetch("unset-epoch"), timeout=10).topics[0].partitions[0]
    assert fetched.error_code == 0 and fetched.high_watermark == end and fetched.records
    # An explicit 0 is still an epoch, and an old one.
    zero = _list_offsets(raw, leader, _lookup("unset-epoch", current_leader_epoch=0))
    assert zero.topics[0].partitions[0].error_code == FENCED


def test_unset_fetch_replica_id_is_a_consumer_and_explicit_0_is_refused(raw: Raw) -> None:
    raw.create_topic("unset-fetch", 1, 3)
    leader, _ = raw.wait_leader_epoch("unset-fetch")
    produced = raw.produce(leader, "unset-fetch", 0, make_batch([b"x"]))
    assert produced.error_code == 0
    answer = raw.stub(leader).Fetch(_fetch("unset-fetch"), timeout=10).topics[0].partitions[0]
    assert answer.error_code == 0 and answer.high_watermark == produced.base_offset + 1
    with pytest.raises(grpc.RpcError) as refused:
        raw.stub(leader).Fetch(_fetch("unset-fetch", replica_id=0), timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_unset_min_bytes_answers_at_once_as_in_kafka(raw: Raw) -> None:
    raw.create_topic("unset-min-bytes", 1, 3)
    leader, _ = raw.wait_leader_epoch("unset-min-bytes")
    # Nothing to read and a minute to wait: only min_bytes 0 (unset) makes it answer within
    # the call's deadline. (Everything else is set, so that only min_bytes is left to mean.)
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=60_000, topics=[pb.FetchTopic(
        name="unset-min-bytes",
        partitions=[pb.FetchPartition(partition=0, current_leader_epoch=-1)],
    )])
    answer = raw.stub(leader).Fetch(request, timeout=20).topics[0].partitions[0]
    assert (answer.error_code, answer.records) == (0, b"")


def test_while_the_hw_lags_unset_replica_id_is_bounded_by_it_and_unset_acks_waits(
    raw: Raw,
) -> None:
    """Only while the high watermark is below the log end does a consumer's answer differ from
    replica 0's, and acks=all's from acks=0's: the partition's only follower is paused."""
    cluster = raw.cluster
    raw.create_topic("lagging-hw", 1, 2)
    leader, _ = raw.wait_leader_epoch("lagging-hw")
    follower = next(n for n in raw.metadata(leader, "lagging-hw").partitions[0].replicas
                    if n != leader)
    committed = raw.produce(leader, "lagging-hw", 0, make_batch([b"committed"]))
    assert committed.error_code == 0
    high_watermark = committed.base_offset + 1
    cluster.pause(follower)
    try:
        written = raw.produce(leader, "lagging-hw", 0, make_batch([b"w1", b"w2"]), acks=1)
        assert (written.error_code, written.base_offset) == (0, high_watermark)
        consumer = _list_offsets(raw, leader, _lookup("lagging-hw")).topics[0].partitions[0]
        replica0 = _list_offsets(raw, leader, pb.ListOffsetsRequest(
            replica_id=0, topics=_lookup("lagging-hw").topics
        )).topics[0].partitions[0]
        assert (consumer.error_code, consumer.offset) == (0, high_watermark), (
            "unset replica_id is a consumer, bounded by the high watermark")
        assert (replica0.error_code, replica0.offset) == (0, high_watermark + 2), (
            "explicit 0 is replica 0, bounded by the log end")
        unset_acks = raw.stub(leader).Produce(pb.ProduceRequest(timeout_ms=300, topics=[
            pb.TopicProduceData(name="lagging-hw", partitions=[
                pb.PartitionProduceData(partition=0, records=make_batch([b"w3"]))
            ])
        ]), timeout=10).topics[0].partitions[0]
    finally:
        cluster.resume(follower)
    # acks unset is acks=all: it waited for a commit that could not happen, and the error
    # answer vouches for no offset.
    assert unset_acks.error_code == TIMED_OUT, unset_acks
    assert unset_acks.error_message
    assert (unset_acks.base_offset, unset_acks.log_append_time_ms,
            unset_acks.log_start_offset) == (-1, -1, -1)


def test_unset_partitions_and_replication_factor_take_the_nodes_defaults(raw: Raw) -> None:
    stub = raw.stub(raw.cluster.node_ids[0])

    def create(*topics: pb.CreatableTopic) -> list[pb.CreatableTopicResult]:
        def answered() -> pb.CreateTopicsResponse | None:
            response = stub.CreateTopics(pb.CreateTopicsRequest(topics=topics, timeout_ms=15_000),
                                         timeout=20)
            moved = any(errors.for_code(t.error_code) is errors.NotControllerError
                        for t in response.topics)
            return None if moved else response

        return list(wait_for(answered, what="a controller").topics)

    unset, minus_one, zeros, bad_factor = create(
        pb.CreatableTopic(name="defaults-unset"),
        pb.CreatableTopic(name="defaults-minus-one", num_partitions=-1, replication_factor=-1),
        pb.CreatableTopic(name="defaults-zero", num_partitions=0, replication_factor=0),
        pb.CreatableTopic(name="defaults-zero-rf", num_partitions=1, replication_factor=0),
    )
    for result in (unset, minus_one):
        assert result.error_code == 0, result
        assert (result.num_partitions, result.replication_factor) == (
            NUM_PARTITIONS, DEFAULT_REPLICATION_FACTOR
        )
        raw.wait_leaders(result.name, NUM_PARTITIONS)
        partitions = raw.metadata(raw.cluster.node_ids[0], result.name).partitions
        assert [len(p.replicas) for p in partitions] == [DEFAULT_REPLICATION_FACTOR] * 3
    assert zeros.error_code == INVALID_PARTITIONS
    assert bad_factor.error_code == INVALID_REPLICATION_FACTOR
    for failed in (zeros, bad_factor):
        assert (failed.num_partitions, failed.replication_factor) == (-1, -1)
        assert failed.error_message


def test_node_defaults_for_new_topics_are_kafkas() -> None:
    config = NodeConfig.from_properties({"node.id": "1", "listen": "127.0.0.1:0",
                                         "data.dir": "/nonexistent"})
    assert (config.num_partitions, config.default_replication_factor) == (1, 1)
    with pytest.raises(errors.InvalidConfigError, match=r"num\.partitions"):
        NodeConfig.from_properties({"node.id": "1", "listen": "127.0.0.1:0",
                                    "data.dir": "/nonexistent", "num.partitions": "0"})


# ---- a partition or topic named twice ----------------------------------------------------------


def test_a_partition_named_twice_in_one_produce_is_written_never(raw: Raw) -> None:
    raw.create_topic("twice-produce", 1, 3)
    leader, _ = raw.wait_leader_epoch("twice-produce")
    response = raw.stub(leader).Produce(pb.ProduceRequest(acks=-1, timeout_ms=10_000, topics=[
        pb.TopicProduceData(name="twice-produce", partitions=[
            pb.PartitionProduceData(partition=0, records=make_batch([b"first"])),
        ]),
        pb.TopicProduceData(name="twice-produce", partitions=[
            pb.PartitionProduceData(partition=0, records=make_batch([b"again"])),
        ]),
    ]), timeout=15)
    assert [t.name for t in response.topics] == ["twice-produce"], "one entry per topic"
    [answer] = response.topics[0].partitions
    assert (answer.partition, answer.error_code) == (0, INVALID_REQUEST)
    assert (answer.base_offset, answer.log_start_offset) == (-1, -1)
    assert "more than once" in answer.error_message
    after = raw.fetch(leader, "twice-produce", 0, 0)
    assert values_of(after.records) == [], "nothing was appended"


def test_a_partition_named_twice_in_one_fetch_gets_one_invalid_request(raw: Raw) -> None:
    raw.create_topic("twice-fetch", 1, 3)
    leader, _ = raw.wait_leader_epoch("twice-fetch")
    response = raw.stub(leader).Fetch(_fetch("twice-fetch", partitions=(0, 0)), timeout=10)
    [answer] = response.topics[0].partitions
    assert answer.error_code == INVALID_REQUEST
    assert (answer.high_watermark, answer.log_start_offset, answer.records) == (-1, -1, b"")


def test_a_topic_named_twice_is_neither_created_nor_deleted(raw: Raw) -> None:
    stub = raw.stub(raw.cluster.node_ids[0])
    created = stub.CreateTopics(pb.CreateTopicsRequest(topics=[
        pb.CreatableTopic(name="twice-created", num_partitions=1, replication_factor=1),
        pb.CreatableTopic(name="twice-created", num_partitions=1, replication_factor=1),
    ], timeout_ms=15_000), timeout=20)
    assert [(t.name, t.error_code) for t in created.topics] == [("twice-created", INVALID_REQUEST)]
    assert raw.metadata(raw.cluster.node_ids[0], "twice-created").error_code == UNKNOWN_TOPIC
    raw.create_topic("twice-deleted", 1, 1)
    deleted = stub.DeleteTopics(pb.DeleteTopicsRequest(
        topic_names=["twice-deleted", "twice-deleted"], timeout_ms=15_000), timeout=20)
    assert [(t.name, t.error_code) for t in deleted.topics] == [("twice-deleted", INVALID_REQUEST)]
    assert raw.metadata(raw.cluster.node_ids[0], "twice-deleted").error_code == 0
    described = stub.Metadata(pb.MetadataRequest(topics=["twice-deleted", "twice-deleted"]),
                              timeout=10)
    assert [t.name for t in described.topics] == ["twice-deleted"]


# ---- what error answers carry ------------------------------------------------------------------


def test_fenced_answers_carry_the_leader_hint_and_other_errors_none(raw: Raw) -> None:
    raw.create_topic("hint-fenced", 1, 3)
    leader, epoch = raw.wait_leader_epoch("hint-fenced")
    follower = next(n for n in raw.cluster.node_ids if n != leader)
    for node in (leader, follower):
        fenced = [
            _list_offsets(raw, node, _lookup("hint-fenced", current_leader_epoch=epoch - 1))
            .topics[0].partitions[0],
            raw.fetch(node, "hint-fenced", 0, 0, epoch=epoch - 1),
        ]
        for answer in fenced:
            assert answer.error_code == FENCED and answer.error_message
            assert answer.HasField("current_leader"), answer
            assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch,
                    answer.current_leader.leader_address) == (
                leader, epoch, raw.cluster.address_of(leader))
        newer = raw.fetch(node, "hint-fenced", 0, 0, epoch=epoch + 1)
        assert newer.error_code == UNKNOWN_EPOCH and not newer.HasField("current_leader")
    missing = raw.produce(leader, "hint-fenced", 9, make_batch([b"x"]))
    assert missing.error_code == UNKNOWN_TOPIC and not missing.HasField("current_leader")
    assert (missing.base_offset, missing.log_append_time_ms, missing.log_start_offset) == (
        -1, -1, -1)


def test_list_offsets_errors_carry_a_message(raw: Raw) -> None:
    raw.create_topic("lo-message", 1, 3)
    leader, _ = raw.wait_leader_epoch("lo-message")
    answers = {
        "unsupported": _lookup("lo-message", timestamp=-9),
        "unknown": pb.ListOffsetsRequest(topics=[pb.ListOffsetsTopic(
            name="lo-message", partitions=[pb.ListOffsetsPartition(partition=5, timestamp=-1)])]),
    }
    for what, request in answers.items():
        answer = _list_offsets(raw, leader, request).topics[0].partitions[0]
        assert answer.error_code and answer.error_message, what
        assert (answer.offset, answer.timestamp, answer.leader_epoch) == (-1, -1, -1)


def test_the_client_reads_hints_only_where_the_answer_has_one() -> None:
    """An absent LeaderHint reads as leader 0, epoch 0 in proto3; it must not become a hint."""
    response = pb.ListOffsetsResponse(topics=[pb.ListOffsetsTopicResponse(name="t", partitions=[
        pb.ListOffsetsPartitionResponse(partition=0, error_code=UNKNOWN_TOPIC, error_message="m"),
        pb.ListOffsetsPartitionResponse(partition=1, error_code=FENCED, error_message="old",
                                        current_leader=pb.LeaderHint(leader_id=2, leader_epoch=7,
                                                                     leader_address="h:1")),
    ])])
    parsed = wire.parse_list_offsets(response)
    no_hint, hinted = parsed[TopicPartition("t", 0)], parsed[TopicPartition("t", 1)]
    assert isinstance(no_hint, wire.Failure) and no_hint.hint is None
    assert "m" in str(no_hint.error)
    assert isinstance(hinted, wire.Failure) and hinted.hint is not None
    assert (hinted.hint.leader_id, hinted.hint.leader_epoch) == (2, 7)
    assert "old" in str(hinted.error)


# ---- the encoding: every default written down, the client explicit -----------------------------


def _request_messages() -> list[Descriptor]:
    """Every message a client sends to the Tidelog service, nested ones included."""
    seen: dict[str, Descriptor] = {}
    todo = [m.input_type for m in pb.DESCRIPTOR.services_by_name["Tidelog"].methods]
    while todo:
        message = todo.pop()
        if message.full_name in seen or message.GetOptions().map_entry:
            continue
        seen[message.full_name] = message
        todo += [f.message_type for f in message.fields if f.message_type is not None]
    return sorted(seen.values(), key=lambda m: m.full_name)


def _field_comments() -> dict[tuple[str, str], str]:
    """(message, field) -> the comment lines just above the field in tidelog.proto."""
    comments: dict[tuple[str, str], str] = {}
    message = ""
    pending: list[str] = []
    for line in (REPO / "proto/tidelog/v1/tidelog.proto").read_text().splitlines():
        stripped = line.strip()
        if match := re.match(r"message (\w+) \{", stripped):
            message, pending = match.group(1), []
        elif stripped.startswith("//"):
            pending.append(stripped[2:].strip())
        elif match := re.match(r"(?:optional |repeated )?[\w<>, .]+ (\w+) = \d+;", stripped):
            comments[(message, match.group(1))] = " ".join(pending)
            pending = []
        else:
            pending = []
    return comments


_NOT_NUMBERS = (
    FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES
)


def test_every_request_field_says_what_unset_means() -> None:
    """proto3 reads an unset number (or bool) as 0: each such request field's comment must say
    what that means, and a field whose 0 is meaningful must have explicit presence to tell them
    apart."""
    comments = _field_comments()
    undocumented = []
    for message in _request_messages():
        for field in message.fields:
            if field.is_repeated or field.type in _NOT_NUMBERS:
                continue
            comment = comments[(message.name, field.name)]
            if not re.search(r"\bunset\b", comment, re.IGNORECASE):
                undocumented.append(f"{message.name}.{field.name}")
            if "nset means -1" in comment or "unset or -1" in comment:
                assert field.has_presence, f"{message.name}.{field.name} needs `optional`"
    assert undocumented == [], "say what unset means in the proto comments"


def test_the_client_sets_every_optional_field_it_sends() -> None:
    """The client never relies on what an unset field means: each optional field is present."""
    tp = TopicPartition("t", 0)
    requests = [
        wire.list_offsets_request({tp: wire.OffsetLookup(-1)}, IsolationLevel.READ_COMMITTED, -1),
        wire.fetch_request({tp: wire.FetchPosition(0, -1)}, isolation=IsolationLevel(0),
                           max_wait_ms=0, min_bytes=1, max_bytes=1, partition_max_bytes=1),
        wire.create_topics_request("t", 1, 1, {}, 1000),
        wire.init_producer_id_request(-1, -1),
        pb.ProduceRequest.FromString(wire.serialized_produce_request({tp: [b""]}, 0, 1000)),
    ]

    def missing(message: Message) -> list[str]:
        out = []
        for field in message.DESCRIPTOR.fields:
            if field.type == FieldDescriptor.TYPE_MESSAGE and field.is_repeated:
                if not field.message_type.GetOptions().map_entry:
                    out += [m for item in getattr(message, field.name) for m in missing(item)]
            # (An optional string's absence is itself the meaning: no transactional id.)
            elif (field.has_presence and field.type != FieldDescriptor.TYPE_STRING
                  and not message.HasField(field.name)):
                out.append(f"{message.DESCRIPTOR.name}.{field.name}")
        return out

    assert [m for r in requests for m in missing(r)] == []
    assert pb.ProduceRequest.FromString(
        wire.serialized_produce_request({tp: [b""]}, 0, 1000)
    ).acks == 0, "acks=0 is sent as 0, not left to mean all"


# ---- bodies that do not parse ------------------------------------------------------------------


def test_a_body_that_does_not_parse_is_invalid_argument_logged_once(raw: Raw) -> None:
    cluster = raw.cluster
    node = cluster.node_ids[-1]
    channel = grpc.insecure_channel(cluster.address_of(node))
    internal = grpc.insecure_channel(cluster.internal_address_of(node))
    try:
        def call(method: str) -> grpc.UnaryUnaryMultiCallable:
            return channel.unary_unary(method, request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)

        methods = ["/tidelog.v1.Tidelog/Metadata", "/tidelog.v1.Tidelog/Produce",
                   "/tidelog.v1.Tidelog/ListOffsets", "/grpc.health.v1.Health/Check"]
        for i in range(60):
            with pytest.raises(grpc.RpcError) as bad:
                call(methods[i % len(methods)])(b"\xff\xff\xff\xff", timeout=10)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad.value
            assert "malformed request body" in (bad.value.details() or "")
        # A stream of requests (reflection) is parsed the same way, and so are the frames of a
        # node-to-node stream (on the node-to-node listener), which its method parses itself:
        # one log line for all of them.
        reflect = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        raft = internal.stream_unary(
            f"/{raft_pb2.DESCRIPTOR.services_by_name['RaftTransport'].full_name}/Stream",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        for _ in range(20):
            with pytest.raises(grpc.RpcError) as bad_stream:
                list(reflect(iter([b"\xff\xff\xff\xff"]), timeout=10))
            assert bad_stream.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.RpcError) as bad_frames:
                raft(iter([b"\x03\xff\xff\xff"]), timeout=10)
            assert bad_frames.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # The node is fine and the well-formed request of the same bytes' method answers.
        assert raw.stub(node).Metadata(pb.MetadataRequest(), timeout=10).nodes
    finally:
        channel.close()
        internal.close()
    log = cluster.logs(node)
    assert len(re.findall(r"malformed", log)) == 1, log[-3000:]
    assert "Traceback" not in log


# ---- health ------------------------------------------------------------------------------------


def test_health_list_answers_every_service_without_a_traceback(raw: Raw) -> None:
    """Health/List, which anyone may call, answers the status of every service the node's
    health service knows: the whole node ("") and the client API, both SERVING on a ready
    node. The library's servicer lacks List, and each call once logged a traceback."""
    cluster = raw.cluster
    node = cluster.node_ids[0]
    channel = grpc.insecure_channel(cluster.address_of(node))
    try:
        listing = health_pb2_grpc.HealthStub(channel).List
        for _ in range(3):
            answer = listing(health_pb2.HealthListRequest(), timeout=10)
            assert {name: status.status for name, status in answer.statuses.items()} == {
                "": health_pb2.HealthCheckResponse.SERVING,
                "tidelog.v1.Tidelog": health_pb2.HealthCheckResponse.SERVING,
            }
        # The node is fine (it answers a call after those), and its log holds no traceback.
        assert raw.stub(node).Metadata(pb.MetadataRequest(), timeout=10).nodes
    finally:
        channel.close()
    log = cluster.logs(node)
    assert "Traceback" not in log and "NotImplementedError" not in log, log[-3000:]


# ---- reflection --------------------------------------------------------------------------------


def _reflect(channel: grpc.Channel, service: str,
             *requests: reflection_pb2.ServerReflectionRequest
             ) -> list[reflection_pb2.ServerReflectionResponse]:
    """ServerReflectionInfo of `service` (v1 and v1alpha messages are the same on the wire)."""
    method = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    return list(method(iter(requests), timeout=10))


@pytest.mark.parametrize("service", ["grpc.reflection.v1.ServerReflection",
                                     "grpc.reflection.v1alpha.ServerReflection"])
def test_reflection_is_served_as_v1_and_v1alpha(raw: Raw, service: str) -> None:
    channel = grpc.insecure_channel(raw.cluster.address_of(raw.cluster.node_ids[0]))
    try:
        listed, tidelog_file, v1_file = _reflect(
            channel, service,
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="tidelog.v1.Tidelog"),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="grpc.reflection.v1.ServerReflection"),
        )
    finally:
        channel.close()
    names = {s.name for s in listed.list_services_response.service}
    assert {"tidelog.v1.Tidelog", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    pool = descriptor_pool.DescriptorPool()
    for response in (tidelog_file, v1_file):
        assert not response.HasField("error_response"), response.error_response
        for blob in response.file_descriptor_response.file_descriptor_proto:
            pool.AddSerializedFile(blob)
    assert pool.FindServiceByName("tidelog.v1.Tidelog").FindMethodByName("Produce")
    v1 = pool.FindServiceByName("grpc.reflection.v1.ServerReflection")
    assert v1.FindMethodByName("ServerReflectionInfo").input_type.full_name == (
        "grpc.reflection.v1.ServerReflectionRequest")


# ---- the producer's word for a missing topic ---------------------------------------------------


def test_sending_to_a_missing_topic_says_it_is_not_in_the_metadata(raw: Raw) -> None:
    with Client(raw.cluster.bootstrap, request_timeout_ms=10_000) as client:
        producer = client.producer(max_block_ms=3000)
        try:
            with pytest.raises(errors.RequestTimedOutError) as info:
                producer.send("no-such-topic", b"v").result(timeout=30)
            assert "topic 'no-such-topic' not present in metadata after 3000 ms" in str(
                info.value)
        finally:
            producer.close()
        # With no node to answer, that is what it says instead.
        with Client("127.0.0.1:1", request_timeout_ms=10_000) as lost:
            started = Deadline(1000)
            with pytest.raises(errors.TidelogError) as nobody:
                lost.connections.metadata.partitions_for("anything", started)
            assert "no node answered Metadata" in str(nobody.value)
            assert "not present" not in str(nobody.value)
