"""The two clocks components take, so tests drive time (tests/fake_clock.py is the one fake).

- A wall clock in milliseconds (`WallClockMs`, default `wall_clock_ms`): the unit of every record
  timestamp and `*.ms` config, for what is stored or compared across processes.
- A monotonic clock in seconds (`Monotonic`, default `time.monotonic`): for deadlines and "how long
  since" within one process (lags, sessions, back-offs), which must not jump with the wall clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeAlias

__all__ = ["Monotonic", "WallClockMs", "monotonic", "wall_clock_ms"]

Monotonic: TypeAlias = Callable[[], float]
WallClockMs: TypeAlias = Callable[[], int]

monotonic: Monotonic = time.monotonic


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
