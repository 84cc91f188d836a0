"""Bulk loops let the event loop go once they have held it for a slice (loop_slices.py)."""

from __future__ import annotations

import asyncio
import itertools
import time

from tidelog.server_common.loop_slices import LoopSlices


async def test_a_loop_within_its_slice_never_yields() -> None:
    pacer = LoopSlices(slice_s=60.0)
    ran = []
    other = asyncio.get_running_loop().call_soon(ran.append, "other")
    for _ in range(10_000):
        await pacer.pace()
    assert pacer.yields == 0 and ran == []  # the loop was never let go: the callback still waits
    other.cancel()


async def test_a_loop_longer_than_its_slice_lets_the_others_run_between_slices() -> None:
    slice_s = 0.002
    pacer = LoopSlices(slice_s=slice_s)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    ticks.clear()
    started = time.perf_counter()
    while time.perf_counter() - started < 0.1:  # 0.1 s of "work", item by item
        await pacer.pace()
        sum(range(200))
    ticking.cancel()
    assert pacer.yields >= 10
    assert len(ticks) >= 10
    # Between two turns of the other task the loop was held about one slice, never the whole 0.1 s.
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert max(gaps) < 0.05


async def test_a_slice_of_zero_yields_at_every_item() -> None:
    pacer = LoopSlices(slice_s=0)
    for _ in range(5):
        await pacer.pace()
    assert pacer.yields == 5
