"""How the group coordinator's records reach `__consumer_offsets`: writes that run to the end.

gRPC cancels a handler whose client went away — a consumer killed in the middle of a commit. A
write cut there either lands but is never applied (the coordinator's state falls behind its own
log) or is cut inside the writer with its fate unknown. So each write, with the apply that
follows it, runs as a task of its own that the caller only waits for; a background write (a
group's record after a change no one waits on) is one with no caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["GroupWrites"]


class GroupWrites:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    async def to_the_end(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (a write and what follows it) to the end, even if the caller is cancelled."""
        await asyncio.shield(self._start(work))

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` without holding the caller up; it handles its own errors."""
        self._start(work)

    def _start(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that went away cannot (its error was its answer)
