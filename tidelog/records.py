"""The record-batch format: one encoding from the producer to the disk to the consumer.

A batch is the unit that is produced, validated, appended, replicated, fetched and indexed.
Nothing on the write path builds a Python object per record: the leader checks a batch once,
patches its base offset and leader epoch in place and writes the bytes; followers receive and
write the same bytes; Fetch returns them; only the consumer decodes records. This module is pure
(no I/O) so that both the client and the storage engine import it, as Kafka's broker uses the
record classes of its clients module.

The format is Kafka's v2 record batch, header and records both, so that a batch travels
unchanged from a Kafka producer to the disk to a Kafka consumer. Header (all integers
big-endian); docs/reference/record-batch.md is the full specification, with test vectors, for
clients in other languages::

    offset  size  field
    0       8     base_offset              first offset of the batch
    8       4     batch_length             bytes that follow this field
    12      4     partition_leader_epoch   epoch of the leader that appended it
    16      1     magic                    format version (MAGIC)
    17      4     crc                      CRC32C of everything from `attributes` to the end
    21      2     attributes               bits 0-2 compression codec (Kafka's ids), bit 3
                                           timestamp type, bit 4 transactional, bit 5 control
    23      4     last_offset_delta        last offset - base offset
    27      8     first_timestamp          timestamp of the first record
    35      8     max_timestamp            largest record timestamp (or the log-append time)
    43      8     producer_id              -1 when not idempotent
    51      2     producer_epoch
    53      4     base_sequence            sequence number of the first record, -1 if none
    57      4     records_count
    61            records

The CRC does not cover base offset, length, epoch or magic, so assigning offsets and stamping the
epoch leaves it valid (as in Kafka); switching a batch to log-append time does recompute it.

A compressed batch (codec in attribute bits 0-2, `tidelog.compression`) has the same header and
its records section, all records back to back, compressed as one stream; the CRC covers the
compressed bytes. Every reader of records here (`validate_records`, `decode_records`,
`record_keys`, `retain_records`, the timestamp walks) decompresses it first (`plain_batch`),
within MAX_BATCH_BYTES, and then checks and reads the records exactly as those of an
uncompressed batch.

A record is Kafka's v2 record: its integers are zigzag varints ("varint" for 32-bit fields, at
most 5 bytes; "varlong" for 64-bit ones, at most 10), -1 meaning null for a length::

    varint   length          bytes that follow this field
    int8     attributes      unused, 0
    varlong  timestamp_delta timestamp - first_timestamp (CreateTime may go backwards)
    varint   offset_delta    offset - base offset (dense 0, 1, 2, ... when produced; the
                             cleaner leaves gaps where it removed records, `retain_records`)
    varint   key_length      -1 for a null key
    .        key
    varint   value_length    -1 for a null value (a tombstone)
    .        value
    varint   header_count
             per header: varint key_length, key (UTF-8), varint value_length (-1 = null), value

Plain Python reads a varint a byte at a time, so the walks below read the one- and two-byte
varints (every length and delta below 8192) inline through precomputed tables
(`_Z1`, `_Z2`) and call `_varint_at` only for longer ones; the writers take the bytes of a small
varint from a table too (`varint`).
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, Protocol

import crc32c as _crc32c

from tidelog.compression import Codec, check_codec, compress, decompress
from tidelog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    TidelogError,
)
from tidelog.types import ConsumerRecord, TopicPartition

MAGIC = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
#: The largest producer epoch a batch header can carry (int16).
MAX_PRODUCER_EPOCH = 0x7FFF
NO_PARTITION_LEADER_EPOCH = -1

#: The largest batch a node takes from a producer, whatever a topic's max.message.bytes says: a
#: batch crosses gRPC whole (to the leader, to every follower, to every consumer), so every
#: message limit on those paths is derived from this one. Kafka bounds a request the same way
#: (socket.request.max.bytes, 100 MiB by default).
MAX_BATCH_BYTES = 100 * 1024 * 1024
#: The gRPC message limit of every Tidelog connection, client and node-to-node, both ways: one
#: maximal batch and room for the request, response or envelope around it.
MAX_MESSAGE_BYTES = MAX_BATCH_BYTES + 1024 * 1024

ATTR_COMPRESSION = 0x07  # Kafka's codec bits (tidelog.compression.Codec)
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
#: Every attribute bit with a meaning; a producer setting another one is refused.
ATTR_DEFINED = ATTR_COMPRESSION | ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL

_HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: what precedes `batch_length`'s bytes
_CRC_START = 21
_CRC_FIELD = struct.Struct(">I")
_ATTRS_FIELD = struct.Struct(">h")
_MAX_TS_FIELD = struct.Struct(">q")
_BASE_OFFSET_FIELD = struct.Struct(">q")
_EPOCH_FIELD = struct.Struct(">i")
_I32 = struct.Struct(">i")
#: The most bytes a record takes beyond its key, value and headers: the length (5),
#: attributes (1), timestamp delta (10), offset delta (5), key and value lengths (5 each) and
#: header count (5) at their widest. What a producer reserves for a record before it knows
#: the record's place in a batch (`record_size` is the exact figure).
RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 5
#: The shortest record body (after its length): attributes and five one-byte varints.
_MIN_RECORD_LENGTH = 6
#: A record's header count of 0 (its last byte when it has no header).
NO_HEADERS = b"\x00"
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def _varint_bytes(n: int) -> bytes:
    """The zigzag varint of `n` (an int64), byte by byte."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


#: The one- and two-byte varints: -8192..8191, at index n + 8192.
_SMALL_VARINTS = tuple(_varint_bytes(n) for n in range(-8192, 8192))
#: The value of a one-byte varint, by its byte.
_Z1 = tuple(_unzigzag(u) for u in range(128))
#: The value of a two-byte varint whose bytes are b (>= 128) and c (< 128), at b + (c << 7).
_Z2 = tuple(
    _unzigzag((i & 0x7F) | ((i >> 7) - 1) << 7) if i >= 128 else 0 for i in range(128 + 128 * 128)
)


def varint(n: int) -> bytes:
    """The zigzag varint of `n` (varint and varlong share the encoding); ValueError when `n`
    does not fit 64 bits."""
    if -8192 <= n < 8192:
        return _SMALL_VARINTS[n + 8192]
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"{n} does not fit a varlong")
    return _varint_bytes(n)


def varint_size(n: int) -> int:
    """How many bytes `varint(n)` takes."""
    u = (n << 1) ^ (n >> 63)
    return 1 if u < 0x80 else 2 if u < 0x4000 else (u.bit_length() + 6) // 7


class _BadVarint(ValueError):
    """A varint longer than its field allows (`_varint_at`)."""


def _varint_at(data: bytes, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """The varint at `pos` and the position after it, for those the walks do not read inline
    (three bytes or more). `_BadVarint` when it runs over `max_bytes` (5 for a varint, 10 for
    a varlong) or its value does not fit the field; IndexError when the data ends inside it."""
    u = shift = 0
    limit = 7 * max_bytes
    while True:
        b = data[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= limit:
            raise _BadVarint(f"a varint longer than {max_bytes} bytes")
    n = (u >> 1) ^ -(u & 1)
    if max_bytes == 5 and not _INT32_MIN <= n <= _INT32_MAX:
        raise _BadVarint(f"varint {n} does not fit 32 bits")
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise _BadVarint(f"varlong {n} does not fit 64 bits")
    return n, pos


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """The type carried in a control record's key (Kafka's ControlRecordType)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2  # the epoch marker a new leader appends (contract §7), as KRaft does
    #: A partition's Raft configuration (`replication.membership`), in the slot of KRaft's
    #: VotersRecord (KIP-853) with Tidelog's own value: consumers skip it like every control.
    MEMBERSHIP = 6


_CONTROL_KEY = struct.Struct(">hh")  # version, type
_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class BatchHeader(NamedTuple):
    """The fixed header of one batch; `size` is the whole batch in bytes."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record, as a consumer sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


# ----------------------------------------------------------------------------------------------
# Building batches (producer side)


def plain_record_head(offset_delta: int, timestamp_delta: int, value_length: int) -> bytes:
    """The bytes before the value of a record with no key and no header, the common one:
    its pieces are this, the value and NO_HEADERS. Public for the producer's send(), which
    encodes such records inline (a call per record is a measurable part of its cost)."""
    small = _SMALL_VARINTS
    ts = small[timestamp_delta + 8192] if -8192 <= timestamp_delta < 8192 else varint(
        timestamp_delta)
    delta = small[offset_delta + 8192] if offset_delta < 8192 else varint(offset_delta)
    size = small[value_length + 8192] if value_length < 8192 else varint(value_length)
    body = b"".join((b"\x00", ts, delta, b"\x01", size))  # attributes 0, key length -1
    length = len(body) + value_length + 1
    return (small[length + 8192] if length < 8192 else varint(length)) + body


def encode_record(
    out: list[bytes],
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> int:
    """Append one record's pieces to `out` (joined later into a batch body) and return their
    size. Public so that the producer can encode each record once, when it is sent, and only
    frame the joined body when the batch leaves (`assemble_batch`)."""
    if key is None and value is not None and not headers:  # the common record: 3 pieces
        head = plain_record_head(offset_delta, timestamp_delta, len(value))
        out += (head, value, NO_HEADERS)
        return len(head) + len(value) + 1
    parts = [b"\x00", varint(timestamp_delta), varint(offset_delta)]
    for field in (key, value):
        if field is None:
            parts.append(b"\x01")  # -1
        else:
            parts += (varint(len(field)), field)
    parts.append(varint(len(headers)))
    for h_key, h_value in headers:
        encoded = h_key.encode()
        parts += (varint(len(encoded)), encoded)
        if h_value is None:
            parts.append(b"\x01")
        else:
            parts += (varint(len(h_value)), h_value)
    body = sum(map(len, parts))
    length = varint(body)
    out.append(length)
    out += parts
    return len(length) + body


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> int:
    """The bytes `encode_record` takes for this record, without encoding it."""
    body = 1 + varint_size(timestamp_delta) + varint_size(offset_delta)
    for field in (key, value):
        body += 1 if field is None else varint_size(len(field)) + len(field)
    body += varint_size(len(headers))
    for h_key, h_value in headers:
        k = len(h_key.encode())
        body += varint_size(k) + k + (1 if h_value is None else
                                      varint_size(len(h_value)) + len(h_value))
    return varint_size(body) + body


class RecordInput(NamedTuple):
    """What a producer hands to `build_batch` for one record."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int = NO_TIMESTAMP
    headers: Sequence[tuple[str, bytes | None]] = ()


class RecordSource(Protocol):
    """Records that encode themselves into a batch's body (`build_batch_of`), for a writer
    that keeps its own form of them rather than a `RecordInput` each: the group coordinator's
    commit sets, whose records it encodes straight from the committed offsets."""

    @property
    def records_count(self) -> int: ...

    @property
    def first_timestamp(self) -> int: ...

    def encode_into(self, out: list[bytes], first_delta: int, first_timestamp: int) -> int:
        """Append the records' pieces to `out` as `encode_records` does (offset deltas from
        `first_delta`, timestamps relative to `first_timestamp`) and return the largest
        record timestamp."""
        ...


def encode_records(
    out: list[bytes], records: Sequence[RecordInput], first_delta: int, first_timestamp: int
) -> int:
    """Append the pieces of `records` to `out`, their offset deltas counted from `first_delta`
    and their timestamps relative to the batch's `first_timestamp`; return the largest record
    timestamp (NO_TIMESTAMP when none is larger). The part of `build_batch` that a batch of
    several sources (`build_batch_of`) repeats per source."""
    max_timestamp = NO_TIMESTAMP
    for delta, rec in enumerate(records, first_delta):
        max_timestamp = max(max_timestamp, rec.timestamp)
        encode_record(out, delta, rec.timestamp - first_timestamp, rec.key, rec.value, rec.headers)
    return max_timestamp


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    compression: Codec = Codec.NONE,
) -> bytes:
    """Encode records into one batch with offsets 0..n-1 relative to `base_offset`, its
    records section compressed with `compression`."""
    if not records:
        raise ValueError("a batch holds at least one record")
    first_timestamp = records[0].timestamp
    parts: list[bytes] = []
    max_timestamp = encode_records(parts, records, 0, first_timestamp)
    return frame_batch(
        parts, len(records), first_timestamp, max_timestamp,
        base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        transactional=transactional, control=control, compression=compression,
    )


def build_batch_of(
    sources: Sequence[Sequence[RecordInput] | RecordSource],
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    transactional: bool = False,
) -> tuple[bytes, int]:
    """One batch of the records of every source in turn (a list of `RecordInput`s or a
    `RecordSource`), and how many records it holds: the bytes `build_batch` gives for all
    their records as one list, each source encoded where it is rather than first turned into
    `RecordInput`s. A coordinator's group commit joins a round's sets so."""
    pieces: list[bytes] = []
    count = 0
    first_timestamp = max_timestamp = NO_TIMESTAMP
    for source in sources:
        if isinstance(source, Sequence):
            if not source:
                continue
            if not count:
                first_timestamp = source[0].timestamp
            last = encode_records(pieces, source, count, first_timestamp)
            count += len(source)
        else:
            if not count:
                first_timestamp = source.first_timestamp
            last = source.encode_into(pieces, count, first_timestamp)
            count += source.records_count
        max_timestamp = max(max_timestamp, last)
    if not count:
        raise ValueError("a batch holds at least one record")
    batch = frame_batch(
        pieces, count, first_timestamp, max_timestamp, producer_id=producer_id,
        producer_epoch=producer_epoch, transactional=transactional,
    )
    return batch, count


def frame_batch(
    pieces: list[bytes],
    records_count: int,
    first_timestamp: int,
    max_timestamp: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    compression: Codec = Codec.NONE,
) -> bytes:
    """The batch of `records_count` encoded records (`pieces`, joined), compressed with
    `compression`: the framing part of `build_batch`."""
    attributes = (
        (ATTR_TRANSACTIONAL if transactional else 0) | (ATTR_CONTROL if control else 0)
        | compression
    )
    body = b"".join(pieces)
    return assemble_batch(
        compress(compression, body) if compression else body,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=records_count - 1,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=records_count,
    )


def assemble_batch(body: bytes, **fields: int) -> bytes:
    """A whole batch: `body` (encoded records) framed by `batch_header`."""
    return batch_header(body, **fields) + body


def batch_header(
    body: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytes:
    """The header (with the CRC) that frames `body` as a batch. Separate from the body so that
    a producer re-stamps a retried batch (new epoch or sequence) without touching its records
    and hands header and body on as pieces, joined only into the request."""
    header = bytearray(
        _HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    )
    crc = _crc32c.crc32c(body, _crc32c.crc32c(bytes(header[_CRC_START:])))
    _CRC_FIELD.pack_into(header, 17, crc)
    return bytes(header)


def build_control_batch(
    control_type: ControlType,
    *,
    timestamp: int = NO_TIMESTAMP,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    transactional: bool = False,
    value: bytes = b"",
) -> bytes:
    """A one-record control batch (transaction marker, leader-change epoch marker, or a Raft
    configuration with its ``value``).

    The epoch marker carries no timestamp (-1), so it is never the answer of a timestamp or
    max-timestamp lookup and never enters a time index (contract §7).
    """
    return build_batch(
        [RecordInput(value=value, key=_CONTROL_KEY.pack(0, control_type), timestamp=timestamp)],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=transactional,
        control=True,
    )


# ----------------------------------------------------------------------------------------------
# Reading and checking batches


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`, checking only what is needed to trust its length.

    Raises CorruptMessageError when the bytes cannot be a batch: too short, a wrong magic, or a
    length that points past the buffer. The CRC is checked separately (`check_crc`) because
    recovery and validation need it but a reader skipping batches does not.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptMessageError(f"truncated batch header at position {pos}")
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptMessageError(f"unknown magic {header.magic} at position {pos}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptMessageError(f"batch length {header.batch_length} too small at {pos}")
    if pos + header.size > len(buf):
        raise CorruptMessageError(f"batch at position {pos} extends past the end of the data")
    # Fewer records than offsets is a compacted batch (its kept records keep their offsets),
    # down to none at all; only a produced batch must be dense (validate_batch).
    if not 0 <= header.records_count <= header.last_offset_delta + 1:
        raise CorruptMessageError(f"inconsistent record count in batch at position {pos}")
    return header


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    view = memoryview(buf)[pos + _CRC_START : pos + header.size]
    return _crc32c.crc32c(view) == header.crc


def check_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    if not crc_matches(buf, pos, header):
        raise CorruptMessageError(f"CRC mismatch in batch at position {pos}")


def codec_of(header: BatchHeader) -> Codec:
    """The batch's compression codec; UNSUPPORTED_COMPRESSION_TYPE for ids 5-7."""
    return check_codec(header.attributes & ATTR_COMPRESSION)


def plain_batch(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> tuple[bytes | bytearray | memoryview, int, BatchHeader]:
    """The batch at `pos` with its records uncompressed: (buffer, position, header) of the same
    batch when it is not compressed, else of a copy at position 0 whose records section is
    decompressed and whose header says so (codec bits 0, batch_length of the plain records;
    its CRC is the compressed batch's and is not checked again). At most MAX_BATCH_BYTES come
    out of one batch: more is CORRUPT_MESSAGE, as is a stream that does not decompress."""
    if not header.attributes & ATTR_COMPRESSION:
        return buf, pos, header
    records, _, _, plain = _plain_records(buf, pos, header)
    head = bytearray(memoryview(buf)[pos : pos + HEADER_SIZE])
    _I32.pack_into(head, 8, plain.batch_length)
    _ATTRS_FIELD.pack_into(head, 21, plain.attributes)
    return b"".join((head, records)), 0, plain


def _plain_records(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> tuple[bytes | bytearray | memoryview, int, int, BatchHeader]:
    """The records section of the batch at `pos`, uncompressed: (buffer, start, end, header
    of the plain batch). Uncompressed, that is the batch's own bytes; compressed, the buffer
    the stream was decompressed into, walked where it lies (no copy into a whole batch, as
    `plain_batch` makes for readers that want one)."""
    codec = header.attributes & ATTR_COMPRESSION
    if not codec:
        return buf, pos + HEADER_SIZE, pos + header.size, header
    records = decompress(
        check_codec(codec),
        memoryview(buf)[pos + HEADER_SIZE : pos + header.size],
        MAX_BATCH_BYTES - HEADER_SIZE,
    )
    plain = header._replace(
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(records),
        attributes=header.attributes & ~ATTR_COMPRESSION,
    )
    return records, 0, len(records), plain


def with_codec(batch: bytes, codec: Codec) -> bytes:
    """A validated batch (`validate_batch`) with its records compressed by `codec` instead
    (Codec.NONE: uncompressed), every header field kept and the CRC recomputed: what a
    leader writes when the topic's compression.type names a codec other than the batch's
    (Kafka's LogValidator recompresses the same way)."""
    header = read_header(batch)
    if header.attributes & ATTR_COMPRESSION == codec:
        return batch
    plain, pos, plain_header = plain_batch(batch, 0, header)
    records = bytes(memoryview(plain)[pos + HEADER_SIZE : pos + plain_header.size])
    return _framed(header, compress(codec, records) if codec else records, codec)


def _framed(header: BatchHeader, records: bytes, codec: int, **changes: int) -> bytes:
    """A batch of `header`'s fields (with `changes`) around `records`, already encoded with
    `codec`."""
    fields = header._replace(
        attributes=(header.attributes & ~ATTR_COMPRESSION) | codec, **changes
    )
    return assemble_batch(
        records,
        base_offset=fields.base_offset,
        partition_leader_epoch=fields.partition_leader_epoch,
        attributes=fields.attributes,
        last_offset_delta=fields.last_offset_delta,
        first_timestamp=fields.first_timestamp,
        max_timestamp=fields.max_timestamp,
        producer_id=fields.producer_id,
        producer_epoch=fields.producer_epoch,
        base_sequence=fields.base_sequence,
        records_count=fields.records_count,
    )


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch; raise on a malformed one."""
    stop = len(buf) if end is None else end
    while pos < stop:
        header = read_header(buf, pos)
        yield pos, header
        pos += header.size


def validate_batch(
    buf: bytes,
    *,
    now_ms: int,
    timestamp_before_max_ms: int,
    timestamp_after_max_ms: int,
    from_client: bool,
    require_keys: bool = False,
) -> BatchHeader:
    """Check a produced batch completely before the leader appends it.

    The whole buffer must be exactly one batch with a good CRC, records that pass
    `validate_records` with offset deltas 0..n-1, a max_timestamp equal to the largest record
    timestamp, and (for CreateTime) every timestamp within the topic's allowed distance from
    `now_ms`. `require_keys` (compacted topics) refuses a record without a key in the same pass
    (INVALID_RECORD).

    A compressed batch is checked record by record after decompressing it (a stream that
    does not decompress, or to more than MAX_BATCH_BYTES, is CORRUPT_MESSAGE; a codec id
    Kafka does not define UNSUPPORTED_COMPRESSION_TYPE); the header returned is the batch's
    own, as it will be written.

    `from_client` adds what only a producer may not do, as Kafka's LogValidator does for
    AppendOrigin.CLIENT: a control batch (INVALID_RECORD: markers are the node's to write, and
    a forged one would hide the records after it from read_committed consumers), attribute
    bits with no meaning (INVALID_RECORD), a producer id without a base sequence
    (INVALID_RECORD), and a transactional batch without a producer id (INVALID_RECORD).
    """
    header = read_header(buf, 0)
    if header.size != len(buf):
        raise CorruptMessageError("a produce request carries exactly one batch per partition")
    check_crc(buf, 0, header)
    if from_client:
        _check_client_batch(header)
    records, start, end, plain_header = _plain_records(buf, 0, header)
    if header.records_count < 1 or header.records_count != header.last_offset_delta + 1:
        raise CorruptMessageError(
            f"a produced batch holds one record per offset and at least one: "
            f"{header.records_count} records for last_offset_delta {header.last_offset_delta}"
        )
    # Offset deltas strictly increasing within 0..last_offset_delta, one record per offset:
    # exactly 0, 1, ..., n-1.
    min_delta, max_delta = _walk_records(
        records, start, end, plain_header, require_keys and not header.is_control, None
    )
    if header.first_timestamp + max_delta != header.max_timestamp:
        raise CorruptMessageError(
            f"max_timestamp {header.max_timestamp} does not match the records' largest "
            f"timestamp {header.first_timestamp + max_delta}"
        )
    if not header.is_control:
        earliest = header.first_timestamp + min_delta
        if earliest < now_ms - timestamp_before_max_ms:
            raise InvalidTimestampError(
                f"record timestamp {earliest} is more than {timestamp_before_max_ms} ms "
                f"before the broker time {now_ms}"
            )
        if header.max_timestamp > now_ms + timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"record timestamp {header.max_timestamp} is more than "
                f"{timestamp_after_max_ms} ms after the broker time {now_ms}"
            )
    return header


def _check_client_batch(header: BatchHeader) -> None:
    """The producer-only rules of `validate_batch`."""
    if header.attributes & ~ATTR_DEFINED:
        raise InvalidRecordError(
            f"batch attributes {header.attributes:#06x} set bits with no meaning "
            f"(defined: {ATTR_DEFINED:#04x})"
        )
    if header.is_control:
        raise InvalidRecordError(
            "clients may not write control batches (attribute 0x20): markers are written by "
            "the partition leader"
        )
    if header.is_transactional and header.producer_id < 0:
        raise InvalidRecordError("a transactional batch (attribute 0x10) without a producer id")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"producer id {header.producer_id} without a base sequence ({header.base_sequence})"
        )


def validate_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    *,
    require_keys: bool = False,
) -> tuple[int, int]:
    """Check the framing of every record of the batch at `pos`; return the smallest and
    largest timestamp delta (0 included: the first record's).

    The one place that decides whether a batch's records can be read: every reader of record
    contents (`decode_records`, `record_keys`, `retain_records`) calls it first and may then
    trust every length, and the leader calls it (through `validate_batch`) before a batch is
    appended, so a batch whose CRC is right but whose lengths lie never reaches a log. Each
    record must lie inside the batch, with lengths that tile it exactly (key and value -1 for
    null or >= 0, header count >= 0, header keys non-null UTF-8, header values -1 or >= 0),
    attributes 0, offset deltas strictly increasing within last_offset_delta, and the first
    record's timestamp delta 0; the records fill the batch exactly. `require_keys` (compacted
    topics) refuses a record without a key in the same pass (InvalidRecordError).
    A compressed batch's records are decompressed first (`plain_batch`). Anything else wrong
    raises CorruptMessageError naming the record and the field.

    No value is copied and no object is built per record (header keys are decoded to check
    their UTF-8): varints read inline by table (`_walk_records`), as this runs on every
    produce.
    """
    records, start, end, plain = _plain_records(buf, pos, header)
    return _walk_records(records, start, end, plain, require_keys, None)


#: A `_Sink`'s min_offset that keeps every record, whatever a batch's base offset says.
_EVERY_OFFSET = -(1 << 64)
#: The partition `decode_records` decodes for: a Record carries none.
_NO_PARTITION = TopicPartition("", -1)


class _Sink(NamedTuple):
    """Where a decoding walk (`_walk_records`) puts the records it has checked: each one at
    or after `min_offset` as a ConsumerRecord of `topic`, `partition` and `leader_epoch`,
    appended to `out`."""

    out: list[ConsumerRecord]
    topic: str
    partition: int
    leader_epoch: int
    min_offset: int


def _bytes_of(
    buf: bytes | bytearray | memoryview, start: int, end: int
) -> tuple[bytes, int, int]:
    """`buf` from `start` to `end` as bytes (indexing bytes is the fastest read of one byte,
    and slices of bytes are the keys and values handed out), with the positions in it: `buf`
    itself when it is bytes, else a copy of that range only."""
    if type(buf) is bytes:
        return buf, start, end
    return bytes(memoryview(buf)[start:end]), 0, end - start


def _walk_records(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int,
    header: BatchHeader,
    require_keys: bool,
    sink: _Sink | None,
) -> tuple[int, int]:
    """The one walk over a batch's records from `start` to `end`: checks each (see
    `validate_records`) and, with a `sink`, decodes it in the same pass (`consumer_records`:
    the sink's list is the caller's only when the walk returns, so no record of a batch that
    fails is returned). Returns the smallest and largest timestamp delta.

    The hot loop of every produce and every consumer: each varint is read inline, one byte
    (`_Z1`) or two (`_Z2`) by table, `_varint_at` only beyond; each field's bound is one
    comparison, and which check failed is worked out only when one does."""
    data, rec_pos, end = _bytes_of(buf, start, end)
    count = header.records_count
    if count * (_MIN_RECORD_LENGTH + 1) > end - rec_pos:
        raise CorruptMessageError(
            f"the batch claims {count} records, but its {end - rec_pos} bytes of records hold "
            f"at most {(end - rec_pos) // (_MIN_RECORD_LENGTH + 1)}"
        )
    z1, z2, varint_at, min_length = _Z1, _Z2, _varint_at, _MIN_RECORD_LENGTH
    last_offset_delta = header.last_offset_delta
    base = header.base_offset
    previous = -1
    min_ts = max_ts = 0
    index = 0
    if sink is not None:
        # ConsumerRecords built by tuple.__new__: no Python-level constructor call per record.
        new, append, min_delta = tuple.__new__, sink.out.append, sink.min_offset - base
        topic, partition, epoch = sink.topic, sink.partition, sink.leader_epoch
        fixed_ts = header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None
        first_ts = header.first_timestamp
    p = rec_pos
    try:
        for index in range(count):
            # length
            b = data[p]
            if b < 128:
                length = z1[b]
                p += 1
            elif (c := data[p + 1]) < 128:
                length = z2[b + (c << 7)]
                p += 2
            else:
                length, p = varint_at(data, p)
            rec_end = p + length
            if length < min_length or rec_end > end or data[p]:
                raise _bad_start(index, length, end - p, data[p] if p < end else 0)
            # timestamp delta (a varlong)
            b = data[p + 1]
            if b < 128:
                ts_delta = z1[b]
                p += 2
            elif (c := data[p + 2]) < 128:
                ts_delta = z2[b + (c << 7)]
                p += 3
            else:
                ts_delta, p = varint_at(data, p + 1, 10)
            # offset delta
            b = data[p]
            if b < 128:
                offset_delta = z1[b]
                p += 1
            elif (c := data[p + 1]) < 128:
                offset_delta = z2[b + (c << 7)]
                p += 2
            else:
                offset_delta, p = varint_at(data, p)
            if not previous < offset_delta <= last_offset_delta:
                raise _malformed(
                    index,
                    f"offset delta {offset_delta} is not above {previous} and at most "
                    f"last_offset_delta {last_offset_delta}",
                )
            previous = offset_delta
            if ts_delta > max_ts:
                max_ts = ts_delta
            elif ts_delta < min_ts:
                min_ts = ts_delta
            # key
            b = data[p]
            if b == 1 and not require_keys:  # -1: null
                key_len = -1
                key_at = p = p + 1
            else:
                if b < 128:
                    key_len = z1[b]
                    p += 1
                elif (c := data[p + 1]) < 128:
                    key_len = z2[b + (c << 7)]
                    p += 2
                else:
                    key_len, p = varint_at(data, p)
                if key_len < 0:
                    raise _bad_key(index, key_len)
                key_at = p
                p += key_len
                if p + 2 > rec_end:
                    raise _malformed(index, f"key length {key_len} runs past the record's end")
            # value
            b = data[p]
            if b < 128:
                value_len = z1[b]
                p += 1
            elif (c := data[p + 1]) < 128:
                value_len = z2[b + (c << 7)]
                p += 2
            else:
                value_len, p = varint_at(data, p)
            value_at = p
            if value_len > 0:
                p += value_len
            elif value_len < -1:
                raise _malformed(index, f"value length {value_len}")
            if p >= rec_end:
                raise _malformed(index, f"value length {value_len} runs past the record's end")
            # headers
            if data[p]:
                headers, p = _read_headers(data, p, rec_end, index, sink is not None)
            else:
                headers = ()
                p += 1
            if p != rec_end:
                raise _malformed(
                    index, f"its fields end {rec_end - p} bytes before its length says"
                    if p < rec_end else "its fields run past its length"
                )
            if sink is not None and offset_delta >= min_delta:
                append(new(ConsumerRecord, (
                    topic,
                    partition,
                    base + offset_delta,
                    first_ts + ts_delta if fixed_ts is None else fixed_ts,
                    None if key_len < 0 else data[key_at : key_at + key_len],
                    None if value_len < 0 else data[value_at : value_at + value_len],
                    headers,
                    epoch,
                )))
    except IndexError:  # a varint read past the end of the data
        raise _malformed(index, "it runs past the end of the data") from None
    except _BadVarint as exc:
        raise _malformed(index, str(exc)) from None
    if p != end:
        raise CorruptMessageError(
            f"{end - p} bytes follow the last of the batch's {count} records"
        )
    if count and _first_ts_delta(data, rec_pos):
        raise _malformed(0, "its timestamp delta is not 0 (first_timestamp is its time)")
    return min_ts, max_ts


def _first_ts_delta(data: bytes, pos: int) -> int:
    """The timestamp delta of the (checked) record at `pos`."""
    _, pos = _varint_at(data, pos)
    return _varint_at(data, pos + 1, 10)[0]


def _bad_start(index: int, length: int, room: int, attributes: int) -> TidelogError:
    """Say which of a record's first fields `_walk_records` found wrong."""
    if not _MIN_RECORD_LENGTH <= length <= room:
        return _malformed(index, f"length {length} does not fit the batch ({room} bytes left)")
    return _malformed(index, f"attributes {attributes} (records have none; must be 0)")


def _bad_key(index: int, key_len: int) -> TidelogError:
    """A null key where keys are required is a well-formed record the topic refuses: Kafka
    answers INVALID_RECORD, which no producer retries (CORRUPT_MESSAGE would be retried until
    the delivery timeout, and the cause lost). Any other negative length is malformed."""
    if key_len == -1:
        return InvalidRecordError(
            f"Compacted topic cannot accept message without key: record {index} of the batch "
            "has none"
        )
    return _malformed(index, f"key length {key_len}")


def _read_headers(
    data: bytes, p: int, rec_end: int, index: int, decode: bool
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """Check a record's headers at `p` (the count first) and return them (decoded when
    `decode`, else ()) with where they end. One-byte varints (every header key and value under
    64 bytes) are read inline, as in `_walk_records`."""
    z1, varint_at = _Z1, _varint_at
    count, p = varint_at(data, p)
    if not 0 <= count <= (rec_end - p) // 2:
        raise _malformed(index, f"header count {count} does not fit the record")
    headers: list[tuple[str, bytes | None]] = []
    for n in range(count):
        if p + 2 > rec_end:
            raise _malformed(index, f"header {n} runs past the record's end")
        b = data[p]
        if b < 128:
            key_len = z1[b]
            p += 1
        else:
            key_len, p = varint_at(data, p)
        if not 0 <= key_len <= rec_end - p - 1:
            raise _malformed(index, f"header {n} key length {key_len}")
        try:
            h_key = str(data[p : p + key_len], "utf-8")
        except UnicodeDecodeError as exc:
            raise _malformed(index, f"header {n} key is not UTF-8 ({exc.reason})") from None
        p += key_len
        b = data[p]
        if b < 128:
            value_len = z1[b]
            p += 1
        else:
            value_len, p = varint_at(data, p)
        if not -1 <= value_len <= rec_end - p:
            raise _malformed(index, f"header {n} value length {value_len}")
        if decode:
            headers.append((h_key, None if value_len < 0 else data[p : p + value_len]))
        if value_len > 0:
            p += value_len
    return tuple(headers), p


def _malformed(index: int, what: str) -> TidelogError:
    return CorruptMessageError(f"malformed record {index} of the batch: {what}")


def assign_offsets(
    buf: bytes | bytearray,
    base_offset: int,
    partition_leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> bytes:
    """The leader's in-place patch: offsets and epoch (CRC unchanged), or log-append time.

    With `log_append_time_ms` the batch switches to LogAppendTime: the timestamp-type bit and
    max_timestamp change, which are covered by the CRC, so the CRC is recomputed (as in Kafka).
    """
    if log_append_time_ms is None:
        # The hot path: one copy of the batch (join), not two (bytearray, then bytes).
        view = memoryview(buf)
        return b"".join(
            (
                _BASE_OFFSET_FIELD.pack(base_offset),
                view[8:12],
                _EPOCH_FIELD.pack(partition_leader_epoch),
                view[16:],
            )
        )
    out = bytearray(buf)
    _BASE_OFFSET_FIELD.pack_into(out, 0, base_offset)
    _EPOCH_FIELD.pack_into(out, 12, partition_leader_epoch)
    (attributes,) = _ATTRS_FIELD.unpack_from(out, 21)
    _ATTRS_FIELD.pack_into(out, 21, attributes | ATTR_TIMESTAMP_TYPE)
    _MAX_TS_FIELD.pack_into(out, 35, log_append_time_ms)
    _CRC_FIELD.pack_into(out, 17, _crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def _prefix_at(data: bytes, pos: int, end: int, index: int) -> tuple[int, int, int, int, int]:
    """The record at `pos` read up to its offset delta: (its end, timestamp delta, where the
    offset delta starts, offset delta, where the key length starts). Only its length is
    checked (it must fit the batch, as must the fields read), which is all the timestamp
    walks rely on; readers of keys, values or headers call `validate_records` first."""
    try:
        length, p = _varint_at(data, pos)
        rec_end = p + length
        if length < _MIN_RECORD_LENGTH or rec_end > end:
            raise _malformed(index, f"length {length} does not fit the batch")
        ts_delta, delta_at = _varint_at(data, p + 1, 10)
        offset_delta, p = _varint_at(data, delta_at)
    except IndexError:
        raise _malformed(index, "it runs past the end of the data") from None
    except _BadVarint as exc:
        raise _malformed(index, str(exc)) from None
    if p > rec_end:
        raise _malformed(index, "its fields run past its length")
    return rec_end, ts_delta, delta_at, offset_delta, p


def _iter_record_prefixes(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> Iterator[tuple[int, int]]:
    """Yield (offset, timestamp) of each record without decoding payloads, checking what
    it relies on as `_prefix_at` does. A compressed batch is decompressed first."""
    records, start, end, plain = _plain_records(buf, pos, header)
    data, rec_pos, end = _bytes_of(records, start, end)
    log_append = plain.timestamp_type is TimestampType.LOG_APPEND_TIME
    for index in range(plain.records_count):
        rec_end, ts_delta, _, offset_delta, _ = _prefix_at(data, rec_pos, end, index)
        ts = plain.max_timestamp if log_append else plain.first_timestamp + ts_delta
        yield plain.base_offset + offset_delta, ts
        rec_pos = rec_end


def first_record_reaching(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, target_ms: int,
    min_offset: int,
) -> tuple[int, int] | None:
    """(offset, timestamp) of the batch's first record at or after `min_offset` whose
    timestamp is >= `target_ms`, or None. A plain loop rather than `record_timestamps`: it is
    the inner loop of every lookup by timestamp, where generators cost as much as the rest.
    It checks what it relies on as `_prefix_at` does."""
    records, start, end, plain = _plain_records(buf, pos, header)
    data, rec_pos, end = _bytes_of(records, start, end)
    base, first_ts = plain.base_offset, plain.first_timestamp
    log_append = plain.timestamp_type is TimestampType.LOG_APPEND_TIME
    for index in range(plain.records_count):
        rec_end, ts_delta, _, offset_delta, _ = _prefix_at(data, rec_pos, end, index)
        ts = plain.max_timestamp if log_append else first_ts + ts_delta
        if ts >= target_ms and base + offset_delta >= min_offset:
            return base + offset_delta, ts
        rec_pos = rec_end
    return None


def record_timestamps(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> Iterator[tuple[int, int]]:
    """Yield (offset, timestamp) of each record of the batch at `pos`."""
    return _iter_record_prefixes(buf, pos, header)


def decode_records(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> list[Record]:
    """Decode every record of the batch at `pos`, checked in the same walk (a lying length
    raises CorruptMessageError instead of decoding garbage), decompressing a compressed batch
    first."""
    return [
        Record(r.offset, r.timestamp, r.key, r.value, r.headers)
        for r in consumer_records(buf, pos, header, _NO_PARTITION, _EVERY_OFFSET)
    ]


def consumer_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: BatchHeader,
    tp: TopicPartition,
    min_offset: int,
) -> list[ConsumerRecord]:
    """The consumer's records of the batch at `pos` from `min_offset` on, each carrying the
    batch's leader epoch: checked (`validate_records`) and decoded in one walk, and none
    returned unless the whole batch passes (the CRC is the caller's to check before). The
    consumer's hot loop (`_walk_records`): the varints read inline, two slices and one tuple
    per common record."""
    out: list[ConsumerRecord] = []
    records, start, end, plain = _plain_records(buf, pos, header)
    _walk_records(records, start, end, plain, False, _Sink(
        out, tp.topic, tp.partition, header.partition_leader_epoch, min_offset
    ))
    return out


class RecordKeys(NamedTuple):
    """What the cleaner needs of a batch's records, one list per field in record order: each
    record's offset and key (None: no key), and the offsets of those that delete (null value).
    Lists rather than an object per record: the cleaner reads every record of a compacted log
    twice a pass, and the offsets topic takes a record per committed offset."""

    offsets: list[int]
    keys: list[bytes | None]
    tombstones: set[int]


def record_keys(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> RecordKeys:
    """Offset, key and tombstone flag of every record of the batch at `pos`, without copying
    values, after `validate_records`."""
    records, start, end, plain = _plain_records(buf, pos, header)
    data, rec_pos, end = _bytes_of(records, start, end)
    _walk_records(data, rec_pos, end, plain, False, None)
    base = plain.base_offset
    offsets: list[int] = []
    keys: list[bytes | None] = []
    tombstones: set[int] = set()
    add_offset, add_key = offsets.append, keys.append
    for index in range(plain.records_count):
        rec_end, _, _, offset_delta, p = _prefix_at(data, rec_pos, end, index)
        offset = base + offset_delta
        add_offset(offset)
        key_len, p = _varint_at(data, p)
        if key_len >= 0:
            add_key(data[p : p + key_len])
            p += key_len
        else:
            add_key(None)
        if data[p] == 1:  # a value length of -1
            tombstones.add(offset)
        rec_pos = rec_end
    return RecordKeys(offsets, keys, tombstones)


def retain_records(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, keep: Container[int]
) -> bytes:
    """The batch at `pos` holding only its records whose offsets are in `keep` (compaction).

    As Kafka's v2 compaction, the base offset and last offset delta stay, so every kept record
    keeps its offset and the batch still spans the same offsets; a batch left with no record
    still says where its offsets went. Epoch, producer fields and attributes stay. The first
    and max timestamps are recomputed because lookups trust them, and a kept record's timestamp
    delta is re-encoded against the new first timestamp (its length with it: both are
    varints); under LogAppendTime the records read the batch's time, which stays while a
    record does.

    A compressed batch keeps its codec, as Kafka's cleaner keeps a batch's compression type:
    its kept records are compressed again. A batch left with no record is written
    uncompressed (nothing to compress; Kafka writes empty batches so too).
    """
    records, start, end, plain = _plain_records(buf, pos, header)
    data, rec_pos, end = _bytes_of(records, start, end)
    _walk_records(data, rec_pos, end, plain, False, None)
    kept: list[tuple[int, int, int]] = []  # (timestamp delta, offset delta's position, end)
    for index in range(plain.records_count):
        rec_end, ts_delta, delta_at, offset_delta, _ = _prefix_at(data, rec_pos, end, index)
        if plain.base_offset + offset_delta in keep:
            kept.append((ts_delta, delta_at, rec_end))
        rec_pos = rec_end
    pieces: list[bytes] = []
    if not kept:
        first_timestamp = max_timestamp = NO_TIMESTAMP
    else:
        first_delta = kept[0][0]
        first_timestamp = plain.first_timestamp + first_delta
        for ts_delta, delta_at, rec_end in kept:
            head = b"\x00" + varint(ts_delta - first_delta)  # attributes, timestamp delta
            pieces += (varint(len(head) + rec_end - delta_at), head, data[delta_at:rec_end])
        if plain.timestamp_type is TimestampType.LOG_APPEND_TIME:
            max_timestamp = plain.max_timestamp
        else:
            max_timestamp = plain.first_timestamp + max(ts for ts, _, _ in kept)
    body = b"".join(pieces)
    codec = codec_of(header) if kept else Codec.NONE
    return _framed(
        header, compress(codec, body) if codec else body, codec,
        first_timestamp=first_timestamp, max_timestamp=max_timestamp, records_count=len(kept),
    )


def control_type_of(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> int:
    """The ControlType of a control batch's (single) record."""
    return control_record_of(buf, pos, header)[0]


def control_record_of(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> tuple[int, int]:
    """The ControlType of a control batch's (single) record and, for a transaction marker,
    the coordinator epoch in its value (-1 when the value holds none: an epoch marker). A value
    of a later version is read as version 0, as Kafka's EndTransactionMarker does."""
    records = decode_records(buf, pos, header)
    key = records[0].key if records else None
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptMessageError("control batch without a control record and key")
    value = records[0].value
    coordinator_epoch = -1
    if value is not None and len(value) >= _TXN_MARKER_VALUE.size:
        coordinator_epoch = _TXN_MARKER_VALUE.unpack_from(value)[1]
    return int(_CONTROL_KEY.unpack_from(key)[1]), coordinator_epoch


def build_txn_marker(
    commit: bool, *, producer_id: int, producer_epoch: int, coordinator_epoch: int
) -> bytes:
    """A COMMIT or ABORT marker (kafka-mapping §8.6): a transactional control batch of the
    producer with one record, key (version 0, type), value (version 0, coordinator epoch).
    It carries no timestamp, like the epoch marker (contract §7)."""
    control_type = ControlType.COMMIT if commit else ControlType.ABORT
    return build_batch(
        [RecordInput(
            value=_TXN_MARKER_VALUE.pack(0, coordinator_epoch),
            key=_CONTROL_KEY.pack(0, control_type),
            timestamp=NO_TIMESTAMP,
        )],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )
