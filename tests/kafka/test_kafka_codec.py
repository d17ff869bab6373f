"""The Kafka codec adapter and the API registry, without a node: every (API, version) the
node advertises round-trips a request and a response through kio and the adapter (once with
every field set, once with nulls and empty arrays), and the registry refuses ranges the node
must never advertise."""

from __future__ import annotations

import dataclasses
import datetime
import io
import uuid
from typing import Any

import pytest
from kafka_wire import served_table
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records

from tidelog.node.kafka.codec import (
    MalformedFrame,
    decode,
    encode_request,
    encode_response,
    read_body,
    read_header,
    request_header,
    request_type,
    response_type,
)
from tidelog.node.kafka.registry import ApiRegistry, kafka_floor

SERVED = [(key, version) for key, (low, high) in served_table().items()
          for version in range(low, high + 1)]

#: A value of each kind of field kio's entities have (the schemas' ``kafka_type``).
_VALUES: dict[str, Any] = {
    "bool": True, "bytes": b"\x00\x01", "error_code": ErrorCode.unknown_topic_or_partition,
    "datetime_i64": datetime.datetime(2026, 11, 29, 4, 5, 6, 789000, tzinfo=datetime.UTC),
    "float64": 1.5, "int8": -7, "int16": -300, "int32": 70_000, "int64": 2**40,
    "records": Records(b"\x00records"), "string": "s\u00e9", "uint16": 65_000,
    "timedelta_i32": datetime.timedelta(milliseconds=1500),
    "timedelta_i64": datetime.timedelta(milliseconds=2**33),
    "uuid": uuid.UUID(int=(2**64 + 7)),
}


def sample(entity: type[Any], full: bool) -> Any:
    """An instance of `entity`: with `full`, every field set (one element in each array,
    nested ones full too); otherwise nulls where the schema allows them and empty arrays."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(entity):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            values[field.name] = (sample(kind.type_, full),) if full else ()
        elif isinstance(kind, EntityField):
            values[field.name] = (
                sample(kind.type_, full) if full or not is_optional(field) else None)
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = (_VALUES[get_schema_field_type(field)],) if full else ()
        else:
            values[field.name] = (
                _VALUES[get_schema_field_type(field)] if full or not is_optional(field)
                else None)
    return entity(**values)


def test_the_table_starts_at_kafka_4s_floors() -> None:
    table = served_table()
    assert table[18] == (0, 4) and table[3] == (0, 12)
    assert all(low == kafka_floor(key) for key, (low, _) in table.items())


@pytest.mark.parametrize("full", [False, True], ids=["sparse", "full"])
@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_served_version_round_trips(api_key: int, version: int, full: bool) -> None:
    request_cls, response_cls = request_type(api_key, version), response_type(api_key, version)
    request = sample(request_cls, full)
    correlation_id = 2**31 - 1 if full else 0
    frame = encode_request(request_header(request, correlation_id), request)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header = read_header(frame[4:], request_cls)
    assert (header.api_key, header.api_version, header.correlation_id) == (
        api_key, version, correlation_id)
    assert read_body(frame[4:], header, request_cls) == request

    response = sample(response_cls, full)
    frame = encode_response(correlation_id, response)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    answer_header, size = decode(response_cls.__header_schema__, frame[4:])
    assert answer_header.correlation_id == correlation_id
    body, body_size = decode(response_cls, frame[4:], size)
    assert body == response and size + body_size == len(frame) - 4


def test_a_body_that_does_not_parse_is_malformed() -> None:
    request_cls = request_type(3, 12)
    request = request_cls(topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
    frame = encode_request(request_header(request, 1), request)[4:]
    header = read_header(frame, request_cls)
    with pytest.raises(MalformedFrame):
        read_body(frame[: header.body_offset + 1], header, request_cls)
    with pytest.raises(MalformedFrame):
        read_header(frame[:5], request_cls)


async def _never(request: Any, call: Any) -> None:
    raise AssertionError("not called")


def test_the_registry_refuses_what_the_node_must_not_advertise() -> None:
    registry = ApiRegistry()
    with pytest.raises(ValueError, match="floor 3"):
        registry.add(0, 0, 9, _never)  # Produce v0-2 are gone from Kafka 4
    with pytest.raises(ValueError, match="does not know"):
        registry.add(18, 0, 99, _never)
    with pytest.raises(ValueError, match="floor"):
        registry.add(3, 4, 12, _never)
    registry.add(18, 0, 4, _never)
    with pytest.raises(ValueError, match="twice"):
        registry.add(18, 0, 3, _never)
    assert registry.versions() == [(18, 0, 4)]


def test_a_response_frame_is_kio_s_encoding() -> None:
    response_cls = response_type(18, 0)
    response = response_cls(error_code=ErrorCode.unsupported_version, api_keys=())
    out = io.BytesIO()
    entity_writer(response_cls)(out, response)
    frame = encode_response(9, response)
    assert frame[4:8] == (9).to_bytes(4, "big") and frame[8:] == out.getvalue()
