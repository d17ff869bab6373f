"""Reading the records of the coordinators' internal topics (`__consumer_offsets`,
`__transaction_state`): the fixed-width fields, strings and checks both record formats are made
of, and the walk over a partition's committed batches that both state machines replay.

Every byte is checked (lengths that lie, truncation, trailing bytes): a record that does not
decode is a `CoordinatorRecordError`, which a loader logs and skips, never a crash.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator

from tidelog.errors import CorruptMessageError, TidelogError
from tidelog.records import BatchHeader, Record, crc_matches, decode_records, read_header

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
#: The longest string an int16 length prefix can announce.
MAX_INT16_STRING_BYTES = 0x7FFF

log = logging.getLogger(__name__)


class CoordinatorRecordError(ValueError):
    """A key or value of an internal topic that does not decode (or cannot be encoded)."""


def encode_string(text: str, what: str, length_field: struct.Struct = I16) -> bytes:
    """`text` as UTF-8 after its length; `CoordinatorRecordError` if an int16 length cannot
    hold it."""
    data = text.encode()
    if length_field is I16 and len(data) > MAX_INT16_STRING_BYTES:
        raise CoordinatorRecordError(
            f"{what} is {len(data)} bytes of UTF-8, the limit is {MAX_INT16_STRING_BYTES}"
        )
    return length_field.pack(len(data)) + data


def read_version(data: bytes, what: str) -> int:
    if len(data) < I16.size:
        raise truncated(what, 0)
    return int(I16.unpack_from(data)[0])


def versioned(data: bytes | memoryview, version: int, what: str) -> bytes:
    """`data` as bytes once its version says `version`: the first check of every decoder of
    a key or value ("key" or "value" for `what`) that reads one version only."""
    data = bytes(data)
    found = read_version(data, what)
    if found != version:
        raise CoordinatorRecordError(f"unknown {what} version {found}")
    return data


def read_string(
    data: bytes, pos: int, length_field: struct.Struct, what: str
) -> tuple[str, int]:
    """The string at `pos` and the position after it."""
    start = pos + length_field.size
    if start > len(data):
        raise truncated(what, pos)
    (length,) = length_field.unpack_from(data, pos)
    if length < 0:
        raise CoordinatorRecordError(f"negative string length {length} in the {what}")
    end = start + length
    if end > len(data):
        raise CoordinatorRecordError(f"string length {length} runs past the end of the {what}")
    try:
        return data[start:end].decode(), end
    except UnicodeDecodeError as exc:
        raise CoordinatorRecordError(f"string in the {what} is not UTF-8: {exc}") from None


def check_size(data: bytes, size: int, what: str) -> None:
    """`data` holds exactly `size` bytes: its last field is whole and nothing follows."""
    if len(data) < size:
        raise truncated(what, len(data))
    if len(data) > size:
        raise CoordinatorRecordError(f"{len(data) - size} bytes left over after the {what}")


def truncated(what: str, pos: int) -> CoordinatorRecordError:
    return CoordinatorRecordError(f"the {what} ends inside a field at byte {pos}")


# ---- replaying committed batches -------------------------------------------------------------


def new_batches(
    data: bytes | memoryview, applied_offset: int, what: str
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in `data` that ends past `applied_offset`, in log
    order; bytes that do not parse as batches end the walk with a logged reason."""
    pos = 0
    while pos < len(data):
        try:
            header = read_header(data, pos)
        except CorruptMessageError as exc:
            log.error(
                "%s data after offset %d does not parse as batches (%s): its last %d bytes are "
                "not applied", what, applied_offset, exc, len(data) - pos,
            )
            return
        if header.last_offset > applied_offset:
            yield pos, header
        pos += header.size


def checked_records(
    data: bytes | memoryview, pos: int, header: BatchHeader, where: str
) -> list[Record] | None:
    """The records of the batch at `pos` once its CRC matches; None, logged, when it does
    not or they do not decode."""
    try:
        if not crc_matches(data, pos, header):
            raise CorruptMessageError("CRC mismatch")
        return decode_records(data, pos, header)
    except TidelogError as exc:  # CorruptMessageError, or a compression codec
        log.warning("%s skipped: %s", where, exc)
        return None
