"""Writing DataFrames to topics, batch and streaming, as Spark's Kafka sink does: columns `value`
(string or binary, required), `key`, `topic` (unless the `topic` option is set: the option wins),
`partition`, `headers` (array<struct<key string, value binary>>); other columns are ignored.

Each task writes its rows through one idempotent producer with acks=all, in bulk: rows grouped by
target (numpy over partition numbers and topic codes) and sent as whole batches (`send_batch`).
The task's commit message counts what it wrote; the job's commit has nothing to add (the records
are in the log once acknowledged). A retried task may write rows its failed attempt wrote, as
Spark's Kafka sink may: at least once.

With the option `idempotentRetries=true`, a retried task writes no row twice, at the price of a
header consumers see. The first record of every producer batch then carries a header
`tidelog.spark.write` = `<write>/<task>/` followed by the task's input row numbers the batch holds
(int64, little-endian): which write (a uuid the driver draws per batch job, or the streaming
query's id and micro-batch id), which task (Spark's partition id), which rows. A batch is written
or not as a whole, so the header is exactly as true as the records. A retry (attempt > 0) first
reads each target topic from the time its write began (less a margin for clocks) for its own
task's headers, and skips the rows they name. Spark recomputes a task's input in the same order,
so a row's number names the same row in every attempt. The cost: one header per batch, and on a
retry one scan of the target's records since the write began.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructType

from tidelog.client import Consumer, Producer, TopicPartition
from tidelog.spark.exactly_once import PreparedTransaction, SinkTask, commit_prepared, write_prepared
from tidelog.spark.options import InvalidOptionError, WriteOptions

__all__ = ["WRITE_ID_HEADER", "TopicStreamWriter", "TopicWriter", "WrittenRecords"]

TEXT_OR_BYTES = (StringType, BinaryType)
WRITE_ID_HEADER: Final = "tidelog.spark.write"
# Records an earlier attempt wrote are no older than the write's start on the driver, less this,
# which covers clocks that differ between the driver and the executors.
RETRY_SCAN_MARGIN_MS: Final = 300_000
ROW_COLUMN: Final = "__tidelog_row"
# Local properties Spark sets on a micro-batch's tasks.
STREAMING_BATCH_ID: Final = "streaming.sql.batchId"
STREAMING_QUERY_ID: Final = "sql.streaming.queryId"


@dataclasses.dataclass
class WrittenRecords(WriterCommitMessage):
    records: int


def check_schema(options: WriteOptions, schema: StructType) -> None:
    """Refuse, before any task runs, a DataFrame the sink cannot write."""
    fields = {field.name.lower(): field for field in schema.fields}
    if options.topic is not None:
        fields.pop("topic", None)  # the option wins over the column, as in Spark's Kafka sink
    if "value" not in fields:
        raise InvalidOptionError("value", "the DataFrame needs a value column (string or binary)")
    for name in ("key", "value", "topic"):
        if name in fields and not isinstance(fields[name].dataType, TEXT_OR_BYTES if name != "topic" else StringType):
            wanted = "string or binary" if name != "topic" else "string"
            raise InvalidOptionError(name, f"column must be {wanted}, not {fields[name].dataType.simpleString()}")
    if "topic" not in fields and options.topic is None:
        raise InvalidOptionError("topic", "no topic column and no topic option: where should rows go?")
    if "partition" in fields and not isinstance(fields["partition"].dataType, (IntegerType, LongType)):
        raise InvalidOptionError("partition", "column must be int")
    if "headers" in fields:
        headers = fields["headers"].dataType
        if not (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]
        ):
            raise InvalidOptionError("headers", "column must be array<struct<key: string, value: binary>>")


def _bytes(column: pa.Array | None, count: int) -> list[bytes | None]:
    if column is None:
        return [None] * count
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _groups(
    batch: pa.RecordBatch, columns: dict[str, pa.Array], default_topic: str | None
) -> list[tuple[str, int | None, pa.RecordBatch]]:
    """The rows of `batch` by target (topic, partition), in order within each, with vectorised
    grouping: numpy over the partition numbers and the topics' dictionary codes, no loop per row."""
    count = batch.num_rows
    if "topic" in columns:
        encoded = columns["topic"].dictionary_encode()
        if encoded.null_count and default_topic is None:
            raise ValueError("a row's topic is null and no topic option is set")
        names = [default_topic if name is None else name for name in encoded.dictionary.to_pylist()] + [default_topic]
        codes = encoded.indices.fill_null(len(names) - 1).to_numpy(zero_copy_only=False)
    else:
        names, codes = [default_topic], np.zeros(count, dtype=np.int64)
    if "partition" in columns:
        raw = columns["partition"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        raw = np.full(count, -1, dtype=np.int64)
    keys = codes.astype(np.int64) * (1 << 32) + (raw + 1)
    order = np.argsort(keys, kind="stable")  # stable: each target keeps the rows' order
    ordered = keys[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    groups = []
    for indexes in np.split(order, bounds):
        if not len(indexes):
            continue
        topic = names[int(codes[indexes[0]])]
        assert topic is not None
        partition = int(raw[indexes[0]])
        groups.append((topic, None if partition < 0 else partition, batch.take(pa.array(indexes))))
    return groups


@dataclasses.dataclass(frozen=True)
class TaskWrite:
    """Who is writing: the write-id prefix of this task's records, whether an earlier attempt may
    have written some, and since when."""

    prefix: bytes  # b"<write>/<task>/"
    retry: bool
    since_ms: int
    fail_after: int | None = None  # failFirstAttemptAfterRecords (tests): attempt 0 fails there


def task_write(write_id: str, since_ms: int, fail_after: int | None) -> TaskWrite:
    context = TaskContext.get()
    if context is None:  # outside Spark (the writer called directly): one attempt, nothing to skip
        return TaskWrite(f"{write_id}/0/".encode(), False, since_ms)
    batch_id = context.getLocalProperty(STREAMING_BATCH_ID)
    if batch_id is not None:  # a micro-batch: the query's id and the batch's are the write
        write_id = f"{context.getLocalProperty(STREAMING_QUERY_ID)}.{batch_id}"
    retry = context.attemptNumber() > 0
    return TaskWrite(
        f"{write_id}/{context.partitionId()}/".encode(),
        retry,
        since_ms,
        fail_after if not retry else None,
    )


async def _already_written(producer: Producer, consumer: Consumer, topic: str, task: TaskWrite) -> set[int]:
    """Row numbers of this task that an earlier attempt wrote to `topic` (read back since the
    write began)."""
    partitions = [TopicPartition(topic, state.partition) for state in await producer.metadata.partitions_of(topic)]
    starts = await consumer.list_offsets(partitions, max(task.since_ms - RETRY_SCAN_MARGIN_MS, 0))
    ends = await consumer.end_offsets(partitions)
    wanted = {tp: starts[tp] for tp in partitions if 0 <= starts[tp] < ends[tp]}
    rows: set[int] = set()
    if not wanted:
        return rows
    consumer.assign(list(wanted))
    for tp, offset in wanted.items():
        consumer.seek(tp, offset)
    while True:
        positions = [await consumer.position(tp) for tp in wanted]
        if all(position >= ends[tp] for position, tp in zip(positions, wanted, strict=True)):
            break
        for fetched in (await consumer.poll_batches(1000)).values():
            for batch in fetched.batches:
                for record_headers in batch.headers:
                    for key, value in record_headers:
                        if key == WRITE_ID_HEADER and value is not None and value.startswith(task.prefix):
                            rows.update(np.frombuffer(value, dtype="<i8", offset=len(task.prefix)).tolist())
    return rows


async def _write(options: WriteOptions, batches: Iterator[pa.RecordBatch], task: TaskWrite) -> int:
    async with (
        Producer(list(options.bootstrap), acks="all", enable_idempotence=True, **options.client) as producer,
        Consumer(list(options.bootstrap), security=options.client.get("security")) as consumer,
    ):
        return await _send(options, batches, task, producer, consumer)


async def _send(
    options: WriteOptions,
    batches: Iterator[pa.RecordBatch],
    task: TaskWrite,
    producer: Producer,
    consumer: Consumer | None,
) -> int:
    """The task's rows through `producer`; `consumer` reads back what an earlier attempt wrote
    (idempotentRetries)."""
    written = 0
    row_base = 0  # the task's running row number: the same rows get the same numbers in every attempt
    done_by_earlier: set[int] = set()
    scanned: set[str] = set()
    deliveries: list[Any] = []
    for batch in batches:
        numbers = np.arange(row_base, row_base + batch.num_rows, dtype=np.int64)
        row_base += batch.num_rows
        numbered = batch.append_column(ROW_COLUMN, pa.array(numbers))
        columns = {name.lower(): numbered.column(i) for i, name in enumerate(numbered.schema.names)}
        if options.topic is not None:
            columns.pop("topic", None)  # the option wins over the column
        for topic, partition, group in _groups(numbered, columns, options.topic):
            rows = group
            if options.idempotent_retries and task.retry and topic not in scanned and consumer is not None:
                done_by_earlier |= await _already_written(producer, consumer, topic, task)
                scanned.add(topic)
            picked = {name.lower(): rows.column(i) for i, name in enumerate(rows.schema.names)}
            numbers = picked[ROW_COLUMN].to_numpy().astype("<i8")
            if done_by_earlier:
                keep = np.flatnonzero(~np.isin(numbers, np.fromiter(done_by_earlier, dtype=np.int64)))
                if not len(keep):
                    continue
                if len(keep) < len(numbers):
                    rows = rows.take(pa.array(keep))
                    picked = {name.lower(): rows.column(i) for i, name in enumerate(rows.schema.names)}
                    numbers = numbers[keep]
            count = rows.num_rows
            prefix = task.prefix

            def marker(indexes: list[int], numbers: Any = numbers, prefix: bytes = prefix) -> tuple[str, bytes]:
                # which of the task's rows this producer batch holds: written all or none
                return (WRITE_ID_HEADER, prefix + numbers[indexes].tobytes())

            user_headers = picked["headers"].to_pylist() if "headers" in picked else None
            deliveries.append(
                await producer.send_batch(
                    topic,
                    _bytes(picked.get("value"), count),
                    keys=_bytes(picked.get("key"), count) if "key" in picked else None,
                    partition=partition,
                    headers=(
                        [tuple((h["key"], h["value"]) for h in extra or ()) for extra in user_headers]
                        if user_headers is not None and any(user_headers)
                        else None
                    ),
                    batch_header=marker if options.idempotent_retries else None,
                )
            )
            written += count
            if task.fail_after is not None and written >= task.fail_after:
                for delivery in deliveries:  # acknowledged, then the attempt dies mid-way
                    await delivery
                raise RuntimeError(f"failFirstAttemptAfterRecords: failing after {written} records")
    for delivery in deliveries:
        await delivery  # raises the first error: the task fails and Spark retries it
    return written


class TopicWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options
        self.write_id = uuid.uuid4().hex[:16]  # on the driver, once per job: every task attempt sees it
        self.since_ms = int(time.time() * 1000)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        task = task_write(self.write_id, self.since_ms, self.options.fail_first_attempt_after)
        return WrittenRecords(asyncio.run(_write(self.options, iterator, task)))


class TopicStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options
        self.write_id = uuid.uuid4().hex[:16]  # replaced by the query and batch ids in each task
        self.since_ms = int(time.time() * 1000)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords | PreparedTransaction:
        task = task_write(self.write_id, self.since_ms, self.options.fail_first_attempt_after)
        if not self.options.exactly_once:
            return WrittenRecords(asyncio.run(_write(self.options, iterator, task)))
        context = TaskContext.get()
        assert context is not None, "an exactly-once write runs in Spark tasks"
        sink_task = SinkTask(
            str(context.getLocalProperty(STREAMING_QUERY_ID)),
            int(context.getLocalProperty(STREAMING_BATCH_ID) or 0),
            context.partitionId(),
        )

        async def send_rows(producer: Producer) -> int:
            return await _send(self.options, iterator, task, producer, None)

        return asyncio.run(write_prepared(self.options, sink_task, send_rows))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        """At least once: acknowledged records are in the log already. Exactly once: phase two."""
        if self.options.exactly_once:
            asyncio.run(commit_prepared(self.options, messages, commit=True))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if self.options.exactly_once:
            asyncio.run(commit_prepared(self.options, messages, commit=False))
