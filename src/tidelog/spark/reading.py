"""What the reader plans on the driver (which partitions, from where to where) and what each task
runs on an executor (one offset range, read from the partition's leader as Arrow batches).

Planning talks to the cluster through the client's Consumer: topic discovery from metadata,
offsets from ListOffsets (earliest, latest, by timestamp), each asked again on failure as
fetchOffset.numRetries and fetchOffset.retryIntervalMs say. A task reads its range with its own
Consumer on an event loop of its own, yielding one Arrow batch per fetch, built from the fetched
bytes' columns (arrow_rows.py), so a large range streams through the task rather than sitting in
memory.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tidelog.client import Consumer, TopicPartition
from tidelog.common.errors import TidelogError, UnknownTopicOrPartitionError
from tidelog.common.record.batch import decode_columns, iter_headers
from tidelog.spark.arrow_rows import to_arrow
from tidelog.spark.data_loss import DataLossError, Snapshot
from tidelog.spark.options import EARLIEST, LATEST, InvalidOptionError, Offsets, ReadOptions

__all__ = [
    "DataLossError",
    "OffsetRange",
    "check_batch_ranges",
    "discover",
    "plan_ranges",
    "read_range",
    "resolve",
    "resolve_end",
    "resolve_start",
    "run",
    "snapshot",
]

T = TypeVar("T")

POLL_STEP_MS: Final = 2000  # a task's single poll; it gives up after kafkaConsumer.pollTimeoutMs of nothing
# A task reads one partition: let one fetch carry more of it than a consumer's default 1 MiB, so
# Spark gets fewer, bigger Arrow batches (the client's max.partition.fetch.bytes, unless set).
TASK_PARTITION_FETCH_BYTES: Final = 8 * 1024 * 1024


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


async def with_retries(options: ReadOptions, ask: Callable[[], Awaitable[T]]) -> T:
    """`ask()`, asked again up to fetchOffset.numRetries times, fetchOffset.retryIntervalMs apart,
    while the cluster answers with an error (a leader moving, a broker restarting)."""
    for attempt in range(options.fetch_offset_retries + 1):
        try:
            return await ask()
        except (TidelogError, ConnectionError):
            if attempt == options.fetch_offset_retries:
                raise
            await asyncio.sleep(options.fetch_offset_retry_interval_ms / 1000)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def discover(consumer: Consumer, options: ReadOptions, *, streaming: bool = False) -> list[TopicPartition]:
    """The partitions the options name, as the cluster has them now. A stream subscribed to a
    topic that does not exist (yet, or any more) reads none of it, as Spark's Kafka source does."""
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
        try:
            states = await consumer.metadata.partitions_of(topic)
        except UnknownTopicOrPartitionError:
            if not streaming:
                raise
            continue
        found += [TopicPartition(topic, state.partition) for state in states]
    return sorted(found)


async def snapshot(consumer: Consumer, options: ReadOptions, *, streaming: bool) -> Snapshot:
    """The partitions the options name now, with their earliest and latest offsets and topic ids.
    Asked again whole on an error: a topic deleted between discovery and its offsets is then not
    discovered any more."""

    async def look() -> Snapshot:
        partitions = await discover(consumer, options, streaming=streaming)
        earliest = await consumer.beginning_offsets(partitions)
        latest = await consumer.end_offsets(partitions)
        topic_ids = {
            tp.topic: states[0].topic_id for tp in partitions if (states := consumer.metadata.partitions.get(tp.topic))
        }
        return Snapshot(earliest, latest, topic_ids)

    return await with_retries(options, look)


def _all_named(option: str, named: Offsets, partitions: list[TopicPartition], specials: str) -> None:
    """Spark's rule for offsets or timestamps given per partition: exactly the partitions read."""
    given = {TopicPartition(topic, p) for topic, offsets in named.items() for p in offsets}
    if given != set(partitions):
        raise InvalidOptionError(
            option,
            f"names {', '.join(map(str, sorted(given))) or 'no partition'} but the query reads "
            f"{', '.join(map(str, partitions)) or 'no partition'}: name every partition{specials}",
        )


async def resolve(
    consumer: Consumer,
    options: ReadOptions,
    partitions: list[TopicPartition],
    spec: str | Offsets,
    *,
    spec_option: str,
    by_timestamp: Offsets | None = None,
    by_timestamp_option: str = "",
    timestamp: int | None = None,
    timestamp_option: str = "",
    none_at_timestamp: str = "latest",
    keep_latest: bool = False,
) -> dict[TopicPartition, int]:
    """Concrete offsets: a global timestamp wins over per-partition timestamps, which win over
    `spec` ("earliest", "latest" or per-partition offsets with -2/-1), as Spark's Kafka source
    orders them. With `keep_latest` a partition to start at its end is LATEST, not the end now
    (a stream's first batch fixes it: see StreamReader)."""
    earliest = await with_retries(options, lambda: consumer.beginning_offsets(partitions))
    latest = await with_retries(options, lambda: consumer.end_offsets(partitions))
    at_end = {tp: LATEST if keep_latest else latest[tp] for tp in partitions}
    chosen: dict[TopicPartition, int] = {}
    if timestamp is not None or by_timestamp is not None:
        if timestamp is None:
            assert by_timestamp is not None
            _all_named(by_timestamp_option, by_timestamp, partitions, "")
        option = timestamp_option if timestamp is not None else by_timestamp_option
        wanted: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            at = timestamp if timestamp is not None else (by_timestamp or {})[tp.topic][tp.partition]
            wanted.setdefault(at, []).append(tp)
        for at, tps in wanted.items():
            found = await with_retries(options, lambda tps=tps, at=at: consumer.list_offsets(tps, at))  # type: ignore[misc]
            for tp, offset in found.items():
                if 0 <= offset <= latest[tp]:
                    chosen[tp] = offset
                elif none_at_timestamp == "error":  # Spark's startingOffsetsByTimestampStrategy=error
                    raise InvalidOptionError(
                        option,
                        f"{tp.topic}-{tp.partition} has no record at or after {at}; set "
                        "startingOffsetsByTimestampStrategy to latest to start at the end instead",
                    )
                else:
                    chosen[tp] = at_end[tp]  # none at or after: the end
        return chosen
    if isinstance(spec, dict):
        _all_named(spec_option, spec, partitions, " (-2 for earliest, -1 for latest)")
    for tp in partitions:
        if isinstance(spec, str):
            special = EARLIEST if spec == "earliest" else LATEST
        else:
            special = spec[tp.topic][tp.partition]
        if special == EARLIEST:
            chosen[tp] = earliest[tp]
        elif special == LATEST:
            chosen[tp] = at_end[tp]
        else:
            chosen[tp] = special
    return chosen


async def resolve_start(
    consumer: Consumer, options: ReadOptions, partitions: list[TopicPartition], *, keep_latest: bool = False
) -> dict[TopicPartition, int]:
    """Where a query starts reading each partition, as the starting* options say."""
    return await resolve(
        consumer,
        options,
        partitions,
        options.starting,
        spec_option="startingOffsets",
        by_timestamp=options.starting_by_timestamp,
        by_timestamp_option="startingOffsetsByTimestamp",
        timestamp=options.starting_timestamp,
        timestamp_option="startingTimestamp",
        none_at_timestamp=options.starting_by_timestamp_strategy,
        keep_latest=keep_latest,
    )


async def resolve_end(
    consumer: Consumer, options: ReadOptions, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """Where a batch query stops reading each partition, as the ending* options say."""
    return await resolve(
        consumer,
        options,
        partitions,
        options.ending,
        spec_option="endingOffsets",
        by_timestamp=options.ending_by_timestamp,
        by_timestamp_option="endingOffsetsByTimestamp",
        timestamp=options.ending_timestamp,
        timestamp_option="endingTimestamp",
    )


def check_batch_ranges(
    start: dict[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
) -> dict[TopicPartition, int]:
    """A batch query's starts, checked as Spark's Kafka relation checks them: a start after its end
    is an error; a start that retention deleted fails the query, or moves up to the log start."""
    adjusted = dict(start)
    for tp, offset in sorted(start.items()):
        if offset > end[tp]:
            raise ValueError(
                f"Beginning offset {offset} is after the ending offset {end[tp]} for topic {tp.topic} partition "
                f"{tp.partition}. You either provided an invalid fromOffset, or the topic has been damaged"
            )
        if offset < earliest[tp]:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{tp.topic}-{tp.partition}: offsets {offset}..{earliest[tp] - 1} are gone (deleted by "
                    "retention). Set failOnDataLoss to false to skip them."
                )
            adjusted[tp] = earliest[tp]
    return adjusted


def _divided(piece: OffsetRange, pieces: int) -> list[OffsetRange]:
    size = piece.end - piece.start
    step = -(-size // max(1, min(size, pieces)))
    return [
        OffsetRange(piece.topic, piece.partition, s, min(s + step, piece.end))
        for s in range(piece.start, piece.end, step)
    ]


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    options: ReadOptions,
) -> list[OffsetRange]:
    """A range per partition with records, split as Spark's Kafka source splits them
    (KafkaOffsetRangeCalculator): into pieces of at most maxRecordsPerPartition, then further,
    the biggest first, until there are minPartitions."""
    ranges = [
        OffsetRange(tp.topic, tp.partition, start[tp], end[tp])
        for tp in sorted(end)
        if tp in start and end[tp] > start[tp]
    ]
    most = options.max_records_per_partition
    if most is not None:
        ranges = [piece for r in ranges for piece in _divided(r, -(-(r.end - r.start) // most))]
    wanted = options.min_partitions
    if not wanted or not ranges or len(ranges) >= wanted:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    return [piece for r in ranges for piece in _divided(r, round(wanted * (r.end - r.start) / total))]


def read_range(options: ReadOptions, piece: OffsetRange) -> Iterator[pa.RecordBatch]:
    """One task: the records of `piece`, one Arrow batch per fetch, straight from the leader.
    Gives up after kafkaConsumer.pollTimeoutMs without a record."""
    poll_timeout_ms = options.poll_timeout_ms
    loop = asyncio.new_event_loop()
    consumer = Consumer(
        list(options.bootstrap), **{"max_partition_fetch_bytes": TASK_PARTITION_FETCH_BYTES, **options.client}
    )
    tp = TopicPartition(piece.topic, piece.partition)
    try:
        consumer.assign([tp])
        consumer.seek(tp, piece.start)
        position = piece.start
        last_read = time.monotonic()
        while position < piece.end:
            fetched = loop.run_until_complete(consumer.poll_stored(min(POLL_STEP_MS, poll_timeout_ms))).get(tp)
            if fetched is None:
                # Transaction markers (and, read_committed, aborted batches) move the position
                # without records: a range may end in them.
                position = loop.run_until_complete(consumer.position(tp))
                if position >= piece.end:
                    break
                if (time.monotonic() - last_read) * 1000 >= poll_timeout_ms:
                    raise TimeoutError(
                        f"{tp.topic}-{tp.partition}: nothing to read at {position} for {poll_timeout_ms} ms "
                        f"(wanted up to {piece.end}; kafkaConsumer.pollTimeoutMs)"
                    )
                continue
            last_read = time.monotonic()
            buffer = fetched.record_batches
            # the consumer checked every batch's CRC before handing them over
            columns = [decode_columns(buffer, at, verify_crc=False) for at, _ in iter_headers(buffer)]
            batch = to_arrow(
                piece.topic,
                piece.partition,
                columns,
                max(position, fetched.start_offset),
                piece.end,
                include_headers=options.include_headers,
            )
            position = loop.run_until_complete(consumer.position(tp))
            if batch is not None:
                yield batch
    finally:
        loop.run_until_complete(consumer.close())
        loop.close()
