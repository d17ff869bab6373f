"""How long the fuzz tests (tests/test_fuzz_*.py) run.

CI runs them with the ``ci`` profile, bounded so that all of them together stay within about a
minute; ``scripts/fuzz.sh`` selects ``long`` through ``TIDELOG_FUZZ_PROFILE`` to run the same
tests with many times the examples. Each test states its CI example count; a profile scales it.
Deadlines are off (timings on a shared machine say nothing about correctness), and a failure
prints the blob that replays it (``@reproduce_failure``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = {"ci": 1, "long": 100}
PROFILE = os.environ.get("TIDELOG_FUZZ_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise RuntimeError(f"TIDELOG_FUZZ_PROFILE must be one of {sorted(PROFILES)}, got {PROFILE!r}")


def fuzz_settings(ci_examples: int) -> settings:
    """Settings for one fuzz test that runs `ci_examples` examples in CI."""
    return settings(
        max_examples=ci_examples * PROFILES[PROFILE],
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
