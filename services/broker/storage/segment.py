"""A log segment: the batches of one partition from `base_offset` on, in three files.

    <base_offset:020d>.log        record batches back to back, exactly as the producer or leader
                                  sent them (docs/record-format.md); nothing else
    <base_offset:020d>.index      sparse offset → position index (index.py)
    <base_offset:020d>.timeindex  sparse timestamp → offset index (index.py)
    <base_offset:020d>.txnindex   aborted transactions whose marker is here, only once there is
                                  one (transaction_index.py)

Reads locate a batch by binary search in the offset index, then a short forward scan of batch
headers. Segments never decode records except to answer a timestamp lookup.

Not thread-safe: the owning PartitionLog serialises every call under its lock. File descriptors are
closed only under that lock, so a pread never meets a closed or reused descriptor.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Final

from tidelog.broker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from tidelog.broker.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex
from tidelog.common.errors import CorruptRecordError, InvalidRecordError, KafkaStorageError
from tidelog.common.record.batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    counted_size,
    decode_batch,
    read_header,
    validate_batch,
)

__all__ = ["BadBatchError", "LogSegment", "segment_file_name"]

SCAN_CHUNK_BYTES: Final = 1 << 20  # validating scans (recovery) read whole batches
HEADER_SCAN_CHUNK_BYTES: Final = 16 << 10  # header-only scans: covers a 4 KiB index gap in one read
LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
NO_TIMESTAMP: Final = -1


class BadBatchError(CorruptRecordError):
    """A batch in a segment file that cannot be trusted, at `position`."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"position {position}: {message}")
        self.position = position


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_entries: int,
        rolling_base_ms: int,
        file_suffix: str = "",
        present: Container[str] | None = None,
    ) -> None:
        """`present`: the folder's listing, when the caller has one (a log's open): the index files
        it lacks are known empty, and neither read nor cut."""
        assert base_offset >= 0
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.file_suffix = file_suffix  # ".cleaned" while the log cleaner writes a replacement
        self.log_path = directory / (segment_file_name(base_offset, LOG_SUFFIX) + file_suffix)
        self.offset_index = OffsetIndex(
            directory / (segment_file_name(base_offset, INDEX_SUFFIX) + file_suffix), base_offset, max_index_entries
        )
        self.time_index = TimeIndex(
            directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + file_suffix),
            base_offset,
            max_index_entries,
        )
        self.txn_index = TransactionIndex(directory / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + file_suffix))
        if present is not None:
            for index in (self.offset_index, self.time_index, self.txn_index):
                if index.path.name not in present:
                    index.known_missing()
        # O_APPEND: every write lands at the end whatever the file offset (after reopen or truncate).
        self._descriptor = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._descriptor).st_size
        # Bytes written or cut since the last fsync (or found on opening, durable or not): a flush
        # of a segment that nothing touched since costs no fsync (a broker closing 10,000 idle
        # logs paid one each).
        self._unsynced = self.size > 0
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        self.rolling_base_ms = rolling_base_ms
        self.closed = False

    # ---- state -------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def _track(self, header: BatchHeader, position: int) -> None:
        """Account for a batch at `position` in the in-memory state and the indexes."""
        assert header.base_offset >= self.next_offset, "offsets in a segment must grow"
        if self._bytes_since_index_entry >= self.index_interval_bytes and position > 0:
            self.offset_index.append(header.base_offset, position)
            self._append_time_entry()
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.base_offset
        self.next_offset = header.next_offset

    def _append_time_entry(self) -> None:
        last = self.time_index.last_timestamp
        if self.max_timestamp != NO_TIMESTAMP and (last is None or self.max_timestamp > last):
            self.time_index.append(self.max_timestamp, self._offset_of_max_timestamp)

    @property
    def index_is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    # ---- writing -----------------------------------------------------------------------------

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader) -> int:
        """Write one validated batch at the end; returns its position."""
        assert not self.closed
        assert header.size == len(batch)
        position = self.size
        view = memoryview(batch)
        self._unsynced = True
        try:
            while view:
                written = os.write(self._descriptor, view)
                view = view[written:]
        except OSError as error:
            # Disk full or failing: cut what was written so no half batch stays behind.
            os.ftruncate(self._descriptor, position)
            raise KafkaStorageError(f"{self.log_path.name}: append failed: {error}") from error
        self._track(header, position)
        self.size += header.size
        return position

    def flush(self, *, sync: bool = True) -> None:
        """fsync the log (if it changed), then persist the indexes. Without `sync`: the indexes
        written, nothing fsynced (the caller syncs the whole file system after)."""
        assert not self.closed
        if self._unsynced and sync:
            os.fsync(self._descriptor)
            self._unsynced = False
        self.offset_index.flush(sync=sync)
        self.time_index.flush(sync=sync)
        self.txn_index.flush(sync=sync)

    def seal(self) -> None:
        """The segment stops being active: record its final max timestamp and make it durable."""
        self._append_time_entry()
        self.flush()

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is ≥ `offset`; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size - position
        self._truncate_at(position, header.base_offset)
        return removed

    def _truncate_at(self, position: int, first_removed_offset: int) -> None:
        """Cut the log at `position` (a batch boundary) and the indexes with it."""
        os.ftruncate(self._descriptor, position)
        self.size = position
        self._unsynced = True
        self.offset_index.truncate_to(first_removed_offset)
        self.time_index.truncate_to(first_removed_offset)
        self.txn_index.truncate_to(first_removed_offset)
        _, resume_position = self.offset_index.lookup(first_removed_offset)
        self._reset_counters()
        self._resume_from(resume_position)

    # ---- reading -----------------------------------------------------------------------------

    def read_at(self, size: int, position: int) -> bytes:
        assert not self.closed
        return os.pread(self._descriptor, size, position)

    def scan(
        self, start_position: int = 0, *, validate: bool = False, max_message_bytes: int | None = None
    ) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
        """Yield (position, header, buffer, offset in buffer) for each batch from `start_position`.

        Raises BadBatchError at the first batch whose framing is broken; with `validate` also at
        the first whose magic, attributes or CRC are wrong.
        """
        position = start_position
        buffer = b""
        buffer_start = position
        chunk_bytes = SCAN_CHUNK_BYTES if validate else HEADER_SCAN_CHUNK_BYTES
        while position < self.size:
            local = position - buffer_start
            if len(buffer) - local < BATCH_OVERHEAD:
                # No more than the file holds: a 1 MiB buffer for a 700-byte segment cost an
                # allocation per log when a broker recovered thousands at a start.
                buffer = self.read_at(min(chunk_bytes, self.size - position), position)
                buffer_start, local = position, 0
            if len(buffer) < BATCH_OVERHEAD:
                raise BadBatchError("torn batch header", position)
            header = read_header(buffer, local)
            if header.size < BATCH_OVERHEAD or position + header.size > self.size:
                raise BadBatchError("batch overruns the segment", position)
            if max_message_bytes is not None and counted_size(header) > max_message_bytes:
                raise BadBatchError("batch exceeds max.message.bytes", position)
            if validate:
                if len(buffer) - local < header.size:
                    buffer = self.read_at(max(SCAN_CHUNK_BYTES, header.size), position)
                    buffer_start, local = position, 0
                try:
                    validate_batch(buffer, local)
                except (CorruptRecordError, InvalidRecordError) as error:
                    raise BadBatchError(error.message, position) from error
            yield position, header, buffer, local
            position += header.size

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is ≥ `offset`."""
        _, indexed_position = self.offset_index.lookup(offset)
        for position, header, _, _ in self.scan(max(indexed_position, start_position)):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> bytearray:
        """Whole batches from the one holding `offset`, up to `max_bytes` and below `max_offset`.

        With `min_one_batch`, the first batch is returned even when it is larger than `max_bytes`
        (so a consumer always progresses, as in Kafka's KIP-74). Every batch returned passed its
        CRC check just now; the good batches before a corrupt one are served, and a read starting
        at a corrupt one raises KafkaStorageError.
        """
        try:
            found = self.translate_offset(offset)
        except BadBatchError as error:
            raise KafkaStorageError(f"{self.log_path.name}: cannot locate offset {offset}: {error}") from error
        if found is None:
            return bytearray()
        start, first = found
        if first.base_offset >= max_offset:
            return bytearray()
        span = min(self.size - start, max(max_bytes, first.size if min_one_batch else 0))
        # Read into a bytearray so trimming a partial last batch is an in-place resize, not a copy.
        assert not self.closed
        data = bytearray(span)
        del data[os.preadv(self._descriptor, [data], start) :]
        end = 0
        while end + BATCH_OVERHEAD <= len(data):
            header = read_header(data, end)
            if header.base_offset >= max_offset or end + header.size > len(data):
                break
            try:
                validate_batch(data, end)
            except (CorruptRecordError, InvalidRecordError) as error:
                if end:
                    break  # serve the good batches before it; the next read reports it
                raise KafkaStorageError(
                    f"{self.log_path.name}: batch at position {start + end} fails validation: {error}"
                ) from error
            end += header.size
        del data[end:]
        return data

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is ≥ `timestamp`, if any."""
        try:
            return self._find_offset_by_timestamp(timestamp)
        except BadBatchError as error:
            raise KafkaStorageError(f"{self.log_path.name}: timestamp lookup failed: {error}") from error

    def _find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        if self.max_timestamp < timestamp:
            return None
        candidate = self.time_index.lookup(timestamp)
        found = self.translate_offset(candidate)
        if found is None:
            return None
        for _, header, buffer, local in self.scan(found[0], validate=True):
            if header.max_timestamp >= timestamp:
                batch = decode_batch(buffer, local, verify_crc=False)
                for record_offset, record_timestamp in zip(batch.offsets, batch.timestamps, strict=True):
                    if record_timestamp >= timestamp:
                        return record_offset, record_timestamp
        return None

    # ---- opening and recovery ------------------------------------------------------------------

    def _reset_counters(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_index_entry = 0

    def _rebuild_state(self, *, validate: bool = False, max_message_bytes: int | None = None) -> int:
        """Rebuild indexes and counters by scanning the log; returns the length of the valid prefix.

        Without `validate` a broken batch raises BadBatchError; with it, the scan stops there.
        """
        self.offset_index.clear()
        self.time_index.clear()
        self._reset_counters()
        valid = 0
        try:
            for position, header, _, _ in self.scan(validate=validate, max_message_bytes=max_message_bytes):
                if header.base_offset < self.next_offset:
                    raise BadBatchError("offsets go back", position)
                if header.next_offset - self.base_offset > 2**32:
                    raise BadBatchError("offset too far from the segment's base offset", position)
                if self.index_is_full:
                    raise BadBatchError("more batches than segment.index.bytes allows", position)
                self._track(header, position)
                valid = position + header.size
        except BadBatchError:
            if not validate:
                raise
        return valid

    def recover(self, max_message_bytes: int) -> int:
        """Validate every batch, truncate a torn or corrupt tail, rebuild both indexes.

        Returns the number of bytes truncated.
        """
        valid = self._rebuild_state(validate=True, max_message_bytes=max_message_bytes)
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self._descriptor, valid)
            self.size = valid
            self._unsynced = True
        # Aborts past the valid end went with their markers; those before were appended when
        # written, and producer-state replay appends any the file lost (transaction_index.py).
        self.txn_index.truncate_to(self.next_offset)
        self.offset_index.flush()
        self.time_index.flush()
        return truncated

    def load_indexes(self) -> bool:
        """Trust the index files if they are sane, else rebuild them; True when rebuilt."""
        try:
            self.offset_index.load()
            # None is made for an index without entries (index.py): a time index can be empty while
            # the offset index is not (timestamps that never grew), and rebuilding for it would
            # validate the whole segment at every open.
            with contextlib.suppress(FileNotFoundError):
                self.time_index.load()
            self.offset_index.check(self.size)
            _, position = self.offset_index.lookup(2**63 - 1)
            self._resume_from(position)
            self.time_index.check(self.next_offset)
            return False
        except (FileNotFoundError, CorruptIndexError, BadBatchError):
            # Rebuilding means trusting the log: every batch's CRC is checked; a bad one goes to recovery.
            valid = self._rebuild_state(validate=True)
            if valid < self.size:
                raise BadBatchError("corrupt batch found while rebuilding the indexes", valid) from None
            self.offset_index.flush()
            self.time_index.flush()
            return True

    def _resume_from(self, position: int) -> None:
        """Set counters by scanning headers from the last index entry to the end."""
        last_time_entry = self.time_index.last_timestamp
        self.max_timestamp = NO_TIMESTAMP if last_time_entry is None else last_time_entry
        if len(self.offset_index):
            self.next_offset = self.base_offset + self.offset_index.keys[-1]
        for scanned_at, header, _, _ in self.scan(position, validate=True):
            if header.base_offset < self.next_offset or header.next_offset - self.base_offset > 2**32:
                raise BadBatchError("offsets out of order after the last index entry", scanned_at)
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.base_offset
            self.next_offset = header.next_offset
            self._bytes_since_index_entry += header.size

    def first_batch(self) -> BatchHeader | None:
        if self.size < BATCH_OVERHEAD:
            return None
        return read_header(self.read_at(BATCH_OVERHEAD, 0))

    # ---- lifecycle -----------------------------------------------------------------------------

    def rename_suffix(self, file_suffix: str) -> None:
        """Move the files to the names with `file_suffix` (the descriptor stays valid)."""
        new_log = self.directory / (segment_file_name(self.base_offset, LOG_SUFFIX) + file_suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename(self.directory / (segment_file_name(self.base_offset, INDEX_SUFFIX) + file_suffix))
        self.time_index.rename(self.directory / (segment_file_name(self.base_offset, TIME_INDEX_SUFFIX) + file_suffix))
        self.txn_index.rename(self.directory / (segment_file_name(self.base_offset, TXN_INDEX_SUFFIX) + file_suffix))
        self.file_suffix = file_suffix

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._descriptor)

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"
