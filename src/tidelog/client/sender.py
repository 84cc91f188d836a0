"""The producer's background task (Kafka's Sender): ready batches → one Produce request per leader.

Each round closes batches past linger.ms, then drains the ready queue: everything bound for one
broker goes in one request (up to max.request.size), one request in flight per broker, and a
partition's batches in creation order — once one of them cannot go now (backing off, no leader,
its leader busy, or one of its batches in flight), the later ones wait behind it. Retriable errors
(NOT_LEADER_OR_FOLLOWER, no leader, timeouts, a broker gone) refresh the metadata and put the batch
back after retry.backoff.ms, until retries or delivery.timeout.ms run out; other errors fail it.
A batch that never went out and is still waiting when delivery.timeout.ms has passed fails too
(Kafka's expired batches).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence

import grpc

from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.client.producer_batch import BatchState, ProducerBatch
from tidelog.client.producer_sequences import ProducerSequences
from tidelog.client.record_accumulator import RecordAccumulator
from tidelog.client.transaction_manager import StaleTransactionError, TransactionManager, TxnClientState
from tidelog.common.errors import (
    RETRIABLE_CODES,
    ErrorCode,
    ProducerFencedError,
    RequestTimedOutError,
    TidelogError,
    error_for,
)
from tidelog.common.record.compression import CompressionType
from tidelog.common.settings import ProducerSettings
from tidelog.v1 import broker_pb2

__all__ = ["Sender"]

log = get_logger(__name__)


class Sender:
    def __init__(
        self,
        settings: ProducerSettings,
        accumulator: RecordAccumulator,
        sequences: ProducerSequences,
        *,
        metadata: ClusterMetadata,
        connections: Connections,
        topics: Callable[[], Sequence[str]],
        clock: Callable[[], float] = time.monotonic,
        transactions: TransactionManager | None = None,
    ) -> None:
        self.settings = settings
        self.compression = CompressionType.from_name(settings.compression_type)
        self.retry_backoff_s = settings.retry_backoff_ms / 1000
        self.request_timeout_s = settings.request_timeout_ms / 1000
        self.accumulator = accumulator
        self.sequences = sequences
        self.metadata = metadata
        self.connections = connections
        self.topics = topics  # what metadata refreshes ask for: the topics produced to
        self.clock = clock
        self.transactions = transactions  # a transactional producer's: partitions join its transaction first
        self.in_flight: dict[str, set[asyncio.Task[None]]] = {}  # endpoint → its requests in flight
        self.muted_until: dict[str, float] = {}  # endpoint → the end of the throttle it asked for
        self.sending: set[tuple[str, int]] = set()  # partitions with a batch in a request in flight
        self.wakeup = asyncio.Event()
        self.flushing = 0
        self.closed = False
        self.retries = 0  # batches sent again, all told (Kafka's producer metric retry-total)

    @property
    def idle(self) -> bool:
        return not (self.accumulator.has_open or self.accumulator.has_ready or self.in_flight)

    async def run(self) -> None:
        while True:
            self.wakeup.clear()
            next_expiry = self.accumulator.close_expired(everything=bool(self.flushing) or self.closed)
            if (
                self.settings.idempotent
                and self.transactions is None
                and not self.sequences.has_id
                and self.accumulator.has_ready
            ):
                retry_at: float | None = await self._init_producer_id()
            else:
                retry_at = await self._drain()
            if self.closed and self.idle:
                return
            waits = [at for at in (next_expiry, retry_at) if at is not None]
            timeout = max(min(waits) - self.clock(), 0) if waits else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), timeout)

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
                self.sequences.set_id(response.producer_id, response.producer_epoch)
                log.info("producer_id_assigned", producer_id=response.producer_id)
                return self.clock()
            log.info("init_producer_id_failed", endpoint=endpoint, error=response.error_message)
        waiting = self.accumulator.take_ready()
        kept = []
        for batch in waiting:
            if self._expired(batch):
                self.fail(batch, RequestTimedOutError("no producer id could be obtained within delivery.timeout.ms"))
            else:
                kept.append(batch)
        self.accumulator.put_back(kept)
        return self.clock() + self.retry_backoff_s

    def _expired(self, batch: ProducerBatch) -> bool:
        return self.clock() - batch.created > self.settings.delivery_timeout_ms / 1000

    async def _add_to_transaction(self) -> bool:
        """Add the ready batches' new partitions to the transaction; False (those batches failed)
        when the coordinator refused."""
        assert self.transactions is not None
        missing = self.transactions.missing(self.accumulator.ready_keys())
        if not missing:
            return True
        try:
            await self.transactions.add_partitions(missing)
            return True
        except StaleTransactionError:
            return False  # for a transaction an abort ended meanwhile: the next round adds for the new one
        except TidelogError as error:
            for batch in self.accumulator.take_ready():
                if batch.key in missing:
                    self.fail(batch, error)
                else:
                    self.accumulator.put_back([batch])
            return False

    def abort_unsent(self, error: BaseException) -> None:
        """An abort: the batches never sent are failed rather than written (Kafka's
        TransactionAbortedException); those sent settle as they will."""
        for batch in self.accumulator.take_unsent():
            self.fail(batch, error)

    async def _drain(self) -> float | None:
        """Start one request per idle leader with its ready batches; the next retry time, if any."""
        if self.transactions is not None and not await self._add_to_transaction():
            return None
        now = self.clock()
        by_leader: dict[str, list[ProducerBatch]] = {}
        waiting: list[ProducerBatch] = []
        retry_at: float | None = None
        refresh = False
        blocked = set(self.sending)
        joined = self.transactions.partitions if self.transactions is not None else None
        for batch in self.accumulator.take_ready():
            if batch.key in blocked or (joined is not None and batch.key not in joined):
                waiting.append(batch)  # (a transaction's new partition: added in the next round)
                continue
            if batch.base_sequence < 0 and self._expired(batch):
                # Waited past delivery.timeout.ms without ever going out (Kafka expires such batches in
                # its accumulator). One that was sent keeps its sequence and expires only when its
                # retry is scheduled: failing it here, behind a request whose outcome is unknown,
                # would leave a sequence gap that fails every later batch of the partition.
                timed_out = RequestTimedOutError(f"{batch.topic}-{batch.partition}: delivery.timeout.ms passed")
                self.fail(batch, batch.last_error or timed_out)  # the last attempt's error says more
                blocked.add(batch.key)
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
                if self._schedule_retry(batch, error):
                    waiting.append(batch)
                    retry_at = batch.next_attempt_at if retry_at is None else min(retry_at, batch.next_attempt_at)
                continue
            if self._busy(endpoint, now):
                waiting.append(batch)
                blocked.add(batch.key)
                continue
            by_leader.setdefault(endpoint, []).append(batch)
        for endpoint, batches in by_leader.items():
            request_batches, rest = _fit(batches, self.settings.max_request_size)
            waiting.extend(rest)
            for batch in request_batches:
                if self.settings.idempotent and batch.base_sequence < 0:
                    self.sequences.assign(batch)
                batch.move_to(BatchState.IN_FLIGHT)
            self.sending.update(batch.key for batch in request_batches)
            task = asyncio.create_task(self._send(endpoint, request_batches))
            self.in_flight.setdefault(endpoint, set()).add(task)
            task.add_done_callback(functools.partial(self._request_done, endpoint))
        self.accumulator.put_back(waiting)
        if refresh:
            await self.refresh_quietly()
        return retry_at

    def requests(self) -> list[asyncio.Task[None]]:
        """Every request in flight."""
        return [task for tasks in self.in_flight.values() for task in tasks]

    def _busy(self, endpoint: str, now: float) -> bool:
        """No new request to `endpoint` now: max.in.flight.requests.per.connection reached, or a
        throttle it asked for still running (KIP-219's client side)."""
        if self.muted_until.get(endpoint, 0.0) > now:
            return True
        return len(self.in_flight.get(endpoint, ())) >= self.settings.max_in_flight_requests_per_connection

    def _request_done(self, endpoint: str, task: asyncio.Task[None]) -> None:
        tasks = self.in_flight.get(endpoint)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self.in_flight[endpoint]
        self.wakeup.set()

    async def _send(self, endpoint: str, batches: list[ProducerBatch]) -> None:
        try:
            encoded = [batch.encode(self.compression) for batch in batches]
            request = broker_pb2.ProduceRequest(
                acks=self.settings.required_acks,
                timeout_ms=self.settings.request_timeout_ms,
                transactional_id=self.settings.transactional_id,
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
                    self._retry_or_fail(batch, failure)
                await self.refresh_quietly()
                return
            retried = False
            for batch, result in zip(batches, response.partitions, strict=True):
                if result.error_code == 0:
                    self.complete(batch, (result.base_offset, result.log_append_time_ms))
                elif result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and self.metadata.learn_leader(
                    batch.topic, batch.partition, result.leader_hint, result.leader_hint_epoch
                ):
                    # The old leader named the new one (a controlled shutdown, a preferred election):
                    # go there at once, without the backoff or a metadata refresh (KIP-951).
                    self._retry_or_fail(batch, error_for(result.error_code, result.error_message), backoff=False)
                elif result.error_code in RETRIABLE_CODES or (
                    self.settings.idempotent and self.sequences.behind_a_retry(batch, result.error_code)
                ):
                    self._retry_or_fail(batch, error_for(result.error_code, result.error_message))
                    retried = True
                else:
                    self.fail(batch, error_for(result.error_code, result.error_message))
            if retried:
                await self.refresh_quietly()
            if response.throttle_time_ms:
                # Over a quota: nothing more goes to this broker until the throttle has passed
                # (KIP-219's client side); this request stays in flight meanwhile.
                until = self.clock() + response.throttle_time_ms / 1000
                self.muted_until[endpoint] = max(self.muted_until.get(endpoint, 0.0), until)
                await asyncio.sleep(response.throttle_time_ms / 1000)
        except Exception as error:  # never leave deliveries hanging
            for batch in batches:
                if batch.state is BatchState.IN_FLIGHT:
                    self.fail(batch, error)
            raise
        finally:
            self.sending.difference_update(batch.key for batch in batches)
            self.wakeup.set()

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException, *, backoff: bool = True) -> None:
        if self._schedule_retry(batch, error, backoff=backoff):
            self.accumulator.requeue(batch)

    def _schedule_retry(self, batch: ProducerBatch, error: BaseException, *, backoff: bool = True) -> bool:
        """Another attempt after retry.backoff.ms (at once with `backoff=False`: the new leader is
        known); False (and the batch failed) when retries or time ran out."""
        batch.attempts += 1
        batch.last_error = error
        if batch.attempts > self.settings.retries or self._expired(batch):
            self.fail(batch, error)
            return False
        self.retries += 1
        batch.next_attempt_at = self.clock() + (self.retry_backoff_s if backoff else 0.0)
        return True

    async def refresh_quietly(self) -> None:
        try:
            await self.metadata.refresh(sorted(self.topics()))
        except ConnectionError as error:
            log.info("metadata_refresh_failed", error=str(error))

    def complete(self, batch: ProducerBatch, result: tuple[int, int]) -> None:
        self.accumulator.release(batch)
        self.sequences.forget(batch)
        batch.acknowledge(result)

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.accumulator.release(batch)
        self.accumulator.remove_ready(batch)
        self.sequences.failed_for_good(batch, str(error))
        batch.fail(error)
        if self.transactions is not None:
            if getattr(error, "code", None) in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                if self.transactions.state is not TxnClientState.FATAL_ERROR:
                    self.transactions.fatal(ProducerFencedError(f"{batch.topic}-{batch.partition}: {error}"))
            else:
                self.transactions.abortable(error)


def _fit(batches: list[ProducerBatch], max_request_size: int) -> tuple[list[ProducerBatch], list[ProducerBatch]]:
    """The leading batches that fit one request (at least one), and the rest."""
    total = 0
    for index, batch in enumerate(batches):
        total += batch.size
        if index and total > max_request_size:
            return batches[:index], batches[index:]
    return batches, []
