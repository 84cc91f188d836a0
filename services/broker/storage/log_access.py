"""How others get at a partition log's lock (PartitionLog's base): the log cleaner, which reads
old segments under it and swaps its result in, and the broker's event loop, which appends and
reads small things itself only when the lock is free now and the work stays in the page cache
(ADR 0036): it must never wait for a thread's flush (fsync) or the cleaner's pass."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tidelog.broker.storage.log_config import LogConfig
from tidelog.broker.storage.segment import LogSegment
from tidelog.broker.storage.segment_list import SegmentList

__all__ = ["LogAccess"]


class LogAccess:
    # PartitionLog's, set in its __init__.
    _lock: threading.RLock
    _local: SegmentList
    _closed: bool
    _unflushed_records: int
    config: LogConfig

    if TYPE_CHECKING:

        def _flush_due(self) -> bool: ...  # flush.ms has passed since the last flush

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"log {self._local.directory.name} is closed")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the log's lock (the cleaner reads old segments under it, a chunk at a time)."""
        with self._lock:
            self._check_open()
            yield

    def replace_segment(self, old: LogSegment, new: LogSegment) -> bool:
        """Swap a cleaned segment in for `old` (SegmentList.replace); False if `old` is gone."""
        with self._lock:
            if self._closed:
                new.delete()
                return False
            return self._local.replace(old, new)

    @contextlib.contextmanager
    def held_if_free(self) -> Iterator[bool]:
        """The log's lock for the block if nobody holds it now (True); never waited for (False).
        The log's methods called inside take it again (it is re-entrant)."""
        taken = self._lock.acquire(blocking=False)
        try:
            yield taken
        finally:
            if taken:
                self._lock.release()

    @contextlib.contextmanager
    def appendable_here(self, size: int) -> Iterator[bool]:
        """True, the lock held for the block, when an append of at most `size` bytes can be made on
        the event loop now: the lock free, and page-cache writes only — no segment rolled (files
        created), no flush (fsync) due. `size` bounds the record count too (a record takes a byte
        at least), so flush.messages errs towards the threads. False: append on a thread."""
        with self.held_if_free() as held:
            flushes = held and (self._unflushed_records + size >= self.config.flush_messages or self._flush_due())
            rolls = held and self._local.roll_due(size, self._local.log_end_offset + size)
            yield held and not (self._closed or flushes or rolls)
