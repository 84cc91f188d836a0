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

import numpy as np
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


async def _write(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    written = 0
    async with Producer(list(options.bootstrap), acks="all", enable_idempotence=True, **options.client) as producer:
        deliveries: list[Any] = []
        for batch in batches:
            columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
            for topic, partition, rows in _groups(batch, columns, options.topic):
                picked = {name.lower(): rows.column(i) for i, name in enumerate(rows.schema.names)}
                count = rows.num_rows
                values = _bytes(picked.get("value"), count)
                keys = _bytes(picked.get("key"), count) if "key" in picked else None
                headers: list[list[dict[str, Any]] | None] = (
                    picked["headers"].to_pylist()
                    if "headers" in picked and picked["headers"].null_count < count
                    else []
                )
                if any(headers):  # the bulk path carries no headers: these go one by one
                    for row in range(count):
                        row_headers = tuple((h["key"], h["value"]) for h in headers[row] or ())
                        deliveries.append(
                            await producer.send(
                                topic,
                                values[row],
                                key=keys[row] if keys is not None else None,
                                partition=partition,
                                headers=row_headers,
                            )
                        )
                else:
                    deliveries.append(await producer.send_batch(topic, values, keys=keys, partition=partition))
            written += batch.num_rows
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
