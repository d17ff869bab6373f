"""Java-compatible hashes: the vectors come from Kafka (kafka-mapping §7.3 and the Java
client's partitioner tests), so a drift from Java arithmetic fails here."""

from __future__ import annotations

import pytest

from tidelog.hashing import group_partition, java_string_hash, murmur2, partition_for_key


@pytest.mark.parametrize(
    ("group", "hash_code", "partition"),
    [
        ("", 0, 0),
        ("grp", 102629, 29),
        ("foo", 101574, 24),
        ("my-group", -1906497762, 12),
        ("test-group", 627841412, 12),
        ("polygenelubricants", -2147483648, 0),
    ],
)
def test_group_partition_matches_kafka(group: str, hash_code: int, partition: int) -> None:
    assert java_string_hash(group) == hash_code
    assert group_partition(group, 50) == partition


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Values from Kafka's UtilsTest.testMurmur2.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
    ],
)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_for_key_is_stable_and_in_range() -> None:
    assert [partition_for_key(str(i).encode(), 7) for i in range(5)] == [
        partition_for_key(str(i).encode(), 7) for i in range(5)
    ]
    assert all(0 <= partition_for_key(bytes([i]), 3) < 3 for i in range(256))
