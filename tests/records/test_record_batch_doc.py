"""docs/reference/record-batch.md cannot drift from the codec: its test vectors are what the
encoder produces, its header table adds up to the header the codec reads, and its CRC check value
is CRC-32C's."""

from __future__ import annotations

import re
from pathlib import Path

import crc32c

from tidelog.records import (
    HEADER_SIZE,
    RecordInput,
    assign_offsets,
    build_batch,
    build_txn_marker,
    validate_batch,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "record-batch.md"


def _vectors() -> list[bytes]:
    """The bytes of each ```hex block: the hex before each line's `#`."""
    blocks = re.findall(r"```hex\n(.*?)```", DOC.read_text(), re.S)
    return [
        bytes.fromhex("".join(line.split("#")[0].strip() for line in block.splitlines()))
        for block in blocks
    ]


def test_the_documented_vectors_are_what_the_encoder_writes() -> None:
    one, two, stamped, marker = _vectors()
    assert one == build_batch(
        [RecordInput(value=b"hello", key=b"k", timestamp=1_700_000_000_000,
                     headers=[("h", b"v")])]
    )
    expected_two = build_batch(
        [RecordInput(b"a", None, 1_700_000_000_000), RecordInput(b"bc", None, 1_700_000_000_005)],
        producer_id=7, producer_epoch=0, base_sequence=0,
    )
    assert two == expected_two
    assert stamped == assign_offsets(expected_two, 42, 3)[:17]
    assert marker == build_txn_marker(True, producer_id=7, producer_epoch=0, coordinator_epoch=11)
    for vector in (one, two):
        validate_batch(vector, now_ms=1_700_000_000_000, timestamp_before_max_ms=0,
                       timestamp_after_max_ms=5, from_client=True)


def test_the_header_table_adds_up_and_the_crc_check_value_is_right() -> None:
    text = DOC.read_text()
    table = text.split("## Batch header")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (\d+) \| (\d+|\.\.\.) \| `(\w+)`", table, re.M)
    at = 0
    for offset, size, name in rows:
        assert int(offset) == at, name
        at += 0 if size == "..." else int(size)
    assert at == HEADER_SIZE
    assert f"`0x{crc32c.crc32c(b'123456789'):08X}`" in text
