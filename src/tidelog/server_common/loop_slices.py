"""Bulk work on the event loop in slices: a loop over thousands of partitions yields to the event
loop once it has held it for a slice, so the requests of the partitions it does not touch run in
between (ADR 0032).

At 10,000 partitions a broker's per-partition loops (a LeaderAndIsr's states, a fetch response's
partitions, an epoch query's answers) each held the loop for 0.1-0.5 s during a rolling restart;
an acks=all produce to a partition none of them touched waited behind each, on its leader and on
each follower, and stood still for over a second. A slice is measured in time, not in items: the
same loop costs 10 µs an item on a quiet broker and ten times as much beside a busy one.

    pacer = LoopSlices()
    for state in states:
        await pacer.pace()  # yields only when the slice is used up
        apply(state)

What a loop reads across a yield may have changed meanwhile: each item is checked against the
state it finds, not against what the loop saw before it started.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

__all__ = ["LOOP_SLICE_S", "LoopSlices"]

# How long a bulk loop holds the event loop before it yields: short beside an acks=all round trip
# (a produce, a follower's fetch and its answer, each waiting for at most one slice on each side),
# long beside one yield's cost (~20 µs: the loop polls its sockets and runs what is ready).
LOOP_SLICE_S: Final = 0.005


class LoopSlices:
    """Counts the time since the loop was last let go; `pace` yields once it reaches `slice_s`."""

    __slots__ = ("_since", "slice_s", "yields")

    def __init__(self, slice_s: float | None = None) -> None:
        self.slice_s = LOOP_SLICE_S if slice_s is None else slice_s  # (0: yield at every item)
        assert self.slice_s >= 0
        self.yields = 0  # how many times the loop was let go (a slow LeaderAndIsr logs it)
        self._since = time.perf_counter()

    async def pace(self) -> None:
        if time.perf_counter() - self._since >= self.slice_s:
            await asyncio.sleep(0)
            self.yields += 1
            self._since = time.perf_counter()
