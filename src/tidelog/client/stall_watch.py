"""Whether this process stopped running for longer than a member's session (frozen by SIGSTOP,
suspended, its event loop blocked): no heartbeat went out meanwhile, so the coordinator has
expired the member and given its partitions to others. The group consumer asks before returning
records and treats its partitions as lost at once — a woken zombie processes nothing new, even
what a fetch begun before the stall brought back.
"""

from __future__ import annotations

import asyncio
from typing import Final

from tidelog.common.clock import Monotonic

__all__ = ["STALL_CHECK_S", "StallWatch"]

STALL_CHECK_S: Final = 0.1  # how often the watch takes its turn


class StallWatch:
    def __init__(self, session_s: float, clock: Monotonic) -> None:
        self.session_s = session_s
        self.clock = clock
        self._tick = clock()  # the watch's last turn
        self._stalled = False
        self._task: asyncio.Task[None] | None = None

    def start(self, name: str) -> None:
        if self._task is None:
            self._tick = self.clock()
            self._task = asyncio.create_task(self._watch(), name=name)

    async def _watch(self) -> None:
        while True:
            self._tick = self.clock()
            await asyncio.sleep(STALL_CHECK_S)
            if self.clock() - self._tick > self.session_s:
                self._stalled = True

    def stalled_past_session(self) -> bool:
        """True once after a stall longer than the session (noted by the watch, or seen now)."""
        stalled = self._stalled or self.clock() - self._tick > self.session_s
        self._stalled = False
        self._tick = self.clock()
        return stalled

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
