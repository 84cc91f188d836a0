"""The log of one partition: a folder `<topic>-<partition>/` of segments plus checkpoint files.

    00000000000000000000.log / .index / .timeindex   segments, named by base offset (segment.py)
    replication-offset-checkpoint                     high watermark
    log-start-offset-checkpoint                       log start offset (delete-records, retention)
    recovery-point-offset-checkpoint                  everything below is fsynced
    leader-epoch-checkpoint                           leader epoch → start offset history
    00000000000000001234.snapshot                     idempotent-producer state at that offset
    cleaner-offset-checkpoint                         first offset compaction has not cleaned yet
    .clean-shutdown                                   present only after close(): skip recovery

Appends go to the last (active) segment; a new one is rolled on `segment.bytes`, `segment.ms` or a
full index. Reads return whole stored batches as bytes, checked against their CRC. Opening
recovers: from the recovery point on, every batch is validated and a torn or corrupt tail is cut.

Thread-safety: every public method takes the log's lock, so a broker may call them from worker
threads (it must: `flush` fsyncs). The log cleaner reads old segments through `read_segment_chunk`,
also under the lock, and swaps its result in with `replace_segment`.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import structlog

from tidelog.broker.storage.checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from tidelog.broker.storage.leader_epoch_cache import LeaderEpochCache
from tidelog.broker.storage.log_config import LogConfig
from tidelog.broker.storage.producer_state import ProducerStateManager
from tidelog.broker.storage.retention import segments_past_retention
from tidelog.broker.storage.segment import LOG_SUFFIX, BadBatchError, LogSegment
from tidelog.common.clock import wall_clock_ms
from tidelog.common.errors import (
    InvalidRecordError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from tidelog.common.record.batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    check_records,
    read_header,
    restamp,
    validate_batch,
)

__all__ = ["AppendInfo", "PartitionLog", "parse_log_directory_name"]

log = structlog.get_logger(__name__)

HIGH_WATERMARK_FILE: Final = "replication-offset-checkpoint"
LOG_START_OFFSET_FILE: Final = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE: Final = "recovery-point-offset-checkpoint"
LEADER_EPOCH_FILE: Final = "leader-epoch-checkpoint"
CLEANER_OFFSET_FILE: Final = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE: Final = ".clean-shutdown"
SWAP_SUFFIX: Final = ".swap"
CLEANED_SUFFIX: Final = ".cleaned"
MAX_RELATIVE_OFFSET: Final = 2**32 - 1
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_DIRECTORY_NAME = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<partition>\d+)$")


def parse_log_directory_name(name: str) -> tuple[str, int]:
    match = _DIRECTORY_NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a <topic>-<partition> log folder")
    return match["topic"], int(match["partition"])


@dataclasses.dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    batch_count: int
    bytes: int
    duplicate: bool = False  # an idempotent producer's retry: nothing appended, original offsets


def _read_offset(path: Path) -> int | None:
    try:
        entries = read_checkpoint(path, fields=1)
    except CorruptCheckpointError:
        log.warning("checkpoint_corrupt", path=str(path))
        return None
    return None if not entries else entries[0][0]


class PartitionLog:
    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        """Use `PartitionLog.open`; this only sets fields."""
        self.directory = directory
        self.topic, self.partition = parse_log_directory_name(directory.name)
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.leader_epochs = LeaderEpochCache(directory / LEADER_EPOCH_FILE)
        self.producer_state = ProducerStateManager(directory)
        self._log_start_offset = 0
        self._high_watermark = 0
        self._checkpointed: dict[str, int] = {}  # offset checkpoint file → the value it holds (absent: 0)
        self._recovery_point = 0
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self._closed = False
        # Appends as leader in an epoch below this are refused (fence_leader_epoch). The broker
        # raises it before the replica starts following; an append checks it under the lock, so one
        # admitted in an older epoch cannot land after a follower's truncation, where it would
        # leave this replica's log diverged from the leader's (Kafka's leaderIsrUpdateLock).
        self._epoch_fence = -1
        # Segments recovery validated on open: only they are scanned for epochs. A flushed segment
        # loaded by its indexes after a recovered one may hold bit rot that a read reports, not open.
        self._recovered: list[LogSegment] = []

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, clock: Callable[[], int] = wall_clock_ms) -> PartitionLog:
        """Open (creating if needed) and recover the log in `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        partition_log = cls(directory, config, clock)
        partition_log._load()
        return partition_log

    @classmethod
    def create(cls, directory: Path, config: LogConfig, *, clock: Callable[[], int] = wall_clock_ms) -> PartitionLog:
        """A new, empty log in a `directory` that does not exist yet: `open` without recovery,
        which has nothing to read (a topic of thousands of partitions creates thousands of these:
        each file-system call counts). Fails with FileExistsError if the directory exists."""
        directory.mkdir(parents=True)
        partition_log = cls(directory, config, clock)
        partition_log._append_segment(partition_log._new_segment(0))
        return partition_log

    def _new_segment(self, base_offset: int, file_suffix: str = "") -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_entries=self.config.segment_index_bytes // 8,
            rolling_base_ms=self.clock(),
            file_suffix=file_suffix,
        )

    def _load(self) -> None:
        self._finish_interrupted_swaps()
        clean_marker = self.directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        base_offsets = sorted(
            int(match[1]) for name in os.listdir(self.directory) if (match := _SEGMENT_NAME.match(name))
        )
        recovery_point = 0 if not clean else 2**63 - 1
        if not clean:
            recovery_point = _read_offset(self.directory / RECOVERY_POINT_FILE) or 0
        drop_rest = False
        for slot, base_offset in enumerate(base_offsets):
            segment = self._new_segment(base_offset)
            if drop_rest:
                log.warning("segment_dropped_after_corruption", segment=segment.log_path.name)
                segment.delete()
                continue
            first = segment.first_batch()
            if first is not None and first.max_timestamp >= 0:
                segment.rolling_base_ms = first.max_timestamp
            is_last = slot == len(base_offsets) - 1
            # A segment may hold unflushed data unless the next one starts below the recovery point.
            unflushed = not clean and (is_last or base_offsets[slot + 1] > recovery_point)
            must_recover = unflushed
            if not unflushed:
                try:
                    segment.load_indexes()
                except BadBatchError:
                    must_recover = True  # flushed data corrupted on disk: cut this segment only
            if must_recover:
                self._recovered.append(segment)
                truncated = segment.recover(self.config.max_message_bytes)
                if truncated:
                    log.warning("segment_tail_truncated", segment=segment.log_path.name, bytes=truncated)
                    # After a torn write nothing later was acknowledged durably: drop it (as Kafka does).
                    drop_rest = unflushed
            if self._segments and segment.base_offset < self._segments[-1].next_offset:
                log.warning("segment_overlaps_previous", segment=segment.log_path.name)
                segment.delete()
                drop_rest = True
                continue
            self._append_segment(segment)
        clean_marker.unlink(missing_ok=True)
        self._load_offsets()

    def _finish_interrupted_swaps(self) -> None:
        """Complete or discard compaction left half-done by a crash (see log_cleaner.py)."""
        for name in os.listdir(self.directory):
            path = self.directory / name
            if name.endswith((".tmp", CLEANED_SUFFIX)):
                path.unlink()
            elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                final = path.with_name(name.removesuffix(SWAP_SUFFIX))
                os.replace(path, final)  # the swap file is complete: it was fsynced before renaming
                for index in (final.with_suffix(".index"), final.with_suffix(".timeindex")):
                    index.unlink(missing_ok=True)  # they describe the old file; rebuilt on load
            elif name.endswith(SWAP_SUFFIX):
                path.unlink()

    def _load_offsets(self) -> None:
        for name in (RECOVERY_POINT_FILE, HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE):  # what is on disk now
            path = self.directory / name
            if path.exists():
                value = _read_offset(path)
                self._checkpointed[name] = -1 if value is None else value  # -1: unreadable, rewrite it
        if not self._segments:
            start = _read_offset(self.directory / LOG_START_OFFSET_FILE) or 0
            self._append_segment(self._new_segment(start))
        first_base = self._segments[0].base_offset
        log_end = self.log_end_offset
        checkpointed_start = _read_offset(self.directory / LOG_START_OFFSET_FILE)
        self._log_start_offset = max(first_base, checkpointed_start or first_base)
        if self._log_start_offset > log_end:
            self._truncate_fully_locked(self._log_start_offset)
            log_end = self.log_end_offset
        self._high_watermark = min(
            max(_read_offset(self.directory / HIGH_WATERMARK_FILE) or 0, self._log_start_offset), log_end
        )
        self._recovery_point = log_end
        self.leader_epochs = LeaderEpochCache.load(self.directory / LEADER_EPOCH_FILE)
        self.leader_epochs.truncate_from_end(log_end)
        self.leader_epochs.truncate_from_start(self._log_start_offset)
        self._assign_epochs_of_recovered_segments()
        self._rebuild_producer_state()
        self._write_checkpoints()

    def _assign_epochs_of_recovered_segments(self) -> None:
        """Add epochs that batches in the recovered (unflushed) segments carry and the checkpoint lacks.

        Epochs are checkpointed before any batch of theirs is written (`_assign_epoch`), so this
        finds nothing in logs this version wrote; it mends logs whose checkpoint fell behind their
        data (as Kafka's recovery assigns epochs from the segments it recovers).
        """
        kept = {id(segment) for segment in self._segments}  # recovered, then dropped: not scanned
        for segment in self._recovered:
            if id(segment) not in kept:
                continue
            for _, header, _, _ in segment.scan():
                if header.partition_leader_epoch > self.leader_epochs.latest_epoch:
                    log.warning(
                        "leader_epoch_recovered_from_log",
                        log=self.directory.name,
                        epoch=header.partition_leader_epoch,
                        start_offset=header.base_offset,
                    )
                    self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
        self._recovered = []

    def _rebuild_producer_state(self) -> None:
        """Newest producer snapshot at or below the log end, then replay batch headers after it."""
        log_end = self.log_end_offset
        start = self.producer_state.load_latest(log_end)
        if start < self._log_start_offset:
            start = self._log_start_offset
            self.producer_state.advance_to(start)
        slot = max(bisect.bisect_right(self._base_offsets, start) - 1, 0)
        for segment in self._segments[slot:]:
            found = segment.translate_offset(start)
            if found is None:
                continue
            for _, header, _, _ in segment.scan(found[0]):
                if header.base_offset >= start:
                    self.producer_state.update(header)
        self.producer_state.advance_to(log_end)

    def _append_segment(self, segment: LogSegment) -> None:
        assert not self._segments or segment.base_offset >= self._segments[-1].next_offset
        self._segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    # ---- state -----------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (LEO)."""
        return self._segments[-1].next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(segment.size for segment in self._segments)

    def segments(self) -> list[LogSegment]:
        """A snapshot of the segment list (oldest first); the last one is active."""
        with self._lock:
            return list(self._segments)

    def assign_leader_epoch(self, leader_epoch: int) -> None:
        """This replica becomes leader in `leader_epoch`: the epoch starts at the log end (KIP-101)."""
        with self._lock:
            self._check_open()
            self._assign_epoch(leader_epoch, self.log_end_offset)

    def fence_leader_epoch(self, leader_epoch: int) -> None:
        """From now on refuse appends as leader in epochs below `leader_epoch` (a newer leader's).

        A plain store, no lock: the broker calls it on its event loop, which must not wait for an
        append holding the lock. An append that read the old fence under the lock completes before
        any truncation the new epoch brings, since truncation takes the lock after this store.
        """
        self._epoch_fence = max(self._epoch_fence, leader_epoch)

    def _assign_epoch(self, leader_epoch: int, start_offset: int) -> None:
        """Record a new epoch before any batch of it is written or served.

        A history that lacks an epoch its log holds makes truncation after a restart wrong in both
        directions (an uncommitted tail kept, or committed records cut), so the checkpoint is
        written on every new epoch, as Kafka's LeaderEpochFileCache does. Written, not synced
        (KAFKA-15046: a synced write per new leadership stalled topic creation for tens of seconds
        at 10,000 partitions): a killed process leaves it in the page cache; a crashed machine may
        lose it, but only along with batches not yet flushed, whose epochs recovery reads back
        from the segments it recovers. A flush syncs it before it moves the recovery point."""
        self.leader_epochs.assign(leader_epoch, start_offset)
        self.leader_epochs.flush(sync=False)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(largest epoch ≤ `leader_epoch`, where it ends in this log) — OffsetsForLeaderEpoch."""
        with self._lock:
            return self.leader_epochs.end_offset_for(leader_epoch, self.log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs; they take effect from the next append, roll or pass."""
        with self._lock:
            self.config = config

    def update_high_watermark(self, offset: int) -> int:
        """Follower (and tools): take a high watermark bounded by this log; returns the value set.

        A follower's may go back: a new leader's HW can be behind its predecessor's (Kafka's
        UnifiedLog.updateHighWatermark). Leaders only move theirs forward: `advance_high_watermark`.
        """
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
            return self._high_watermark

    def advance_high_watermark(self, offset: int) -> None:
        """Leader: move the high watermark forward to `offset`, which the whole ISR holds.

        The HW a leader exposes never goes back and never passes its log end: consumers read below
        it and acks=all answers rest on it (Kafka's maybeIncrementHighWatermark).
        """
        with self._lock:
            assert offset >= self._high_watermark, f"{self.directory.name}: HW {self._high_watermark} → {offset}"
            assert offset <= self.log_end_offset, f"{self.directory.name}: HW {offset} past LEO {self.log_end_offset}"
            self._high_watermark = offset

    # ---- appending -------------------------------------------------------------------------

    def _validate_all(self, records: bytes | bytearray | memoryview, *, from_producer: bool) -> list[BatchHeader]:
        """Check every batch before writing any, so a bad request never half-writes."""
        headers: list[BatchHeader] = []
        position = 0
        limit = self.config.max_message_bytes
        if not records:
            raise InvalidRecordError("no record batches to append")
        while position < len(records):
            if len(records) - position >= BATCH_OVERHEAD:
                # Say "too large" before "torn": a client cut off at a size limit should learn why.
                size = read_header(records, position).size
                if size > limit:
                    raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={limit}")
            header = validate_batch(records, position)
            if from_producer or self.config.compact:
                check_records(
                    records, position, header, contiguous_offsets=from_producer, require_keys=self.config.compact
                )
            headers.append(header)
            position += header.size
        return headers

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> AppendInfo:
        """Validate producer batches, assign offsets from the log end, stamp the leader epoch."""
        headers = self._validate_all(records, from_producer=True)
        with self._lock:
            self._check_open()
            duplicate = self.producer_state.check(headers)
            if duplicate is not None:
                return AppendInfo(
                    first_offset=duplicate.first_offset,
                    last_offset=duplicate.last_offset,
                    max_timestamp=duplicate.timestamp,
                    log_append_time_ms=-1,
                    batch_count=0,
                    bytes=0,
                    duplicate=True,
                )
            newest = max(self._epoch_fence, self.leader_epochs.latest_epoch)
            if leader_epoch < newest:
                raise NotLeaderOrFollowerError(
                    f"{self.directory.name}: append as leader in epoch {leader_epoch}, "
                    f"but this replica has seen epoch {newest}"
                )
            data = bytearray(records)
            self._assign_epoch(leader_epoch, self.log_end_offset)
            next_offset = self.log_end_offset
            append_time = self.clock() if self.config.message_timestamp_type == "LogAppendTime" else None
            position = 0
            stamped: list[BatchHeader] = []
            for header in headers:
                view = memoryview(data)[position : position + header.size]
                restamp(view, base_offset=next_offset, partition_leader_epoch=leader_epoch, log_append_time=append_time)
                stamped.append(
                    header._replace(
                        base_offset=next_offset,
                        partition_leader_epoch=leader_epoch,
                        max_timestamp=header.max_timestamp if append_time is None else append_time,
                    )
                )
                next_offset += header.last_offset_delta + 1
                position += header.size
            return self._append_locked(data, stamped, -1 if append_time is None else append_time)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry their offsets and leader epochs (replication)."""
        headers = self._validate_all(records, from_producer=False)
        with self._lock:
            self._check_open()
            expected = self.log_end_offset
            for header in headers:
                if header.base_offset < expected:
                    raise InvalidRecordError(
                        f"batch at offset {header.base_offset} is below the expected offset {expected}"
                    )
                expected = header.next_offset
            for header in headers:
                self._assign_epoch(header.partition_leader_epoch, header.base_offset)
            return self._append_locked(records, headers, -1)

    def _append_locked(
        self, data: bytes | bytearray | memoryview, headers: list[BatchHeader], append_time: int
    ) -> AppendInfo:
        self._maybe_roll(len(data), headers[0].base_offset, headers[-1].last_offset)
        segment = self.active_segment
        position = 0
        records = 0
        for header in headers:
            segment.append(memoryview(data)[position : position + header.size], header)
            self.producer_state.update(header)
            position += header.size
            records += header.record_count
        assert self.log_end_offset == headers[-1].next_offset
        self._unflushed_records += records
        if self._unflushed_records >= self.config.flush_messages or self._flush_due():
            self._flush_locked()
        return AppendInfo(
            first_offset=headers[0].base_offset,
            last_offset=headers[-1].last_offset,
            max_timestamp=max(header.max_timestamp for header in headers),
            log_append_time_ms=append_time,
            batch_count=len(headers),
            bytes=len(data),
        )

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int) -> None:
        segment = self.active_segment
        if segment.is_empty:
            return
        if (
            segment.size + size > self.config.segment_bytes
            or segment.index_is_full
            or self.clock() - segment.rolling_base_ms >= self.config.segment_ms
            or last_offset - segment.base_offset > MAX_RELATIVE_OFFSET
        ):
            self._roll_locked(first_offset)

    def roll(self) -> None:
        """Seal the active segment and start a new one at the log end offset."""
        with self._lock:
            self._check_open()
            if not self.active_segment.is_empty:
                self._roll_locked(self.log_end_offset)

    def _roll_locked(self, base_offset: int) -> None:
        self.active_segment.seal()
        self._append_segment(self._new_segment(base_offset))
        # A snapshot per segment bounds what opening or truncating must replay to one segment.
        self.producer_state.advance_to(self.log_end_offset)
        self.producer_state.take_snapshot()

    # ---- reading ---------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytearray:
        """Stored batches from the one holding `offset`, up to `max_bytes`, below `max_offset`.

        Batches are returned as they are stored (ready to send without re-encoding), so the
        first may start before `offset`; the consumer skips the records it did not ask for.
        """
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        with self._lock:
            self._check_open()
            end = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
            if offset < self._log_start_offset or offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside [{self._log_start_offset}, {self.log_end_offset}] "
                    f"of {self.topic}-{self.partition}"
                )
            slot = max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)
            for segment in self._segments[slot:]:
                if segment.base_offset >= end:
                    break
                data = segment.read(offset, max_bytes, max_offset=end, min_one_batch=min_one_batch)
                if data:
                    return data
            return bytearray()

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp` (ListOffsets)."""
        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp)
                    if found is not None and found[0] >= self._log_start_offset:
                        return found
            return None

    # ---- truncation and deletion -----------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove records at and after `offset` (whole batches: the log may end below it)."""
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            if offset <= self._segments[0].base_offset:
                self._truncate_fully_locked(max(offset, self._log_start_offset))
                return
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                self._segments.pop().delete()
                self._base_offsets.pop()
            self.active_segment.truncate_to(offset)
            self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log at `offset` (a replica far behind the leader)."""
        with self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._base_offsets.clear()
        self._append_segment(self._new_segment(offset))
        self._log_start_offset = offset
        self.leader_epochs.clear()
        self.producer_state.clear(offset)
        self._after_truncation()

    def _after_truncation(self) -> None:
        log_end = self.log_end_offset
        self._high_watermark = min(self._high_watermark, log_end)
        self._high_watermark = max(self._high_watermark, self._log_start_offset)
        self._recovery_point = min(self._recovery_point, log_end)
        self.leader_epochs.truncate_from_end(log_end)
        if self.producer_state.map_end_offset > log_end:
            self._rebuild_producer_state()
        self._write_checkpoints()

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to `offset` (≤ high watermark); returns the new start.

        Whole segments below it are deleted now; the rest go at the next retention pass.
        """
        with self._lock:
            self._check_open()
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records up to {offset}: above the high watermark {self._high_watermark}"
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self.leader_epochs.truncate_from_start(offset)
                self._delete_oldest(
                    segments_past_retention(
                        self._segments,
                        self.config,
                        now_ms=self.clock(),
                        log_start_offset=offset,
                        start_offset_only=True,
                    )
                )
                self._write_checkpoints()
            return self._log_start_offset

    def apply_retention(self) -> int:
        """Delete old segments by retention.ms, retention.bytes and log start; returns how many."""
        with self._lock:
            self._check_open()
            count = segments_past_retention(
                self._segments, self.config, now_ms=self.clock(), log_start_offset=self._log_start_offset
            )
            if count:
                self._delete_oldest(count)
                self._write_checkpoints()
            return count

    def expire_producers(self, expiration_ms: int) -> int:
        """Forget idempotent producers silent for `producer.id.expiration.ms`; how many."""
        with self._lock:
            self._check_open()
            return self.producer_state.remove_expired(self.clock(), expiration_ms)

    def _delete_oldest(self, count: int) -> None:
        assert count < len(self._segments), "the active segment is never deleted by retention"
        for segment in self._segments[:count]:
            log.info("segment_deleted", segment=segment.log_path.name, size=segment.size)
            segment.delete()
        del self._segments[:count]
        del self._base_offsets[:count]
        first_base = self._segments[0].base_offset
        if first_base > self._log_start_offset:
            self._log_start_offset = first_base
            self.leader_epochs.truncate_from_start(first_base)
        self.producer_state.delete_snapshots_below(first_base)
        self._high_watermark = max(self._high_watermark, self._log_start_offset)

    # ---- durability ------------------------------------------------------------------------

    def _flush_due(self) -> bool:
        return self.clock() - self._last_flush_ms >= self.config.flush_ms

    @property
    def has_unflushed(self) -> bool:
        """Records appended and not yet fsync'd (read without the lock: a hint for the scheduler)."""
        return self._unflushed_records > 0

    def maybe_flush(self) -> bool:
        """Flush when `flush.ms` has passed with unflushed data; the broker calls this on a timer."""
        with self._lock:
            if self._closed or not self._unflushed_records or not self._flush_due():
                return False
            self._flush_locked()
            return True

    def flush(self) -> None:
        """fsync every segment with unflushed data and advance the recovery point."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        for segment in self._segments:
            if segment.next_offset > self._recovery_point or segment is self.active_segment:
                segment.flush()
        self._recovery_point = self.log_end_offset
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()
        self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        """Write the offsets that changed since written (an fsync'd file each): a new, empty log
        writes none (a missing file reads as 0), and a flush that moved nothing writes nothing.
        The epoch history first: once the recovery point passes a batch, recovery no longer reads
        that batch's epoch back, so the history holding it must be durable by then."""
        self.leader_epochs.flush()
        for name, value in (
            (RECOVERY_POINT_FILE, self._recovery_point),
            (HIGH_WATERMARK_FILE, self._high_watermark),
            (LOG_START_OFFSET_FILE, self._log_start_offset),
        ):
            if self._checkpointed.get(name, 0) != value:
                write_checkpoint(self.directory / name, [(value,)])
                self._checkpointed[name] = value

    def close(self) -> None:
        """Flush, close every segment and leave the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            self.producer_state.take_snapshot()
            for segment in self._segments:
                segment.close()
            self._closed = True
            (self.directory / CLEAN_SHUTDOWN_FILE).touch()

    def close_without_flush(self) -> None:
        """Close descriptors as a crash would leave them: no flush, no marker (tests, shutdown on error)."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition folder (topic deletion, StopReplica)."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"log {self.directory.name} is closed")

    # ---- log cleaner access ----------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the log's lock (the cleaner reads old segments under it, a chunk at a time)."""
        with self._lock:
            self._check_open()
            yield

    def replace_segment(self, old: LogSegment, new: LogSegment) -> bool:
        """Swap a cleaned segment in for `old`; False (and `new` discarded) if `old` is gone.

        Crash safety: `new` was written as `.cleaned` and fsynced; renaming it to `.swap` is the
        commit point (a crash after it completes the swap on the next open), then `.swap`
        replaces the old files by rename.
        """
        with self._lock:
            if self._closed or old not in self._segments or old is self.active_segment:
                new.delete()
                return False
            assert new.base_offset == old.base_offset
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
