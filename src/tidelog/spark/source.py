"""The `tidelog` data source for PySpark (the Python Data Source API, PySpark 4.x): read and write
topics as Spark's Kafka source does, with the same options and schema.

    import tidelog.spark
    tidelog.spark.register(spark)           # once per session
    spark.read.format("tidelog").option("tidelog.bootstrap.servers", "localhost:9292") \\
        .option("subscribe", "events").load()

Batch reads plan one task per partition's offset range (more with minPartitions), each read from
the partition's leader as Arrow batches. Streaming reads keep Spark's Kafka source's offsets in
the checkpoint ({"topic": {"0": 42}}), bounded per micro-batch by maxOffsetsPerTrigger. Writes go
through the idempotent producer with acks=all (tidelog.spark.writing).
"""

from __future__ import annotations

import time
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
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tidelog.client import Consumer, TopicPartition
from tidelog.spark.arrow_rows import HEADERS_DDL, SCHEMA_DDL
from tidelog.spark.data_loss import Snapshot, plan_starts
from tidelog.spark.options import LATEST, ReadOptions, read_options, write_options
from tidelog.spark.reading import (
    OffsetRange,
    check_batch_ranges,
    discover,
    plan_ranges,
    read_range,
    resolve_end,
    resolve_start,
    run,
    snapshot,
    with_retries,
)

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

        return TopicStreamWriter(write_options(self.options, streaming=True), schema)


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return run(self._plan())  # type: ignore[no-any-return]

    async def _plan(self) -> list[OffsetRange]:
        options = self.options
        async with Consumer(list(options.bootstrap), **options.client) as consumer:
            partitions = await with_retries(options, lambda: discover(consumer, options))
            start = await resolve_start(consumer, options, partitions)
            end = await resolve_end(consumer, options, partitions)
            earliest = await with_retries(options, lambda: consumer.beginning_offsets(partitions))
        start = check_batch_ranges(start, end, earliest, options.fail_on_data_loss)
        return plan_ranges(start, end, options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # nothing planned: PySpark reads one default partition
            return iter(())
        return read_range(self.options, partition)


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


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream's offsets, decided once per micro-batch before any record is read.

    The first batch: PySpark asks `initialOffset()` to plan batch 0 and again to run it, and once
    more after a restart that finds batch 0 planned but not committed. Spark's Kafka source keeps
    its first answer in the checkpoint (sources/0/0); a Python source is not told where the
    checkpoint is. So the answer is resolved once per reader and kept, and batch 0 reads nothing
    of the partitions that start at their end (startingOffsets=latest): its end, which Spark
    writes to the offset log before the batch runs, is that start. Batch 1 reads from there, and a
    batch 0 run again after a restart, whose fresh initial offset may be later, is empty too
    rather than a range that ends before it starts (ADR 0019).
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._initial: dict[str, dict[str, int]] | None = None
        self._at_end: set[TopicPartition] = set()  # started at their end: batch 0 holds them there
        self._hold_first = False  # the first latestOffset after initialOffset is batch 0's
        self._topic_ids: dict[str, str] = {}  # as first seen by this reader: a change is a re-creation
        self._last_trigger_s = 0.0  # minOffsetsPerTrigger: when a batch was last let through
        self._available_now: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's target

    def _client(self) -> Consumer:
        return Consumer(list(self.options.bootstrap), **self.options.client)

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 - Spark's names
        if self._initial is not None:
            return self._initial
        options = self.options

        async def initial() -> dict[TopicPartition, int]:
            async with self._client() as consumer:
                now = await snapshot(consumer, options, streaming=True)
                self._learn_ids(now)
                starts = await resolve_start(consumer, options, sorted(now.latest), keep_latest=True)
            self._at_end = {tp for tp, offset in starts.items() if offset == LATEST}
            return {tp: now.latest[tp] if offset == LATEST else offset for tp, offset in starts.items()}

        self._initial = _to_json(run(initial()))
        self._hold_first = True
        return self._initial

    def _learn_ids(self, now: Snapshot) -> None:
        for topic, topic_id in now.topic_ids.items():
            self._topic_ids.setdefault(topic, topic_id)

    def _recreated(self, now: Snapshot) -> set[str]:
        return {topic for topic, topic_id in now.topic_ids.items() if self._topic_ids.get(topic, topic_id) != topic_id}

    def _look(self) -> Snapshot:
        async def look() -> Snapshot:
            async with self._client() as consumer:
                return await snapshot(consumer, self.options, streaming=True)

        return run(look())  # type: ignore[no-any-return]

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """Spark's Kafka source answers a composite of both limits; PySpark has none, so one
        stands for both and latestOffset applies the options' limits unless told to read all."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Trigger.AvailableNow: read up to what is there now, in batches of maxOffsetsPerTrigger."""
        self._available_now = dict(self._look().latest)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:  # noqa: N802
        now = self._look()  # new partitions and topics are picked up here
        self._learn_ids(now)
        ends = dict(now.latest)
        if self._available_now is not None:  # nothing that came after the target, no new partition
            ends = {tp: min(end, self._available_now[tp]) for tp, end in ends.items() if tp in self._available_now}
        begun = _from_json(start)
        if self._hold_first and start == self._initial:  # batch 0: nothing of what starts at its end
            ends.update({tp: begun[tp] for tp in self._at_end if tp in ends})
        self._hold_first = False
        froms = plan_starts(begun, ends, now, self._recreated(now), fail=None)  # reported when planned
        if isinstance(limit, ReadAllAvailable):
            return _to_json(ends)
        options = self.options
        if options.min_offsets_per_trigger is not None and self._available_now is None and self._delay(froms, ends):
            return start  # too little yet: no batch (Spark's minOffsetsPerTrigger)
        if options.max_offsets_per_trigger is not None:
            ends = _bounded(froms, ends, options.max_offsets_per_trigger)
        return _to_json(ends)

    def _delay(self, froms: dict[TopicPartition, int], ends: dict[TopicPartition, int]) -> bool:
        """Spark's rule: hold a batch back while fewer than minOffsetsPerTrigger records wait and
        less than maxTriggerDelay has passed since the last batch (the first is never held)."""
        waiting = sum(max(ends[tp] - froms[tp], 0) for tp in ends)
        now = time.monotonic()
        recent = self._last_trigger_s and (now - self._last_trigger_s) * 1000 < self.options.max_trigger_delay_ms
        if recent and waiting < (self.options.min_offsets_per_trigger or 0):
            return True
        self._last_trigger_s = now
        return False

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if start == end:  # nothing to read (Spark also calls this so on a restart)
            return []
        begun, ending = _from_json(start), _from_json(end)
        if start == self._initial:
            # Batch 0, maybe run again after a restart with a fresh, later initial offset: it
            # read nothing of the partitions that start at their end, and its end is where the
            # first run started them.
            begun.update({tp: ending[tp] for tp in self._at_end if tp in ending and begun[tp] > ending[tp]})
        now = self._look()
        # The batch's end was fixed and logged: plan against it, with the cluster's log starts now.
        now = Snapshot({tp: now.earliest.get(tp, 0) for tp in ending}, ending, now.topic_ids)
        froms = plan_starts(begun, ending, now, self._recreated(now), fail=self.options.fail_on_data_loss)
        self._topic_ids.update(now.topic_ids)  # reported (or failed) once: the new topic is the one read
        return plan_ranges(froms, ending, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # nothing planned: PySpark reads one default partition
            return iter(())
        return read_range(self.options, partition)

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
