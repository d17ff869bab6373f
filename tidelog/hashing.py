"""Hash functions that must match Kafka's Java code bit for bit.

A key must land on the same partition whichever client produced it, and a group must map to the
same `__consumer_offsets` partition on every node, so these reproduce Java's 32-bit signed
arithmetic rather than using Python's `hash()`.
"""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF


def _to_int32(value: int) -> int:
    value &= _MASK32
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & _MASK32
    blocks = length // 4
    for i in range(blocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & _MASK32
        k ^= k >> 24
        k = (k * m) & _MASK32
        h = (h * m) & _MASK32
        h ^= k
    tail = length & 3
    base = blocks * 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(value: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The default partitioner for keyed records."""
    return to_positive(murmur2(key)) % num_partitions


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode`: h = 31*h + c over UTF-16 code units, signed 32-bit."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + int.from_bytes(encoded[i : i + 2], "big")) & _MASK32
    return _to_int32(h)


def java_abs(value: int) -> int:
    """Kafka's `Utils.abs`: like abs, but Integer.MIN_VALUE maps to 0."""
    return 0 if value == -0x8000_0000 else abs(value)


def group_partition(group_id: str, partition_count: int) -> int:
    """The `__consumer_offsets` partition of a group (contract §8)."""
    return java_abs(java_string_hash(group_id)) % partition_count
