"""The tests' one fake clock: time that moves only when a test says so.

Components take their clock (`clock=`, `monotonic=`) rather than reading time themselves, so a
test drives them through time exactly. Call the clock for seconds (as `time.monotonic`), or hand
out `.millis` where a component wants milliseconds (as a wall clock in ms, the storage layer's).
`now` and `now_ms` read and set the same instant; `advance` and `advance_ms` move it.
"""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self._now_ms = round(now * 1000)  # whole milliseconds: exact at wall-clock magnitudes

    def __call__(self) -> float:
        return self._now_ms / 1000

    def millis(self) -> int:
        return self._now_ms

    @property
    def now(self) -> float:
        return self._now_ms / 1000

    @now.setter
    def now(self, seconds: float) -> None:
        self._now_ms = round(seconds * 1000)

    @property
    def now_ms(self) -> int:
        return self._now_ms

    @now_ms.setter
    def now_ms(self, ms: int) -> None:
        self._now_ms = ms

    def advance(self, seconds: float) -> None:
        self._now_ms += round(seconds * 1000)

    def advance_ms(self, ms: int) -> None:
        self._now_ms += ms
