"""The Kafka codec adapter and the API registry, without a node: every (API, version) the
node advertises round-trips a request and a response through kio and the adapter, and the
registry refuses ranges the node must never advertise."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from tidelog.node.kafka.apis import KafkaParts, kafka_registry
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
from tidelog.node.kafka.registry import ApiRegistry


def _served() -> list[tuple[int, int]]:
    """Every (api key, version) the node advertises in ApiVersions."""
    registry = kafka_registry(KafkaParts(None, None, None, None))  # type: ignore[arg-type]
    return [
        (key, version)
        for key, low, high in registry.versions()
        for version in range(low, high + 1)
    ]


SERVED = _served()
_EXAMPLES = settings(max_examples=5, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_the_table_is_kafka_4s_floors_to_the_minimal_set() -> None:
    registry = kafka_registry(KafkaParts(None, None, None, None))  # type: ignore[arg-type]
    assert registry.versions() == [(3, 0, 12), (18, 0, 4)]


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@_EXAMPLES
@given(data=st.data())
def test_every_served_version_round_trips(api_key: int, version: int, data: st.DataObject) -> None:
    request_cls, response_cls = request_type(api_key, version), response_type(api_key, version)
    request = data.draw(st.from_type(request_cls))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    frame = encode_request(request_header(request, correlation_id), request)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header = read_header(frame[4:], request_cls)
    assert (header.api_key, header.api_version, header.correlation_id) == (
        api_key, version, correlation_id)
    assert read_body(frame[4:], header, request_cls) == request

    response = data.draw(st.from_type(response_cls))
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
