"""The log of one partition: a folder `<topic>-<partition>/` of segments plus checkpoint files
(log_files.py lists them), and what the log keeps beside its segments — high watermark, log start
offset, recovery point, leader epochs, producers and their transactions (the last stable offset).

Its parts, each a module: segment_list.py, log_loader.py, log_validator.py, offset_checkpoints.py.
Appends go to the active segment; reads return whole stored batches as bytes. Opening recovers
from the recovery point on and cuts a torn tail.

Thread-safety: every public method takes the log's lock, so a broker may call them from worker
threads (it must: `flush` fsyncs). The log cleaner and the broker's event loop get at it as
log_access.py says.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from tidelog.broker.storage.leader_epoch_cache import LeaderEpochCache
from tidelog.broker.storage.log_access import LogAccess
from tidelog.broker.storage.log_config import LogConfig
from tidelog.broker.storage.log_files import CLEAN_SHUTDOWN_FILE, LEADER_EPOCH_FILE, parse_log_directory_name
from tidelog.broker.storage.log_loader import load_log, rebuild_producer_state
from tidelog.broker.storage.log_validator import AppendInfo, assign_offsets, validate_batches
from tidelog.broker.storage.offset_checkpoints import OffsetCheckpoints
from tidelog.broker.storage.producer_state import ProducerStateManager
from tidelog.broker.storage.segment import LogSegment
from tidelog.broker.storage.segment_list import SegmentList
from tidelog.broker.storage.transaction_index import AbortedTxn
from tidelog.broker.storage.transaction_tracking import collect_aborted, track_batch
from tidelog.common.clock import wall_clock_ms
from tidelog.common.errors import InvalidRecordError, NotLeaderOrFollowerError, OffsetOutOfRangeError
from tidelog.common.record.batch import BatchHeader, read_header
from tidelog.common.record.control import Marker, encode_marker

__all__ = ["AppendInfo", "PartitionLog", "parse_log_directory_name"]

log = structlog.get_logger(__name__)


class PartitionLog(LogAccess):
    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        """Use `PartitionLog.open`; this only sets fields."""
        self.directory = directory
        self.topic, self.partition = parse_log_directory_name(directory.name)
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._local = SegmentList(directory, config, clock)
        self.leader_epochs = LeaderEpochCache(directory / LEADER_EPOCH_FILE)
        self.producer_state = ProducerStateManager(directory)
        self._log_start_offset = 0
        self._high_watermark = 0
        self._checkpoints = OffsetCheckpoints(directory)
        self._recovery_point = 0
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self._closed = False
        # Appends as leader in an epoch below this are refused (fence_leader_epoch). The broker
        # raises it before the replica starts following; an append checks it under the lock, so one
        # admitted in an older epoch cannot land after a follower's truncation, where it would
        # leave this replica's log diverged from the leader's (Kafka's leaderIsrUpdateLock).
        self._epoch_fence = -1

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        clean: bool = False,
        existing: bool = False,
    ) -> PartitionLog:
        """Open (creating if needed) and recover the log in `directory`; `clean`: closed cleanly by the
        broker's last stop (clean_shutdown.py): no recovery; `existing`: the caller saw the folder."""
        if not existing:
            directory.mkdir(parents=True, exist_ok=True)
        (partition_log := cls(directory, config, clock))._load(clean)
        return partition_log

    @classmethod
    def create(cls, directory: Path, config: LogConfig, *, clock: Callable[[], int] = wall_clock_ms) -> PartitionLog:
        """A new, empty log in a `directory` that does not exist yet (FileExistsError if it does):
        `open` without recovery, which has nothing to read (a new topic creates thousands)."""
        directory.mkdir(parents=True)
        partition_log = cls(directory, config, clock)
        partition_log._local.append(partition_log._local.new_segment(0, present=()))  # a new folder: empty
        return partition_log

    def _load(self, clean: bool) -> None:
        loaded = load_log(self._local, self.producer_state, self._checkpoints, self.config, clean=clean)
        self._log_start_offset, self._high_watermark = loaded.log_start_offset, loaded.high_watermark
        self._recovery_point, self.leader_epochs = loaded.recovery_point, loaded.leader_epochs

    # ---- state -----------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (LEO)."""
        return self._local.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """read_committed reads below it (KIP-98): the high watermark, or an open or unreplicated
        transaction's first offset, not below the log start (retention may delete it, as Kafka's)."""
        with self._lock:
            return self.producer_state.last_stable_offset(self._high_watermark, self._log_start_offset)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._local.size_bytes

    def segments(self) -> list[LogSegment]:
        """A snapshot of the segment list (oldest first); the last one is active."""
        with self._lock:
            return list(self._local)

    def assign_leader_epoch(self, leader_epoch: int) -> None:
        """This replica leads in `leader_epoch` from the log end on (KIP-101); the history is written
        with the epoch's first batch (taking 3,000 leaderships wrote 3,000 files, producers waiting)."""
        with self._lock:
            self._check_open()
            self.leader_epochs.assign(leader_epoch, self.log_end_offset)

    def fence_leader_epoch(self, leader_epoch: int) -> None:
        """From now on refuse appends as leader in epochs below `leader_epoch` (a newer leader's).

        A plain store, no lock: the broker calls it on its event loop, which must not wait for an
        append holding the lock. An append that read the old fence under the lock completes before
        any truncation the new epoch brings, since truncation takes the lock after this store."""
        self._epoch_fence = max(self._epoch_fence, leader_epoch)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(largest epoch ≤ `leader_epoch`, where it ends in this log) — OffsetsForLeaderEpoch."""
        with self._lock:
            return self.leader_epochs.end_offset_for(leader_epoch, self.log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs; they take effect from the next append, roll or pass."""
        with self._lock:
            self.config = config
            self._local.config = config

    def update_high_watermark(self, offset: int) -> int:
        """Follower (and tools): take a high watermark bounded by this log; returns the value set.

        A follower's may go back: a new leader's HW can be behind its predecessor's (Kafka's
        UnifiedLog.updateHighWatermark). Leaders only move theirs forward: `advance_high_watermark`."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
            self.producer_state.on_high_watermark(self._high_watermark)
            return self._high_watermark

    def advance_high_watermark(self, offset: int) -> None:
        """Leader: move the high watermark forward to `offset`, which the whole ISR holds.

        The HW a leader exposes never goes back and never passes its log end: consumers read below
        it and acks=all answers rest on it (Kafka's maybeIncrementHighWatermark)."""
        with self._lock:
            assert offset >= self._high_watermark, f"{self.directory.name}: HW {self._high_watermark} → {offset}"
            assert offset <= self.log_end_offset, f"{self.directory.name}: HW {offset} past LEO {self.log_end_offset}"
            self._high_watermark = offset
            self.producer_state.on_high_watermark(offset)

    # ---- appending -------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int, *, unsequenced: bool = False
    ) -> AppendInfo:
        """Validate producer batches, assign offsets from the log end, stamp the leader epoch
        (`unsequenced`: a group coordinator's transactional offsets, ProducerStateManager.check)."""
        headers = validate_batches(records, self.config, from_producer=True)
        with self._lock:
            self._check_open()
            duplicate = self.producer_state.check(headers, unsequenced=unsequenced)
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
            return self._append_as_leader_locked(bytearray(records), headers, leader_epoch)

    def append_marker(self, producer_id: int, producer_epoch: int, marker: Marker, leader_epoch: int) -> AppendInfo:
        """As leader, end `producer_id`'s transaction here with a marker (WriteTxnMarkers)."""
        batch = bytearray(encode_marker(producer_id, producer_epoch, marker, timestamp=self.clock()))
        with self._lock:
            self._check_open()
            self.producer_state.check_marker(producer_id, producer_epoch, marker)
            return self._append_as_leader_locked(batch, [read_header(batch)], leader_epoch)

    def _append_as_leader_locked(self, data: bytearray, headers: list[BatchHeader], leader_epoch: int) -> AppendInfo:
        newest = max(self._epoch_fence, self.leader_epochs.latest_epoch)
        if leader_epoch < newest:
            raise NotLeaderOrFollowerError(
                f"{self.directory.name}: append as leader in epoch {leader_epoch}, "
                f"but this replica has seen epoch {newest}"
            )
        self.leader_epochs.assign(leader_epoch, self.log_end_offset)  # (written by the flush: ADR 0030)
        append_time = self.clock() if self.config.message_timestamp_type == "LogAppendTime" else None
        stamped = assign_offsets(data, headers, self.log_end_offset, leader_epoch, append_time)
        return self._append_locked(data, stamped, -1 if append_time is None else append_time)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry their offsets and leader epochs (replication)."""
        headers = validate_batches(records, self.config, from_producer=False)
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
                self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
            return self._append_locked(records, headers, -1)

    def _append_locked(
        self, data: bytes | bytearray | memoryview, headers: list[BatchHeader], append_time: int
    ) -> AppendInfo:
        self._maybe_roll(len(data), headers[0].base_offset, headers[-1].last_offset)
        segment = self._local.active
        position = 0
        records = 0
        for header in headers:
            batch = memoryview(data)[position : position + header.size]
            segment.append(batch, header)
            track_batch(self.producer_state, segment, header, lambda batch=batch: batch)  # type: ignore[misc]
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
        if self._local.roll_due(size, last_offset):
            self._roll_locked(first_offset)

    def roll(self) -> None:
        """Seal the active segment and start a new one at the log end offset."""
        with self._lock:
            self._check_open()
            if not self._local.active.is_empty:
                self._roll_locked(self.log_end_offset)

    def _roll_locked(self, base_offset: int) -> None:
        self._local.roll(base_offset)
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
            return self._local.read(offset, max_bytes, end=end, min_one_batch=min_one_batch)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, end) (a read_committed fetch's list)."""
        with self._lock:
            self._check_open()
            return collect_aborted(self._local.segments, self._local.base_offsets, start, end)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp` (ListOffsets)."""
        with self._lock:
            self._check_open()
            return self._local.offset_for_timestamp(timestamp, self._log_start_offset)

    # ---- truncation and deletion -----------------------------------------------------------

    def truncate_to(self, offset: int, *, sync: bool = True) -> None:
        """Remove records at and after `offset` (whole batches: the log may end below it); without
        `sync`, the caller syncs the file system before appending past the cut (replica_fetcher)."""
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            if offset <= self._local.first.base_offset:
                self._truncate_fully_locked(max(offset, self._log_start_offset), sync=sync)
                return
            self._local.truncate_to(offset)
            self._after_truncation(sync=sync)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log at `offset` (a replica far behind the leader)."""
        with self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int, *, sync: bool = True) -> None:
        self._local.delete_all_and_start_at(offset)
        self._log_start_offset = offset
        self.leader_epochs.clear()
        self.producer_state.clear(offset)
        self._after_truncation(sync=sync)

    def _after_truncation(self, *, sync: bool = True) -> None:
        log_end = self.log_end_offset
        self._high_watermark = min(self._high_watermark, log_end)
        self._high_watermark = max(self._high_watermark, self._log_start_offset)
        self._recovery_point = min(self._recovery_point, log_end)
        self.leader_epochs.truncate_from_end(log_end)
        if (producers := self.producer_state).map_end_offset > log_end:
            rebuild_producer_state(
                producers, self._local.segments, self._local.base_offsets, self.log_start_offset, log_end
            )
            producers.on_high_watermark(self._high_watermark)
        self._write_checkpoints(sync=sync)

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to `offset` (≤ high watermark); returns the new start. Whole
        segments below it are deleted now; the rest go at the next retention pass."""
        with self._lock:
            self._check_open()
            if offset > (hw := self._high_watermark):
                raise OffsetOutOfRangeError(f"cannot delete records up to {offset}: above the high watermark {hw}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self.leader_epochs.truncate_from_start(offset)
                self._delete_oldest(self._local.past_retention(offset, start_offset_only=True))
                self._write_checkpoints()
            return self._log_start_offset

    def apply_retention(self) -> int:
        """Delete old segments by retention.ms, retention.bytes and log start; returns how many."""
        with self._lock:
            self._check_open()
            count = self._local.past_retention(self._log_start_offset)
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
        self._local.delete_oldest(count)
        first_base = self._local.first.base_offset
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
        self._local.flush_from(self._recovery_point)
        self._recovery_point = self.log_end_offset
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()
        self._write_checkpoints()

    def _write_checkpoints(self, *, sync: bool = True) -> None:
        """The epoch history first: once the recovery point passes a batch, recovery no longer
        reads that batch's epoch back, so the history holding it must be durable by then."""
        self.leader_epochs.flush(sync=sync, log_end=self.log_end_offset)
        self._checkpoints.write(
            recovery_point=self._recovery_point,
            high_watermark=self._high_watermark,
            log_start_offset=self._log_start_offset,
            sync=sync,
        )

    def close(self, *, sync: bool = True) -> None:
        """Flush, close every segment and leave the clean-shutdown marker. Without `sync`: the first
        half, everything written, nothing fsynced, checkpoints and marker left to `finish_close`
        after a sync of the file system (ADR 0023)."""
        with self._lock:
            if self._closed:
                return
            self._local.flush_from(self._recovery_point, sync=sync)
            self.leader_epochs.flush(sync=sync, log_end=self.log_end_offset)
            self.producer_state.take_snapshot(sync=sync)
            self._local.close()
            self._closed = True
            if sync:
                self.finish_close(sync=True)

    def finish_close(self, *, sync: bool = False, marker: bool = True) -> None:
        """close(sync=False)'s second half, once the file system is synced: checkpoints, and the
        marker unless the caller names the log in its data directory's list (clean_shutdown.py)."""
        with self._lock:
            assert self._closed, "finish_close follows close()"
            self._recovery_point = self.log_end_offset  # (the segments' ends outlive their files)
            self._write_checkpoints(sync=sync)
            if marker:
                (self.directory / CLEAN_SHUTDOWN_FILE).touch()

    def close_without_flush(self) -> None:
        """Close descriptors as a crash would leave them: no flush, no marker (tests, shutdown on error)."""
        with self._lock:
            self._local.close()
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition folder (topic deletion, StopReplica)."""
        with self._lock:
            self.close_without_flush()
            shutil.rmtree(self.directory, ignore_errors=True)
