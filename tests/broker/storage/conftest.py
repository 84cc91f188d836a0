from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fake_clock import FakeClock
from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.common.record.batch import RecordBatch, decode_batches


@contextlib.contextmanager
def held_by_a_thread(partition_log: PartitionLog) -> Iterator[None]:
    """The log's lock held by another thread (as a flush's fsync or the cleaner holds it) for the block."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with partition_log.locked():
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10), "the thread never took the lock"
        yield
    finally:
        release.set()
        holder.join()


WALL_NOW_S = 1_700_000_000.0  # the storage layer's clock is a wall clock in milliseconds


def wall_clock() -> FakeClock:
    return FakeClock(WALL_NOW_S)


@pytest.fixture
def clock() -> FakeClock:
    return wall_clock()


OpenLog = Callable[..., PartitionLog]


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock) -> Iterator[OpenLog]:
    opened: list[PartitionLog] = []

    def _open(folder: str = "topic-0", **configs: object) -> PartitionLog:
        config = LogConfig.from_configs({name.replace("_", "."): value for name, value in configs.items()})
        partition_log = PartitionLog.open(tmp_path / folder, config, clock=clock.millis)
        opened.append(partition_log)
        return partition_log

    yield _open
    for partition_log in opened:
        partition_log.close_without_flush()


def read_all(partition_log: PartitionLog, start: int | None = None) -> list[RecordBatch]:
    """Every batch from `start` (default: log start) to the log end, through `read`."""
    offset = partition_log.log_start_offset if start is None else start
    batches: list[RecordBatch] = []
    while offset < partition_log.log_end_offset:
        fetched = decode_batches(partition_log.read(offset, 1 << 20))
        if not fetched:
            break
        offset = fetched[-1].header.next_offset
        batches.extend(fetched)
    return batches


def records_of(batches: list[RecordBatch]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (offset, key, value)
        for batch in batches
        for offset, key, value in zip(batch.offsets, batch.keys, batch.values, strict=True)
    ]
