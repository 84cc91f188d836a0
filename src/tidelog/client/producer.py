"""The producer: records → per-partition batches → one Produce request per leader broker.

Split as Kafka's: `record_accumulator` holds the open and ready batches and buffer.memory,
`sender` turns ready batches into requests (one in flight per broker, retries, delivery.timeout.ms),
`producer_sequences` holds the idempotent producer's id and sequences, and `producer_batch` a
batch's life as explicit states. This module is the public face: `send()` only appends to the
partition's open batch (no encoding, no I/O); `send_batch()` is the bulk path, many records in
one call encoded straight into ready batches.

`send()` blocks (as Kafka's) for at most `max.block.ms`: while the topic or the partition is not in
the producer's metadata yet (a new topic, or a broker that restarted and has not been told the
cluster's state), and while `buffer.memory` is full. Its metadata refreshes ask only for the topics
it produces to, so one broker's partial answer cannot make it forget a topic in use.

Idempotence (KIP-98; on by default with acks=all, as in Kafka >= 3.0): see `producer_sequences`.
Transactions (with `transactional.id`): `init_transactions`, `begin_transaction`, `send…`,
`send_offsets_to_transaction`, `commit_transaction` / `abort_transaction`, as Kafka's producer;
see `transaction_manager`.
Partitioning as Kafka's default: an explicit partition wins; a key goes to murmur2(key) mod
partitions; keyless records stick to one partition until its batch closes (KIP-480).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import ClusterMetadata, TopicPartition
from tidelog.client.connections import Connections, client_id_metadata
from tidelog.client.deliveries import BulkDelivery, RecordDelivery, RecordMetadata
from tidelog.client.murmur2 import partition_for_key
from tidelog.client.producer_batch import BatchState, ProducerBatch
from tidelog.client.producer_sequences import ProducerSequences
from tidelog.client.record_accumulator import RecordAccumulator
from tidelog.client.sender import Sender
from tidelog.client.transaction_manager import (
    ConsumerGroupMetadata,
    TransactionAbortedError,
    TransactionManager,
    TxnClientState,
)
from tidelog.common.errors import (
    ErrorCode,
    InvalidConfigError,
    RecordTooLargeError,
    TidelogError,
    TopicAuthorizationFailedError,
    error_for,
)
from tidelog.common.record.batch import BATCH_OVERHEAD, RECORD_COLUMNS_BYTES, Header, Headers
from tidelog.common.settings import ProducerSettings, SecuritySettings

if TYPE_CHECKING:
    from tidelog.client.group_consumer import GroupConsumer

__all__ = ["BulkDelivery", "Producer", "RecordDelivery", "RecordMetadata"]

log = get_logger(__name__)

DEFAULTS: Final = ProducerSettings.from_configs()  # the registry's (docs/configuration.md)


class Producer:
    # The producer settings it takes, each as the keyword argument of the config's attribute name
    # (`linger.ms` → linger_ms): all of them (tests/client check the signature against it).
    CONFIGS: ClassVar[frozenset[str]] = frozenset(definition.name for definition in ProducerSettings.DEFINITIONS)

    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        acks: str | int = DEFAULTS.acks,
        enable_idempotence: bool = DEFAULTS.enable_idempotence,
        transactional_id: str = DEFAULTS.transactional_id,
        transaction_timeout_ms: int = DEFAULTS.transaction_timeout_ms,
        batch_size: int = DEFAULTS.batch_size,
        linger_ms: int = DEFAULTS.linger_ms,
        compression_type: str = DEFAULTS.compression_type,
        buffer_memory: int = DEFAULTS.buffer_memory,
        max_request_size: int = DEFAULTS.max_request_size,
        retries: int = DEFAULTS.retries,
        retry_backoff_ms: int = DEFAULTS.retry_backoff_ms,
        delivery_timeout_ms: int = DEFAULTS.delivery_timeout_ms,
        request_timeout_ms: int = DEFAULTS.request_timeout_ms,
        max_in_flight_requests_per_connection: int = DEFAULTS.max_in_flight_requests_per_connection,
        max_block_ms: int = DEFAULTS.max_block_ms,
        connections: Connections | None = None,
        security: SecuritySettings | Mapping[str, object] | None = None,
        client_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Built once from the registry (bounds checked: an InvalidConfigError names a bad value)
        # and handed down whole; every part reads its settings from it.
        self.settings = settings = ProducerSettings.from_configs(
            {
                "acks": str(acks),
                "enable.idempotence": enable_idempotence,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": transaction_timeout_ms,
                "batch.size": batch_size,
                "linger.ms": linger_ms,
                "compression.type": compression_type,
                "buffer.memory": buffer_memory,
                "max.request.size": max_request_size,
                "retries": retries,
                "retry.backoff.ms": retry_backoff_ms,
                "delivery.timeout.ms": delivery_timeout_ms,
                "request.timeout.ms": request_timeout_ms,
                "max.in.flight.requests.per.connection": max_in_flight_requests_per_connection,
                "max.block.ms": max_block_ms,
            }
        )
        if settings.batch_size > settings.max_request_size:
            raise InvalidConfigError(
                f"batch.size={settings.batch_size} exceeds max.request.size={settings.max_request_size}"
            )
        if settings.transactional_id and not settings.idempotent:
            raise InvalidConfigError("transactional.id needs idempotence: enable.idempotence=true and acks=all")
        # The client id travels with every request (client quotas may name it).
        self.connections = connections or Connections(security, call_metadata=client_id_metadata(client_id))
        self._owns_connections = connections is None
        self.metadata = ClusterMetadata(
            bootstrap, self.connections, request_timeout_s=settings.request_timeout_ms / 1000
        )
        self.accumulator = RecordAccumulator(settings, clock=clock)
        self.sequences = ProducerSequences(transactional=bool(settings.transactional_id))
        self.transactions = (
            TransactionManager(
                settings.transactional_id,
                settings.transaction_timeout_ms,
                self.sequences,
                self.metadata,
                self.connections,
                request_timeout_s=settings.request_timeout_ms / 1000,
                retry_backoff_s=settings.retry_backoff_ms / 1000,
                max_block_s=settings.max_block_ms / 1000,
            )
            if settings.transactional_id
            else None
        )
        self._topics: set[str] = set()  # the topics produced to: what metadata refreshes ask for
        self.sender = Sender(
            settings,
            self.accumulator,
            self.sequences,
            metadata=self.metadata,
            connections=self.connections,
            topics=lambda: sorted(self._topics),
            clock=clock,
            transactions=self.transactions,
        )
        self._sticky: dict[str, int] = {}
        self._sender_task: asyncio.Task[None] | None = None
        self._rng = random.Random()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _wake_sender(self) -> None:
        if self._sender_task is None:
            self._sender_task = asyncio.create_task(self.sender.run(), name="producer-sender")
        self.sender.wakeup.set()

    # ---- appending -------------------------------------------------------------------------

    async def _partition_count(self, topic: str, partition: int | None = None) -> int:
        """The topic's partition count once the metadata holds the topic (and `partition`).

        Waits up to max.block.ms as Kafka's producer does (`waitOnMetadata`): a topic just created,
        or one a restarted broker has not yet been told about, appears within a refresh or two.
        """
        self._topics.add(topic)
        deadline = time.monotonic() + self.settings.max_block_ms / 1000
        while not self._in_metadata(topic, partition):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._not_in_metadata(topic, partition)
            try:
                await asyncio.wait_for(self.metadata.refresh(sorted(self._topics)), remaining)
            except (ConnectionError, TimeoutError) as error:
                log.info("metadata_refresh_failed", topic=topic, error=str(error))
            if self.metadata.topic_errors.get(topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                # Not a topic that may yet appear: as Kafka's producer, fail at once.
                self._topics.discard(topic)
                raise TopicAuthorizationFailedError(f"not authorised to describe topic {topic!r} (Describe or Write)")
            if not self._in_metadata(topic, partition):
                await asyncio.sleep(max(min(self.settings.retry_backoff_ms / 1000, deadline - time.monotonic()), 0))
        return len(self.metadata.partitions[topic])

    def _in_metadata(self, topic: str, partition: int | None) -> bool:
        partitions = self.metadata.partitions.get(topic)
        return partitions is not None and (partition is None or partition < len(partitions))

    def _not_in_metadata(self, topic: str, partition: int | None) -> TidelogError:
        waited = f"after max.block.ms={self.settings.max_block_ms}"
        known = self.metadata.partitions.get(topic)
        if known is None:
            code = self.metadata.topic_errors.get(topic, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            return error_for(code, f"topic {topic!r} not present in metadata {waited}")
        return error_for(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"partition {partition} of topic {topic!r} ({len(known)} partitions) not present in metadata {waited}",
        )

    def record_size(self, value: bytes | None, key: bytes | None = None, headers: Headers | None = None) -> int:
        """Bytes a record takes in a batch; RecordTooLargeError if it can never fit in a request
        (callers that must not send part of a set check every record first)."""
        size = RECORD_COLUMNS_BYTES + (len(value) if value else 0) + (len(key) if key else 0)
        if headers:
            size += sum(len(name) + len(header_value or b"") + 6 for name, header_value in headers)
        if size + BATCH_OVERHEAD > self.settings.max_request_size:
            limit = self.settings.max_request_size
            raise RecordTooLargeError(f"a record of {size} bytes exceeds max.request.size={limit}")
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
        if self.sender.closed:
            raise RuntimeError("producer is closed")
        if self.transactions is not None:
            self.transactions.require(TxnClientState.IN_TRANSACTION, doing="send outside a transaction")
        if partition is not None and partition < 0:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
        # The common case takes no await of its own: the topic known, room in buffer.memory.
        known = self.metadata.partitions.get(topic) if topic in self._topics else None
        if known is not None and (partition is None or partition < len(known)):
            count = len(known)
        else:
            count = await self._partition_count(topic, partition)
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else self._sticky_partition(topic, count)
        size = self.record_size(value, key, headers)
        if not self.accumulator.try_reserve(size):
            await self.accumulator.reserve(size, self.settings.max_block_ms / 1000, self._wake_sender)
        batch, index, created = self.accumulator.append(
            topic, partition, value, key=key, headers=headers, timestamp=timestamp, size=size
        )
        if created or batch.state is not BatchState.OPEN:
            self._wake_sender()  # a new batch's linger deadline, or a full batch, is news to the sender
            if batch.state is not BatchState.OPEN and self._sticky.get(topic) == partition:
                self._sticky.pop(topic)  # the batch closed: the next keyless record picks a new partition
        return RecordDelivery(batch, index)

    def _sticky_partition(self, topic: str, count: int) -> int:
        current = self._sticky.get(topic)
        if current is None or current >= count:
            current = self._sticky[topic] = self._rng.randrange(count)
        return current

    async def send_batch(
        self,
        topic: str,
        values: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        headers: Sequence[Headers] | None = None,
        batch_header: Callable[[list[int]], Header] | None = None,
    ) -> BulkDelivery:
        """Bulk path: queue many records at once as ready batches of about batch.size bytes
        (`keys` and `headers`, when given, one per value).

        `batch_header(indexes)`, when given, is called for each batch made with the indexes (into
        `values`) of the records it holds; the header it returns goes on the batch's first record.
        A batch is written or not as a whole, so that header says exactly which records were: a
        marker for a whole batch at the cost of one header (the Spark sink's retries use it)."""
        if partition is not None and partition < 0:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {partition}")
        if self.transactions is not None:
            self.transactions.require(TxnClientState.IN_TRANSACTION, doing="send outside a transaction")
        for name, column in (("keys", keys), ("headers", headers)):
            if column is not None and len(column) != len(values):
                raise error_for(ErrorCode.INVALID_REQUEST, f"{len(column)} {name} for {len(values)} values")
        count = await self._partition_count(topic, partition)
        per_record = RECORD_COLUMNS_BYTES + (len(values[0] or b"") if values else 0)
        if headers:
            per_record += sum(len(k) + len(v or b"") + 2 for k, v in headers[0])
        chunk = max(1, (self.settings.batch_size - BATCH_OVERHEAD) // max(per_record, 1))
        batches: list[ProducerBatch] = []
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
                batch = self.accumulator.new_batch(topic, chosen)
                if timestamp is not None:
                    batch.timestamp = timestamp
                if len(picked) == len(values):
                    batch.values = list(values)
                    batch.keys = list(keys) if keys is not None else None
                    batch.headers = list(headers) if headers is not None else None
                else:
                    batch.values = [values[index] for index in picked]
                    batch.keys = [keys[index] for index in picked] if keys is not None else None
                    batch.headers = [headers[index] for index in picked] if headers is not None else None
                batch.size = (
                    BATCH_OVERHEAD + sum(map(len, filter(None, batch.values))) + RECORD_COLUMNS_BYTES * len(picked)
                )
                if batch.headers is not None:  # a header costs its key, its value and two lengths
                    batch.size += sum(len(k) + len(v or b"") + 2 for record in batch.headers for k, v in record)
                if batch_header is not None:
                    name, value = marker = batch_header(picked)
                    if batch.headers is None:
                        batch.headers = [()] * len(picked)
                    batch.headers[0] = (*batch.headers[0], marker)
                    batch.size += len(name) + len(value or b"") + 2
                await self.accumulator.reserve(batch.size, self.settings.max_block_ms / 1000, self._wake_sender)
                batch.reserved = batch.size
                batches.append(batch)
                self.accumulator.add_ready(batch)
        self._wake_sender()
        return BulkDelivery(batches)

    # ---- transactions ----------------------------------------------------------------------

    def _transactional(self) -> TransactionManager:
        if self.transactions is None:
            raise RuntimeError("not a transactional producer: set transactional_id")
        return self.transactions

    async def init_transactions(self) -> None:
        """Take the transactional.id over: fences every older instance of it and aborts what it
        left open (waiting up to max.block.ms while that abort completes)."""
        await self._transactional().init()

    def begin_transaction(self) -> None:
        self._transactional().begin()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata | GroupConsumer | str
    ) -> None:
        """Commit a consumer group's offsets (the next offset to read, per partition) with the
        transaction: consume-transform-produce then reads each input once. Pass the GroupConsumer
        (or its `ConsumerGroupMetadata`) so a member fenced by a rebalance cannot commit (KIP-447)."""
        transactions = self._transactional()
        transactions.require(TxnClientState.IN_TRANSACTION, doing="send offsets to the transaction")
        if isinstance(group, str):
            metadata = ConsumerGroupMetadata(group)
        elif isinstance(group, ConsumerGroupMetadata):
            metadata = group
        else:
            metadata = ConsumerGroupMetadata.of(group)
        await transactions.send_offsets(offsets, metadata)

    async def prepare_transaction(self) -> tuple[int, int]:
        """Two-phase commit's first phase (KIP-939's prepareTransaction): send everything and leave
        the transaction open; returns the (producer id, epoch) with which `resume_transaction` on
        another producer of the same transactional.id commits or aborts it. Close this producer
        without ending the transaction; it stays open up to transaction.timeout.ms."""
        transactions = self._transactional()
        transactions.require(TxnClientState.IN_TRANSACTION, TxnClientState.ABORTABLE_ERROR, doing="prepare")
        await self.flush()
        if transactions.state is TxnClientState.ABORTABLE_ERROR:
            assert transactions.error is not None
            raise transactions.error
        return self.sequences.producer_id, self.sequences.producer_epoch

    def resume_transaction(self, producer_id: int, producer_epoch: int) -> None:
        """Take over the transaction another producer of this transactional.id prepared (instead of
        init_transactions); then commit_transaction or abort_transaction ends it."""
        self._transactional().resume(producer_id, producer_epoch)

    async def commit_transaction(self) -> None:
        """Send everything, then commit: every record of the transaction becomes visible to
        read_committed readers, with the offsets sent to it. Raises the error of a failed send
        (the transaction can then only be aborted)."""
        transactions = self._transactional()
        transactions.require(TxnClientState.IN_TRANSACTION, TxnClientState.ABORTABLE_ERROR, doing="commit")
        await self.flush()
        if transactions.state is TxnClientState.ABORTABLE_ERROR:
            assert transactions.error is not None
            raise transactions.error
        await transactions.end(commit=True)

    async def abort_transaction(self) -> None:
        """Abort: the records not yet sent are failed, those sent are never visible to
        read_committed readers."""
        transactions = self._transactional()
        transactions.require(TxnClientState.IN_TRANSACTION, TxnClientState.ABORTABLE_ERROR, doing="abort")
        self.sender.abort_unsent(TransactionAbortedError("the transaction was aborted before this record was sent"))
        await self.flush()
        await transactions.end(commit=False)

    # ---- flushing and closing --------------------------------------------------------------

    async def flush(self) -> None:
        """Send everything queued so far and wait for every delivery (successful or not)."""
        self.sender.flushing += 1
        try:
            while not self.sender.idle:
                waits: list[asyncio.Future[Any]] = [
                    *(batch.future for batch in self.accumulator.waiting()),
                    *self.sender.requests(),
                ]
                self._wake_sender()
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.sender.flushing -= 1

    async def close(self) -> None:
        if self.sender.closed:
            return
        await self.flush()
        self.sender.closed = True
        self.sender.wakeup.set()
        if self._sender_task is not None:
            await self._sender_task
        if self._owns_connections:
            await self.connections.close()
