"""How long the fuzz tests (tests/*/test_fuzz_*.py) run.

CI runs them with the ``ci`` profile, bounded so that all of them together stay within about a
minute; ``scripts/fuzz.sh`` selects ``long`` through ``TIDELOG_FUZZ_PROFILE`` to run the same
tests with many times the examples. Each test states its CI example count; a profile scales it.
Deadlines are off (timings on a shared machine say nothing about correctness), and a failure
prints the blob that replays it (``@reproduce_failure``).
"""

from __future__ import annotations

import os
import struct

import crc32c
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from record_helpers import kafka_varint, read_varint

from tidelog.records import HEADER_SIZE, ControlType, RecordInput, build_batch, build_control_batch

PROFILES = {"ci": 1, "long": 100}
PROFILE = os.environ.get("TIDELOG_FUZZ_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise RuntimeError(f"TIDELOG_FUZZ_PROFILE must be one of {sorted(PROFILES)}, got {PROFILE!r}")


#: pytest-timeout for a fuzz test module, scaled with the examples.
FUZZ_TIMEOUT_S = 300 * PROFILES[PROFILE]


def fuzz_settings(ci_examples: int) -> settings:
    """Settings for one fuzz test that runs `ci_examples` examples in CI."""
    return settings(
        max_examples=ci_examples * PROFILES[PROFILE],
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


T = 1_700_000_000_000

headers_st = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=2
)
record_st = st.builds(
    RecordInput,
    value=st.one_of(st.none(), st.binary(max_size=24)),
    key=st.one_of(st.none(), st.binary(max_size=8)),
    timestamp=st.integers(T - 1000, T + 1000),
    headers=headers_st,
)
valid_batch_st = st.one_of(
    st.builds(
        build_batch,
        st.lists(record_st, min_size=1, max_size=6),
        producer_id=st.sampled_from([-1, 7]),
        base_sequence=st.sampled_from([-1, 0]),
    ),
    st.builds(build_control_batch, st.sampled_from(ControlType)),
)


@st.composite
def mutated_batch(draw: st.DrawFn) -> bytes:
    """A valid batch with a few bytes overwritten, inserted or removed, its CRC recomputed
    most of the time (so that structure, not the checksum, has to catch the damage)."""
    data = bytearray(draw(valid_batch_st))
    lengths = _length_fields(bytes(data))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["set", "set", "insert", "delete", "int32", "length"]))
        if kind == "length":  # a record's length, key, value or header length, or count, lies
            start, end = draw(st.sampled_from(lengths))
            value = draw(st.sampled_from([-2, -1, 0, 1, 3, 2**31 - 1, -(2**31), 1 << 20]))
            data[start:end] = kafka_varint(value)
            continue
        if kind == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "int32" and at + 4 <= len(data):
            value = draw(st.sampled_from([-2, -1, 0, 1, 3, 2**31 - 1, -(2**31), 1 << 20]))
            struct.pack_into(">i", data, at, value)
    if len(data) >= HEADER_SIZE and draw(st.booleans()):
        struct.pack_into(">i", data, 8, len(data) - 12)  # a length that matches the bytes
    if len(data) >= HEADER_SIZE and draw(st.integers(0, 9)):
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _length_fields(batch: bytes) -> list[tuple[int, int]]:
    """Where (start, end) the varint length and count fields of a valid batch's records
    are."""
    at, out = HEADER_SIZE, []
    while at < len(batch):
        length, cursor = read_varint(batch, at)
        end = cursor + length
        out.append((at, cursor))  # length
        _, cursor = read_varint(batch, cursor + 1)  # timestamp delta
        _, cursor = read_varint(batch, cursor)  # offset delta
        for _field in ("key", "value"):
            size, after = read_varint(batch, cursor)
            out.append((cursor, after))
            cursor = after + max(size, 0)
        count, after = read_varint(batch, cursor)
        out.append((cursor, after))  # header_count
        cursor = after
        for _ in range(count):  # each header's key and value lengths
            for _field in ("key", "value"):
                size, after = read_varint(batch, cursor)
                out.append((cursor, after))
                cursor = after + max(size, 0)
        at = end
    return out
