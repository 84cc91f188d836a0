"""Writing DataFrames to topics, batch and streaming, as Spark's Kafka sink does: columns `value`
(string or binary, required), `key`, `topic` (else the `topic` option), `partition`, `headers`
(array<struct<key string, value binary>>); other columns are ignored.

Each task writes its rows through one idempotent producer with acks=all, in bulk: rows grouped by
target and sent as whole batches (`send_batch`), one record at a time only for rows that carry
headers. The task's commit message counts what it wrote; the job's commit has nothing to add (the
records are in the log once acknowledged).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructType

from tidelog.client import Producer
from tidelog.spark.options import InvalidOptionError, WriteOptions

__all__ = ["TopicStreamWriter", "TopicWriter", "WrittenRecords"]

TEXT_OR_BYTES = (StringType, BinaryType)


@dataclasses.dataclass
class WrittenRecords(WriterCommitMessage):
    records: int


def check_schema(options: WriteOptions, schema: StructType) -> None:
    """Refuse, before any task runs, a DataFrame the sink cannot write."""
    fields = {field.name.lower(): field for field in schema.fields}
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


async def _write(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    written = 0
    async with Producer(list(options.bootstrap), acks="all", enable_idempotence=True, **options.client) as producer:
        deliveries: list[Any] = []
        for batch in batches:
            columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
            count = batch.num_rows
            values = _bytes(columns.get("value"), count)
            keys = _bytes(columns.get("key"), count)
            topics = columns["topic"].to_pylist() if "topic" in columns else [options.topic] * count
            partitions = columns["partition"].to_pylist() if "partition" in columns else [None] * count
            headers: list[list[dict[str, Any]] | None] = (
                columns["headers"].to_pylist() if "headers" in columns else [None] * count
            )
            groups: dict[tuple[str, int | None], list[int]] = {}
            for row in range(count):
                topic = topics[row] or options.topic
                if not topic:
                    raise ValueError(f"row {row}: topic is null and no topic option is set")
                row_headers = headers[row]
                if row_headers:
                    record_headers = tuple((h["key"], h["value"]) for h in row_headers)
                    deliveries.append(
                        await producer.send(
                            topic, values[row], key=keys[row], partition=partitions[row], headers=record_headers
                        )
                    )
                else:
                    groups.setdefault((topic, partitions[row]), []).append(row)
            for (topic, partition), rows in groups.items():
                deliveries.append(
                    await producer.send_batch(
                        topic,
                        [values[row] for row in rows],
                        keys=[keys[row] for row in rows] if "key" in columns else None,
                        partition=partition,
                    )
                )
            written += count
        for delivery in deliveries:
            await delivery  # raises the first error: the task fails and Spark retries it
    return written


class TopicWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return WrittenRecords(asyncio.run(_write(self.options, iterator)))


class TopicStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return WrittenRecords(asyncio.run(_write(self.options, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        pass  # acknowledged records are in the log already

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass
