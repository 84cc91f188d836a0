"""Opening a partition log (Kafka's LogLoader): finish what a crash interrupted, load the
segments, recover those that may hold unflushed data, and rebuild the state kept beside them
(leader epochs, idempotent producers).

Recovery starts at the recovery point (everything below it was fsynced) unless the log was
closed cleanly: each batch from there is validated and a torn or corrupt tail is cut, and, since
nothing after a torn write was acknowledged durably, every later segment is dropped (as Kafka
does). A flushed segment whose indexes do not load is recovered on its own.

`load_log` is the whole of it for PartitionLog.open: it fills the log's segment list and producer
state and returns the offsets the log keeps beside them.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import os
from collections.abc import Container
from pathlib import Path
from typing import Protocol

import structlog

from tidelog.broker.storage.leader_epoch_cache import LeaderEpochCache
from tidelog.broker.storage.log_config import LogConfig
from tidelog.broker.storage.log_files import (
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    HIGH_WATERMARK_FILE,
    LEADER_EPOCH_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    SEGMENT_NAME,
    SWAP_SUFFIX,
    read_offset,
)
from tidelog.broker.storage.offset_checkpoints import OffsetCheckpoints
from tidelog.broker.storage.producer_state import ProducerStateManager
from tidelog.broker.storage.segment import LOG_SUFFIX, BadBatchError, LogSegment
from tidelog.broker.storage.segment_list import SegmentList
from tidelog.broker.storage.transaction_tracking import track_batch
from tidelog.common.record.batch import BatchHeader, Buffer

__all__ = [
    "LoadedLog",
    "LoadedSegments",
    "assign_recovered_epochs",
    "load_log",
    "load_segments",
    "rebuild_producer_state",
]

log = structlog.get_logger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedSegments:
    segments: list[LogSegment]  # in offset order, none overlapping
    # Segments recovery validated: only they are scanned for epochs. A flushed segment loaded by
    # its indexes may hold bit rot that a read reports, not the open.
    recovered: list[LogSegment]
    clean: bool  # closed cleanly: nothing recovered, everything below the log end is durable
    recovery_point: int  # as checkpointed (0 if none); meaningless when clean


class NewSegment(Protocol):
    def __call__(self, base_offset: int, *, present: Container[str] | None = None) -> LogSegment: ...


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedLog:
    log_start_offset: int
    high_watermark: int
    recovery_point: int
    leader_epochs: LeaderEpochCache


def load_log(
    local: SegmentList,
    producer_state: ProducerStateManager,
    checkpoints: OffsetCheckpoints,
    config: LogConfig,
    *,
    clean: bool,
) -> LoadedLog:
    """Open the log in `local.directory` into `local` and `producer_state`; `clean`: closed cleanly
    by the broker's last stop (its data directory's list, clean_shutdown.py): no recovery."""
    directory = local.directory
    names = os.listdir(directory)  # once: a broker opens thousands of logs at a start
    loaded = load_segments(directory, names, config, local.new_segment, clean=clean)
    for segment in loaded.segments:
        local.append(segment)
    checkpointed = checkpoints.load(names)
    checkpointed_start = checkpointed[LOG_START_OFFSET_FILE]
    if not len(local):
        local.append(local.new_segment(checkpointed_start or 0))
    first_base = local.first.base_offset
    log_end = local.log_end_offset
    log_start = max(first_base, checkpointed_start or first_base)
    if log_start > log_end:  # everything was deleted: the log restarts at its start offset
        local.delete_all_and_start_at(log_start)
        producer_state.clear(log_start)
        log_end, names = local.log_end_offset, os.listdir(directory)
    high_watermark = min(max(checkpointed[HIGH_WATERMARK_FILE] or 0, log_start), log_end)
    # After a crash it stays (as Kafka's LogLoader): what recovery validated is not fsynced yet.
    recovery_point = log_end if loaded.clean else min(loaded.recovery_point, log_end)
    leader_epochs = LeaderEpochCache.load(directory / LEADER_EPOCH_FILE)
    leader_epochs.truncate_from_end(log_end)
    leader_epochs.truncate_from_start(log_start)
    # The file loses what the log lost; not synced (an fsync per log at a start): a crash before a
    # flush makes the next open cut it again.
    leader_epochs.flush(sync=False)
    # Left to the next flush, as any new epoch (ADR 0030): the recovery point stays below them, so
    # a second crash recovers them again (a file each was 1.3 s of a 10,000-log broker's restart).
    assign_recovered_epochs(local.segments, loaded.recovered, leader_epochs)
    rebuild_producer_state(producer_state, local.segments, local.base_offsets, log_start, log_end, names=names)
    producer_state.on_high_watermark(high_watermark)
    checkpoints.write(recovery_point=recovery_point, high_watermark=high_watermark, log_start_offset=log_start)
    return LoadedLog(log_start, high_watermark, recovery_point, leader_epochs)


def finish_interrupted_swaps(directory: Path, names: list[str]) -> bool:
    """Complete or discard compaction left half-done by a crash (see log_cleaner.py); True when
    it changed the folder's names."""
    changed = False
    for name in names:
        if not name.endswith((".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)):
            continue  # most names: no path built (a broker opens thousands of folders at a start)
        path = directory / name
        if name.endswith((".tmp", CLEANED_SUFFIX)):
            path.unlink()
        elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            final = path.with_name(name.removesuffix(SWAP_SUFFIX))
            os.replace(path, final)  # the swap file is complete: it was fsynced before renaming
            for index in (final.with_suffix(".index"), final.with_suffix(".timeindex")):
                index.unlink(missing_ok=True)  # they describe the old file; rebuilt on load
        else:
            path.unlink()
        changed = True
    return changed


def load_segments(
    directory: Path,
    names: list[str],
    config: LogConfig,
    new_segment: NewSegment,
    *,
    clean: bool = False,
) -> LoadedSegments:
    """The log's segments, recovered where they may hold unflushed data; consumes the clean-shutdown
    marker. `names` is the folder's listing, read once by the caller (each file-system call counts
    when a broker opens 10,000 logs); `clean`: closed cleanly by the broker's last stop."""
    if finish_interrupted_swaps(directory, names):
        names = os.listdir(directory)
    present = frozenset(names)  # index files not in it are known empty (LogSegment)
    marked = CLEAN_SHUTDOWN_FILE in names
    clean = clean or marked
    base_offsets = sorted(int(match[1]) for name in names if (match := SEGMENT_NAME.match(name)))
    recovery_point = 0  # (unused when clean: nothing is recovered)
    if not clean and RECOVERY_POINT_FILE in names:
        recovery_point = read_offset(directory / RECOVERY_POINT_FILE) or 0
    segments: list[LogSegment] = []
    recovered: list[LogSegment] = []
    drop_rest = False
    for slot, base_offset in enumerate(base_offsets):
        segment = new_segment(base_offset, present=present)
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
            recovered.append(segment)
            truncated = segment.recover(config.max_message_bytes)
            if truncated:
                log.warning("segment_tail_truncated", segment=segment.log_path.name, bytes=truncated)
                # After a torn write nothing later was acknowledged durably: drop it (as Kafka does).
                drop_rest = unflushed
        if segments and segment.base_offset < segments[-1].next_offset:
            log.warning("segment_overlaps_previous", segment=segment.log_path.name)
            segment.delete()
            drop_rest = True
            continue
        segments.append(segment)
    if marked:
        (directory / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    return LoadedSegments(segments, recovered, clean, recovery_point)


def assign_recovered_epochs(
    segments: list[LogSegment], recovered: list[LogSegment], leader_epochs: LeaderEpochCache
) -> None:
    """Add the epochs that batches in the recovered segments carry and the history lacks: those
    the log's last flush did not write (ADR 0030), as Kafka's recovery assigns epochs from the
    segments it recovers."""
    kept = {id(segment) for segment in segments}  # recovered, then dropped: not scanned
    for segment in recovered:
        if id(segment) not in kept:
            continue
        for _, header, _, _ in segment.scan():
            if header.partition_leader_epoch > leader_epochs.latest_epoch:
                leader_epochs.assign(header.partition_leader_epoch, header.base_offset)


def rebuild_producer_state(
    producer_state: ProducerStateManager,
    segments: list[LogSegment],
    base_offsets: list[int],
    log_start: int,
    log_end: int,
    *,
    names: list[str] | None = None,
) -> None:
    """Newest producer snapshot at or below the log end, then replay batch headers after it (and
    the markers' records: transaction_tracking.py) (`names`: the folder's listing, if the caller
    has it)."""
    start = producer_state.load_latest(log_end, names)
    if start < log_start:
        start = log_start
        producer_state.advance_to(start)
    slot = max(bisect.bisect_right(base_offsets, start) - 1, 0)
    for segment in segments[slot:]:
        try:
            found = segment.translate_offset(start)
            if found is None:
                continue
            for position, header, buffer, local in segment.scan(found[0]):
                if header.base_offset >= start:
                    whole = functools.partial(_batch_bytes, segment, position, header, buffer, local)
                    track_batch(producer_state, segment, header, whole)
        except BadBatchError as error:
            # Bit rot in a flushed segment (only recovered segments were validated): the rest of it
            # is unreadable, and a read there reports KAFKA_STORAGE_ERROR, never serves it. The
            # producers it held are not known; the open goes on, as it does for the reads.
            log.error(
                "producer_state_scan_stopped", segment=segment.base_offset, position=error.position, error=str(error)
            )
    producer_state.advance_to(log_end)


def _batch_bytes(segment: LogSegment, position: int, header: BatchHeader, buffer: Buffer, local: int) -> Buffer:
    """The whole batch a header scan found (its chunk may end inside the batch)."""
    if local + header.size <= len(buffer):
        return memoryview(buffer)[local : local + header.size]
    return segment.read_at(header.size, position)
