"""The broker's disk work on a bounded thread pool (`num.io.threads`): appends, reads, flushes,
retention, opening and closing logs. The event loop never waits for a write or an fsync; the time
a task waited for a thread is its request's queue time (Kafka's RequestQueueTimeMs), and the
pool's busy time feeds the I/O idle figure (server_metrics.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

from tidelog.broker.request_metrics import QUEUE_TIME_MS
from tidelog.broker.server_metrics import BusyMeter

__all__ = [
    "BULK_CHUNKS_AT_ONCE",
    "INLINE_BYTES_MAX",
    "INLINE_PARTITIONS_MAX",
    "LOGS_PER_TASK",
    "NEW_LOGS_CHUNKS_AT_ONCE",
    "StorageIo",
    "small_enough",
]

T = TypeVar("T")

LOGS_PER_TASK: Final = 64  # logs one I/O task opens (new ones), truncates or closes in a row
# Bulk work that is Python between small system calls (opening logs a restart finds, judging
# and cutting them for truncation, starting leader epochs) runs this many chunks at a time, not
# one a thread: the threads only contend for the GIL. Opening 1,000 logs left by a kill -9 took
# 0.43-0.57 ms a log with 8 chunks at a time, 0.34-0.38 with 2, 0.25-0.30 with 1, and twice the
# CPU with 8 (bench-less probe, 3 runs each). Creating logs is mostly the kernel's work, which
# the threads do overlap: 2 at a time were as fast as 8 and faster than 1.
BULK_CHUNKS_AT_ONCE: Final = 1
NEW_LOGS_CHUNKS_AT_ONCE: Final = 2
# Appends this small in all, and reads of what lies above the high watermark (written within the
# last replication round trip), run on the event loop when they touch only the page cache: no
# segment roll, no flush due, the log's lock free now. A hop to a thread and back cost more CPU
# than such a write or read (~4 ms of broker CPU per acks=all record on 3 brokers, ~3 ms on the
# loop; ADR 0036), and the loop never waits: anything else still goes to the threads.
INLINE_BYTES_MAX: Final = 64 * 1024
INLINE_PARTITIONS_MAX: Final = 64  # and this many partitions at most: the loop's turn stays short


def small_enough(partitions: int, size: int = 0) -> bool:
    """Whether a request's work on `partitions` partitions, `size` bytes of appends, is small
    enough for the event loop to do itself (what each log then allows is the log's to say)."""
    return partitions <= INLINE_PARTITIONS_MAX and size <= INLINE_BYTES_MAX


class StorageIo:
    def __init__(self, threads: int) -> None:
        assert threads >= 1, threads  # num.io.threads (the registry bounds it)
        self.threads = threads
        self.busy = BusyMeter()
        self.tasks = 0  # handed to the threads so far (what stayed on the loop is not)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="storage-io")

    async def run(self, function: Callable[..., T], *args: Any, request: str = "Internal") -> T:
        """`function(*args)` on the pool; the wait for a thread is observed as `request`'s queue time."""
        submitted = time.perf_counter()
        self.tasks += 1

        def timed() -> T:
            started = time.perf_counter()
            QUEUE_TIME_MS.labels(request).observe((started - submitted) * 1000)
            try:
                return function(*args)
            finally:
                self.busy.add(time.perf_counter() - started)

        return await asyncio.get_running_loop().run_in_executor(self._pool, timed)

    def ran_here(self, request: str) -> None:
        """Work the event loop did itself (INLINE_BYTES_MAX): counted with no wait for a thread, so
        `request`'s queue time still counts every request, as Kafka's RequestQueueTimeMs does."""
        QUEUE_TIME_MS.labels(request).observe(0)

    def chunks(self, items: list[T]) -> list[list[T]]:
        """`items` cut for the threads to share: at most LOGS_PER_TASK each, every thread busy, so
        the event loop handles a few hundred completions rather than thousands."""
        step = max(1, min(LOGS_PER_TASK, len(items) // self.threads))
        return [items[i : i + step] for i in range(0, len(items), step)]

    async def each_chunk(
        self, work: Callable[[list[T]], Any], items: list[T], *, request: str = "Internal", parallel: int | None = None
    ) -> list[Any]:
        """`work(chunk)` for every chunk of `items`, side by side on the pool; with `parallel`, no
        more than that many chunks at a time (see BULK_CHUNKS_AT_ONCE)."""
        if parallel is None:
            return await asyncio.gather(*(self.run(work, chunk, request=request) for chunk in self.chunks(items)))
        assert parallel >= 1, parallel
        slots = asyncio.Semaphore(parallel)

        async def one(chunk: list[T]) -> Any:
            async with slots:
                return await self.run(work, chunk, request=request)

        return await asyncio.gather(*(one(chunk) for chunk in self.chunks(items)))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
