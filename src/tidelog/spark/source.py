"""The `tidelog` data source for PySpark (the Python Data Source API, PySpark 4.x): read and write
topics as Spark's Kafka source does, with the same options and schema.

    import tidelog.spark
    tidelog.spark.register(spark)           # once per session
    spark.read.format("tidelog").option("tidelog.bootstrap.servers", "localhost:9092") \\
        .option("subscribe", "events").load()

Batch reads plan one task per partition's offset range (more with minPartitions), each read from
the partition's leader as Arrow batches. Streaming reads keep Spark's Kafka source's offsets in
the checkpoint ({"topic": {"0": 42}}), bounded per micro-batch by maxOffsetsPerTrigger. Writes go
through the idempotent producer with acks=all (tidelog.spark.writing).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from tidelog.client import Consumer, TopicPartition
from tidelog.spark.arrow_rows import HEADERS_DDL, SCHEMA_DDL
from tidelog.spark.options import EARLIEST, ReadOptions, read_options, write_options
from tidelog.spark.reading import OffsetRange, check_data_loss, discover, plan_ranges, read_range, resolve, run

__all__ = ["TidelogDataSource"]


class TidelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return SCHEMA_DDL + (HEADERS_DDL if include else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        return StreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from tidelog.spark.writing import TopicWriter  # noqa: PLC0415 - the writer's imports only when writing

        return TopicWriter(write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from tidelog.spark.writing import TopicStreamWriter  # noqa: PLC0415

        return TopicStreamWriter(write_options(self.options), schema)


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return run(self._plan())  # type: ignore[no-any-return]

    async def _plan(self) -> list[OffsetRange]:
        options = self.options
        async with Consumer(list(options.bootstrap), **options.client) as consumer:
            partitions = await discover(consumer, options)
            start = await resolve(
                consumer,
                partitions,
                options.starting,
                by_timestamp=options.starting_by_timestamp,
                timestamp=options.starting_timestamp,
                option="startingTimestamp" if options.starting_timestamp is not None else "startingOffsetsByTimestamp",
                missing_is=EARLIEST,
                none_at_timestamp=options.starting_by_timestamp_strategy,
            )
            end = await resolve(
                consumer,
                partitions,
                options.ending,
                by_timestamp=options.ending_by_timestamp,
                option="endingOffsets",
                missing_is=-1,
            )
            start = check_data_loss(start, await consumer.beginning_offsets(partitions), options.fail_on_data_loss)
        return plan_ranges(start, end, options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # nothing planned: PySpark reads one default partition
            return iter(())
        return read_range(self.options.bootstrap, self.options.client, partition, self.options.include_headers)


def _to_json(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka source's checkpoint form: {"topic": {"0": 42}}."""
    result: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return result


def _from_json(offsets: dict[str, Any]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(p)): int(o) for topic, partitions in offsets.items() for p, o in partitions.items()
    }


class StreamReader(DataSourceStreamReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 - Spark's names
        async def initial() -> dict[TopicPartition, int]:
            async with Consumer(list(self.options.bootstrap), **self.options.client) as consumer:
                partitions = await discover(consumer, self.options)
                return await resolve(
                    consumer,
                    partitions,
                    self.options.starting,
                    by_timestamp=self.options.starting_by_timestamp,
                    timestamp=self.options.starting_timestamp,
                    option=(
                        "startingTimestamp"
                        if self.options.starting_timestamp is not None
                        else "startingOffsetsByTimestamp"
                    ),
                    missing_is=-1,
                    none_at_timestamp=self.options.starting_by_timestamp_strategy,
                )

        return _to_json(run(initial()))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:  # noqa: N802
        async def latest() -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
            async with Consumer(list(self.options.bootstrap), **self.options.client) as consumer:
                partitions = await discover(consumer, self.options)  # new partitions are picked up here
                return await consumer.beginning_offsets(partitions), await consumer.end_offsets(partitions)

        earliest, ends = run(latest())
        begun = _from_json(start)
        # A partition new since the last batch is read from its beginning, as Spark's Kafka source does.
        froms = {tp: begun.get(tp, earliest[tp]) for tp in ends}
        if isinstance(limit, ReadMaxRows):
            ends = _bounded(froms, ends, limit.max_rows)
        return _to_json({tp: max(end, froms[tp]) for tp, end in ends.items()})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begun, ending = _from_json(start), _from_json(end)

        async def earliest() -> dict[TopicPartition, int]:
            async with Consumer(list(self.options.bootstrap), **self.options.client) as consumer:
                return await consumer.beginning_offsets(sorted(ending))

        log_starts = run(earliest()) if ending else {}
        froms = {tp: begun.get(tp, log_starts[tp]) for tp in ending}
        froms = check_data_loss(froms, log_starts, self.options.fail_on_data_loss)
        return plan_ranges(froms, ending, None)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # nothing planned: PySpark reads one default partition
            return iter(())
        return read_range(self.options.bootstrap, self.options.client, partition, self.options.include_headers)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # nothing to release: progress lives in Spark's checkpoint, not in a consumer group


def _bounded(
    froms: dict[TopicPartition, int], ends: dict[TopicPartition, int], budget: int
) -> dict[TopicPartition, int]:
    """maxOffsetsPerTrigger spread over partitions in proportion to what each has waiting."""
    waiting = {tp: max(ends[tp] - froms[tp], 0) for tp in ends}
    total = sum(waiting.values())
    if total <= budget:
        return ends
    bounded = {}
    given = 0
    for tp in sorted(waiting):
        share = waiting[tp] * budget // total
        bounded[tp] = froms[tp] + share
        given += share
    for tp in sorted(waiting, key=lambda t: -waiting[t]):  # the remainder to the biggest backlogs
        if given >= budget:
            break
        if bounded[tp] < ends[tp]:
            bounded[tp] += 1
            given += 1
    return bounded
