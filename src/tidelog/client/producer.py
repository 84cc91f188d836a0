"""The producer: records → per-partition batches → one Produce request per leader broker.

`send()` only appends to the partition's open batch (no encoding, no I/O). A batch closes when it
reaches `batch.size` bytes or is `linger.ms` old; the sender task encodes closed batches with the
columnar codec (one bulk encode per batch) and sends everything bound for one broker in one
request, one request in flight per broker so retries cannot reorder a partition. Retriable errors
(NOT_LEADER_OR_FOLLOWER, no leader, timeouts, a broker gone) refresh the metadata and retry after
`retry.backoff.ms` until `delivery.timeout.ms`; other errors fail the records' deliveries.

`send()` blocks (as Kafka's) for at most `max.block.ms`: while the topic or the partition is not in
the producer's metadata yet (a new topic, or a broker that restarted and has not been told the
cluster's state), and while `buffer.memory` is full. Its metadata refreshes ask only for the topics
it produces to, so one broker's partial answer cannot make it forget a topic in use.

Idempotence (KIP-98; on by default with acks=all, as in Kafka ≥ 3.0): the producer takes a
producer id from any broker (InitProducerId) and numbers each partition's batches with sequences
when they are first sent; a retry resends the same bytes, so the leader writes it once and answers
a repeat with the original offset. A partition's batches are sent in sequence order, one request at
a time. A batch that fails for good leaves a gap, so the producer then bumps its epoch and the
partition's sequences restart at 0 (KIP-360).

Partitioning as Kafka's default: an explicit partition wins; a key goes to murmur2(key) mod
partitions; keyless records stick to one partition until its batch closes (KIP-480).
`send_batch()` is the bulk path: many records in one call, encoded straight into batches.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Final

import grpc
import structlog

from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.client.murmur2 import partition_for_key
from tidelog.common.clock import wall_clock_ms
from tidelog.common.errors import (
    RETRIABLE_CODES,
    ErrorCode,
    InvalidConfigError,
    RecordTooLargeError,
    RequestTimedOutError,
    TidelogError,
    error_for,
)
from tidelog.common.record.batch import (
    BATCH_OVERHEAD,
    NO_PRODUCER_ID,
    RECORD_COLUMNS_BYTES,
    Headers,
    encode_batch,
    next_sequence,
)
from tidelog.common.record.compression import CompressionType
from tidelog.common.settings import ProducerSettings
from tidelog.v1 import broker_pb2

__all__ = ["BulkDelivery", "Producer", "RecordDelivery", "RecordMetadata"]

log = structlog.get_logger(__name__)

ACKS: Final = {"0": 0, "1": 1, "all": -1, "-1": -1}
DEFAULTS: Final = ProducerSettings.from_configs()  # the registry's (docs/configuration.md)
PRODUCER_EPOCH_MAX: Final = 2**15 - 1


@dataclasses.dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int
    timestamp: int


class _Batch:
    __slots__ = (
        "attempts",
        "base_sequence",
        "created",
        "encoded",
        "future",
        "headers",
        "keys",
        "next_attempt_at",
        "partition",
        "producer_epoch",
        "producer_id",
        "reserved",
        "serial",
        "size",
        "timestamp",
        "timestamps",
        "topic",
        "values",
    )

    def __init__(self, topic: str, partition: int, loop: asyncio.AbstractEventLoop, serial: int) -> None:
        self.serial = serial  # creation order: a partition's batches are sent in this order
        self.topic = topic
        self.partition = partition
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] | None = None
        self.timestamps: list[int] | None = None
        self.headers: list[Headers] | None = None
        self.size = BATCH_OVERHEAD
        self.created = time.monotonic()
        self.timestamp = wall_clock_ms()
        self.future: asyncio.Future[tuple[int, int]] = loop.create_future()
        self.attempts = 0
        self.next_attempt_at = 0.0
        self.reserved = 0  # bytes of buffer.memory this batch holds
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.base_sequence = -1  # set when first sent (idempotence), kept for every retry
        self.encoded: bytes | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

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
            )
        return self.encoded


class RecordDelivery:
    """Awaitable delivery of one record: its RecordMetadata, or the error that failed it."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.future.done()

    def add_done_callback(self, callback: Callable[[RecordDelivery], None]) -> None:
        """Call `callback(self)` once the record is acknowledged or failed (Kafka's send callback)."""
        self._batch.future.add_done_callback(lambda _: callback(self))

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        base_offset, timestamp = yield from self._batch.future.__await__()
        batch = self._batch
        if batch.timestamps is not None and timestamp == -1:
            timestamp = batch.timestamps[self._index]
        return RecordMetadata(
            batch.topic, batch.partition, base_offset + self._index, batch.timestamp if timestamp == -1 else timestamp
        )


class BulkDelivery:
    """Awaitable delivery of a `send_batch`: (partition, base offset, record count) per batch."""

    def __init__(self, batches: list[_Batch]) -> None:
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


class Producer:
    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        acks: str | int = DEFAULTS.acks,
        enable_idempotence: bool = DEFAULTS.enable_idempotence,
        batch_size: int = DEFAULTS.batch_size,
        linger_ms: int = DEFAULTS.linger_ms,
        compression_type: str = DEFAULTS.compression_type,
        buffer_memory: int = DEFAULTS.buffer_memory,
        max_request_size: int = DEFAULTS.max_request_size,
        retries: int = DEFAULTS.retries,
        retry_backoff_ms: int = DEFAULTS.retry_backoff_ms,
        delivery_timeout_ms: int = DEFAULTS.delivery_timeout_ms,
        request_timeout_ms: int = DEFAULTS.request_timeout_ms,
        max_block_ms: int = DEFAULTS.max_block_ms,
        connections: Connections | None = None,
    ) -> None:
        # Checked against the registry's bounds: a bad value is an InvalidConfigError naming it.
        self.settings = ProducerSettings.from_configs(
            {
                "acks": str(acks),
                "enable.idempotence": enable_idempotence,
                "batch.size": batch_size,
                "linger.ms": linger_ms,
                "compression.type": compression_type,
                "buffer.memory": buffer_memory,
                "max.request.size": max_request_size,
                "retries": retries,
                "retry.backoff.ms": retry_backoff_ms,
                "delivery.timeout.ms": delivery_timeout_ms,
                "request.timeout.ms": request_timeout_ms,
                "max.block.ms": max_block_ms,
            }
        )
        if batch_size > max_request_size:
            raise InvalidConfigError(f"batch.size={batch_size} exceeds max.request.size={max_request_size}")
        self.acks = ACKS[str(acks)]
        # Idempotence needs acks=all; with other acks it is off (as Kafka >= 3.0 does when unset).
        self.idempotent = enable_idempotence and self.acks == -1
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.compression = CompressionType.from_name(compression_type)
        self.buffer_memory = buffer_memory
        self.max_request_size = max_request_size
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.max_block_s = max_block_ms / 1000
        self.connections = connections or Connections()
        self._owns_connections = connections is None
        self.metadata = ClusterMetadata(bootstrap, self.connections, request_timeout_s=self.request_timeout_s)
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: collections.deque[_Batch] = collections.deque()
        self._sticky: dict[str, int] = {}
        self._topics: set[str] = set()  # the topics produced to: what metadata refreshes ask for
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._buffered = 0
        self._buffer_freed = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._flushing = 0
        self._closed = False
        self._sender: asyncio.Task[None] | None = None
        self._rng = random.Random()
        self._serial = 0
        self._requeued = False  # a retried batch went back to the front: re-sort before sending
        self._producer_id = NO_PRODUCER_ID
        self._producer_epoch = 0
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._unacked: dict[tuple[str, int], collections.deque[_Batch]] = {}  # sequenced, in order
        self._sending: set[tuple[str, int]] = set()  # partitions with a batch in a request in flight

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _ensure_sender(self) -> None:
        if self._sender is None:
            self._sender = asyncio.create_task(self._run_sender(), name="producer-sender")

    # ---- appending -------------------------------------------------------------------------

    async def _partition_count(self, topic: str, partition: int | None = None) -> int:
        """The topic's partition count once the metadata holds the topic (and `partition`).

        Waits up to max.block.ms as Kafka's producer does (`waitOnMetadata`): a topic just created,
        or one a restarted broker has not yet been told about, appears within a refresh or two.
        """
        self._topics.add(topic)
        deadline = time.monotonic() + self.max_block_s
        while not self._in_metadata(topic, partition):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._not_in_metadata(topic, partition)
            try:
                await asyncio.wait_for(self.metadata.refresh(sorted(self._topics)), remaining)
            except (ConnectionError, TimeoutError) as error:
                log.info("metadata_refresh_failed", topic=topic, error=str(error))
            if not self._in_metadata(topic, partition):
                await asyncio.sleep(max(min(self.retry_backoff_s, deadline - time.monotonic()), 0))
        return len(self.metadata.partitions[topic])

    def _in_metadata(self, topic: str, partition: int | None) -> bool:
        partitions = self.metadata.partitions.get(topic)
        return partitions is not None and (partition is None or partition < len(partitions))

    def _not_in_metadata(self, topic: str, partition: int | None) -> TidelogError:
        waited = f"after max.block.ms={self.max_block_s * 1000:.0f}"
        known = self.metadata.partitions.get(topic)
        if known is None:
            code = self.metadata.topic_errors.get(topic, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            return error_for(code, f"topic {topic!r} not present in metadata {waited}")
        return error_for(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"partition {partition} of topic {topic!r} ({len(known)} partitions) not present in metadata {waited}",
        )

    async def _reserve(self, size: int) -> None:
        """Wait while buffer.memory is full (bounded by max.block.ms)."""
        deadline = time.monotonic() + self.max_block_s
        while self._buffered + size > self.buffer_memory and self._buffered:
            # What fills the buffer must be on its way out: a bulk send that has queued batches
            # but not yet started (or woken) the sender would otherwise wait for itself.
            self._ensure_sender()
            self._wakeup.set()
            self._buffer_freed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOutError("buffer.memory stayed full for max.block.ms")
            try:
                await asyncio.wait_for(self._buffer_freed.wait(), remaining)
            except TimeoutError:
                continue
        self._buffered += size

    def record_size(self, value: bytes | None, key: bytes | None = None, headers: Headers | None = None) -> int:
        """Bytes a record takes in a batch; RecordTooLargeError if it can never fit in a request
        (callers that must not send part of a set check every record first)."""
        size = RECORD_COLUMNS_BYTES + (len(value) if value else 0) + (len(key) if key else 0)
        if headers:
            size += sum(len(name) + len(header_value or b"") + 6 for name, header_value in headers)
        if size + BATCH_OVERHEAD > self.max_request_size:
            raise RecordTooLargeError(f"a record of {size} bytes exceeds max.request.size={self.max_request_size}")
        return size

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        timestamp: int | None = None,
    ) -> RecordDelivery:
        """Queue one record; await the returned delivery for its offset."""
        if self._closed:
            raise RuntimeError("producer is closed")
        if partition is not None and partition < 0:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
        count = await self._partition_count(topic, partition)
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else self._sticky_partition(topic, count)
        size = self.record_size(value, key, headers)
        await self._reserve(size)
        batch = self._open.get((topic, partition))
        if batch is None:
            batch = self._open[(topic, partition)] = self._new_batch(topic, partition)
            self._ensure_sender()
            self._wakeup.set()  # the sender must learn this batch's linger deadline
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
            self._close_batch(batch)
        return RecordDelivery(batch, index)

    def _new_batch(self, topic: str, partition: int) -> _Batch:
        self._serial += 1
        return _Batch(topic, partition, asyncio.get_running_loop(), self._serial)

    def _sticky_partition(self, topic: str, count: int) -> int:
        current = self._sticky.get(topic)
        if current is None or current >= count:
            current = self._sticky[topic] = self._rng.randrange(count)
        return current

    def _close_batch(self, batch: _Batch) -> None:
        del self._open[(batch.topic, batch.partition)]
        self._ready.append(batch)
        if self._sticky.get(batch.topic) == batch.partition:
            self._sticky.pop(batch.topic)  # the next keyless record picks a new sticky partition
        self._wakeup.set()

    async def send_batch(
        self,
        topic: str,
        values: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> BulkDelivery:
        """Bulk path: queue many records at once as ready batches of about batch.size bytes."""
        if partition is not None and partition < 0:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
        count = await self._partition_count(topic, partition)
        per_record = RECORD_COLUMNS_BYTES + (len(values[0] or b"") if values else 0)
        chunk = max(1, (self.batch_size - BATCH_OVERHEAD) // max(per_record, 1))
        batches: list[_Batch] = []
        if keys is not None and partition is None:
            groups: dict[int, list[int]] = {}
            for index, key in enumerate(keys):
                target = partition_for_key(key, count) if key is not None else self._rng.randrange(count)
                groups.setdefault(target, []).append(index)
            slices = [(target, indexes) for target, indexes in groups.items()]
        else:
            slices = [
                (-1, list(range(start, min(start + chunk, len(values))))) for start in range(0, len(values), chunk)
            ]
        for target, indexes in slices:
            for start in range(0, len(indexes), chunk):
                picked = indexes[start : start + chunk]
                chosen = target if target >= 0 else (partition if partition is not None else self._rng.randrange(count))
                batch = self._new_batch(topic, chosen)
                if timestamp is not None:
                    batch.timestamp = timestamp
                if len(picked) == len(values):
                    batch.values = list(values)
                    batch.keys = list(keys) if keys is not None else None
                else:
                    batch.values = [values[index] for index in picked]
                    batch.keys = [keys[index] for index in picked] if keys is not None else None
                batch.size = (
                    BATCH_OVERHEAD + sum(map(len, filter(None, batch.values))) + RECORD_COLUMNS_BYTES * len(picked)
                )
                await self._reserve(batch.size)
                batch.reserved = batch.size
                batches.append(batch)
                self._ready.append(batch)
        self._ensure_sender()
        self._wakeup.set()
        return BulkDelivery(batches)

    # ---- sending ---------------------------------------------------------------------------

    def _close_expired(self, now: float) -> float | None:
        """Close batches past linger.ms (all of them while flushing); the next expiry, if any."""
        next_expiry: float | None = None
        for batch in list(self._open.values()):
            expiry = batch.created + self.linger_s
            if self._flushing or self._closed or expiry <= now:
                self._close_batch(batch)
            elif next_expiry is None or expiry < next_expiry:
                next_expiry = expiry
        return next_expiry

    async def _run_sender(self) -> None:
        while True:
            self._wakeup.clear()
            now = time.monotonic()
            next_expiry = self._close_expired(now)
            if self.idempotent and self._producer_id == NO_PRODUCER_ID and self._ready:
                retry_at: float | None = await self._init_producer_id()
            else:
                retry_at = await self._dispatch(now)
            if self._closed and not self._open and not self._ready and not self._in_flight:
                return
            waits = [at for at in (next_expiry, retry_at) if at is not None]
            timeout = max(min(waits) - time.monotonic(), 0) if waits else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _init_producer_id(self) -> float | None:
        """InitProducerId from any broker; the time to try again when none gave one."""
        request = broker_pb2.InitProducerIdRequest()
        for endpoint in [*self.metadata.bootstrap, *self.metadata.brokers.values()]:
            try:
                response = await self.connections.broker(endpoint).InitProducerId(
                    request, timeout=self.request_timeout_s
                )
            except grpc.aio.AioRpcError as error:
                log.info("init_producer_id_failed", endpoint=endpoint, error=error.code().name)
                continue
            if response.error_code == 0:
                self._producer_id, self._producer_epoch = response.producer_id, response.producer_epoch
                log.info("producer_id_assigned", producer_id=self._producer_id)
                return time.monotonic()
            log.info("init_producer_id_failed", endpoint=endpoint, error=response.error_message)
        for batch in list(self._ready):
            if time.monotonic() - batch.created > self.delivery_timeout_s:
                self._fail(batch, RequestTimedOutError("no producer id could be obtained within delivery.timeout.ms"))
        return time.monotonic() + self.retry_backoff_s

    def _assign_sequence(self, batch: _Batch) -> None:
        key = batch.key
        sequence = self._next_sequence.get(key, 0)
        batch.producer_id, batch.producer_epoch, batch.base_sequence = (
            self._producer_id,
            self._producer_epoch,
            sequence,
        )
        self._next_sequence[key] = next_sequence(sequence, len(batch.values))
        self._unacked.setdefault(key, collections.deque()).append(batch)

    def _reset_sequences(self, reason: str) -> None:
        """A sequenced batch failed for good: new epoch, sequences from 0 (KIP-360)."""
        self._producer_epoch += 1
        if self._producer_epoch > PRODUCER_EPOCH_MAX:
            self._producer_id, self._producer_epoch = NO_PRODUCER_ID, 0  # a fresh id on the next send
        self._next_sequence.clear()
        log.warning("producer_epoch_bumped", producer_id=self._producer_id, epoch=self._producer_epoch, reason=reason)

    async def _dispatch(self, now: float) -> float | None:
        """Start one request per idle leader with its ready batches; the next retry time, if any.

        A partition's batches go in creation order: once one of them cannot go now (backing
        off, no leader, its leader busy, or one in flight), the later ones wait behind it.
        """
        by_leader: dict[str, list[_Batch]] = {}
        waiting: list[_Batch] = []
        retry_at: float | None = None
        refresh = False
        blocked = set(self._sending)
        if self._requeued:
            self._ready = collections.deque(sorted(self._ready, key=lambda batch: batch.serial))
            self._requeued = False
        while self._ready:
            batch = self._ready.popleft()
            if batch.key in blocked:
                waiting.append(batch)
                continue
            if batch.next_attempt_at > now:
                waiting.append(batch)
                blocked.add(batch.key)
                retry_at = batch.next_attempt_at if retry_at is None else min(retry_at, batch.next_attempt_at)
                continue
            try:
                endpoint = self.metadata.leader_endpoint(batch.topic, batch.partition)
            except TidelogError as error:
                refresh = True
                blocked.add(batch.key)
                if self._retry_later(batch, error):
                    waiting.append(batch)
                    retry_at = batch.next_attempt_at if retry_at is None else min(retry_at, batch.next_attempt_at)
                continue
            if endpoint in self._in_flight:
                waiting.append(batch)
                blocked.add(batch.key)
                continue
            by_leader.setdefault(endpoint, []).append(batch)
        for endpoint, batches in by_leader.items():
            request_batches, rest = _fit(batches, self.max_request_size)
            waiting.extend(rest)
            if self.idempotent:
                for batch in request_batches:
                    if batch.base_sequence < 0:
                        self._assign_sequence(batch)
            self._sending.update(batch.key for batch in request_batches)
            task = asyncio.create_task(self._send(endpoint, request_batches))
            self._in_flight[endpoint] = task
        waiting.sort(key=lambda batch: batch.serial)
        self._ready.extend(waiting)
        if refresh:
            try:
                await self.metadata.refresh(sorted(self._topics))
            except ConnectionError as error:
                log.info("metadata_refresh_failed", error=str(error))
        return retry_at

    async def _send(self, endpoint: str, batches: list[_Batch]) -> None:
        try:
            encoded = [batch.encode(self.compression) for batch in batches]
            request = broker_pb2.ProduceRequest(
                acks=self.acks,
                timeout_ms=int(self.request_timeout_s * 1000),
                partitions=[
                    broker_pb2.ProducePartition(topic=batch.topic, partition=batch.partition, record_batches=data)
                    for batch, data in zip(batches, encoded, strict=True)
                ],
            )
            try:
                response = await self.connections.broker(endpoint).Produce(request, timeout=self.request_timeout_s)
            except grpc.aio.AioRpcError as error:
                failure = error_for(ErrorCode.REQUEST_TIMED_OUT, f"{endpoint}: {error.code().name}")
                for batch in batches:
                    if self._retry_later(batch, failure):
                        self._ready.appendleft(batch)
                        self._requeued = True
                await self._refresh_quietly()
                return
            retried = False
            for batch, result in zip(batches, response.partitions, strict=True):
                if result.error_code == 0:
                    self._complete(batch, (result.base_offset, result.log_append_time_ms))
                elif result.error_code in RETRIABLE_CODES or self._behind_a_retry(batch, result.error_code):
                    if self._retry_later(batch, error_for(result.error_code, result.error_message)):
                        self._ready.appendleft(batch)
                        self._requeued = True
                    retried = True
                else:
                    self._fail(batch, error_for(result.error_code, result.error_message))
            if retried:
                await self._refresh_quietly()
        except Exception as error:  # never leave deliveries hanging
            for batch in batches:
                if not batch.future.done():
                    self._fail(batch, error)
            raise
        finally:
            self._in_flight.pop(endpoint, None)
            self._sending.difference_update(batch.key for batch in batches)
            self._wakeup.set()

    def _behind_a_retry(self, batch: _Batch, code: int) -> bool:
        """OUT_OF_ORDER_SEQUENCE for a batch whose predecessor is still to be retried: retry it too."""
        if code != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER or not self.idempotent:
            return False
        pending = self._unacked.get(batch.key)
        return pending is not None and len(pending) > 0 and pending[0] is not batch

    async def _refresh_quietly(self) -> None:
        try:
            await self.metadata.refresh(sorted(self._topics))
        except ConnectionError as error:
            log.info("metadata_refresh_failed", error=str(error))

    def _retry_later(self, batch: _Batch, error: BaseException) -> bool:
        """Schedule another attempt; False (and the delivery failed) when retries or time ran out."""
        batch.attempts += 1
        expired = time.monotonic() - batch.created > self.delivery_timeout_s
        if batch.attempts > self.retries or expired:
            self._fail(batch, error)
            return False
        batch.next_attempt_at = time.monotonic() + self.retry_backoff_s
        return True

    def _release(self, batch: _Batch) -> None:
        self._buffered -= batch.reserved
        batch.reserved = 0
        assert self._buffered >= 0
        self._buffer_freed.set()

    def _forget_sequenced(self, batch: _Batch) -> bool:
        """Drop an answered batch from its partition's unacknowledged ones; whether it was there."""
        pending = self._unacked.get(batch.key)
        if not pending or batch not in pending:
            return False
        pending.remove(batch)
        if not pending:
            del self._unacked[batch.key]
        return True

    def _complete(self, batch: _Batch, result: tuple[int, int]) -> None:
        self._release(batch)
        self._forget_sequenced(batch)
        if not batch.future.done():
            batch.future.set_result(result)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        self._release(batch)
        if batch in self._ready:
            self._ready.remove(batch)
        if self._forget_sequenced(batch) and batch.producer_epoch == self._producer_epoch:
            self._reset_sequences(str(error))  # its sequence is now a gap nothing will fill
        if not batch.future.done():
            batch.future.set_exception(error)
            batch.future.exception()  # retrieved: a failed delivery nobody awaits is not an "unhandled" error

    # ---- flushing and closing --------------------------------------------------------------

    async def flush(self) -> None:
        """Send everything queued so far and wait for every delivery (successful or not)."""
        self._flushing += 1
        try:
            while self._ready or self._in_flight or self._open:
                futures = [batch.future for batch in [*self._open.values(), *self._ready]]
                waits: list[asyncio.Future[Any]] = [*futures, *self._in_flight.values()]
                self._wakeup.set()
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        self._wakeup.set()
        if self._sender is not None:
            await self._sender
        if self._owns_connections:
            await self.connections.close()


def _fit(batches: list[_Batch], max_request_size: int) -> tuple[list[_Batch], list[_Batch]]:
    """The leading batches that fit one request (at least one), and the rest."""
    total = 0
    for index, batch in enumerate(batches):
        total += batch.size
        if index and total > max_request_size:
            return batches[:index], batches[index:]
    return batches, []
