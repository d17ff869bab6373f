"""The Kafka listener of a live node: ApiVersions, framing, and connections that send what
the node cannot answer (closed, the node serving on), answers in request order."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_wire import ask, closed_within, connect, frame_of, read_answer, served_table
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.request_header.v2.header import RequestHeader

from tidelog.node.kafka.codec import encode_request, read_header
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

#: What ApiVersions must say: the registry's table, API for API.
TABLE = served_table()


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def address(cluster: LocalCluster) -> Iterator[str]:
    yield cluster.kafka_address_of(1)


def _table(response: object) -> dict[int, tuple[int, int]]:
    return {int(k.api_key): (int(k.min_version), int(k.max_version))
            for k in response.api_keys}  # type: ignore[attr-defined]


def _header_only(request: object) -> bytes:
    """A frame of `request`'s header and none of its body."""
    frame = frame_of(request, 1)[4:]
    header = read_header(frame, type(request))
    return header.body_offset.to_bytes(4, "big") + frame[: header.body_offset]


def _still_serving(address: str) -> None:
    response = ask(address, ApiVersionsV0())
    assert response.error_code == ErrorCode.none and _table(response) == TABLE


def test_api_versions_names_exactly_the_served_apis(address: str) -> None:
    assert TABLE[18] == (0, 4) and TABLE[3] == (0, 12)
    for request in (ApiVersionsV0(),
                    ApiVersionsV3(client_software_name="t", client_software_version="1")):
        response = ask(address, request)
        assert response.error_code == ErrorCode.none
        assert _table(response) == TABLE


def test_an_unknown_api_versions_version_gets_v0_with_the_table(address: str) -> None:
    header = RequestHeader(request_api_key=18, request_api_version=99, correlation_id=5,
                           client_id="future")
    request = ApiVersionsV3(client_software_name="t", client_software_version="1")
    with connect(address) as sock:
        sock.sendall(encode_request(header, request))
        correlation_id, response = read_answer(sock, 18, 0)
    assert correlation_id == 5
    assert response.error_code == ErrorCode.unsupported_version
    assert _table(response) == TABLE


_UNANSWERABLE = {
    "garbage": (12).to_bytes(4, "big") + b"\xff" * 12,
    "unserved api": (8).to_bytes(4, "big") + b"\x00\x00\x00\x03\x00\x00\x00\x01",
    "unserved version": (8).to_bytes(4, "big") + b"\x00\x03\x00\x63\x00\x00\x00\x01",
    "oversized": (2**31 - 1).to_bytes(4, "big"),
    "negative size": (-5).to_bytes(4, "big", signed=True),
    "empty frame": (0).to_bytes(4, "big"),
    "truncated body": _header_only(MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )),
}


@pytest.mark.parametrize("name", list(_UNANSWERABLE))
def test_a_frame_the_node_cannot_answer_closes_that_connection_only(
    address: str, name: str
) -> None:
    with connect(address) as bystander, connect(address) as sock:
        sock.sendall(_UNANSWERABLE[name])
        assert closed_within(sock), f"{name}: the connection stayed open"
        bystander.sendall(frame_of(ApiVersionsV0(), 2))
        assert read_answer(bystander, 18, 0)[0] == 2
    _still_serving(address)


def test_a_frame_cut_short_by_the_client_ends_its_connection(address: str) -> None:
    with connect(address) as sock:
        sock.sendall((100).to_bytes(4, "big") + b"\x00\x12\x00\x00")
        sock.shutdown(socket.SHUT_WR)
        assert closed_within(sock)
    _still_serving(address)


def test_pipelined_requests_are_answered_in_request_order(address: str) -> None:
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
    requests = [(ApiVersionsV0() if i % 2 else metadata, 1000 + i) for i in range(40)]
    with connect(address) as sock:
        sock.sendall(b"".join(frame_of(request, cid) for request, cid in requests))
        for request, cid in requests:
            got, _ = read_answer(sock, type(request).__api_key__, type(request).__version__)
            assert got == cid
