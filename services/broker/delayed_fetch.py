"""A fetch's reads and its long poll (Kafka's DelayedFetch): read every partition asked for on the
I/O pool (a read of the logs' tails on the loop), and when there is less than fetch.min.bytes and
no error, wait for an append to one of them (or, in a follower's incremental session, for the
session's news) until max.wait.ms.

The wake-up is taken before each read, so an append while the read runs still wakes the waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Final

from tidelog.broker.fetch_session import FetchSession
from tidelog.broker.partition import PartitionRead
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.broker.replica_role import ReplicaRole
from tidelog.broker.storage_io import small_enough
from tidelog.v1 import broker_pb2

__all__ = ["READ_COMMITTED", "full_reads", "session_reads"]

READ_COMMITTED: Final = 1  # FetchRequest.isolation_level (0: read_uncommitted)


async def full_reads(
    replicas: ReplicaManager,
    request: broker_pb2.FetchRequest,
    max_bytes: int,
    *,
    deadline: float,
    kind: str,
) -> tuple[list[PartitionRead], float]:
    """A sessionless fetch: every listed partition read, long-polling until there is data."""
    keys = [(entry.topic, entry.partition) for entry in request.partitions]
    follower = request.replica_id >= 0
    committed = request.isolation_level == READ_COMMITTED
    refused = (
        replicas.followers.record_fetch(request.replica_id, request.replica_incarnation, list(request.partitions))
        if follower
        else {}
    )
    wanted = [entry for entry in request.partitions if (entry.topic, entry.partition) not in refused]
    read_s = 0.0
    while True:
        events = replicas.append_events(keys)  # before the read: no lost wake-up
        read_started = time.perf_counter()
        reads = await _read(replicas, wanted, max_bytes, follower, committed, kind=kind)
        read_s += time.perf_counter() - read_started  # request time, without the long-poll wait
        reads += _refused_reads(refused)
        remaining = deadline - time.monotonic()
        if _fetch_done(reads, request.min_bytes, remaining):
            return reads, read_s
        await replicas.wait_for_append(events, remaining)


async def session_reads(
    replicas: ReplicaManager,
    request: broker_pb2.FetchRequest,
    session: FetchSession,
    max_bytes: int,
    *,
    deadline: float,
    kind: str,
) -> list[PartitionRead]:
    """An incremental fetch (KIP-227), a follower's or a consumer's: the session takes the changed
    partitions and drops the forgotten ones; the answer holds the changed ones and those with news
    since the last answer. With none, it waits on the session's one event: idle costs nothing per
    partition."""
    follower = request.replica_id >= 0
    committed = request.isolation_level == READ_COMMITTED
    forgotten = [(entry.topic, entry.partition) for entry in request.forgotten]
    answer = set(session.update(request.partitions, forgotten))
    session.fetched()
    refused = (
        replicas.followers.record_fetch(
            request.replica_id, request.replica_incarnation, list(request.partitions), session
        )
        if follower
        else {}
    )
    epoch = session.epoch
    serving = session.serving = object()
    try:
        while True:
            if session.serving is not serving:
                # Its follower cut it short and sent the next: that one answers what this took.
                session.mark_all(answer)
                return []
            answer |= session.take_dirty()  # before the read: no lost wake-up
            wanted = [session.partitions[key] for key in answer if key in session.partitions and key not in refused]
            reads = await _read(replicas, wanted, max_bytes, follower, committed, kind=kind) if wanted else []
            reads += _refused_reads(refused)
            remaining = deadline - time.monotonic()
            if _fetch_done(reads, request.min_bytes, remaining) or session.closed or replicas.long_polls_ended.is_set():
                break
            await session.wait(remaining)
    except asyncio.CancelledError:
        if session.serving is not serving:
            session.mark_all(answer)
        elif request.session_id:  # (a new session's first fetch: its sender opens another)
            session.taken_back(epoch, answer)
        raise
    if session.serving is not serving:  # superseded while reading: the next fetch answers it
        session.mark_all(answer)
        return []
    if follower:  # (answered again only to a follower's repeated epoch: FetchSessionCache.resolve)
        session.answered = frozenset((read.topic, read.partition) for read in reads)
    for read in reads:  # left out for the response's size: still news for the next fetch
        key = (read.topic, read.partition)
        held = session.partitions.get(key)
        readable_end = (
            read.log_end_offset if follower else read.last_stable_offset if committed else read.high_watermark
        )
        if not read.data and held is not None and readable_end > held.fetch_offset:
            session.dirty.add(key)
    return reads


async def _read(
    replicas: ReplicaManager, wanted: list[Any], max_bytes: int, follower: bool, committed: bool, *, kind: str
) -> list[PartitionRead]:
    """`_read_all` on the loop for a read of the logs' tails (`_tail_read_here`), else on the pool."""
    here = _tail_read_here(replicas, wanted, max_bytes, follower, committed)
    if here is not None:
        replicas.io.ran_here(kind)
        return here
    return await replicas.io.run(_read_all, replicas, wanted, max_bytes, follower, committed, request=kind)


def _tail_read_here(
    replicas: ReplicaManager, wanted: list[Any], max_bytes: int, follower: bool, committed: bool
) -> list[PartitionRead] | None:
    """The reads, done here on the event loop, when each is at or above its log's high watermark
    (an in-sync follower's fetch, a consumer's at the end): what lies there was written within a
    replication round trip, in the page cache. None (read on the pool) for any other read, more
    partitions than `small_enough` takes, or a log whose lock a thread holds now (ADR 0036)."""
    if not small_enough(len(wanted)):
        return None
    logs = []
    for entry in wanted:
        hosted = replicas.partitions.get((entry.topic, entry.partition))
        if hosted is None or hosted.role is not ReplicaRole.LEADER or entry.fetch_offset < hosted.log.high_watermark:
            return None
        logs.append(hosted.log)
    with contextlib.ExitStack() as held:
        for partition_log in logs:
            if not held.enter_context(partition_log.held_if_free()):
                return None
        return _read_all(replicas, wanted, max_bytes, follower, committed)


def _read_all(
    replicas: ReplicaManager, partitions: list[Any], max_bytes: int, follower: bool, committed: bool
) -> list[PartitionRead]:
    reads: list[PartitionRead] = []
    remaining = max_bytes
    for entry in partitions:
        first = not reads or remaining > 0
        read = replicas.read(entry, max(remaining, 0), first, follower=follower, read_committed=committed)
        remaining -= len(read.data)
        reads.append(read)
    return reads


def _refused_reads(refused: dict[tuple[str, int], int]) -> list[PartitionRead]:
    """A fetch's partitions refused before reading (fenced epochs), as error results."""
    return [PartitionRead(topic, partition, b"", -1, -1, -1, code) for (topic, partition), code in refused.items()]


def _fetch_done(reads: list[PartitionRead], min_bytes: int, remaining_s: float) -> bool:
    """Answer now: fetch.min.bytes reached, an error to report, or the long poll's time is up."""
    return (
        sum(len(read.data) for read in reads) >= max(min_bytes, 1)
        or any(read.error_code for read in reads)
        or remaining_s <= 0
    )
