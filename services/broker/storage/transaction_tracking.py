"""What an appended or replayed batch does to the transactional state beside the log: the producer
state takes every batch; a transaction marker also completes its producer's transaction, and an
ABORT goes into the aborted-transaction index of the segment holding the marker (as Kafka's
`UnifiedLog.analyzeAndValidateProducerState` plus `LogSegment.updateTxnIndex`).

One function for appends (leader and follower) and for replays on open and truncation, so what a
write records and what a restart rebuilds cannot differ.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from tidelog.broker.storage.producer_state import CompletedTxn, ProducerStateManager
from tidelog.broker.storage.segment import LogSegment
from tidelog.broker.storage.transaction_index import AbortedTxn
from tidelog.common.record.batch import BatchHeader, Buffer
from tidelog.common.record.control import decode_marker

__all__ = ["collect_aborted", "track_batch"]


def track_batch(
    producer_state: ProducerStateManager, segment: LogSegment, header: BatchHeader, batch: Callable[[], Buffer]
) -> CompletedTxn | None:
    """Apply one batch in log order; `batch()` gives its bytes (read only for a marker)."""
    if not header.is_control or header.producer_id < 0:
        producer_state.update(header)
        return None
    marker = decode_marker(batch())
    stable = producer_state.stable_offset_after(header.producer_id, header.base_offset)
    completed = producer_state.update(header, marker)
    assert completed is not None
    if completed.aborted:
        segment.txn_index.append(AbortedTxn(header.producer_id, completed.first_offset, completed.last_offset, stable))
    return completed


def collect_aborted(
    segments: Sequence[LogSegment], base_offsets: Sequence[int], start: int, end: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping offsets [start, end), oldest marker first.

    An abort's entry sits in its marker's segment, at or after the segment of any of its records,
    so the search starts at the segment holding `start` and goes on until an entry says the
    partition was stable past `end` (Kafka's collectAbortedTransactions).
    """
    found: list[AbortedTxn] = []
    slot = max(bisect.bisect_right(base_offsets, start) - 1, 0)
    for segment in segments[slot:]:
        entries, complete = segment.txn_index.collect(start, end)
        found += entries
        if complete:
            break
    return found
