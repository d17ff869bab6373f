"""The record encoding Tidelog wrote before its records became Kafka's v2 records (format 1:
fixed-width big-endian fields), kept to build the data dirs of earlier versions that a node
must convert (`tidelog.storage.record_format`). Test only: nothing writes this format now."""

from __future__ import annotations

import struct

from tidelog.compression import compress
from tidelog.records import (
    ATTR_COMPRESSION,
    assemble_batch,
    codec_of,
    decode_records,
    read_header,
)

_PREFIX = struct.Struct(">iBiqi")  # length, attributes, offset delta, timestamp delta, key length
_I32 = struct.Struct(">i")


def fixed_width_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> bytes:
    """One record of format 1."""
    rest = (key or b"") + _I32.pack(-1 if value is None else len(value)) + (value or b"")
    rest += _I32.pack(len(headers))
    for h_key, h_value in headers:
        encoded = h_key.encode()
        rest += _I32.pack(len(encoded)) + encoded
        rest += _I32.pack(-1 if h_value is None else len(h_value)) + (h_value or b"")
    length = _PREFIX.size - 4 + len(rest)
    return _PREFIX.pack(length, 0, offset_delta, timestamp_delta,
                        -1 if key is None else len(key)) + rest


def to_fixed_width(batch: bytes) -> bytes:
    """`batch` (Kafka's v2 records) as a version of format 1 wrote it: the same header fields
    and codec, its records in the fixed-width encoding (a CreateTime batch: a LogAppendTime
    one's records no longer say their own timestamps)."""
    header = read_header(batch)
    if not header.records_count:
        return batch
    ts_base = header.first_timestamp
    records = b"".join(
        fixed_width_record(r.offset - header.base_offset,
                           r.timestamp - ts_base,
                           r.key, r.value, r.headers)
        for r in decode_records(batch, 0, header)
    )
    codec = codec_of(header)
    fields = header._replace(attributes=header.attributes & ~ATTR_COMPRESSION | codec)._asdict()
    for name in ("batch_length", "magic", "crc"):
        del fields[name]
    return assemble_batch(compress(codec, records) if codec else records, **fields)
