"""A producer batch and its life (Kafka's ProducerBatch and its final states).

    OPEN ──full / linger.ms / flush──▶ READY ──drained into a request──▶ IN_FLIGHT ──▶ ACKNOWLEDGED
                                        │  ▲                               │
                                        │  └──── retriable error ──────────┤
                                        └────────▶ FAILED ◀── fatal error, retries or time out

A batch is in exactly one place for each state: the accumulator's open batches (OPEN), its ready
queue (READY), one request of the sender (IN_FLIGHT); ACKNOWLEDGED and FAILED are final and settle
the delivery future. Every change goes through `move_to`, which refuses one the table does not list.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from typing import Any, Final

from tidelog.common.clock import wall_clock_ms
from tidelog.common.record.batch import BATCH_OVERHEAD, NO_PRODUCER_ID, Headers, encode_batch
from tidelog.common.record.compression import CompressionType
from tidelog.common.state_machine import Transitions

__all__ = ["TRANSITIONS", "BatchState", "ProducerBatch"]


class BatchState(enum.Enum):
    OPEN = "open"
    READY = "ready"
    IN_FLIGHT = "in-flight"
    ACKNOWLEDGED = "acknowledged"
    FAILED = "failed"


TRANSITIONS: Final = Transitions(
    "a producer batch",
    {
        BatchState.OPEN: {BatchState.READY},
        BatchState.READY: {BatchState.IN_FLIGHT, BatchState.FAILED},
        BatchState.IN_FLIGHT: {BatchState.ACKNOWLEDGED, BatchState.READY, BatchState.FAILED},
        BatchState.ACKNOWLEDGED: set(),
        BatchState.FAILED: set(),
    },
)


class ProducerBatch:
    __slots__ = (
        "attempts",
        "base_sequence",
        "callback_deliveries",
        "callbacks",
        "created",
        "encoded",
        "future",
        "headers",
        "keys",
        "last_error",
        "next_attempt_at",
        "partition",
        "producer_epoch",
        "producer_id",
        "reserved",
        "serial",
        "size",
        "state",
        "timestamp",
        "timestamps",
        "topic",
        "transactional",
        "values",
    )

    def __init__(
        self, topic: str, partition: int, loop: asyncio.AbstractEventLoop, serial: int, created: float | None = None
    ) -> None:
        self.serial = serial  # creation order: a partition's batches are sent in this order
        self.topic = topic
        self.partition = partition
        self.state = BatchState.OPEN
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] | None = None
        self.timestamps: list[int] | None = None
        self.headers: list[Headers] | None = None
        self.size = BATCH_OVERHEAD
        self.created = time.monotonic() if created is None else created
        self.timestamp = wall_clock_ms()
        self.future: asyncio.Future[tuple[int, int]] = loop.create_future()
        self.attempts = 0
        self.next_attempt_at = 0.0
        self.last_error: BaseException | None = None  # why the last attempt failed, if it did
        self.reserved = 0  # bytes of buffer.memory this batch holds
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.base_sequence = -1  # set when first sent (idempotence), kept for every retry
        self.transactional = False  # part of a transaction (set with the sequence)
        self.encoded: bytes | None = None
        # Records' done callbacks, called in the order added by one callback on the batch's future.
        # Two flat lists, not a future callback (a closure, its cells, a Handle) per record: a
        # record in flight then holds one object the collector tracks (its delivery), so fewer
        # survive into the old generations, whose full collections are a busy producer's latency
        # tail (docs/client.md, "Latency and Python's garbage collector").
        self.callbacks: list[Callable[[Any], None]] | None = None
        self.callback_deliveries: list[Any] | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def done(self) -> bool:
        return self.state in (BatchState.ACKNOWLEDGED, BatchState.FAILED)

    def move_to(self, target: BatchState) -> None:
        TRANSITIONS.check(self.state, target)
        self.state = target

    def acknowledge(self, result: tuple[int, int]) -> None:
        self.move_to(BatchState.ACKNOWLEDGED)
        self.future.set_result(result)

    def fail(self, error: BaseException) -> None:
        self.move_to(BatchState.FAILED)
        self.future.set_exception(error)
        self.future.exception()  # retrieved: a failed delivery nobody awaits is not an "unhandled" error

    def add_record_callback(self, callback: Callable[[Any], None], delivery: Any) -> None:
        """Call `callback(delivery)` once the batch is settled, after the callbacks added before it;
        soon (as asyncio would) if it already is."""
        if self.future.done():
            self.future.get_loop().call_soon(callback, delivery)
            return
        if self.callbacks is None or self.callback_deliveries is None:
            self.callbacks = []
            self.callback_deliveries = []
            self.future.add_done_callback(self._run_record_callbacks)
        self.callbacks.append(callback)
        self.callback_deliveries.append(delivery)

    def _run_record_callbacks(self, future: asyncio.Future[tuple[int, int]]) -> None:
        callbacks, deliveries = self.callbacks or [], self.callback_deliveries or []
        self.callbacks = self.callback_deliveries = None
        for callback, delivery in zip(callbacks, deliveries, strict=True):
            try:
                callback(delivery)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as error:  # as asyncio does: one failing callback stops no other
                future.get_loop().call_exception_handler(
                    {"message": "Exception in a record's done callback", "exception": error, "future": future}
                )

    def encode(self, compression: CompressionType) -> bytes:
        """The batch's bytes, encoded once: a retry sends exactly what the first attempt did."""
        if self.encoded is None:
            self.encoded = encode_batch(
                self.values,
                keys=self.keys,
                headers=self.headers,
                timestamps=self.timestamp if self.timestamps is None else self.timestamps,
                compression=compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                transactional=self.transactional,
            )
        return self.encoded
