"""The wall clock, in one place.

Storage, replication and the coordinators have no clock of their own: they are handed one, so
that the simulator can run them on virtual time and a test can stop time. Everything that runs
on real time (the node, the CLI, tests, benchmarks) passes this one.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, the unit of record timestamps and retention."""
    return time.time_ns() // 1_000_000
