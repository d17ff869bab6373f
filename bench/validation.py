"""What the leader's validation of a produced batch costs per record, against the CRC check of
the same batch measured in the same run (the one per-byte cost every append already pays).

For 1 KiB records, 100 per batch, without and with one header: CPU time per record
(``time.process_time``, best of several rounds, so that other processes on the machine do not
inflate it) of

* ``check_crc``: CRC-32C over the batch (the baseline);
* ``validate_records``: the framing walk alone;
* ``validate_batch``: all the leader's checks (header, CRC, framing, timestamps, client rules);
* ``decode_records``: what a consumer pays per record (framing check included), for scale.

Run: ``.venv/bin/python bench/validation.py [--quick]``. ``--quick`` runs few rounds (seconds)
so that a smoke test can keep this script working; its figures mean little.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; keep it off.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from tidelog.records import (  # noqa: E402
    RecordInput,
    build_batch,
    check_crc,
    decode_records,
    read_header,
    validate_batch,
    validate_records,
)

RECORDS = 100
VALUE = bytes(1024)
NOW = 1_700_000_000_000


def per_record_ns(call: Callable[[], object], repeat: int, rounds: int) -> float:
    """Best CPU time per record over `rounds` rounds of `repeat` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(repeat):
            call()
        best = min(best, (time.process_time() - start) / repeat / RECORDS * 1e9)
    return best


def measure(batch: bytes, repeat: int, rounds: int) -> dict[str, float]:
    header = read_header(batch)
    return {
        "check_crc": per_record_ns(lambda: check_crc(batch, 0, header), repeat, rounds),
        "validate_records": per_record_ns(
            lambda: validate_records(batch, 0, header), repeat, rounds
        ),
        "validate_batch": per_record_ns(
            lambda: validate_batch(batch, now_ms=NOW, timestamp_before_max_ms=1000,
                                   timestamp_after_max_ms=1000, from_client=True),
            repeat, rounds,
        ),
        "decode_records": per_record_ns(
            lambda: decode_records(batch, 0, header), max(repeat // 5, 1), rounds
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (smoke test)")
    args = parser.parse_args()
    repeat, rounds = (20, 2) if args.quick else (500, 15)
    print(f"{RECORDS} records of {len(VALUE)} bytes per batch; CPU ns per record, best of "
          f"{rounds} rounds")
    for label, headers in (("no header", ()), ("one header", (("trace", b"abc"),))):
        batch = build_batch([RecordInput(VALUE, None, NOW, headers)] * RECORDS)
        figures = measure(batch, repeat, rounds)
        print(f"{label}: " + ", ".join(f"{name} {ns:.0f}" for name, ns in figures.items()))
        print(f"ratio validate_batch/check_crc ({label}): "
              f"{figures['validate_batch'] / figures['check_crc']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
