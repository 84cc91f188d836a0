"""What the reader plans on the driver (which partitions, from where to where) and what each task
runs on an executor (one offset range, read from the partition's leader as Arrow batches).

Planning talks to the cluster through the client's Consumer: topic discovery from metadata,
offsets from ListOffsets (earliest, latest, by timestamp). A task reads its range with its own
Consumer on an event loop of its own, yielding one Arrow batch per fetch, so a large range streams
through the task rather than sitting in memory.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tidelog.client import Consumer, TopicPartition
from tidelog.spark.arrow_rows import to_arrow
from tidelog.spark.options import EARLIEST, LATEST, InvalidOptionError, Offsets, ReadOptions

__all__ = [
    "DataLossError",
    "OffsetRange",
    "discover",
    "plan_ranges",
    "read_range",
    "resolve",
    "run",
]

POLL_TIMEOUT_MS: Final = 2000
# A task reads one partition: let one fetch carry more of it than a consumer's default 1 MiB, so
# Spark gets fewer, bigger Arrow batches (the client's max.partition.fetch.bytes, unless set).
TASK_PARTITION_FETCH_BYTES: Final = 8 * 1024 * 1024
STALL_POLLS_MAX: Final = 30  # polls in a row returning nothing before a task gives up on its range


class DataLossError(RuntimeError):
    """Records a query was to read are gone (retention deleted them) and failOnDataLoss is true."""


class OffsetRange(InputPartition):
    """One task's work: offsets start ≤ offset < end of one partition (picklable, to executors)."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        assert 0 <= start <= end, (topic, partition, start, end)
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def key(self) -> tuple[str, int, int, int]:
        return (self.topic, self.partition, self.start, self.end)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetRange) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def run(work: Any) -> Any:
    """Run a coroutine on a fresh event loop (Spark calls us from plain threads)."""
    return asyncio.run(work)


async def discover(consumer: Consumer, options: ReadOptions) -> list[TopicPartition]:
    """The partitions the options name, as the cluster has them now."""
    if options.assign is not None:
        return sorted(TopicPartition(t, p) for t, partitions in options.assign.items() for p in partitions)
    if options.subscribe_pattern is not None:
        await consumer.metadata.refresh()
        pattern = re.compile(options.subscribe_pattern)
        topics = [t for t in sorted(consumer.metadata.partitions) if pattern.fullmatch(t) and not t.startswith("__")]
    else:
        topics = list(options.subscribe)
    found = []
    for topic in topics:
        for state in await consumer.metadata.partitions_of(topic):
            found.append(TopicPartition(topic, state.partition))
    return sorted(found)


async def resolve(
    consumer: Consumer,
    partitions: list[TopicPartition],
    spec: str | Offsets,
    *,
    by_timestamp: Offsets | None = None,
    timestamp: int | None = None,
    option: str,
    missing_is: int,
    none_at_timestamp: str = "latest",
) -> dict[TopicPartition, int]:
    """Concrete offsets: a global timestamp wins over per-partition timestamps, which win over
    `spec` ("earliest", "latest" or per-partition offsets with -2/-1), as Spark's Kafka source
    orders them. A partition `spec` does not name starts at `missing_is` (EARLIEST or LATEST)."""
    earliest = await consumer.beginning_offsets(partitions)
    latest = await consumer.end_offsets(partitions)
    chosen: dict[TopicPartition, int] = {}
    if timestamp is not None or by_timestamp is not None:
        wanted: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            at = timestamp if timestamp is not None else (by_timestamp or {}).get(tp.topic, {}).get(tp.partition)
            if at is None:
                raise InvalidOptionError(option, f"names no timestamp for {tp.topic}-{tp.partition}")
            wanted.setdefault(at, []).append(tp)
        for at, tps in wanted.items():
            for tp, offset in (await consumer.list_offsets(tps, at)).items():
                if 0 <= offset <= latest[tp]:
                    chosen[tp] = offset
                elif none_at_timestamp == "error":  # Spark's startingOffsetsByTimestampStrategy=error
                    raise InvalidOptionError(
                        option,
                        f"{tp.topic}-{tp.partition} has no record at or after {at}; set "
                        "startingOffsetsByTimestampStrategy to latest to start at the end instead",
                    )
                else:
                    chosen[tp] = latest[tp]  # none at or after: the end
        return chosen
    for tp in partitions:
        if isinstance(spec, str):
            special = EARLIEST if spec == "earliest" else LATEST
        else:
            special = spec.get(tp.topic, {}).get(tp.partition, missing_is)
        if special == EARLIEST:
            chosen[tp] = earliest[tp]
        elif special == LATEST:
            chosen[tp] = latest[tp]
        else:
            chosen[tp] = special
    return chosen


def check_data_loss(
    start: dict[TopicPartition, int], earliest: Mapping[TopicPartition, int], fail_on_data_loss: bool
) -> dict[TopicPartition, int]:
    """Starts below a partition's log start (deleted by retention) fail the query, or move up to it."""
    adjusted = dict(start)
    for tp, offset in start.items():
        if offset < earliest[tp]:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{tp.topic}-{tp.partition}: offsets {offset}..{earliest[tp] - 1} are gone (deleted by "
                    "retention). Set failOnDataLoss to false to skip them."
                )
            adjusted[tp] = earliest[tp]
    return adjusted


def plan_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], min_partitions: int | None
) -> list[OffsetRange]:
    """A range per partition with records, split into more when minPartitions asks for more (the
    biggest ranges split first, as Spark's Kafka source does)."""
    ranges = [
        OffsetRange(tp.topic, tp.partition, start[tp], end[tp])
        for tp in sorted(end)
        if tp in start and end[tp] > start[tp]
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    split: list[OffsetRange] = []
    for r in ranges:
        size = r.end - r.start
        pieces = max(1, min(size, round(min_partitions * size / total))) if total else 1
        step = -(-size // pieces)
        split += [OffsetRange(r.topic, r.partition, s, min(s + step, r.end)) for s in range(r.start, r.end, step)]
    return split


def read_range(
    bootstrap: tuple[str, ...], client: Mapping[str, Any], piece: OffsetRange, include_headers: bool
) -> Iterator[pa.RecordBatch]:
    """One task: the records of `piece`, one Arrow batch per fetch, straight from the leader."""
    loop = asyncio.new_event_loop()
    consumer = Consumer(list(bootstrap), **{"max_partition_fetch_bytes": TASK_PARTITION_FETCH_BYTES, **client})
    tp = TopicPartition(piece.topic, piece.partition)
    try:
        consumer.assign([tp])
        consumer.seek(tp, piece.start)
        position = piece.start
        stalled = 0
        while position < piece.end:
            fetched = loop.run_until_complete(consumer.poll_batches(POLL_TIMEOUT_MS)).get(tp)
            if fetched is None or not fetched.batches:
                stalled += 1
                if stalled > STALL_POLLS_MAX:
                    raise TimeoutError(
                        f"{tp.topic}-{tp.partition}: nothing to read at {position} (wanted up to {piece.end})"
                    )
                continue
            stalled = 0
            batch = to_arrow(
                piece.topic,
                piece.partition,
                fetched.batches,
                max(position, fetched.start_offset),
                piece.end,
                include_headers=include_headers,
            )
            position = loop.run_until_complete(consumer.position(tp))
            if batch is not None:
                yield batch
    finally:
        loop.run_until_complete(consumer.close())
        loop.close()
