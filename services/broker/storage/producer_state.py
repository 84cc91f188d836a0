"""Idempotent-producer state of one partition (Kafka's ProducerStateManager, KIP-98).

For every producer id that wrote to the partition: its producer epoch and the metadata of its last
`PRODUCER_BATCHES_RETAINED` batches (first/last sequence, last offset). The leader checks each
incoming batch against it before appending:

    epoch older than the one on record          → INVALID_PRODUCER_EPOCH (a newer instance fenced it)
    same (first, last) sequence as a kept batch → duplicate: answered with the original offsets
    first sequence ≠ last sequence + 1          → OUT_OF_ORDER_SEQUENCE_NUMBER
    a new epoch must start at sequence 0; a producer with no state may start anywhere

Followers update the state from the batches they copy, without checks, so a new leader has it.

Persistence: `<20-digit offset>.snapshot` files hold the state as of that offset (written at every
segment roll and on close, atomically). Opening loads the newest snapshot at or below the log end
and replays batch headers from there; truncation reloads from the newest snapshot at or below the
truncation point. Snapshots of deleted segments go with them (the newest is always kept).

Transactions (KIP-98): a producer's transactional batches open a transaction at the first one's
offset (`ongoing`), and the marker the coordinator writes (a control batch, control.py) completes
it. The first offset of any transaction still open — or completed by a marker the high watermark
has not passed yet (`unreplicated`) — bounds the last stable offset, below which read_committed
consumers read. Checks as Kafka's ProducerAppendInfo:

    a non-transactional batch while the producer's transaction is open  → INVALID_TXN_STATE
    a transactional batch in a newer epoch than its open transaction's  → CONCURRENT_TRANSACTIONS
      (the coordinator fenced it and has not ended the old one here yet)
    a marker from an older producer epoch                               → INVALID_PRODUCER_EPOCH
    a marker from an older coordinator epoch                            → TRANSACTION_COORDINATOR_FENCED
    after a marker moved the epoch, the next batch starts at sequence 0

Not thread-safe: the owning PartitionLog calls it under its lock.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple

import structlog

from tidelog.broker.storage.checkpoint import read_small_file, write_atomically
from tidelog.common.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tidelog.common.record.batch import BatchHeader, next_sequence
from tidelog.common.record.control import Marker

__all__ = [
    "PRODUCER_BATCHES_RETAINED",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerEntry",
    "ProducerStateManager",
]

log = structlog.get_logger(__name__)

NO_SEQUENCE: Final = -1  # a batch not numbered by its producer (Kafka's RecordBatch.NO_SEQUENCE)
PRODUCER_BATCHES_RETAINED: Final = 5  # Kafka's NumBatchesToRetain; also the client's in-flight bound
SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 2  # 2 added each producer's coordinator epoch and open transaction
_READABLE_SNAPSHOT_VERSIONS: Final = (1, 2)
_SNAPSHOT_NAME: Final = re.compile(r"^(\d{20})\.snapshot$")


@dataclasses.dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its first offset here and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclasses.dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: collections.deque[BatchMetadata] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=PRODUCER_BATCHES_RETAINED)
    )
    last_timestamp: int = -1
    coordinator_epoch: int = -1  # of the last marker written for this producer
    current_txn_first_offset: int = -1  # the open transaction's first offset; -1: none open

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        last_sequence = next_sequence(header.base_sequence, header.last_offset_delta)
        for batch in self.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == last_sequence:
                return batch
        return None

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            collections.deque(self.batches, maxlen=PRODUCER_BATCHES_RETAINED),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0  # the state covers every batch below this offset
        self._snapshot_offset: int | None = None  # of the newest snapshot on disk, when known
        self.ongoing: dict[int, int] = {}  # producer id → first offset of its open transaction
        # Completed by a marker at or past the high watermark: still unstable (Kafka's unreplicatedTxns).
        self.unreplicated: collections.deque[CompletedTxn] = collections.deque()

    # ---- checks (leader) -------------------------------------------------------------------

    def check(self, headers: Iterable[BatchHeader], *, unsequenced: bool = False) -> BatchMetadata | None:
        """Validate producer batches about to be appended together, in order.

        Returns the original batch when the append is exactly one batch already written (the
        caller answers it with the original offsets and appends nothing). Raises on a fenced
        epoch or a sequence gap, and DuplicateSequence-like cases inside a larger append as
        out of order. Nothing is changed. With `unsequenced` (a group coordinator's transactional
        offset commit, Kafka's AppendOrigin.COORDINATOR) a transactional batch without a sequence
        is checked for its epoch and transaction only.
        """
        pending: dict[int, ProducerEntry] = {}
        headers = list(headers)
        for header in headers:
            if header.producer_id < 0:
                continue
            entry = pending.get(header.producer_id) or self.producers.get(header.producer_id)
            if entry is None:
                entry = ProducerEntry(header.producer_id, header.producer_epoch)
            if header.producer_epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}"
                )
            _check_transaction(entry, header)
            if header.base_sequence == NO_SEQUENCE:
                if not (unsequenced and header.is_transactional):
                    raise OutOfOrderSequenceError(f"producer {header.producer_id}: a batch without a sequence")
            elif not entry.batches and entry.coordinator_epoch >= 0:
                if header.base_sequence != 0:  # after a marker the producer's sequences restart
                    raise OutOfOrderSequenceError(
                        f"producer {header.producer_id} epoch {header.producer_epoch}: sequence "
                        f"{header.base_sequence} after a transaction marker, expected 0"
                    )
            elif header.producer_epoch == entry.epoch and entry.batches:
                duplicate = entry.find_duplicate(header)
                if duplicate is not None:
                    if len(headers) == 1:
                        return duplicate
                    raise OutOfOrderSequenceError(
                        f"producer {header.producer_id}: batch at sequence {header.base_sequence} is a duplicate "
                        "inside a multi-batch append"
                    )
                expected = next_sequence(entry.last_sequence)
                if header.base_sequence != expected:
                    raise OutOfOrderSequenceError(
                        f"producer {header.producer_id} epoch {header.producer_epoch}: sequence "
                        f"{header.base_sequence}, expected {expected}"
                    )
            elif header.producer_epoch > entry.epoch and entry.batches and header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: new epoch {header.producer_epoch} must start at sequence 0, "
                    f"not {header.base_sequence}"
                )
            updated = entry.copy()
            _apply(updated, header)
            if header.is_transactional and updated.current_txn_first_offset < 0:
                updated.current_txn_first_offset = header.base_offset  # (a later batch sees it open)
            pending[header.producer_id] = updated
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, marker: Marker) -> None:
        """Validate a transaction marker about to be appended (WriteTxnMarkers, as leader)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return  # nothing of the producer's here (or expired): the marker ends nothing, harmlessly
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} epoch {producer_epoch}, older than {entry.epoch}"
            )
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {marker.coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}"
            )

    # ---- updates (leader and follower) -----------------------------------------------------

    def update(self, header: BatchHeader, marker: Marker | None = None) -> CompletedTxn | None:
        """Record an appended batch (with its final offsets); a control batch comes with its
        marker, and returns the transaction it completed."""
        assert header.base_offset >= self.map_end_offset or header.producer_id < 0, "batches come in offset order"
        completed = None
        if header.producer_id >= 0:
            entry = self.producers.get(header.producer_id)
            if entry is None:
                entry = self.producers[header.producer_id] = ProducerEntry(header.producer_id, header.producer_epoch)
            if marker is None:
                _apply(entry, header)
                if header.is_transactional and entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = header.base_offset
                    self.ongoing[entry.producer_id] = header.base_offset
            else:
                assert header.is_control
                completed = self._complete(entry, header, marker)
        self.map_end_offset = max(self.map_end_offset, header.next_offset)
        return completed

    def _complete(self, entry: ProducerEntry, header: BatchHeader, marker: Marker) -> CompletedTxn:
        if header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        first = entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else header.base_offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        self.ongoing.pop(entry.producer_id, None)
        completed = CompletedTxn(entry.producer_id, first, header.base_offset, not marker.commit)
        self.unreplicated.append(completed)
        return completed

    # ---- stability (the last stable offset) -------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of a transaction still open or not yet below the high watermark."""
        candidates = list(self.ongoing.values())
        if self.unreplicated:
            candidates.append(min(txn.first_offset for txn in self.unreplicated))
        return min(candidates) if candidates else None

    def last_stable_offset(self, high_watermark: int, log_start: int) -> int:
        """The high watermark, or the first unstable offset below it, never below the log start."""
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(max(first, log_start), high_watermark)

    def stable_offset_after(self, producer_id: int, marker_offset: int) -> int:
        """The last stable offset once a marker at `marker_offset` ends `producer_id`'s transaction
        (Kafka's lastStableOffset(completedTxn)): another open transaction's first offset, else
        just past the marker."""
        others = [first for producer, first in self.ongoing.items() if producer != producer_id]
        return min(others) if others else marker_offset + 1

    def on_high_watermark(self, high_watermark: int) -> None:
        """Completed transactions whose marker the high watermark passed are stable now."""
        while self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated.popleft()

    def advance_to(self, offset: int) -> None:
        """The state covers the log up to `offset` (batches without producers need no entry)."""
        self.map_end_offset = max(self.map_end_offset, offset)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for `producer.id.expiration.ms`; how many were removed."""
        expired = [
            producer_id
            for producer_id, entry in self.producers.items()
            if entry.last_timestamp >= 0
            and now_ms - entry.last_timestamp > expiration_ms
            and entry.current_txn_first_offset < 0  # an open transaction keeps its producer (as Kafka)
        ]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    # ---- snapshots -------------------------------------------------------------------------

    def snapshot_offsets(self, names: list[str] | None = None) -> list[int]:
        """Offsets of the snapshots in the folder (`names`: its listing, if the caller has it)."""
        listing = os.listdir(self.directory) if names is None else names
        return sorted(int(match[1]) for name in listing if (match := _SNAPSHOT_NAME.match(name)))

    def take_snapshot(self, *, sync: bool = True) -> None:
        """Write the state as of `map_end_offset` (atomically; an existing one is replaced) —
        unless no batch came since the newest snapshot, as Kafka's takeSnapshot: loading would
        give the same state (an empty state at offset 0 needs no file at all). Closing 10,000
        idle logs wrote and synced 10,000 snapshots of nothing."""
        if self.map_end_offset == self._snapshot_offset or (self.map_end_offset == 0 and not self.producers):
            return
        producers = [
            [
                entry.producer_id,
                entry.epoch,
                entry.last_timestamp,
                [
                    [b.first_sequence, b.last_sequence, b.last_offset, b.offset_delta, b.timestamp]
                    for b in entry.batches
                ],
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            ]
            for entry in self.producers.values()
        ]
        data = json.dumps({"version": SNAPSHOT_VERSION, "offset": self.map_end_offset, "producers": producers})
        write_atomically(self.directory / snapshot_file_name(self.map_end_offset), data.encode(), sync=sync)
        self._snapshot_offset = self.map_end_offset

    def _read_snapshot(self, offset: int) -> dict[int, ProducerEntry] | None:
        path = self.directory / snapshot_file_name(offset)
        try:
            data = read_small_file(path)
            if data is None:
                raise FileNotFoundError(path)
            document = json.loads(data)
            if document["version"] not in _READABLE_SNAPSHOT_VERSIONS or document["offset"] != offset:
                raise ValueError("version or offset mismatch")
            producers: dict[int, ProducerEntry] = {}
            for producer_id, epoch, last_timestamp, batches, *transactional in document["producers"]:
                entry = ProducerEntry(int(producer_id), int(epoch), last_timestamp=int(last_timestamp))
                entry.batches.extend(BatchMetadata(*(int(field) for field in batch)) for batch in batches)
                if transactional:  # version 2
                    entry.coordinator_epoch, entry.current_txn_first_offset = (int(field) for field in transactional)
                producers[entry.producer_id] = entry
            return producers
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("producer_snapshot_unreadable", path=str(path), error=str(error))
            path.unlink(missing_ok=True)
            return None

    def load_latest(self, at_most: int, names: list[str] | None = None) -> int:
        """Reset to the newest readable snapshot at or below `at_most`; returns its offset (0 if none).

        Snapshots above `at_most` describe records no longer in the log: they are deleted. The
        caller replays batch headers from the returned offset.
        """
        for offset in reversed(self.snapshot_offsets(names)):
            if offset > at_most:
                (self.directory / snapshot_file_name(offset)).unlink(missing_ok=True)
                continue
            producers = self._read_snapshot(offset)
            if producers is not None:
                self._reset(producers, offset)
                self._snapshot_offset = offset
                return offset
        self._reset({}, 0)
        self._snapshot_offset = None
        return 0

    def _reset(self, producers: dict[int, ProducerEntry], offset: int) -> None:
        self.producers = producers
        self.map_end_offset = offset
        self.ongoing = {
            entry.producer_id: entry.current_txn_first_offset
            for entry in producers.values()
            if entry.current_txn_first_offset >= 0
        }
        self.unreplicated.clear()

    def delete_snapshots_below(self, offset: int) -> None:
        """Drop snapshots of deleted segments, keeping the newest one in any case."""
        offsets = self.snapshot_offsets()
        for old in offsets[:-1]:
            if old < offset:
                (self.directory / snapshot_file_name(old)).unlink(missing_ok=True)

    def clear(self, offset: int) -> None:
        """Forget everything (the log was emptied and restarts at `offset`)."""
        for old in self.snapshot_offsets():
            (self.directory / snapshot_file_name(old)).unlink(missing_ok=True)
        self._reset({}, offset)
        self._snapshot_offset = None


def _apply(entry: ProducerEntry, header: BatchHeader) -> None:
    if header.producer_epoch != entry.epoch:  # the leader only lets epochs grow; replays follow the log
        entry.epoch = header.producer_epoch
        entry.batches.clear()
    entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
    if header.base_sequence == NO_SEQUENCE:
        return  # a coordinator's transactional offsets: nothing to dedupe them by
    entry.batches.append(
        BatchMetadata(
            header.base_sequence,
            next_sequence(header.base_sequence, header.last_offset_delta),
            header.last_offset,
            header.last_offset_delta,
            header.max_timestamp,
        )
    )


def _check_transaction(entry: ProducerEntry, header: BatchHeader) -> None:
    """A data batch against the producer's open transaction, if any."""
    if entry.current_txn_first_offset < 0:
        return
    if not header.is_transactional:
        raise InvalidTxnStateError(
            f"producer {header.producer_id} wrote a non-transactional batch inside its open transaction"
        )
    if header.producer_epoch != entry.epoch:
        raise ConcurrentTransactionsError(
            f"producer {header.producer_id} epoch {header.producer_epoch}: the transaction of epoch "
            f"{entry.epoch} is not ended in this partition yet"
        )
