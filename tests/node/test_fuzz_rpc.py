"""Fuzzing every RPC of the Tidelog service against one real node shared by the module:
random requests (every field drawn from its type, with edge values, the names of a real topic
and real, mutated or random batches in `records`) and random or mutated request bytes.

Each call must end in a response (whose problems are Kafka error codes inside it) or a gRPC
status the node chose; never UNKNOWN, which is what grpc answers when a handler raised, nor a
deadline (a handler that hangs). After each test the node still answers a normal request.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from fuzz_helpers import FUZZ_TIMEOUT_S, T, fuzz_settings, mutated_batch
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import given
from hypothesis import strategies as st

from tidelog import wire
from tidelog.testing import LocalCluster, Raw, make_batch, wait_for
from tidelog.types import TopicPartition
from tidelog.v1 import tidelog_pb2 as pb

pytestmark = pytest.mark.timeout(FUZZ_TIMEOUT_S)

SERVICE = pb.DESCRIPTOR.services_by_name["Tidelog"]
METHODS = [m.name for m in SERVICE.methods]
TOPIC = "fuzz"  # what random requests name (and may delete or re-create)
COMPACTED = "fuzz-compacted"  # the same, where produce also reads keys
ALIVE = "alive"  # what the liveness check uses: no random request names it
CALL_TIMEOUT_S = 15.0

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def _integers(field: FieldDescriptor) -> st.SearchStrategy[int]:
    """Small values (where the interesting branches are), edges, and anything in range; waits
    and timeouts stay short so that a call cannot legitimately outlast its deadline."""
    if "timeout" in field.name or "wait" in field.name:
        return st.integers(-5, 300)
    if field.cpp_type in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_ENUM):
        low, high = _INT32
    elif field.cpp_type == FieldDescriptor.CPPTYPE_UINT32:
        low, high = 0, 2**32 - 1
    elif field.cpp_type == FieldDescriptor.CPPTYPE_UINT64:
        low, high = 0, 2**64 - 1
    else:
        low, high = _INT64
    if "partitions" in field.name or "replication" in field.name:
        high = min(high, 4)  # creating topics of millions of partitions proves nothing here
    small = st.integers(max(low, -3), min(high, 4))
    edges = st.sampled_from([v for v in (low, high, -1, -2, T) if low <= v <= high])
    return st.one_of(small, small, edges, st.integers(low, high))


def _strings(field: FieldDescriptor) -> st.SearchStrategy[str]:
    names = [TOPIC, TOPIC, COMPACTED, COMPACTED, "", "nope", "x" * 300]
    return st.one_of(st.sampled_from(names), st.text(max_size=8))


def _bytes(field: FieldDescriptor) -> st.SearchStrategy[bytes]:
    fresh = st.lists(st.binary(max_size=20), min_size=1, max_size=3).map(
        lambda values: make_batch(values, timestamp_ms=T)
    )
    return st.one_of(fresh, mutated_batch(), st.binary(max_size=100))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return st.booleans()
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        return _bytes(field) if field.type == FieldDescriptor.TYPE_BYTES else _strings(field)
    if cpp in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return st.floats(allow_nan=True, width=32)
    return _integers(field)


@functools.cache
def message(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    """Instances of the message `descriptor`, each field set or not, repeated ones 0-3 long.
    Built once per descriptor, from fixed values only, so that Hypothesis can replay a draw."""
    cls = message_factory.GetMessageClass(descriptor)
    fields: list[tuple[FieldDescriptor, str, st.SearchStrategy[Any]]] = []
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field, value_field = field.message_type.fields
            fields.append((field, "map", st.dictionaries(
                _scalar(key_field), _scalar(value_field), max_size=3)))
        elif field.message_type is not None:
            if depth < 4:
                sub = message(field.message_type, depth + 1)
                kind = "messages" if field.is_repeated else "message"
                fields.append((field, kind, st.lists(sub, max_size=3) if field.is_repeated
                               else sub))
        elif field.is_repeated:
            fields.append((field, "scalars", st.lists(_scalar(field), max_size=3)))
        else:
            fields.append((field, "scalar", _scalar(field)))

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        msg = cls()
        for field, kind, strategy in fields:
            if not draw(st.booleans()):
                continue
            value = draw(strategy)
            target = getattr(msg, field.name) if kind != "scalar" else None
            if kind == "map":
                target.update(value)
            elif kind == "messages":
                for item in value:
                    target.add().CopyFrom(item)
            elif kind == "message":
                target.CopyFrom(value)
            elif kind == "scalars":
                target.extend(value)
            else:
                setattr(msg, field.name, value)
        return msg

    return build()


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, object]:
    # The authorizer on, so that random ACL requests reach the ACL code. Random CreateAcls may
    # write any ACL (a DENY on "*" for User:*): the caller is a super user, so the other
    # methods and the liveness check are still served.
    return {"nodes": 1, "offsets_topic_num_partitions": 2, "super_users": "User:ANONYMOUS",
            "authorizer": "acl"}


@pytest.fixture(scope="module", autouse=True)
def topics(raw: Raw) -> None:
    raw.create_topic(TOPIC, 2, 1)
    raw.create_topic(COMPACTED, 1, 1, cleanup_policy="compact")
    raw.create_topic(ALIVE, 1, 1)
    # The offsets topic exists, so that random offset requests reach the group coordinator.
    find = pb.FindCoordinatorRequest(key="warm-up")
    wait_for(lambda: raw.stub(1).FindCoordinator(find, timeout=5).error_code == 0, 60,
             "a group coordinator")


@pytest.fixture(scope="module")
def channel(cluster: LocalCluster) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(cluster.address_of(cluster.node_ids[0])) as ch:
        yield ch


def _call(channel: grpc.Channel, method: str, request: bytes) -> grpc.StatusCode:
    """Send raw request bytes to `method`; the status it ends with."""
    rpc = channel.unary_unary(f"/{SERVICE.full_name}/{method}")
    try:
        rpc(request, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _assert_serves(cluster: LocalCluster) -> None:
    """The node still answers a produce and a fetch of it."""
    with Raw(cluster) as raw:
        node = cluster.node_ids[0]
        produced = raw.produce(node, ALIVE, 0, make_batch([b"still here"]))
        assert produced.error_code == 0, produced
        fetched = raw.fetch(node, ALIVE, 0, produced.base_offset)
        assert fetched.error_code == 0 and fetched.records, fetched
    assert cluster.is_running(cluster.node_ids[0])


@pytest.mark.parametrize("method", METHODS)
def test_random_requests_get_an_answer_or_a_chosen_status(
    cluster: LocalCluster, channel: grpc.Channel, method: str
) -> None:
    descriptor = SERVICE.methods_by_name[method].input_type

    @fuzz_settings(20)
    @given(message(descriptor))
    def run(request: Any) -> None:
        status = _call(channel, method, request.SerializeToString())
        assert status not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED), (
            method, status, request,
        )

    run()
    _assert_serves(cluster)


@pytest.mark.parametrize("method", METHODS)
def test_random_request_bytes_never_take_the_node_down(
    cluster: LocalCluster, channel: grpc.Channel, method: str
) -> None:
    """Bytes that may not parse at all: grpc itself refuses those (INTERNAL); the node must
    neither crash nor hang."""
    descriptor = SERVICE.methods_by_name[method].input_type
    valid = message(descriptor).map(lambda m: m.SerializeToString())

    @fuzz_settings(8)
    @given(st.one_of(st.binary(max_size=200), valid.flatmap(_mutated_bytes)))
    def run(request: bytes) -> None:
        status = _call(channel, method, request)
        assert status not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED), (
            method, status, request,
        )

    run()
    _assert_serves(cluster)


def _mutated_bytes(data: bytes) -> st.SearchStrategy[bytes]:
    if not data:
        return st.binary(max_size=20)
    return st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)).map(
        lambda change: data[: change[0]] + bytes([change[1]]) + data[change[0] + 1 :]
    )


@fuzz_settings(40)
@given(
    topic=st.sampled_from([TOPIC, COMPACTED]),
    acks=st.sampled_from([-1, 1, 0]),
    batch=st.one_of(mutated_batch(), st.binary(max_size=120)),
)
def test_produce_of_mutated_batches_gets_an_answer(
    cluster: LocalCluster, channel: grpc.Channel, topic: str, acks: int, batch: bytes
) -> None:
    """Well-formed requests carrying damaged batches, to both a plain and a compacted topic:
    random requests rarely reach this deep into the produce path."""
    request = wire.serialized_produce_request({TopicPartition(topic, 0): [batch]}, acks, 5000)
    rpc = channel.unary_unary(f"/{SERVICE.full_name}/Produce",
                              response_deserializer=pb.ProduceResponse.FromString)
    response = rpc(request, timeout=CALL_TIMEOUT_S)
    assert len(response.topics) == 1 and len(response.topics[0].partitions) == 1
