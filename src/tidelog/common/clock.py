"""Wall-clock time in milliseconds, the unit of every timestamp and `*.ms` config.

Components take a `clock: Callable[[], int]` defaulting to this, so tests can drive time.
"""

from __future__ import annotations

import time

__all__ = ["wall_clock_ms"]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
