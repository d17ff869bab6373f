"""A raw Kafka client for the tests of the Kafka listener: frames written and read on a plain
socket, with the node's own codec adapter (node/kafka/codec.py), so a test controls every byte
it sends (pipelined requests, garbage, truncated or oversized frames)."""

from __future__ import annotations

import socket
import time
from typing import Any

from tidelog.node.kafka.apis import KafkaParts, kafka_registry
from tidelog.node.kafka.codec import decode, encode_request, request_header, response_type

#: How long a test waits for an answer, or for a connection to close.
WIRE_TIMEOUT_S = 20.0


class _NotBuilt:
    """Stands for the node's parts when only the registry's table is wanted: the adapters
    keep what they are given (and may look things up on it) but no handler ever runs."""

    def __getattr__(self, name: str) -> _NotBuilt:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _NotBuilt:
        return self


def served_table() -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version of every API the node serves: its ApiVersions table."""
    parts = KafkaParts(*(_NotBuilt() for _ in range(4)))  # type: ignore[arg-type]
    return {key: (low, high) for key, low, high in kafka_registry(parts).versions()}


def connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=WIRE_TIMEOUT_S)
    sock.settimeout(WIRE_TIMEOUT_S)
    return sock


def frame_of(request: Any, correlation_id: int) -> bytes:
    return encode_request(request_header(request, correlation_id), request)


def read_frame(sock: socket.socket) -> bytes | None:
    """The next answer frame (without its size), or None once the node closed the connection."""
    prefix = _read_exactly(sock, 4)
    if prefix is None:
        return None
    frame = _read_exactly(sock, int.from_bytes(prefix, "big"))
    if frame is None:
        raise AssertionError("the node closed the connection in the middle of an answer")
    return frame


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_answer(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, response entity) of the next answer, read as `api_key` at `version`
    (ApiVersions' answers always have the v0 response header)."""
    frame = read_frame(sock)
    assert frame is not None, "the node closed the connection instead of answering"
    body_type = response_type(api_key, version)
    header, size = decode(body_type.__header_schema__, frame)
    body, _ = decode(body_type, frame, size)
    return int(header.correlation_id), body


def ask(address: str, request: Any, correlation_id: int = 1) -> Any:
    """`request`'s answer on a connection of its own."""
    with connect(address) as sock:
        sock.sendall(frame_of(request, correlation_id))
        got, body = read_answer(sock, type(request).__api_key__, type(request).__version__)
        assert got == correlation_id
        return body


def closed_within(sock: socket.socket, timeout_s: float = WIRE_TIMEOUT_S) -> bool:
    """Whether the node closes `sock` within `timeout_s` (reading and dropping any answers)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False
