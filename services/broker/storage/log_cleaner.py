"""Log compaction (`cleanup.policy=compact`): keep the last record of each key, offsets unchanged.

One pass (`compact`) over a partition log:
1. The cleanable range is every non-active segment whose newest record is older than
   `min.compaction.lag.ms`, below the last stable offset; the dirty part starts at
   `cleaner-offset-checkpoint`. Control batches (transaction markers) are kept as they are;
   aborted transactions' batches (the aborted-transaction index says which) are removed and never
   supersede anything: an aborted offset commit must not delete the committed one before it.
2. An offset map key → last offset is built from the dirty part (one `dict.update(zip(...))`
   per batch: C-level, no per-record Python).
3. Every cleanable segment that loses a record is rewritten as `<base>.log.cleaned`: a record
   survives unless a later offset holds its key; a tombstone (null value) also goes once its
   segment's newest record is older than `delete.retention.ms`. Surviving records keep their
   offsets (the batch format carries per-record offset deltas); untouched batches are copied byte
   for byte; batches left empty are dropped.
4. The cleaned segment is swapped in by rename (PartitionLog.replace_segment: crash-safe).

The active segment is never read or written. The cleaner holds the log's lock only to read one
chunk of an old segment and for the swap, so appends go on while it works. `LogCleaner` runs passes
on a background thread over every log that is dirty enough (`min.cleanable.dirty.ratio`).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Final, TypeVar

import numpy as np
import structlog

from tidelog.broker.storage.checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from tidelog.broker.storage.log_files import CLEANED_SUFFIX, CLEANER_OFFSET_FILE
from tidelog.broker.storage.partition_log import PartitionLog
from tidelog.broker.storage.segment import LogSegment
from tidelog.common.record.batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    decode_batch,
    encode_batch,
    read_header,
    validate_batch,
)

__all__ = ["CleanResult", "LogCleaner", "compact", "dirty_ratio"]

log = structlog.get_logger(__name__)

READ_CHUNK_BYTES: Final = 1 << 20
T = TypeVar("T")


class CleaningAbortedError(Exception):
    """The log changed under the cleaner (segment deleted, log closed): try again later."""


@dataclasses.dataclass(frozen=True, slots=True)
class CleanResult:
    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int
    cleaned_up_to: int


def _first_dirty_offset(partition_log: PartitionLog) -> int:
    try:
        entries = read_checkpoint(partition_log.directory / CLEANER_OFFSET_FILE, fields=1)
    except CorruptCheckpointError:
        entries = None
    checkpointed = entries[0][0] if entries else 0
    return max(checkpointed, partition_log.log_start_offset)


def _cleanable_segments(partition_log: PartitionLog, now_ms: int) -> list[LogSegment]:
    """Non-active segments, up to the first holding a record younger than min.compaction.lag.ms or
    past the last stable offset (Kafka's bound too): above the high watermark records may yet be
    truncated, and an open transaction's may yet be aborted."""
    horizon = now_ms - partition_log.config.min_compaction_lag_ms
    stable = partition_log.last_stable_offset
    segments = partition_log.segments()[:-1]
    return list(
        itertools.takewhile(
            lambda segment: segment.max_timestamp <= horizon and segment.next_offset <= stable, segments
        )
    )


def dirty_ratio(partition_log: PartitionLog, now_ms: int) -> float:
    """Fraction of the cleanable bytes not cleaned yet."""
    segments = _cleanable_segments(partition_log, now_ms)
    total = sum(segment.size for segment in segments)
    if not total:
        return 0.0
    first_dirty = _first_dirty_offset(partition_log)
    dirty = sum(segment.size for segment in segments if segment.next_offset > first_dirty)
    return dirty / total


def _batches(partition_log: PartitionLog, segment: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """Each batch of an old segment, read a chunk at a time under the log's lock and validated."""
    position = 0
    while True:
        with partition_log.locked():
            if segment.closed:
                raise CleaningAbortedError(f"{segment.log_path.name} was removed while cleaning")
            end = segment.size
            if position >= end:
                return
            chunk = segment.read_at(READ_CHUNK_BYTES, position)
            if len(chunk) >= BATCH_OVERHEAD:
                wanted = read_header(chunk).size
                if wanted > len(chunk):
                    chunk = segment.read_at(wanted, position)
        local = 0
        while local + BATCH_OVERHEAD <= len(chunk):
            header = read_header(chunk, local)
            if local + header.size > len(chunk):
                break
            validate_batch(chunk, local)
            yield header, chunk[local : local + header.size]
            local += header.size
        if local == 0:
            raise CleaningAbortedError(f"{segment.log_path.name}: unreadable batch at {position}")
        position += local


Aborted = dict[int, list[tuple[int, int]]]  # producer id → (first offset, marker offset) of its aborts


def _aborted(partition_log: PartitionLog, segments: list[LogSegment]) -> Aborted:
    found: Aborted = {}
    for entry in partition_log.aborted_transactions(segments[0].base_offset, segments[-1].next_offset):
        found.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
    return found


def _is_aborted(header: BatchHeader, aborted: Aborted) -> bool:
    return header.is_transactional and any(
        first <= header.base_offset <= last for first, last in aborted.get(header.producer_id, ())
    )


def _build_offset_map(
    partition_log: PartitionLog, dirty: list[LogSegment], first_dirty: int, aborted: Aborted
) -> dict[bytes | None, int]:
    offset_map: dict[bytes | None, int] = {}
    for segment in dirty:
        for header, raw in _batches(partition_log, segment):
            if header.next_offset <= first_dirty or header.is_control or _is_aborted(header, aborted):
                continue
            batch = decode_batch(raw, verify_crc=False)
            offset_map.update(zip(batch.keys, batch.offsets, strict=True))
    offset_map.pop(None, None)
    return offset_map


def _clean_batch(raw: bytes, offset_map: dict[bytes | None, int], drop_tombstones: bool) -> tuple[bytes | None, int]:
    """The batch with superseded records removed (None if none survive); and how many went."""
    batch = decode_batch(raw, verify_crc=False)
    offsets = np.fromiter(batch.offsets, dtype=np.int64, count=len(batch))
    latest = np.fromiter(map(offset_map.get, batch.keys, itertools.repeat(-1)), dtype=np.int64, count=len(batch))
    keep = latest <= offsets
    if drop_tombstones:
        keep &= np.fromiter((value is not None for value in batch.values), dtype=bool, count=len(batch))
    kept = np.flatnonzero(keep).tolist()
    removed = len(batch) - len(kept)
    if not removed:
        return raw, 0
    if not kept:
        return None, removed
    header = batch.header

    def pick(column: list[T]) -> list[T]:
        return [column[index] for index in kept]

    cleaned = encode_batch(
        pick(batch.values),
        keys=pick(batch.keys),
        timestamps=header.max_timestamp if header.timestamp_type else pick(batch.timestamps),
        headers=pick(batch.headers),
        offset_deltas=[batch.offsets[index] - header.base_offset for index in kept],
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        compression=header.compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
    )
    return cleaned, removed


def _rewrite_segment(
    partition_log: PartitionLog,
    segment: LogSegment,
    offset_map: dict[bytes | None, int],
    drop_tombstones: bool,
    aborted: Aborted,
) -> tuple[LogSegment | None, int]:
    """A cleaned copy of `segment` (None when nothing would change) and the records it drops."""
    cleaned_segment: LogSegment | None = None
    removed_total = 0
    try:
        for header, raw in _batches(partition_log, segment):
            if header.is_control:
                cleaned, removed = raw, 0
            elif _is_aborted(header, aborted):
                cleaned, removed = None, header.record_count
            else:
                cleaned, removed = _clean_batch(raw, offset_map, drop_tombstones)
            if removed and cleaned_segment is None:
                # First loss in this segment: only now start the copy, with the untouched prefix.
                cleaned_segment = LogSegment(
                    segment.directory,
                    segment.base_offset,
                    index_interval_bytes=segment.index_interval_bytes,
                    max_index_entries=segment.offset_index.max_entries,
                    rolling_base_ms=segment.rolling_base_ms,
                    file_suffix=CLEANED_SUFFIX,
                )
                for prefix_header, prefix_raw in _batches(partition_log, segment):
                    if prefix_header.base_offset >= header.base_offset:
                        break
                    cleaned_segment.append(prefix_raw, prefix_header)
            removed_total += removed
            if cleaned_segment is not None and cleaned is not None:
                cleaned_segment.append(cleaned, read_header(cleaned))
    except BaseException:
        if cleaned_segment is not None:
            cleaned_segment.delete()
        raise
    return cleaned_segment, removed_total


def compact(partition_log: PartitionLog, *, now_ms: int | None = None) -> CleanResult | None:
    """One compaction pass; None when there is nothing to clean or the log changed under it."""
    now = partition_log.clock() if now_ms is None else now_ms
    config = partition_log.config
    assert config.compact, "compaction runs only on logs with cleanup.policy containing compact"
    cleanable = _cleanable_segments(partition_log, now)
    first_dirty = _first_dirty_offset(partition_log)
    dirty = [segment for segment in cleanable if segment.next_offset > first_dirty]
    if not dirty:
        return None
    try:
        aborted = _aborted(partition_log, cleanable)
        offset_map = _build_offset_map(partition_log, dirty, first_dirty, aborted)
        rewritten = removed_total = bytes_before = bytes_after = 0
        tombstone_horizon = now - config.delete_retention_ms
        for segment in cleanable:
            drop_tombstones = segment.max_timestamp < tombstone_horizon
            cleaned, removed = _rewrite_segment(partition_log, segment, offset_map, drop_tombstones, aborted)
            if cleaned is None:
                continue
            size_before, size_after = segment.size, cleaned.size
            if partition_log.replace_segment(segment, cleaned):
                rewritten += 1
                removed_total += removed
                bytes_before += size_before
                bytes_after += size_after
        cleaned_up_to = dirty[-1].next_offset
        write_checkpoint(partition_log.directory / CLEANER_OFFSET_FILE, [(cleaned_up_to,)])
    except (CleaningAbortedError, FileNotFoundError, RuntimeError) as error:
        log.info("compaction_aborted", log=partition_log.directory.name, reason=str(error))
        return None
    log.info("compaction_done", log=partition_log.directory.name, segments=rewritten, removed=removed_total)
    return CleanResult(rewritten, removed_total, bytes_before, bytes_after, cleaned_up_to)


class LogCleaner:
    """Background thread compacting, on each pass, every log whose dirty ratio is high enough."""

    def __init__(self, logs: Callable[[], Iterable[PartitionLog]], *, backoff_ms: int = 15_000) -> None:
        assert backoff_ms > 0
        self._logs = logs
        self._backoff_ms = backoff_ms
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0

    def run_once(self) -> list[CleanResult]:
        results = []
        for partition_log in list(self._logs()):
            if self._stopping.is_set():
                break
            config = partition_log.config
            if not config.compact:
                continue
            if dirty_ratio(partition_log, partition_log.clock()) < config.min_cleanable_dirty_ratio:
                continue
            result = compact(partition_log)
            if result is not None:
                results.append(result)
        self.passes += 1
        return results

    def start(self) -> None:
        assert self._thread is None
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("log_cleaner_pass_failed")
            self._stopping.wait(self._backoff_ms / 1000)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
