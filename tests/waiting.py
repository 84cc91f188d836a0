"""Waiting on a condition with a deadline in tests that run without a cluster (the cluster tests'
`wait_until` polls async conditions at a slower pace)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Return once `condition()` holds, checking at every turn of the event loop and each
    millisecond; TimeoutError after `timeout_s`."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)
