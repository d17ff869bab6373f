"""Batches laid out by hand, so that any field can lie while the CRC stays right: what a
buggy or hostile producer can send. Shared by the codec, cluster and fuzz tests."""

from __future__ import annotations

from tidelog.records import assemble_batch, decode_records, iter_batches

T = 10_000


def forge_record(
    *,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: bytes = b"\x00",
    key_len: int | None = None,
    value_len: int | None = None,
    offset_delta: int = 0,
    ts_delta: int = 0,
    attributes: int = 0,
    extra: int = 0,
) -> bytes:
    """One record of Kafka's v2 encoding laid out by hand, so that any field can lie:
    `key_len`/`value_len` override the true lengths, `headers` is the raw count-and-headers
    tail, `extra` adjusts `length` (and when positive adds that many bytes after the fields)."""
    if key_len is None:
        key_len = -1 if key is None else len(key)
    if value_len is None:
        value_len = -1 if value is None else len(value)
    body = kafka_varint(key_len) + (key or b"")
    body += kafka_varint(value_len) + (value or b"") + headers
    rest = bytes([attributes]) + kafka_varint(ts_delta) + kafka_varint(offset_delta) + body
    return kafka_varint(len(rest) + extra) + rest + bytes(max(extra, 0))


def forge_batch(
    *records: bytes, count: int | None = None, attributes: int = 0, **kw: int
) -> bytes:
    """A batch framing `records` with a correct CRC: only the structure can catch a lie."""
    n = len(records) if count is None else count
    fields = {
        "base_offset": 0, "partition_leader_epoch": -1, "attributes": attributes,
        "last_offset_delta": n - 1, "first_timestamp": T, "max_timestamp": T,
        "producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "records_count": n,
    }
    fields.update(kw)
    return assemble_batch(b"".join(records), **fields)


def forge_header(key: bytes, value: bytes | None, key_len: int | None = None) -> bytes:
    """One header (key and value) laid out by hand; `key_len` overrides the true length."""
    k = kafka_varint(len(key) if key_len is None else key_len) + key
    v = kafka_varint(-1) if value is None else kafka_varint(len(value)) + value
    return k + v


def kafka_varint(n: int) -> bytes:
    """Kafka's zigzag varint, written here from the protocol description (test only)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte, z = z & 0x7F, z >> 7
        out.append(byte | (0x80 if z else 0))
        if not z:
            return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at `pos` and the position after it (test only)."""
    u = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        u |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return (u >> 1) ^ -(u & 1), pos


def values_of(records: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every data record in fetched bytes; control batches skipped."""
    out: list[tuple[int, bytes | None]] = []
    for pos, header in iter_batches(records):
        if not header.is_control:
            out.extend((r.offset, r.value) for r in decode_records(records, pos, header))
    return out
