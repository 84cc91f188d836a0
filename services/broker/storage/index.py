"""A segment's sparse indexes: `.index` (offset → position) and `.timeindex` (timestamp → offset).

On-disk layout, little-endian fixed-width entries, nothing else in the file:

    .index       uint32 relative_offset | uint32 position          (8 bytes an entry)
    .timeindex   int64  timestamp       | uint32 relative_offset   (12 bytes an entry)

relative_offset = offset - segment base offset. Both files are append-only and strictly
increasing in both fields; a file that breaks this (or whose size is not a whole number of
entries) is corrupt and is rebuilt from the log. The whole index lives in memory as two `array`s
(binary search with `bisect`); the file is its durable copy, appended at flush.

Not thread-safe: the owning PartitionLog serialises every call under its lock.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from array import array
from pathlib import Path
from typing import ClassVar, Final

import numpy as np

__all__ = ["CorruptIndexError", "OffsetIndex", "TimeIndex"]

# Files are little-endian whatever the host; the in-memory arrays are native.
_LITTLE: Final = {"I": "<u4", "q": "<i8"}


class CorruptIndexError(Exception):
    pass


def _smallest_step(column: array[int]) -> int:
    """The smallest difference between neighbours (1 when there are fewer than two entries)."""
    if len(column) < 2:
        return 1
    values = np.frombuffer(column, dtype=column.typecode).astype(np.int64)
    return int(np.diff(values).min())


class _IndexFile:
    """Two parallel columns (`keys`, `values`) persisted as interleaved fixed-width entries."""

    KEY_TYPE: ClassVar[str]
    VALUE_TYPE: ClassVar[str]
    ENTRY_BYTES: ClassVar[int]

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        assert max_entries > 0
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self.keys: array[int] = array(self.KEY_TYPE)
        self.values: array[int] = array(self.VALUE_TYPE)
        self._persisted = 0  # entries already in the file
        self._rewrite = True  # the file must be rewritten whole at the next flush
        self._missing = False  # known to have no file (known_missing) until a flush makes one

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    def _append_entry(self, key: int, value: int) -> None:
        assert not self.is_full, "index full: the segment must roll first"
        self.keys.append(key)
        self.values.append(value)

    def _truncate_entries(self, count: int) -> None:
        del self.keys[count:]
        del self.values[count:]
        if count < self._persisted:
            self._rewrite = True

    def clear(self) -> None:
        self._truncate_entries(0)

    def known_missing(self) -> None:
        """The caller's listing of the folder shows no file: it holds no entry, and an empty index
        has nothing to cut nor to read (recovery rebuilt and cut the absent indexes of 10,000 small
        segments at a broker's restart, two failing system calls each)."""
        assert not self.keys and self._persisted == 0
        self._rewrite = False
        self._missing = True

    def _entry_dtype(self) -> np.dtype[np.void]:
        return np.dtype([("key", _LITTLE[self.KEY_TYPE]), ("value", _LITTLE[self.VALUE_TYPE])])

    def load(self) -> None:
        """Read entries from the file; CorruptIndexError when the file cannot be trusted."""
        if self._missing:
            raise FileNotFoundError(self.path)
        data = self.path.read_bytes()
        if len(data) % self.ENTRY_BYTES:
            raise CorruptIndexError(f"{self.path}: {len(data)} bytes is not whole entries")
        count = len(data) // self.ENTRY_BYTES
        if count > self.max_entries:
            raise CorruptIndexError(f"{self.path}: {count} entries, at most {self.max_entries}")
        rows = np.frombuffer(data, dtype=self._entry_dtype())
        self.keys = array(self.KEY_TYPE, rows["key"].astype(self.KEY_TYPE).tobytes())
        self.values = array(self.VALUE_TYPE, rows["value"].astype(self.VALUE_TYPE).tobytes())
        self._persisted = count
        self._rewrite = False

    def flush(self, *, sync: bool = True) -> None:
        """Make the file hold exactly the in-memory entries, durably (without `sync`: written, for
        a caller that syncs the whole file system after)."""
        if not self._rewrite and self._persisted == len(self.keys):
            return
        if self._rewrite and not self.keys and not (sync and self._persisted):
            self._truncate_in_place()
            return
        start = 0 if self._rewrite else self._persisted
        rows = np.empty(len(self.keys) - start, dtype=self._entry_dtype())
        rows["key"] = np.frombuffer(self.keys, dtype=self.KEY_TYPE, offset=start * self.keys.itemsize)
        rows["value"] = np.frombuffer(self.values, dtype=self.VALUE_TYPE, offset=start * self.values.itemsize)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if self._rewrite else os.O_APPEND)
        descriptor = os.open(self.path, flags, 0o644)
        try:
            os.write(descriptor, rows.tobytes())
            if sync:  # (an index that never held an entry makes no file: _truncate_in_place)
                os.fsync(descriptor)
        finally:
            os.close(descriptor)
        self._persisted = len(self.keys)
        self._rewrite = False
        self._missing = False

    def _truncate_in_place(self) -> None:
        """Empty the file by its name, one system call: the common case when recovery rebuilds the
        (empty) index of a small segment. No file is made for an empty index: opening takes a
        missing one as empty and scans the segment, which holds less than `index.interval.bytes`
        past its base (a broker closing 10,000 new logs created 20,000 empty files, 0.3 ms each)."""
        with contextlib.suppress(FileNotFoundError):
            os.truncate(self.path, 0)
        self._persisted = 0
        self._rewrite = False

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    KEY_TYPE = "I"
    VALUE_TYPE = "I"
    ENTRY_BYTES = 8

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        assert 0 <= relative < 2**32 and 0 <= position < 2**32
        if self.keys:
            assert relative > self.keys[-1], "offset index must grow"
            assert position > self.values[-1], "positions in the offset index must grow"
        self._append_entry(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below `offset`: (offset, position); the segment start if none."""
        slot = bisect.bisect_right(self.keys, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self.keys[slot], self.values[slot]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets at or above `offset`."""
        self._truncate_entries(bisect.bisect_left(self.keys, offset - self.base_offset))

    def check(self, log_size: int) -> None:
        """CorruptIndexError unless entries grow strictly and point inside the log."""
        for column in (self.keys, self.values):
            if _smallest_step(column) <= 0:
                raise CorruptIndexError(f"{self.path}: entries do not grow")
        if self.values and self.values[-1] >= log_size:
            raise CorruptIndexError(f"{self.path}: points past the end of the log")


class TimeIndex(_IndexFile):
    KEY_TYPE = "q"
    VALUE_TYPE = "I"
    ENTRY_BYTES = 12

    def append(self, timestamp: int, offset: int) -> None:
        relative = offset - self.base_offset
        assert 0 <= relative < 2**32
        if self.keys:
            assert timestamp > self.keys[-1], "time index timestamps must grow"
            assert relative >= self.values[-1], "time index offsets must not go back"
        self._append_entry(timestamp, relative)

    @property
    def last_timestamp(self) -> int | None:
        return self.keys[-1] if self.keys else None

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first record with a timestamp ≥ `timestamp`."""
        slot = bisect.bisect_left(self.keys, timestamp) - 1
        if slot < 0:
            return self.base_offset
        return self.base_offset + self.values[slot]

    def truncate_to(self, offset: int) -> None:
        keep = len(self.values)
        while keep and self.values[keep - 1] >= offset - self.base_offset:
            keep -= 1
        self._truncate_entries(keep)

    def check(self, next_offset: int) -> None:
        if _smallest_step(self.keys) <= 0:
            raise CorruptIndexError(f"{self.path}: timestamps do not grow")
        if _smallest_step(self.values) < 0:
            raise CorruptIndexError(f"{self.path}: offsets go back")
        if self.values and self.base_offset + self.values[-1] >= next_offset:
            raise CorruptIndexError(f"{self.path}: points past the end of the log")
