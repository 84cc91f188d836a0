"""A follower's work on its logs, run on the broker's I/O threads for many partitions a task: where
a log is cut by leader epoch (KIP-101/279) and the cut itself, and the appends of fetched batches
(small ones on the event loop itself: `append_small_here`, ADR 0036).

The replica fetcher asks the leader where the follower's latest epoch ended (OffsetsForLeaderEpoch);
`needs_cut` and `cut` take that answer for a partition.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import structlog

from tidelog.broker.storage import PartitionLog
from tidelog.broker.storage.checkpoint import sync_filesystems
from tidelog.broker.storage_io import StorageIo, small_enough

__all__ = [
    "UNDEFINED",
    "EpochAnswer",
    "FollowedPartition",
    "append_chunk",
    "append_fetched",
    "append_small_here",
    "cut",
    "needs_cut",
    "sync_cuts",
    "truncation_target",
]

log = structlog.get_logger(__name__)

UNDEFINED: Final = -1


@dataclasses.dataclass(slots=True)
class FollowedPartition:
    topic: str
    partition: int
    log: PartitionLog
    leader: int
    leader_epoch: int
    truncated: bool = False  # set once the KIP-279 truncation for this leader epoch is done


EpochAnswer = tuple[FollowedPartition, int, int]  # the partition, the leader's epoch and its end offset


def truncation_target(partition_log: PartitionLog, leader_epoch: int, leader_end_offset: int) -> int | None:
    """The offset the log is cut at, from the leader's answer; None when there is nothing to compare
    (an empty or epoch-less log fetches from its end)."""
    if UNDEFINED in (leader_epoch, leader_end_offset):
        if partition_log.leader_epochs.latest_epoch == UNDEFINED:
            return None
        return partition_log.high_watermark  # the leader knows none of our epochs: keep what was committed
    _, own_end = partition_log.end_offset_for_epoch(leader_epoch)
    return min(leader_end_offset, own_end) if own_end != UNDEFINED else leader_end_offset


def needs_cut(answers: list[EpochAnswer]) -> list[bool]:
    """For each answer, whether the log holds records past its cut (an I/O task for many partitions:
    a broker back from a restart asks for thousands, and most keep everything)."""
    flags = []
    for followed, leader_epoch, leader_end_offset in answers:
        target = truncation_target(followed.log, leader_epoch, leader_end_offset)
        flags.append(target is not None and target < followed.log.log_end_offset)
    return flags


def cut(followed: FollowedPartition, leader_epoch: int, leader_end_offset: int, *, sync: bool = True) -> None:
    """Cut the log where the leader's answer says (nothing when it keeps everything); without
    `sync`, the caller syncs the file system before anything is appended past the cut."""
    partition_log = followed.log
    target = truncation_target(partition_log, leader_epoch, leader_end_offset)
    if target is None or target >= partition_log.log_end_offset:
        return
    log.warning(
        "follower_truncated",
        topic=followed.topic,
        partition=followed.partition,
        from_offset=partition_log.log_end_offset,
        to_offset=target,
        own_epoch=partition_log.leader_epochs.latest_epoch,
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end_offset,
    )
    partition_log.truncate_to(target, sync=sync)


def sync_cuts(answers: list[EpochAnswer]) -> None:
    """Make a round of cuts made without `sync` durable before anything is appended past them: one
    sync of each file system holding their logs (3,334 one-record cuts after a leader's crash, each
    fsyncing its recovery point and epoch history, took 5 s)."""
    sync_filesystems({followed.log.directory.parent for followed, _, _ in answers})


def append_chunk(appends: list[tuple[FollowedPartition, Any]]) -> tuple[int, BaseException | None]:
    """Append each partition's fetched batches in turn; how many were appended, and the error that
    stopped the rest."""
    for done, (followed, result) in enumerate(appends):
        try:
            followed.log.append_as_follower(result.record_batches)
        except Exception as error:
            return done, error
    return len(appends), None


Outcome = tuple[int, BaseException | None]  # append_chunk's: how many appended, what stopped the rest


def append_small_here(
    appends: list[tuple[FollowedPartition, Any]],
) -> tuple[list[tuple[list[tuple[FollowedPartition, Any]], Outcome]], list[tuple[FollowedPartition, Any]]]:
    """On the event loop: append what one fetch brought where it is a small page-cache write now
    (small enough in all, storage_io.py; each log appendable here), each as a chunk of one with its
    outcome; the others, returned, go to the I/O threads."""
    if not small_enough(len(appends), sum(len(result.record_batches) for _, result in appends)):
        return [], appends
    done: list[tuple[list[tuple[FollowedPartition, Any]], Outcome]] = []
    later: list[tuple[FollowedPartition, Any]] = []
    for item in appends:
        with item[0].log.appendable_here(len(item[1].record_batches)) as here:
            if here:
                done.append(([item], append_chunk([item])))
                continue
        later.append(item)
    return done, later


async def append_fetched(
    io: StorageIo, appends: list[tuple[FollowedPartition, Any]]
) -> list[tuple[list[tuple[FollowedPartition, Any]], Outcome]]:
    """Append what one fetch brought for many partitions: the small ones here (append_small_here),
    the rest in a few I/O tasks, not a task each (at thousands of partitions a thread hop per
    partition was most of a catching-up follower's time). Each chunk with its outcome."""
    done, later = append_small_here(appends)
    if later:
        done += zip(io.chunks(later), await io.each_chunk(append_chunk, later), strict=True)
    return done
