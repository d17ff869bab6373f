"""Fuzzing the Kafka listener of a live node with random frames: random bytes, random api
keys, versions and bodies behind a well-formed header, and real requests of every served
(API, version) with bytes flipped or cut. The client sends its frames and half-closes; the
node must answer what it can (each answer carrying its request's correlation id, in order)
and close the connection within a deadline, never hang, never die, never log a traceback."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_helpers import FUZZ_TIMEOUT_S, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from kafka_wire import WIRE_TIMEOUT_S, ask, connect, frame_of, read_frame, served_table
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.static.primitive import Records

from tidelog.node.kafka.codec import request_type
from tidelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(FUZZ_TIMEOUT_S)

# A record set is opaque bytes to the codec: random bytes, as a broken client might send.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

SERVED = [(key, version) for key, (low, high) in served_table().items()
          for version in range(low, high + 1)]


@pytest.fixture(scope="module")
def cluster_options() -> dict[str, Any]:
    return {"nodes": 1}


@pytest.fixture(scope="module")
def address(cluster: LocalCluster) -> Iterator[str]:
    yield cluster.kafka_address_of(1)


def _sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@st.composite
def _headed(draw: st.DrawFn) -> bytes:
    """A v1 request header with any api key, version and client id, then random bytes."""
    api_key = draw(st.one_of(st.sampled_from([3, 18]), st.integers(-2, 80),
                             st.integers(-(2**15), 2**15 - 1)))
    version = draw(st.one_of(st.integers(-1, 20), st.integers(-(2**15), 2**15 - 1)))
    client_id = draw(st.one_of(st.none(), st.binary(max_size=8)))
    header = struct.pack(">hhi", api_key, version, draw(st.integers(0, 2**31 - 1)))
    header += struct.pack(">h", -1) if client_id is None else struct.pack(
        ">h", draw(st.integers(-2, 12))) + client_id
    return _sized(header + draw(st.binary(max_size=64)))


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A real request of a served (API, version) with bytes flipped, cut or appended."""
    api_key, version = draw(st.sampled_from(SERVED))
    request = draw(st.from_type(request_type(api_key, version)))
    data = bytearray(frame_of(request, draw(st.integers(0, 2**31 - 1)))[4:])
    for _ in range(draw(st.integers(0, 3))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    return _sized(bytes(data[:cut]) + draw(st.binary(max_size=8)))


@st.composite
def _valid(draw: st.DrawFn) -> bytes:
    api_key, version = draw(st.sampled_from(SERVED))
    return frame_of(draw(st.from_type(request_type(api_key, version))),
                    draw(st.integers(0, 2**31 - 1)))


_FRAMES = st.lists(
    st.one_of(_headed(), _mutated(), _valid(), st.binary(max_size=40)), min_size=1, max_size=4
)


@fuzz_settings(200)
@given(frames=_FRAMES)
def test_random_frames_are_answered_or_closed_and_the_node_serves_on(
    address: str, frames: list[bytes]
) -> None:
    with connect(address) as sock:
        try:
            sock.sendall(b"".join(frames))
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node closed already: what it must do with some of these
        sock.settimeout(WIRE_TIMEOUT_S)
        while True:
            try:
                answer = read_frame(sock)
            except TimeoutError:
                pytest.fail(f"the node neither answered nor closed within {WIRE_TIMEOUT_S} s")
            if answer is None:
                break
            assert len(answer) >= 4  # a correlation id, then the response
    assert ask(address, ApiVersionsRequest()).api_keys


def test_the_node_survived_the_fuzzing_without_a_traceback(cluster: LocalCluster) -> None:
    """Runs after the fuzzing (tests run in file order): a handler that raised would have
    logged a traceback, even though its connection was closed as it should be."""
    assert cluster.is_running(1)
    assert "Traceback" not in cluster.logs(1)
