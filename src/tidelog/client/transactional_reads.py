"""What a consumer keeps of a fetched partition's batches (Kafka's CompletedFetch): never the
control batches (transaction markers), and under read_committed not the batches of aborted
transactions either.

The broker sends, with a read_committed fetch, the aborted transactions that have records in what
it returns: (producer id, first offset), oldest first. Walking the batches in order, a producer
joins the aborted set once a batch reaches its first offset, its transactional batches are dropped
while it is in the set, and its ABORT marker takes it out again (the same producer's next
transaction may commit). Batches are kept or dropped whole, as stored bytes: nothing is decoded
but the markers.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.common.record.batch import BatchHeader, iter_headers
from tidelog.common.record.control import ControlType, decode_marker

__all__ = ["committed_batches"]


def committed_batches(data: bytes, aborted: Sequence[tuple[int, int]], *, read_committed: bool) -> bytes:
    """`data` (stored batches back to back, already checked) without the batches a reader skips;
    `data` itself when it keeps everything."""
    kept: list[tuple[int, BatchHeader]] = []
    pending = sorted(aborted, key=lambda entry: entry[1])
    aborting: set[int] = set()
    dropped = False
    for position, header in iter_headers(data):
        if read_committed and header.producer_id >= 0:
            while pending and pending[0][1] <= header.last_offset:
                aborting.add(pending.pop(0)[0])
            if header.is_control:
                if decode_marker(data, position).control_type == ControlType.ABORT:
                    aborting.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborting:
                dropped = True
                continue
        if header.is_control:
            dropped = True
            continue
        kept.append((position, header))
    if not dropped:
        return data
    view = memoryview(data)
    return b"".join(view[position : position + header.size] for position, header in kept)
