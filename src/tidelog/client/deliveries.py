"""What a send returns: an awaitable delivery per record (`RecordDelivery`, Kafka's send future and
callback), one per bulk send (`BulkDelivery`), and a record's place once acknowledged
(`RecordMetadata`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Generator
from typing import Any

from tidelog.client.producer_batch import ProducerBatch

__all__ = ["BulkDelivery", "RecordDelivery", "RecordMetadata"]


@dataclasses.dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int
    timestamp: int


class RecordDelivery:
    """Awaitable delivery of one record: its RecordMetadata, or the error that failed it."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        """True once the record is acknowledged or failed."""
        return self._batch.future.done()

    def result(self) -> RecordMetadata:
        """The record's metadata once acknowledged, as asyncio.Future.result(): raises the error that
        failed it, or asyncio.InvalidStateError while it is in flight (await the delivery to wait)."""
        base_offset, timestamp = self._batch.future.result()
        return self._metadata(base_offset, timestamp)

    def exception(self) -> BaseException | None:
        """The error that failed the record, None if acknowledged; InvalidStateError while in flight."""
        return self._batch.future.exception()

    def add_done_callback(self, callback: Callable[[RecordDelivery], None]) -> None:
        """Call `callback(self)` once the record is acknowledged or failed (Kafka's send callback).
        A batch's callbacks run in the order they were added (so in send order for records sent
        then given callbacks), from one event-loop callback and in its context, not each in a copy
        of the context it was added in as asyncio's would."""
        self._batch.add_record_callback(callback, self)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        base_offset, timestamp = yield from self._batch.future.__await__()
        return self._metadata(base_offset, timestamp)

    def _metadata(self, base_offset: int, timestamp: int) -> RecordMetadata:
        batch = self._batch
        if batch.timestamps is not None and timestamp == -1:
            timestamp = batch.timestamps[self._index]
        return RecordMetadata(
            batch.topic, batch.partition, base_offset + self._index, batch.timestamp if timestamp == -1 else timestamp
        )


class BulkDelivery:
    """Awaitable delivery of a `send_batch`: (partition, base offset, record count) per batch."""

    def __init__(self, batches: list[ProducerBatch]) -> None:
        self._batches = batches

    async def settled(self) -> list[tuple[int, int | BaseException, int]]:
        """Once every batch is done: (partition, base offset or the error that failed it, record
        count) per batch, in the order the batches were made — the records' order when send_batch
        had a partition or no keys. Awaiting the delivery itself raises at the first failed batch;
        this reports each one."""
        if self._batches:
            await asyncio.wait([batch.future for batch in self._batches])
        return [
            (batch.partition, batch.future.exception() or batch.future.result()[0], len(batch.values))
            for batch in self._batches
        ]

    def __await__(self) -> Generator[Any, None, list[tuple[int, int, int]]]:
        results = []
        for batch in self._batches:
            base_offset, _ = yield from batch.future.__await__()
            results.append((batch.partition, base_offset, len(batch.values)))
        return results
