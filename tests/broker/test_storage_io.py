"""The broker's I/O pool: chunked bulk work, bounded when asked."""

from __future__ import annotations

import threading
import time

import pytest

from tidelog.broker.storage_io import LOGS_PER_TASK, StorageIo


@pytest.mark.parametrize("parallel", [1, 2])
async def test_bulk_work_runs_no_more_chunks_at_once_than_asked_and_answers_in_order(parallel: int) -> None:
    io = StorageIo(8)
    lock = threading.Lock()
    running = 0
    most = 0

    def work(chunk: list[int]) -> list[int]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.005)  # long enough for the pool's other threads to start theirs, were they let
        with lock:
            running -= 1
        return [item * 2 for item in chunk]

    try:
        items = list(range(LOGS_PER_TASK * 6))
        chunks = await io.each_chunk(work, items, parallel=parallel)
        assert [item for chunk in chunks for item in chunk] == [item * 2 for item in items]
        assert len(chunks) > parallel and most <= parallel, (len(chunks), most)
    finally:
        io.shutdown()
