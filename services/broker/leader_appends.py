"""What a leader appends for a request, and the I/O-thread side of appending it: a producer's
batches, a transaction marker (WriteTxnMarkers) or a group coordinator's offsets."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Final, NamedTuple

from tidelog.broker.partition import Partition
from tidelog.broker.storage import AppendInfo
from tidelog.broker.storage_io import small_enough
from tidelog.common.record.control import Marker

__all__ = ["CoordinatorWrite", "LeaderAppend", "MarkerWrite", "append_leader_groups", "append_small_groups_here"]

MARKER_BYTES: Final = 128  # a transaction marker's batch, as counted against storage_io.INLINE_BYTES_MAX


class MarkerWrite(NamedTuple):
    """A transaction marker to append as leader (WriteTxnMarkers), in place of a producer's batches."""

    producer_id: int
    producer_epoch: int
    marker: Marker


class CoordinatorWrite(NamedTuple):
    """A group coordinator's batches for __consumer_offsets: its transactional offset commits carry
    no sequence (Kafka's AppendOrigin.COORDINATOR)."""

    data: bytes


@dataclasses.dataclass(slots=True)
class LeaderAppend:
    index: int  # in its round of the request
    hosted: Partition
    leader_epoch: int  # led in when appended: the wait for the ISR checks it has not ended
    batches: bytes | MarkerWrite | CoordinatorWrite
    outcome: AppendInfo | BaseException | None = None


def append_leader_groups(groups: list[list[LeaderAppend]]) -> None:
    """On an I/O thread: each partition's appends in their order, each outcome kept (one failing
    stops no other: a later one is refused on its own merits, e.g. its sequence)."""
    for append in itertools.chain.from_iterable(groups):
        try:
            partition_log, batches = append.hosted.log, append.batches
            if isinstance(batches, MarkerWrite):
                append.outcome = partition_log.append_marker(*batches, leader_epoch=append.leader_epoch)
            elif isinstance(batches, CoordinatorWrite):
                append.outcome = partition_log.append_as_leader(batches.data, append.leader_epoch, unsequenced=True)
            else:
                append.outcome = partition_log.append_as_leader(batches, append.leader_epoch)
        except Exception as error:
            append.outcome = error


def append_small_groups_here(groups: list[list[LeaderAppend]]) -> list[list[LeaderAppend]]:
    """On the event loop: append the groups that are small page-cache writes now (small enough in
    all, storage_io.py; each log appendable here); the others, returned, go to the I/O threads. A
    partition's appends stay together, in order, on one path."""
    sizes = [sum(_size(append.batches) for append in group) for group in groups]
    if not small_enough(len(groups), sum(sizes)):
        return groups
    later: list[list[LeaderAppend]] = []
    for group, size in zip(groups, sizes, strict=True):
        with group[0].hosted.log.appendable_here(size) as here:
            if here:
                append_leader_groups([group])
                continue
        later.append(group)
    return later


def _size(batches: bytes | MarkerWrite | CoordinatorWrite) -> int:
    if isinstance(batches, MarkerWrite):
        return MARKER_BYTES
    if isinstance(batches, CoordinatorWrite):
        return len(batches.data)
    return len(batches)
