"""Where records wait to be sent (Kafka's RecordAccumulator): one open batch per partition, a queue
of ready batches, and the buffer.memory they hold.

`send()` appends to its partition's open batch; the batch becomes ready when it reaches
`batch.size` bytes or is `linger.ms` old (or at once while flushing). The sender takes ready
batches in creation order and puts back what it could not send yet; a retried batch goes back
too, and the queue is re-sorted before the next take so a partition's batches keep their order.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterator

from tidelog.client.producer_batch import BatchState, ProducerBatch
from tidelog.common.errors import RequestTimedOutError
from tidelog.common.record.batch import Headers
from tidelog.common.settings import ProducerSettings

__all__ = ["RecordAccumulator"]


class RecordAccumulator:
    def __init__(
        self,
        settings: ProducerSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.batch_size = settings.batch_size
        self.linger_s = settings.linger_ms / 1000
        self.buffer_memory = settings.buffer_memory
        self.clock = clock
        self.buffered = 0  # bytes of buffer.memory held by batches not yet answered
        self._open: dict[tuple[str, int], ProducerBatch] = {}
        self._ready: collections.deque[ProducerBatch] = collections.deque()
        self._requeued = False  # a retried batch went back: re-sort before the next take
        self._serial = 0
        self._freed = asyncio.Event()

    # ---- batches ---------------------------------------------------------------------------

    def new_batch(self, topic: str, partition: int) -> ProducerBatch:
        self._serial += 1
        return ProducerBatch(topic, partition, asyncio.get_running_loop(), self._serial, self.clock())

    def append(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: Headers | None,
        timestamp: int | None,
        size: int,
    ) -> tuple[ProducerBatch, int, bool]:
        """Add one record (its `size` already reserved) to the partition's open batch: the batch,
        the record's index in it, and whether the batch is new (its linger deadline is news)."""
        batch = self._open.get((topic, partition))
        created = batch is None
        if batch is None:
            batch = self._open[(topic, partition)] = self.new_batch(topic, partition)
        index = len(batch.values)
        batch.values.append(value)
        if key is not None or batch.keys is not None:
            if batch.keys is None:
                batch.keys = [None] * index
            batch.keys.append(key)
        if timestamp is not None or batch.timestamps is not None:
            if batch.timestamps is None:
                batch.timestamps = [batch.timestamp] * index
            batch.timestamps.append(batch.timestamp if timestamp is None else timestamp)
        if headers or batch.headers is not None:
            if batch.headers is None:
                batch.headers = [()] * index
            batch.headers.append(headers or ())
        batch.size += size
        batch.reserved += size
        if batch.size >= self.batch_size:
            self.close(batch)
        return batch, index, created

    def close(self, batch: ProducerBatch) -> None:
        """An open batch takes no more records and waits to be sent."""
        del self._open[batch.key]
        batch.move_to(BatchState.READY)
        self._ready.append(batch)

    def add_ready(self, batch: ProducerBatch) -> None:
        """A batch built whole (the bulk path) goes straight to the ready queue."""
        batch.move_to(BatchState.READY)
        self._ready.append(batch)

    def close_expired(self, everything: bool) -> float | None:
        """Close batches past linger.ms (all of them with `everything`); the next expiry, if any."""
        now = self.clock()
        next_expiry: float | None = None
        for batch in list(self._open.values()):
            expiry = batch.created + self.linger_s
            if everything or expiry <= now:
                self.close(batch)
            elif next_expiry is None or expiry < next_expiry:
                next_expiry = expiry
        return next_expiry

    def is_open(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._open

    # ---- the sender's side -----------------------------------------------------------------

    def take_ready(self) -> list[ProducerBatch]:
        """Every ready batch, in creation order; the sender puts back what it does not send now."""
        if self._requeued:
            self._requeued = False
            taken = sorted(self._ready, key=lambda batch: batch.serial)
        else:
            taken = list(self._ready)
        self._ready.clear()
        return taken

    def put_back(self, batches: list[ProducerBatch]) -> None:
        """Batches taken but not sent: still READY, back in order."""
        assert all(batch.state is BatchState.READY for batch in batches)
        if self._ready:
            self._requeued = True  # others arrived since the take: order all of them next time
        self._ready.extend(sorted(batches, key=lambda batch: batch.serial))

    def requeue(self, batch: ProducerBatch) -> None:
        """A batch whose request failed retriably is ready again (its backoff is on the batch)."""
        batch.move_to(BatchState.READY)
        self._ready.appendleft(batch)
        self._requeued = True

    def remove_ready(self, batch: ProducerBatch) -> None:
        if batch in self._ready:
            self._ready.remove(batch)

    def waiting(self) -> Iterator[ProducerBatch]:
        """Batches not yet handed to the sender (open, then ready)."""
        yield from self._open.values()
        yield from self._ready

    def ready_keys(self) -> set[tuple[str, int]]:
        """The partitions of the ready batches (a transactional sender adds them to the transaction first)."""
        return {batch.key for batch in self._ready}

    def take_unsent(self) -> list[ProducerBatch]:
        """Close every open batch and take the ready ones never sent (an abort fails them)."""
        for batch in list(self._open.values()):
            self.close(batch)
        unsent = [batch for batch in self._ready if batch.base_sequence < 0]
        for batch in unsent:
            self._ready.remove(batch)
        return unsent

    @property
    def has_open(self) -> bool:
        return bool(self._open)

    @property
    def has_ready(self) -> bool:
        return bool(self._ready)

    # ---- buffer.memory ---------------------------------------------------------------------

    def try_reserve(self, size: int) -> bool:
        """Hold `size` bytes of buffer.memory if there is room now (send()'s path without an await)."""
        if self.buffered + size > self.buffer_memory and self.buffered:
            return False
        self.buffered += size
        return True

    async def reserve(self, size: int, max_block_s: float, drain: Callable[[], None]) -> None:
        """Hold `size` bytes of buffer.memory, waiting up to max.block.ms while it is full.

        `drain` makes sure what fills the buffer is on its way out (a bulk send that queued batches
        but has not woken the sender yet would otherwise wait for itself).
        """
        deadline = time.monotonic() + max_block_s
        while self.buffered + size > self.buffer_memory and self.buffered:
            drain()
            self._freed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOutError("buffer.memory stayed full for max.block.ms")
            try:
                await asyncio.wait_for(self._freed.wait(), remaining)
            except TimeoutError:
                continue
        self.buffered += size

    def release(self, batch: ProducerBatch) -> None:
        self.buffered -= batch.reserved
        batch.reserved = 0
        assert self.buffered >= 0, "buffer.memory released twice"
        self._freed.set()
