"""Leader epoch → start offset history of one partition (Kafka's LeaderEpochFileCache, KIP-101).

Each entry says "epoch E began at offset O". A replica coming back asks the leader for the end
offset of its own latest epoch (OffsetsForLeaderEpoch) and truncates exactly where the two logs
diverge, instead of to the high watermark. Persisted as `leader-epoch-checkpoint` (checkpoint.py)
by the log's flush, before the recovery point passes a new epoch's first batch, and by its close;
not when the epoch is assigned: an unclean open recovers every batch from the recovery point on and
assigns their epochs again (ADR 0030), where a file written per new epoch cost ~130 µs each, 10,000
of them on the followers at a 10,000-partition topic's first produce.

Invariants, asserted: epochs strictly grow, start offsets never go back.
Not thread-safe: the owning PartitionLog calls it under its lock.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from tidelog.broker.storage.checkpoint import CorruptCheckpointError, read_checkpoint, sync_file, write_checkpoint

__all__ = ["UNDEFINED_EPOCH", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._start_offsets: list[int] = []
        self._dirty = False
        self._unsynced = False  # written by flush(sync=False), not fsynced since
        self._on_disk: list[tuple[int, int]] | None = []  # what the file holds (None: unknown)

    @classmethod
    def load(cls, path: Path) -> LeaderEpochCache:
        """Load the checkpoint; a corrupt one is discarded (the history is rebuilt as batches come)."""
        cache = cls(path)
        try:
            entries = read_checkpoint(path, fields=2) or []
        except CorruptCheckpointError:
            entries = []
            cache._on_disk = None
        for epoch, start_offset in entries:
            if cache._epochs and (epoch <= cache._epochs[-1] or start_offset < cache._start_offsets[-1]):
                cache._epochs.clear()
                cache._start_offsets.clear()
                break
            cache._epochs.append(epoch)
            cache._start_offsets.append(start_offset)
        if cache._on_disk is not None:
            cache._on_disk = [(int(epoch), int(start)) for epoch, start in entries]
        return cache

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._start_offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (ignored when it is the latest already)."""
        if epoch < 0:
            return
        if self._epochs and epoch <= self._epochs[-1]:
            assert epoch == self._epochs[-1], f"leader epoch went back: {epoch} after {self._epochs[-1]}"
            return
        assert not self._start_offsets or start_offset >= self._start_offsets[-1], "epoch start went back"
        self._epochs.append(epoch)
        self._start_offsets.append(start_offset)
        self._dirty = True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch ≤ `epoch`, the offset where that epoch ended) — OffsetsForLeaderEpoch.

        The end of an epoch is the start of the next one, or the log end for the latest epoch.
        (UNDEFINED_EPOCH, UNDEFINED_OFFSET) when no epoch this old is known.
        """
        slot = bisect.bisect_right(self._epochs, epoch) - 1
        if slot < 0:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if slot == len(self._epochs) - 1:
            return self._epochs[slot], log_end_offset
        return self._epochs[slot], self._start_offsets[slot + 1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        keep = bisect.bisect_left(self._start_offsets, end_offset)
        if keep < len(self._epochs):
            del self._epochs[keep:]
            del self._start_offsets[keep:]
            self._dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop older epochs, clamp the one that holds it."""
        slot = bisect.bisect_right(self._start_offsets, start_offset) - 1
        if slot < 0:
            return
        if slot > 0 or self._start_offsets[0] != start_offset:
            del self._epochs[:slot]
            del self._start_offsets[:slot]
            self._start_offsets[0] = start_offset
            self._dirty = True

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._start_offsets.clear()
            self._dirty = True

    def flush(self, *, sync: bool = True, log_end: int | None = None) -> None:
        """Write the history if it changed; with `sync`, make it survive a machine crash too (also
        when an earlier flush wrote it without). With `log_end`, epochs starting there are left
        out: no batch carries them yet (a leadership with no append), the next open would drop
        them, and the epoch's first batch writes them (a broker closing after thousands of
        leaderships moved wrote a file for each)."""
        if self._dirty:
            entries = self.entries()
            if log_end is not None:
                while entries and entries[-1][1] >= log_end:
                    entries.pop()
            if entries != self._on_disk:
                write_checkpoint(self.path, entries, sync=sync)
                self._on_disk = entries
                self._unsynced = not sync
            self._dirty = len(entries) != len(self._epochs)
        if sync and self._unsynced:
            sync_file(self.path)
            self._unsynced = False
