"""The segments of one partition log, oldest first, the last one active (Kafka's LocalLog): where
an offset is, reading across segments, rolling, truncating and deleting whole segments, flushing
those past the recovery point, and swapping in a cleaned segment.

Not thread-safe on its own: PartitionLog holds its lock around every call. What the log keeps
beside the segments (high watermark, log start, epochs, producers, checkpoints) is PartitionLog's.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Container, Iterator
from pathlib import Path

import structlog

from tidelog.broker.storage.log_config import LogConfig
from tidelog.broker.storage.log_files import MAX_RELATIVE_OFFSET, SWAP_SUFFIX
from tidelog.broker.storage.retention import segments_past_retention
from tidelog.broker.storage.segment import LogSegment

__all__ = ["SegmentList"]

log = structlog.get_logger(__name__)


class SegmentList:
    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config  # the topic's configs, as the log last applied them
        self.clock = clock
        self._segments: list[LogSegment] = []
        self._base_offsets: list[int] = []  # the same segments' base offsets, for bisection

    def new_segment(
        self, base_offset: int, file_suffix: str = "", *, present: Container[str] | None = None
    ) -> LogSegment:
        """`present`: the folder's listing, when the caller has one (LogSegment)."""
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_entries=self.config.segment_index_bytes // 8,
            rolling_base_ms=self.clock(),
            file_suffix=file_suffix,
            present=present,
        )

    def append(self, segment: LogSegment) -> None:
        assert not self._segments or segment.base_offset >= self._segments[-1].next_offset, "segments overlap"
        self._segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __len__(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The list itself (log_loader reads it; nothing outside changes it)."""
        return self._segments

    @property
    def base_offsets(self) -> list[int]:
        return self._base_offsets

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    # ---- reading ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, end: int, min_one_batch: bool) -> bytearray:
        """Stored batches from the segment holding `offset` on, up to `max_bytes`, below `end`."""
        slot = max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)
        for segment in self._segments[slot:]:
            if segment.base_offset >= end:
                break
            data = segment.read(offset, max_bytes, max_offset=end, min_one_batch=min_one_batch)
            if data:
                return data
        return bytearray()

    def offset_for_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        for segment in self._segments:
            if segment.max_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp)
                if found is not None and found[0] >= log_start_offset:
                    return found
        return None

    # ---- rolling ---------------------------------------------------------------------------

    def roll_due(self, size: int, last_offset: int) -> bool:
        """Whether an append of `size` bytes ending at `last_offset` needs a new segment first:
        segment.bytes, a full index, segment.ms, or offsets beyond the index's 32-bit deltas."""
        segment = self.active
        if segment.is_empty:
            return False
        return (
            segment.size + size > self.config.segment_bytes
            or segment.index_is_full
            or self.clock() - segment.rolling_base_ms >= self.config.segment_ms
            or last_offset - segment.base_offset > MAX_RELATIVE_OFFSET
        )

    def roll(self, base_offset: int) -> None:
        self.active.seal()
        self.append(self.new_segment(base_offset))

    # ---- truncation and deletion -----------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove records at and after `offset`, which is above the first segment's base."""
        assert offset > self._segments[0].base_offset
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._segments.pop().delete()
            self._base_offsets.pop()
        self.active.truncate_to(offset)

    def delete_all_and_start_at(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._base_offsets.clear()
        self.append(self.new_segment(offset))

    def past_retention(self, log_start_offset: int, *, start_offset_only: bool = False) -> int:
        """How many of the oldest segments retention (or the log start alone) removes (retention.py)."""
        return segments_past_retention(
            self._segments,
            self.config,
            now_ms=self.clock(),
            log_start_offset=log_start_offset,
            start_offset_only=start_offset_only,
        )

    def delete_oldest(self, count: int) -> None:
        assert count < len(self._segments), "the active segment is never deleted by retention"
        for segment in self._segments[:count]:
            log.info("segment_deleted", segment=segment.log_path.name, size=segment.size)
            segment.delete()
        del self._segments[:count]
        del self._base_offsets[:count]

    # ---- durability ------------------------------------------------------------------------

    def flush_from(self, recovery_point: int, *, sync: bool = True) -> None:
        """fsync every segment that may hold data at or past `recovery_point`, and the active one
        (without `sync`: their indexes written, nothing fsynced)."""
        for segment in self._segments:
            if segment.next_offset > recovery_point or segment is self.active:
                segment.flush(sync=sync)

    def close(self) -> None:
        for segment in self._segments:
            segment.close()

    # ---- compaction ------------------------------------------------------------------------

    def replace(self, old: LogSegment, new: LogSegment) -> bool:
        """Swap a cleaned segment in for `old`; False (and `new` discarded) if `old` is gone.

        Crash safety: `new` was written as `.cleaned` and fsynced; renaming it to `.swap` is the
        commit point (a crash after it completes the swap on the next open), then `.swap`
        replaces the old files by rename.
        """
        if old not in self._segments or old is self.active:
            new.delete()
            return False
        assert new.base_offset == old.base_offset
        old.txn_index.copy_to(new.txn_index)  # compaction keeps every marker, so every abort
        new.flush()
        new.rename_suffix(SWAP_SUFFIX)
        slot = self._segments.index(old)
        old.close()
        old.offset_index.delete()
        old.time_index.delete()
        new.rename_suffix("")  # replaces the old .log atomically
        new.offset_index.flush()
        new.time_index.flush()
        self._segments[slot] = new
        return True
