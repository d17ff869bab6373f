"""Kafka's batch compression codecs, with the framing Kafka's Java client writes and reads.

A compressed batch keeps its 61-byte header as it is and replaces its records section (all the
records, back to back) by one compressed stream; attribute bits 0-2 name the codec with Kafka's
numbers. The codecs themselves come from ``cramjam``; what lives here is the framing and the
limits that make bytes from outside safe to decompress:

* gzip (1): a gzip stream (RFC 1952), as ``java.util.zip.GZIPOutputStream`` writes.
* snappy (2): xerial's snappy-java stream framing, which Kafka's Java client writes: the
  16-byte header ``\\x82SNAPPY\\x00``, version 1, minimum compatible version 1, then blocks of
  an int32 big-endian length and a raw snappy block, each of at most 32 KiB uncompressed.
  xerial's reader takes a stream without that header as one raw snappy block (what some
  non-Java clients write), so this one does too.
* lz4 (3): the LZ4 frame format with independent blocks of at most 64 KiB, which is what
  Kafka's Lz4BlockInputStream can read (it decompresses each block on its own, so a frame of
  linked blocks would not be readable by Kafka).
* zstd (4): a zstd frame.

Decompression never trusts a length it is told: the output goes into a buffer of bounded size
(``limit``), and a stream that would produce more, whatever its headers claim, is refused
with CORRUPT_MESSAGE without allocating more than the limit. A decompression bomb costs at most
``limit`` bytes of memory and the time to fill them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

import cramjam

from tidelog.errors import CorruptMessageError, InvalidConfigError, UnsupportedCompressionTypeError


class Codec(IntEnum):
    """Kafka's compression codec ids (batch attribute bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


#: A producer's ``compression.type`` values (Kafka's ProducerConfig names).
PRODUCER_CODECS: dict[str, Codec] = {
    "none": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}
#: A topic's ``compression.type`` value that keeps whatever codec the producer used.
TOPIC_KEEPS_PRODUCER_CODEC = "producer"
#: A topic's ``compression.type`` values other than ``producer`` (Kafka's topic-config names:
#: ``uncompressed`` where a producer says ``none``).
TOPIC_CODECS: dict[str, Codec] = {
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}


def codec_name(codec: int) -> str:
    """The producer-config name of a codec id (``unknown codec N`` for ids Kafka has none
    for)."""
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"unknown codec {codec}"


def producer_codec(name: str) -> Codec:
    """A producer's ``compression.type``; anything else is InvalidConfigError."""
    try:
        return PRODUCER_CODECS[name.strip().lower()]
    except KeyError:
        raise InvalidConfigError(
            f"compression.type={name!r} must be one of {', '.join(PRODUCER_CODECS)}"
        ) from None


def check_codec(codec: int) -> Codec:
    """`codec` as a Codec, or UNSUPPORTED_COMPRESSION_TYPE for the ids 5-7 that Kafka leaves
    undefined."""
    try:
        return Codec(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(
            f"the batch is compressed with codec {codec}, which neither Kafka nor Tidelog "
            "defines (1 gzip, 2 snappy, 3 lz4, 4 zstd)"
        ) from None


# ----------------------------------------------------------------------------------------------
# Compression

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
#: Snappy's largest expansion is a 3-byte copy of 64 bytes; a block stating more than this
#: many times its size is a lie, refused before its output buffer is allocated.
_SNAPPY_MAX_RATIO = 32  # snappy-java's default block size, which Kafka's producer uses
_I32 = struct.Struct(">i")
_LZ4_MAGIC = 0x184D2204
_ZSTD_MAGIC = 0xFD2FB528
_U32_LE = struct.Struct("<I")


def compress(codec: Codec, data: bytes) -> bytes:
    """`data` compressed with `codec`, framed as Kafka's Java client frames it."""
    if codec is Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Codec.SNAPPY:
        parts = [_XERIAL_HEADER]
        view = memoryview(data)
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
            parts += (_I32.pack(len(block)), block)
        return b"".join(parts)
    if codec is Codec.LZ4:
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec is Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"nothing to compress with {codec!r}")


# ----------------------------------------------------------------------------------------------
# Decompression

#: The smallest output buffer tried first when a stream says nothing of its size.
_FIRST_GUESS = 64 * 1024
#: The largest ratio of output to input a stream's own size hint is believed up to at first:
#: beyond real data's ratios, and it keeps garbage whose "size" field says gigabytes from
#: costing a buffer of the whole limit (the buffer grows from there if the data is real).
_MAX_HINTED_RATIO = 256
#: How much larger each next buffer is when the previous one was too small.
_GROWTH = 4
#: What cramjam says when the output buffer is full (Rust's io::ErrorKind::WriteZero, and
#: zstd's one-shot path for a frame that states its size): the only errors after which a
#: larger buffer may succeed. Any other is a broken stream. (tests/records/test_compression.py
#: checks that data of every codec larger than the first buffer still decompresses.)
_BUFFER_FULL = ("failed to write whole buffer", "Destination buffer is too small")


def decompress(codec: Codec, data: bytes | memoryview, limit: int) -> bytes | memoryview:
    """`data` decompressed, at most `limit` bytes of it; CORRUPT_MESSAGE for a stream that is
    not valid for `codec` or would decompress to more than `limit` bytes. The result may be a
    view of the buffer it was decompressed into (a leader validating a batch walks it there:
    no copy)."""
    try:
        if codec is Codec.SNAPPY:
            return _snappy(data, limit)
        if codec is Codec.GZIP:
            return _bounded(cramjam.gzip.decompress_into, data, limit, _gzip_size(data))
        if codec is Codec.LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, limit, _lz4_size(data))
        if codec is Codec.ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, limit, _zstd_size(data))
    except cramjam.DecompressionError as exc:
        raise CorruptMessageError(f"the batch's {codec_name(codec)} records do not decompress: "
                                  f"{exc}") from None
    raise ValueError(f"nothing to decompress with {codec!r}")


def _bounded(
    decompress_into: Callable[[bytes | memoryview, bytearray], int],
    data: bytes | memoryview,
    limit: int,
    size_hint: int | None,
) -> memoryview:
    """Decompress into a buffer that starts at the stream's own size hint (or a guess) and
    grows while the output does not fit, never past `limit`. cramjam stops with an error as
    soon as a buffer is full, so a stream that lies about its size costs no more than the
    buffer; a stream broken in any other way fails at once."""
    if size_hint is not None:
        size = min(size_hint, limit, _FIRST_GUESS + _MAX_HINTED_RATIO * len(data))
    else:
        size = min(limit, max(_FIRST_GUESS, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if not any(text in str(exc) for text in _BUFFER_FULL):
                raise
            if size >= limit:
                raise CorruptMessageError(
                    f"the batch's records decompress to more than {limit} bytes"
                ) from None
            size = min(limit, max(size, 1024) * _GROWTH)
            continue
        return memoryview(out)[:written]


def _gzip_size(data: bytes | memoryview) -> int | None:
    """ISIZE, the gzip trailer's uncompressed size (modulo 2**32, and only of the last member:
    a hint)."""
    return _U32_LE.unpack_from(data, len(data) - 4)[0] if len(data) >= 18 else None


def _lz4_size(data: bytes | memoryview) -> int | None:
    """The frame descriptor's content size, when the frame carries one."""
    if len(data) >= 15 and _U32_LE.unpack_from(data, 0)[0] == _LZ4_MAGIC and data[4] & 0x08:
        return int(struct.unpack_from("<Q", data, 6)[0])
    return None


def _zstd_size(data: bytes | memoryview) -> int | None:
    """The first frame's content size, when its header carries one (RFC 8878 §3.1.1.1)."""
    if len(data) < 6 or _U32_LE.unpack_from(data, 0)[0] != _ZSTD_MAGIC:
        return None
    descriptor = data[4]
    size_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (single_segment, 2, 4, 8)[size_flag]
    if width == 0 or len(data) < at + width:
        return None
    size = int.from_bytes(data[at : at + width], "little")
    return size + 256 if width == 2 else size


def _snappy(data: bytes | memoryview, limit: int) -> bytes:
    """xerial-framed snappy, or one raw snappy block when the header is missing. Every raw
    block states its uncompressed length up front, which is checked against what is left of
    `limit` before the block is decompressed."""
    view = memoryview(data)
    if bytes(view[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return _snappy_block(view, limit, limit)
    if len(view) < len(_XERIAL_HEADER):
        raise CorruptMessageError("the batch's snappy records end inside the stream header")
    parts: list[bytes] = []
    left = limit
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptMessageError("the batch's snappy records end inside a block length")
        (length,) = _I32.unpack_from(view, pos)
        pos += 4
        if not 0 <= length <= len(view) - pos:
            raise CorruptMessageError(
                f"a snappy block length of {length} runs past the batch's records"
            )
        block = _snappy_block(view[pos : pos + length], left, limit)
        left -= len(block)
        parts.append(block)
        pos += length
    return b"".join(parts)


def _snappy_block(block: memoryview, room: int, limit: int) -> bytes:
    """One raw block, refused before it is decompressed when its stated size is over `room`
    (what is left of `limit`)."""
    size = cramjam.snappy.decompress_raw_len(block)
    if size > _SNAPPY_MAX_RATIO * len(block):
        raise CorruptMessageError(
            f"a snappy block of {len(block)} bytes says it holds {size}, more than snappy can "
            "encode in that many"
        )
    if size > room:
        raise CorruptMessageError(
            f"the batch's records decompress to more than {limit} bytes (a snappy block "
            f"says {size} more)"
        )
    out = bytearray(size)
    written = cramjam.snappy.decompress_raw_into(block, out)
    if written != size:
        raise CorruptMessageError(f"a snappy block said {size} bytes and held {written}")
    return bytes(out)
