"""The record-batch format: one encoding from the producer to the disk to the consumer.

A batch is the unit that is produced, validated, appended, replicated, fetched and indexed.
Nothing on the write path builds a Python object per record: the leader checks a batch once,
patches its base offset and leader epoch in place and writes the bytes; followers receive and
write the same bytes; Fetch returns them; only the consumer decodes records. This module is pure
(no I/O) so that both the client and the storage engine import it, as Kafka's broker uses the
record classes of its clients module.

Layout (all integers big-endian), in the spirit of Kafka's v2 batch;
docs/reference/record-batch.md is the full specification, with test vectors, for clients in
other languages::

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

A record is fixed-width rather than varint-encoded: Python decodes one ``struct`` call much faster
than a chain of varints, and the few extra bytes per record do not matter at 1 KiB values::

    4  length          bytes that follow this field
    1  attributes      unused, 0
    4  offset_delta    offset - base offset (dense 0, 1, 2, ... when produced; the cleaner
                       leaves gaps where it removed records, see `retain_records`)
    8  timestamp_delta timestamp - first_timestamp (signed: CreateTime may go backwards)
    4  key_length      -1 for a null key
    .  key
    4  value_length    -1 for a null value (a tombstone)
    .  value
    4  header_count
       per header: 4 key_length, key (UTF-8), 4 value_length (-1 = null), value
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import islice, repeat
from operator import add, lt
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
_TS_DELTA_FIELD = struct.Struct(">q")  # in a record, after length, attributes, offset_delta
_BASE_OFFSET_FIELD = struct.Struct(">q")
_EPOCH_FIELD = struct.Struct(">i")
_RECORD_PREFIX = struct.Struct(">iBiqi")  # length, attributes, offset_delta, ts_delta, key_length
#: A keyless record with a value and no headers, the common one, is 3 pieces: this prefix
#: packed with (length, attributes 0, offset_delta, timestamp_delta, key_length -1,
#: value_length), the value, and NO_HEADERS. Public for the producer's send(), which encodes
#: such records inline (a call per record is a measurable part of its cost).
_PLAIN_RECORD_PREFIX = struct.Struct(">iBiqii")
pack_plain_record_prefix = _PLAIN_RECORD_PREFIX.pack
NO_HEADERS = bytes(4)  # a header count of 0
_I32 = struct.Struct(">i")
#: Bytes of every record beyond its key, value and headers (all its fixed fields): what a
#: producer counts per record against its batch size.
RECORD_OVERHEAD = 4 + 1 + 4 + 8 + 4 + 4 + 4
_MIN_RECORD_LENGTH = RECORD_OVERHEAD - 4  # a record's `length` with no key, value or header
_KEY_AT = 21  # where a record's key starts, relative to the record


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
        size = RECORD_OVERHEAD - 4 + len(value)
        out += (pack_plain_record_prefix(size, 0, offset_delta, timestamp_delta, -1, len(value)),
                value, NO_HEADERS)
        return size + 4
    key_len = -1 if key is None else len(key)
    value_len = -1 if value is None else len(value)
    size = RECORD_OVERHEAD - 4 + max(key_len, 0) + max(value_len, 0)
    body: list[bytes] = []
    for h_key, h_value in headers:
        encoded = h_key.encode()
        body.append(_I32.pack(len(encoded)))
        body.append(encoded)
        body.append(_I32.pack(-1 if h_value is None else len(h_value)))
        if h_value is not None:
            body.append(h_value)
        size += 8 + len(encoded) + (0 if h_value is None else len(h_value))
    out.append(_RECORD_PREFIX.pack(size, 0, offset_delta, timestamp_delta, key_len))
    if key is not None:
        out.append(key)
    out.append(_I32.pack(value_len))
    if value is not None:
        out.append(value)
    out.append(_I32.pack(len(headers)))
    out.extend(body)
    return size + 4


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
    min_delta, max_delta = _checked_walk(
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
    their UTF-8): `struct.unpack_from` at computed offsets, as this runs on every produce.
    """
    records, start, end, plain = _plain_records(buf, pos, header)
    return _checked_walk(records, start, end, plain, require_keys, None)


def _checked_walk(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int,
    header: BatchHeader,
    require_keys: bool,
    sink: _Sink | None,
) -> tuple[int, int]:
    """`_walk_records` over the plain records from `start` to `end`, saying so when a batch
    it refuses has Kafka's varint record encoding. A decoding walk over records of one shape
    (`_decode_uniform`) takes one struct call for the whole batch instead."""
    if sink is not None:
        walked = _decode_uniform(buf, start, end, header, require_keys, sink)
        if walked is not None:
            return walked
    try:
        return _walk_records(buf, start, end, header, require_keys, sink)
    except CorruptMessageError:
        if _is_kafka_varint_body(buf, start, end, header.records_count):
            raise CorruptMessageError(
                "the batch has Kafka's v2 record encoding (varint lengths); Tidelog batches "
                "use magic 2 with fixed-width big-endian record fields instead "
                "(docs/reference/record-batch.md)"
            ) from None
        raise


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


#: The struct of each shape of batch `_decode_uniform` met lately, by (key length, value
#: length, records count); emptied when full (producers send few shapes). A struct holds 32
#: bytes per field: 74 KB for 256 records, at most 0.6 MB, so at most ~10 MB are kept.
_UNIFORM_LAYOUTS: dict[tuple[int, int, int], struct.Struct] = {}
_UNIFORM_LAYOUTS_KEPT = 16
#: Batches of more records take the record-at-a-time walk (the struct grows with the count).
_UNIFORM_MAX_RECORDS = 2048


def _decode_uniform(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int,
    header: BatchHeader,
    require_keys: bool,
    sink: _Sink,
) -> tuple[int, int] | None:
    """The decoding walk of `_walk_records` for a batch whose records all have one length,
    keys of one length (or none), no null value and no header, what a producer of fixed-size
    records sends: one `struct` call reads every field of every record (a struct per shape,
    kept), the fields are checked a column at a time (`tuple.count`, `min`, `all(map(...))`,
    in C), and the ConsumerRecords are built by `map` over `zip`, with no Python code per
    record: about 0.3 us a record at 1 KiB values against 0.8 for the record-at-a-time walk.
    It checks everything that walk checks; None when the batch is not of that shape or any
    check fails, and the record-at-a-time walk then reads it (and names what is wrong)."""
    count = header.records_count
    if not 0 < count <= _UNIFORM_MAX_RECORDS or end - start < _PLAIN_RECORD_PREFIX.size:
        return None
    length, _, _, _, key_len, _ = _PLAIN_RECORD_PREFIX.unpack_from(buf, start)
    if count * (4 + length) != end - start or length < _MIN_RECORD_LENGTH:
        return None
    if key_len == -1 and not require_keys:
        value_len, width, record = length - _MIN_RECORD_LENGTH, 8, "iBiqii{1}si"
    elif key_len >= 0:
        value_len, width, record = length - _MIN_RECORD_LENGTH - key_len, 9, "iBiqi{0}si{1}si"
    else:
        return None
    if value_len < 0:
        return None
    shape = (key_len, value_len, count)
    layout = _UNIFORM_LAYOUTS.get(shape)
    if layout is None:
        if len(_UNIFORM_LAYOUTS) >= _UNIFORM_LAYOUTS_KEPT:
            _UNIFORM_LAYOUTS.clear()
        layout = struct.Struct(">" + record.format(key_len, value_len) * count)
        _UNIFORM_LAYOUTS[shape] = layout
    fields = layout.unpack_from(buf, start)  # exactly start..end: the lengths tile the batch
    deltas, ts_deltas = fields[2::width], fields[3::width]
    if (
        fields[0::width].count(length) != count or fields[1::width].count(0) != count
        or fields[4::width].count(key_len) != count
        or fields[width - 3::width].count(value_len) != count
        or fields[width - 1::width].count(0) != count
        or ts_deltas[0] or deltas[0] < 0 or deltas[-1] > header.last_offset_delta
        or not all(map(lt, deltas, islice(deltas, 1, None)))
    ):
        return None
    base = header.base_offset
    timestamps = (
        repeat(header.max_timestamp) if header.attributes & ATTR_TIMESTAMP_TYPE
        else map(add, repeat(header.first_timestamp), ts_deltas)
    )
    records = map(tuple.__new__, repeat(ConsumerRecord), zip(
        repeat(sink.topic), repeat(sink.partition), map(add, repeat(base), deltas), timestamps,
        repeat(None) if width == 8 else fields[5::9], fields[width - 2::width], repeat(()),
        repeat(sink.leader_epoch),
    ))
    skip = bisect_left(deltas, sink.min_offset - base)
    sink.out.extend(islice(records, skip, None) if skip else records)
    return min(ts_deltas), max(ts_deltas)


def _walk_records(
    buf: bytes | bytearray | memoryview,
    rec_pos: int,
    end: int,
    header: BatchHeader,
    require_keys: bool,
    sink: _Sink | None,
) -> tuple[int, int]:
    """The one walk over a batch's records: checks each (see `validate_records`) and, with
    a `sink`, decodes it in the same pass (`consumer_records`: the sink's list is the
    caller's only when the walk returns, so no record of a batch that fails is returned)."""
    count = header.records_count
    if count * RECORD_OVERHEAD > end - rec_pos:
        raise CorruptMessageError(
            f"the batch claims {count} records, but its {end - rec_pos} bytes of records hold "
            f"at most {(end - rec_pos) // RECORD_OVERHEAD}"
        )
    if count and _TS_DELTA_FIELD.unpack_from(buf, rec_pos + 9)[0]:
        raise _malformed(0, "its timestamp delta is not 0 (first_timestamp is its time)")
    # The prefix read with the value length that follows it when the key is null (the common
    # record); a record with a key has its value length read again after the key.
    unpack_prefix = _PLAIN_RECORD_PREFIX.unpack_from
    unpack_i32 = _I32.unpack_from
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
        first_ts, data = header.first_timestamp, buf if isinstance(buf, bytes) else bytes(buf)
    try:
        # One combined test per group of fields; which one failed is worked out only then.
        for index in range(count):
            length, attributes, offset_delta, ts_delta, key_len, value_len = unpack_prefix(
                buf, rec_pos
            )
            rec_end = rec_pos + 4 + length
            if (
                length < _MIN_RECORD_LENGTH or rec_end > end or attributes
                or not previous < offset_delta <= last_offset_delta
            ):
                raise _bad_prefix(index, length, end - rec_pos - 4, attributes, offset_delta,
                                  previous, last_offset_delta)
            previous = offset_delta
            if ts_delta > max_ts:
                max_ts = ts_delta
            elif ts_delta < min_ts:
                min_ts = ts_delta
            if key_len == -1 and not require_keys:
                cursor = rec_pos + _KEY_AT + 4
            elif key_len >= 0:
                cursor = rec_pos + _KEY_AT + key_len
                if cursor + 8 > rec_end:
                    raise _malformed(index, f"key length {key_len} runs past the record's end")
                (value_len,) = unpack_i32(buf, cursor)
                cursor += 4
            else:
                raise _bad_key(index, key_len)
            if value_len > 0:
                cursor += value_len
            elif value_len < -1:
                raise _malformed(index, f"value length {value_len}")
            if cursor + 4 > rec_end:
                raise _malformed(index, f"value length {value_len} runs past the record's end")
            (header_count,) = unpack_i32(buf, cursor)
            fields_end = cursor + 4
            if header_count:
                fields_end = _walk_headers(buf, fields_end, rec_end, header_count, index)
            if fields_end != rec_end:
                raise _malformed(
                    index, f"its fields end {rec_end - fields_end} bytes before its length says"
                )
            if sink is not None and offset_delta >= min_delta:
                append(new(ConsumerRecord, (
                    topic,
                    partition,
                    base + offset_delta,
                    first_ts + ts_delta if fixed_ts is None else fixed_ts,
                    None if key_len < 0 else data[rec_pos + _KEY_AT : rec_pos + _KEY_AT + key_len],
                    None if value_len < 0 else data[cursor - value_len : cursor],
                    _decode_headers(data, cursor) if header_count else (),
                    epoch,
                )))
            rec_pos = rec_end
    except struct.error:  # a prefix read past the end of `buf` itself
        raise _malformed(index, "it starts too close to the end of the data") from None
    if rec_pos != end:
        raise CorruptMessageError(
            f"{end - rec_pos} bytes follow the last of the batch's {count} records"
        )
    return min_ts, max_ts


def _bad_prefix(
    index: int, length: int, room: int, attributes: int, offset_delta: int, previous: int,
    last_offset_delta: int,
) -> TidelogError:
    """Say which of a record's fixed fields `_walk_records` found wrong."""
    if not _MIN_RECORD_LENGTH <= length <= room:
        return _malformed(index, f"length {length} does not fit the batch ({room} bytes left)")
    if attributes:
        return _malformed(index, f"attributes {attributes} (records have none; must be 0)")
    return _malformed(
        index,
        f"offset delta {offset_delta} is not above {previous} and at most last_offset_delta "
        f"{last_offset_delta}",
    )


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


def _walk_headers(
    buf: bytes | bytearray | memoryview, cursor: int, rec_end: int, count: int, index: int
) -> int:
    """Check a record's headers from `cursor` (past the count); return where they end."""
    if not 0 <= count <= (rec_end - cursor) // 8:
        raise _malformed(index, f"header count {count} does not fit the record")
    unpack_i32 = _I32.unpack_from
    for n in range(count):
        if cursor + 8 > rec_end:
            raise _malformed(index, f"header {n} runs past the record's end")
        (key_len,) = unpack_i32(buf, cursor)
        cursor += 4
        if not 0 <= key_len <= rec_end - cursor - 4:
            raise _malformed(index, f"header {n} key length {key_len}")
        try:
            str(buf[cursor : cursor + key_len], "utf-8")
        except UnicodeDecodeError as exc:
            raise _malformed(index, f"header {n} key is not UTF-8 ({exc.reason})") from None
        cursor += key_len
        (value_len,) = unpack_i32(buf, cursor)
        cursor += 4
        if not -1 <= value_len <= rec_end - cursor:
            raise _malformed(index, f"header {n} value length {value_len}")
        if value_len > 0:
            cursor += value_len
    return cursor


def _malformed(index: int, what: str) -> TidelogError:
    return CorruptMessageError(f"malformed record {index} of the batch: {what}")


def _is_kafka_varint_body(
    buf: bytes | bytearray | memoryview, pos: int, end: int, count: int
) -> bool:
    """Whether the records from `pos` to `end` read as `count` records of Kafka's v2 encoding
    (zigzag varint length, attributes byte 0, ...): only to say so when refusing them."""
    if count < 1:
        return False
    for _ in range(count):
        length = 0
        for shift in range(0, 35, 7):
            if pos >= end:
                return False
            byte = buf[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
        else:
            return False
        length = (length >> 1) ^ -(length & 1)
        if length < 1 or pos + length > end or buf[pos] != 0:
            return False
        pos += length
    return pos == end


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


def _iter_record_prefixes(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> Iterator[tuple[int, int, int]]:
    """Yield (record position, offset, timestamp) of each record without decoding payloads.

    Only each record's length is checked (it must fit the batch), which is all this walk
    relies on; readers of keys, values or headers call `validate_records` first. A compressed
    batch is decompressed first, so positions are then into its plain copy: callers that use
    them pass a plain batch (`plain_batch`)."""
    buf, pos, header = plain_batch(buf, pos, header)
    unpack = _RECORD_PREFIX.unpack_from
    rec_pos = pos + HEADER_SIZE
    end = pos + header.size
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    for index in range(header.records_count):
        if rec_pos + RECORD_OVERHEAD > end:
            raise _malformed(index, "it starts too close to the end of the batch to hold one")
        length, _attrs, offset_delta, ts_delta, _ = unpack(buf, rec_pos)
        if length < _MIN_RECORD_LENGTH or rec_pos + 4 + length > end:
            raise _malformed(index, f"length {length} does not fit the batch")
        ts = header.max_timestamp if log_append else header.first_timestamp + ts_delta
        yield rec_pos, header.base_offset + offset_delta, ts
        rec_pos += 4 + length


def first_record_reaching(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, target_ms: int,
    min_offset: int,
) -> tuple[int, int] | None:
    """(offset, timestamp) of the batch's first record at or after `min_offset` whose
    timestamp is >= `target_ms`, or None. A plain loop rather than `record_timestamps`: it is
    the inner loop of every lookup by timestamp, where generators cost as much as the rest.
    It checks what it relies on as `_iter_record_prefixes` does."""
    buf, pos, header = plain_batch(buf, pos, header)
    unpack = _RECORD_PREFIX.unpack_from
    base, first_ts = header.base_offset, header.first_timestamp
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    rec_pos = pos + HEADER_SIZE
    end = pos + header.size
    for index in range(header.records_count):
        if rec_pos + RECORD_OVERHEAD > end:
            raise _malformed(index, "it starts too close to the end of the batch to hold one")
        length, _attrs, offset_delta, ts_delta, _ = unpack(buf, rec_pos)
        if length < _MIN_RECORD_LENGTH or rec_pos + 4 + length > end:
            raise _malformed(index, f"length {length} does not fit the batch")
        ts = header.max_timestamp if log_append else first_ts + ts_delta
        if ts >= target_ms and base + offset_delta >= min_offset:
            return base + offset_delta, ts
        rec_pos += 4 + length
    return None


def record_timestamps(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader
) -> Iterator[tuple[int, int]]:
    """Yield (offset, timestamp) of each record of the batch at `pos`."""
    for _, offset, ts in _iter_record_prefixes(buf, pos, header):
        yield offset, ts


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
    consumer's hot loop: one struct call for a whole batch of records of one shape
    (`_decode_uniform`), else one unpack, two slices and one tuple per common record."""
    out: list[ConsumerRecord] = []
    records, start, end, plain = _plain_records(buf, pos, header)
    _checked_walk(records, start, end, plain, False, _Sink(
        out, tp.topic, tp.partition, header.partition_leader_epoch, min_offset
    ))
    return out


def _decode_headers(data: bytes, cursor: int) -> tuple[tuple[str, bytes | None], ...]:
    """The headers at `cursor` (the count first) of a validated record."""
    unpack_i32 = _I32.unpack_from
    (count,) = unpack_i32(data, cursor)
    cursor += 4
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        (hk_len,) = unpack_i32(data, cursor)
        h_key = data[cursor + 4 : cursor + 4 + hk_len].decode()
        cursor += 4 + hk_len
        (hv_len,) = unpack_i32(data, cursor)
        cursor += 4
        h_value = None if hv_len < 0 else data[cursor : cursor + hv_len]
        cursor += max(hv_len, 0)
        headers.append((h_key, h_value))
    return tuple(headers)


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
    values: one `struct` call a record (two with a key), after `validate_records`."""
    buf, pos, header = plain_batch(buf, pos, header)
    validate_records(buf, pos, header)
    data = buf if isinstance(buf, bytes) else bytes(buf)  # slices of bytes are bytes
    unpack_prefix = _PLAIN_RECORD_PREFIX.unpack_from
    unpack_i32 = _I32.unpack_from
    base = header.base_offset
    offsets: list[int] = []
    keys: list[bytes | None] = []
    tombstones: set[int] = set()
    add_offset, add_key = offsets.append, keys.append
    rec_pos = pos + HEADER_SIZE
    for _ in range(header.records_count):
        # The value length is the prefix's last field when the key is null, else after it.
        length, _attrs, offset_delta, _ts, key_len, value_len = unpack_prefix(data, rec_pos)
        offset = base + offset_delta
        add_offset(offset)
        if key_len >= 0:
            key_at = rec_pos + _KEY_AT
            add_key(data[key_at : key_at + key_len])
            (value_len,) = unpack_i32(data, key_at + key_len)
        else:
            add_key(None)
        if value_len < 0:
            tombstones.add(offset)
        rec_pos += 4 + length
    return RecordKeys(offsets, keys, tombstones)


def retain_records(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, keep: Container[int]
) -> bytes:
    """The batch at `pos` holding only its records whose offsets are in `keep` (compaction).

    As Kafka's v2 compaction, the base offset and last offset delta stay, so every kept record
    keeps its offset and the batch still spans the same offsets; a batch left with no record
    still says where its offsets went. Epoch, producer fields and attributes stay. The first
    and max timestamps are recomputed because lookups trust them; under LogAppendTime the
    records read the batch's time, which stays while a record does.

    A compressed batch keeps its codec, as Kafka's cleaner keeps a batch's compression type:
    its kept records are compressed again. A batch left with no record is written
    uncompressed (nothing to compress; Kafka writes empty batches so too).
    """
    original = header
    buf, pos, header = plain_batch(buf, pos, header)
    validate_records(buf, pos, header)
    unpack = _RECORD_PREFIX.unpack_from
    view = memoryview(buf)
    rec_pos = pos + HEADER_SIZE
    kept: list[tuple[bytearray, int]] = []
    for _ in range(header.records_count):
        length, _attrs, offset_delta, ts_delta, _ = unpack(buf, rec_pos)
        if header.base_offset + offset_delta in keep:
            kept.append((bytearray(view[rec_pos : rec_pos + 4 + length]), ts_delta))
        rec_pos += 4 + length
    if not kept:
        first_timestamp = max_timestamp = NO_TIMESTAMP
    else:
        first_delta = kept[0][1]
        first_timestamp = header.first_timestamp + first_delta
        for record, ts_delta in kept:
            _TS_DELTA_FIELD.pack_into(record, 9, ts_delta - first_delta)
        if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
            max_timestamp = header.max_timestamp
        else:
            max_timestamp = header.first_timestamp + max(ts_delta for _, ts_delta in kept)
    records = b"".join(record for record, _ in kept)
    codec = codec_of(original) if kept else Codec.NONE
    return _framed(
        header, compress(codec, records) if codec else records, codec,
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
