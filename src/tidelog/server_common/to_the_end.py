"""Work that runs to its end even when the request that started it is cancelled.

gRPC cancels a handler whose caller went away or whose deadline passed: a consumer killed in the
middle of a commit, a controller that stopped waiting for a slow LeaderAndIsr. Work cut there is
cut at an arbitrary await: a group coordinator's write that lands but is never applied, a broker's
state change that opened logs it never registered (their file descriptors leaked). So such work
runs as a task of its own that the caller only waits for; background work is one with no caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["ToTheEnd"]

T = TypeVar("T")


class ToTheEnd:
    def __init__(self, on_failure: Callable[[BaseException], None] | None = None) -> None:
        """`on_failure` sees every failure (a caller that went away cannot: its error was its answer)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._on_failure = on_failure

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` to the end, even if the caller is cancelled; its result or error to the caller."""
        return await asyncio.shield(self._start(work))

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` without holding the caller up."""
        self._start(work)

    async def finish(self) -> None:
        """Wait for every piece of work under way (one stopping waits for what it started)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    def _start(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(work)
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None and self._on_failure is not None:
            self._on_failure(error)  # (task.exception() retrieved it: no "never retrieved" warning)
