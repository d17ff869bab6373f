"""The thin adapter over kio, the Kafka protocol codec (typed entities generated from Kafka's
JSON message schemas, flexible versions and tagged fields included). Nothing else in the node
imports kio's serializers: a kio upgrade is checked here and by tests/kafka/test_codec.py.

A frame is ``int32 size`` then ``size`` bytes: a request header and a body. The header's
layout depends on the API and version (v1, or v2 with tagged fields for flexible versions),
so its first two fields (api key, version) are read first and the schema chosen from them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.serial.readers import read_int16

#: ApiVersions' key: the one API whose unknown versions get an answer (Kafka's rule, so that a
#: client can learn which versions the node speaks).
API_VERSIONS_KEY = 18


class MalformedFrame(ValueError):
    """The frame does not parse as the request its header names: the connection is closed."""


@dataclass(frozen=True, slots=True)
class Header:
    """What the connection needs of a request header."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: Where the body starts in the frame.
    body_offset: int


def peek_api(frame: bytes) -> tuple[int, int]:
    """The api key and version a frame names (its first four bytes)."""
    try:
        key, _ = read_int16(frame, 0)
        version, _ = read_int16(frame, 2)
    except (SerialError, ValueError, IndexError) as exc:
        raise MalformedFrame(f"a frame of {len(frame)} bytes has no request header") from exc
    return int(key), int(version)


def request_type(api_key: int, version: int) -> type[Any]:
    """kio's request entity of `api_key` at `version` (KeyError when kio has none)."""
    try:
        return load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise KeyError((api_key, version)) from None


def response_type(api_key: int, version: int) -> type[Any]:
    """kio's response entity of `api_key` at `version` (KeyError when kio has none)."""
    try:
        return load_response_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise KeyError((api_key, version)) from None


def read_header(frame: bytes, body_type: type[Any] | None) -> Header:
    """The frame's header, laid out as `body_type`'s schema says (None: a version of
    ApiVersions the node does not know, whose header Kafka reads as v2, the layout of every
    ApiVersions version from 3 on)."""
    schema = body_type.__header_schema__ if body_type is not None else RequestHeaderV2
    try:
        header, size = entity_reader(schema)(frame, 0)
    except Exception as exc:  # whatever the reader raises, the bytes are at fault
        raise MalformedFrame(f"request header does not parse: {exc}") from exc
    return Header(
        int(header.request_api_key), int(header.request_api_version),
        int(header.correlation_id), header.client_id, size,
    )


def read_body(frame: bytes, header: Header, body_type: type[Any]) -> Any:
    """The request entity in `frame` after its header. Bytes after it are ignored, as Kafka
    ignores them (librdkafka's Metadata v12 carries three)."""
    try:
        body, _ = entity_reader(body_type)(frame, header.body_offset)
    except Exception as exc:  # kio raises KeyError for a tag it does not know, among others
        raise MalformedFrame(f"{body_type.__name__} does not parse: {exc}") from exc
    return body


def encode_response(correlation_id: int, response: Any) -> bytes:
    """The whole frame of `response` (size prefix, the response header its schema names with
    `correlation_id`, the body)."""
    header_type = type(response).__header_schema__
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(header_type)(out, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(out, response)
    frame = out.getbuffer()
    frame[:4] = (len(frame) - 4).to_bytes(4, "big")
    return bytes(frame)


def encode_request(header: Any, request: Any) -> bytes:
    """A request frame (size prefix, `header`, `request`): what a client sends, for tests and
    tools."""
    out = io.BytesIO()
    entity_writer(type(header))(out, header)
    entity_writer(type(request))(out, request)
    body = out.getvalue()
    return len(body).to_bytes(4, "big") + body


def request_header(request: Any, correlation_id: int, client_id: str | None = "tidelog") -> Any:
    """The header a client puts before `request`."""
    schema = type(request).__header_schema__
    return schema(
        request_api_key=type(request).__api_key__,
        request_api_version=type(request).__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )


def encode(entity: Any) -> bytes:
    """`entity`'s bytes alone, no header or size (a struct carried inside a message's bytes
    field, as the consumer protocol's assignment in SyncGroup)."""
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def decode(entity_type: type[Any], data: bytes, offset: int = 0) -> tuple[Any, int]:
    """`entity_type` read from `data` at `offset`, and how many bytes it took (tests read
    answers)."""
    return entity_reader(entity_type)(data, offset)

