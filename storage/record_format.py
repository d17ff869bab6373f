"""The record format of a data dir, and the one-time conversion of data written before
Tidelog's records became Kafka's v2 records.

Up to format 1, a record inside a batch had fixed-width big-endian fields (int32 length, int8
attributes, int32 offset delta, int64 timestamp delta, int32 key and value lengths, int32
header count, int32 header lengths); the batch header was already Kafka's. Format 2 is Kafka's
v2 record (`tidelog.records`). A node starting on a data dir that does not say it holds format 2
converts every segment of every partition (the internal topics and the cluster metadata log
included: they are partitions of the data dir like any other) before it serves anything, and
then writes the marker file. Only the records section of each batch is re-encoded; base offset,
leader epoch, attributes (codec included: the records are compressed again with it), offsets,
timestamps and producer fields stay, and the CRC and batch length are recomputed. The offset and
time indexes, which hold file positions that the new sizes move, are deleted so that the
loader rebuilds them (`storage.loader`); the transaction index holds offsets only and stays.

The conversion is safe to interrupt: each segment is written beside the old one and renamed
over it, and a batch is converted only when its records read as format 1 (`_old_records`), so
a restart after a crash converts what is left and never a batch twice. A format-2 batch never
reads as format 1: its first byte, a record's varint length, is never 0, so the int32 length
format 1 would see is at least 16 MiB, past any batch that could hold it.

The reader of format 1 here is the only one left: nothing else reads that format.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from pathlib import Path

from tidelog.compression import compress, decompress
from tidelog.errors import InvalidConfigError, TidelogError
from tidelog.records import (
    ATTR_COMPRESSION,
    HEADER_SIZE,
    MAX_BATCH_BYTES,
    BatchHeader,
    assemble_batch,
    codec_of,
    encode_record,
    iter_batches,
)
from tidelog.storage.checkpoint import replace_durably
from tidelog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX

log = logging.getLogger(__name__)

#: The file in a data dir naming the record format of everything in it.
RECORD_FORMAT_FILE = "record-format"
#: Kafka's v2 records: what this version writes.
RECORD_FORMAT = 2
#: The record format of a data dir without the file that holds segments.
FIXED_WIDTH_FORMAT = 1

#: A format-1 record's fields up to its key: length, attributes, offset delta, timestamp
#: delta, key length.
_OLD_PREFIX = struct.Struct(">iBiqi")
_OLD_I32 = struct.Struct(">i")
#: A format-1 record's length with no key, value or header.
_OLD_MIN_LENGTH = _OLD_PREFIX.size - 4 + 8

Fields = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _old_records(records: bytes, count: int) -> list[Fields] | None:
    """The (offset delta, timestamp delta, key, value, headers) of each of the `count`
    format-1 records that make up `records` exactly, or None when they do not read as such."""
    out: list[Fields] = []
    pos, end = 0, len(records)
    try:
        for _ in range(count):
            length, attributes, offset_delta, ts_delta, key_len = _OLD_PREFIX.unpack_from(
                records, pos)
            rec_end = pos + 4 + length
            if length < _OLD_MIN_LENGTH or rec_end > end or attributes or key_len < -1:
                return None
            cursor = pos + _OLD_PREFIX.size
            key = None if key_len < 0 else records[cursor : cursor + key_len]
            cursor += max(key_len, 0)
            (value_len,) = _OLD_I32.unpack_from(records, cursor)
            cursor += 4
            if value_len < -1:
                return None
            value = None if value_len < 0 else records[cursor : cursor + value_len]
            cursor += max(value_len, 0)
            (header_count,) = _OLD_I32.unpack_from(records, cursor)
            cursor += 4
            if not 0 <= header_count <= (rec_end - cursor) // 8:
                return None
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(header_count):
                (h_key_len,) = _OLD_I32.unpack_from(records, cursor)
                if h_key_len < 0:
                    return None
                h_key = records[cursor + 4 : cursor + 4 + h_key_len].decode()
                cursor += 4 + h_key_len
                (h_value_len,) = _OLD_I32.unpack_from(records, cursor)
                cursor += 4
                if h_value_len < -1:
                    return None
                headers.append((h_key, None if h_value_len < 0 else
                                records[cursor : cursor + h_value_len]))
                cursor += max(h_value_len, 0)
            if cursor != rec_end:
                return None
            out.append((offset_delta, ts_delta, key, value, tuple(headers)))
            pos = rec_end
    except (struct.error, UnicodeDecodeError):
        return None
    return out if pos == end else None


def convert_batch(buf: bytes, pos: int, header: BatchHeader) -> bytes | None:
    """The batch at `pos` with its format-1 records re-encoded as Kafka's v2 records (every
    header field kept but the length and CRC), or None when its records are not format 1
    (already converted, or no record at all)."""
    if not header.records_count:
        return None
    body = buf[pos + HEADER_SIZE : pos + header.size]
    codec = codec_of(header)
    try:
        plain = decompress(codec, body, MAX_BATCH_BYTES) if codec else body
    except TidelogError:
        return None
    fields = _old_records(bytes(plain), header.records_count)
    if fields is None:
        return None
    parts: list[bytes] = []
    for offset_delta, ts_delta, key, value, headers in fields:
        encode_record(parts, offset_delta, ts_delta, key, value, headers)
    records = b"".join(parts)
    return assemble_batch(
        compress(codec, records) if codec else records,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes & ~ATTR_COMPRESSION | codec,
        last_offset_delta=header.last_offset_delta,
        first_timestamp=header.first_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=header.records_count,
    )


def convert_segment(path: Path) -> int:
    """Rewrite the segment file at `path` with its format-1 batches converted; return how
    many were. The new file is written and synced beside it and renamed over it, and the
    segment's offset and time indexes are deleted (the loader rebuilds them). A torn batch at
    the end (a crash while appending) is kept as it is, for the loader's recovery to cut."""
    data = path.read_bytes()
    pieces: list[bytes] = []
    converted = done = 0
    try:
        for pos, header in iter_batches(data):
            new = convert_batch(data, pos, header)
            pieces.append(data[pos : pos + header.size] if new is None else new)
            converted += new is not None
            done = pos + header.size
    except TidelogError:
        pass  # a torn or damaged tail: kept below, unread, for recovery to judge
    if not converted:
        return 0
    pieces.append(data[done:])
    base = path.name.split(".")[0]
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (path.parent / (base + suffix)).unlink(missing_ok=True)
    replace_durably(path, b"".join(pieces))
    return converted


def _segment_files(directory: Path) -> Sequence[Path]:
    """The files of `directory` holding batches: segments and the rewritten segments a
    cleaner left to be swapped in (``.log.swap``)."""
    return sorted(p for p in directory.iterdir()
                  if p.name.endswith(LOG_SUFFIX) or p.name.endswith(LOG_SUFFIX + ".swap"))


def prepare_record_format(data_dir: Path) -> None:
    """Make every segment of `data_dir` Kafka's v2 records before the node serves: convert
    a data dir of format 1 (logging a line per partition), then record format 2 in
    RECORD_FORMAT_FILE; a fresh data dir only gets the file. InvalidConfigError for a format
    this version does not know (written by a later one)."""
    marker = data_dir / RECORD_FORMAT_FILE
    try:
        text = marker.read_text().strip()
    except FileNotFoundError:
        text = ""
    if text:
        if text != str(RECORD_FORMAT):
            raise InvalidConfigError(
                f"data dir {data_dir} holds records of format {text!r} ({marker}); this "
                f"version reads format {RECORD_FORMAT} and converts format "
                f"{FIXED_WIDTH_FORMAT} only"
            )
        return
    partitions = sorted(p for p in data_dir.iterdir() if p.is_dir() and _segment_files(p))
    for directory in partitions:
        batches = sum(convert_segment(path) for path in _segment_files(directory))
        log.info("converted %d batches of %s to Kafka's v2 records", batches, directory.name,
                 extra={"event": "record_format_converted", "partition": directory.name,
                        "batches": batches})
    replace_durably(marker, f"{RECORD_FORMAT}\n".encode())
