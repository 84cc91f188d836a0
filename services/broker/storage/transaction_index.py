"""A segment's aborted-transaction index, `<base_offset:020d>.txnindex` (Kafka's TransactionIndex).

One entry per transaction whose ABORT marker is in the segment, in marker order:

    int16 version (0) | int64 producer_id | int64 first_offset | int64 last_offset
    | int64 last_stable_offset                                    (34 bytes, little-endian)

`first_offset` is the transaction's first record in this partition, `last_offset` its marker's
offset, `last_stable_offset` the partition's LSO once the abort completed. A read_committed fetch
collects the entries overlapping what it returns (`collect`), and the consumer drops the aborted
producers' batches in that range.

Most segments never hold an abort, so the file exists only once one does, and nothing is opened
or read until the index is first used (a broker holds thousands of segments; each descriptor
counts). Entries live in memory; appends go to the file at once, fsynced by `flush` (the
segment's, so before the recovery point passes them). Replays append again what the file may
already hold: an entry whose marker is not past the last one is a replay and is ignored, so
rebuilding producer state never duplicates an entry.

Not thread-safe: the owning PartitionLog serialises every call under its lock.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Final, NamedTuple

import structlog

__all__ = ["TXN_INDEX_SUFFIX", "AbortedTxn", "TransactionIndex"]

log = structlog.get_logger(__name__)

TXN_INDEX_SUFFIX: Final = ".txnindex"
_ENTRY: Final = struct.Struct("<hqqqq")
_VERSION: Final = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # of the ABORT marker
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._unsynced = False

    def known_missing(self) -> None:
        """The caller's listing of the folder shows no file: no abort to read."""
        assert self._entries is None
        self._entries = []

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % _ENTRY.size
        if whole != len(data):  # a torn last entry: the replay after a crash appends it again
            log.warning("txn_index_torn_tail", path=str(self.path), bytes=len(data) - whole)
        entries: list[AbortedTxn] = []
        for version, *fields in _ENTRY.iter_unpack(data[:whole]):
            if version != _VERSION or (entries and fields[2] <= entries[-1].last_offset):
                log.warning("txn_index_corrupt", path=str(self.path), entries_kept=len(entries))
                break
            entries.append(AbortedTxn(*fields))
        if len(entries) * _ENTRY.size != len(data):
            self._rewrite(entries)
        return entries

    def append(self, entry: AbortedTxn) -> bool:
        """Add an abort; False (nothing done) when its marker is not past the last one (a replay)."""
        assert entry.first_offset <= entry.last_offset, entry
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            return False
        with open(self.path, "ab") as file:
            file.write(_ENTRY.pack(_VERSION, *entry))
        entries.append(entry)
        self._unsynced = True
        return True

    def collect(self, start: int, end: int) -> tuple[list[AbortedTxn], bool]:
        """The aborts overlapping offsets [start, end), whose records may be among those read; and
        whether the search is complete: an abort after which the partition was stable up to `end`
        means no later marker ends a transaction begun below `end` (Kafka's collectAbortedTxns)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= start and entry.first_offset < end:
                found.append(entry)
            if entry.last_stable_offset >= end:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the aborts whose marker is at or past `offset` (the log was cut there)."""
        entries = self.entries
        kept = [entry for entry in entries if entry.last_offset < offset]
        if len(kept) != len(entries):
            self._entries = kept
            self._rewrite(kept)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.path.unlink(missing_ok=True)
            self._unsynced = False
            return
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_bytes(b"".join(_ENTRY.pack(_VERSION, *entry) for entry in entries))
        os.replace(temporary, self.path)
        self._unsynced = True

    def flush(self, *, sync: bool = True) -> None:
        if self._unsynced and sync:
            descriptor = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            self._unsynced = False

    def copy_to(self, other: TransactionIndex) -> None:
        """Give `other` (a cleaned copy of this segment) the same entries."""
        other._entries = []
        for entry in self.entries:
            other.append(entry)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._unsynced = False
