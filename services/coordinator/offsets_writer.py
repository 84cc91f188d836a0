"""Appends to `__consumer_offsets` (and, a second writer, `__transaction_state`), fenced by the
owner's claim epoch.

Each partition p is written as producer id `OFFSETS_PRODUCER_ID_BASE + p` (for
`__transaction_state`: `TXN_STATE_PRODUCER_ID_BASE + p`) with the producer epoch
of this instance's claim (partition_ownership.py) and its own sequence numbers: the broker's
idempotent-producer checks then do the fencing — once a newer owner has written with a higher
epoch, a deposed owner's appends fail with INVALID_PRODUCER_EPOCH instead of landing. A retry
resends the same batch, so a retried commit is written once.

One append per partition at a time (sequences stay in order). A failed append — cancelled
included — leaves its fate unknown; the partition is then marked `broken`, appends queued behind
it are refused rather than sent under its sequence (the broker would answer them as its
duplicate), and the ownership loop gives the partition up, so whoever claims it next (maybe this
instance again) rebuilds the state from the log itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Final

import grpc
import structlog

from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.common.clock import wall_clock_ms
from tidelog.common.errors import RETRIABLE_CODES, ErrorCode, RemoteError, TidelogError, error_for
from tidelog.common.record.batch import encode_batch, next_sequence
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC
from tidelog.v1 import broker_pb2

__all__ = ["OFFSETS_PRODUCER_ID_BASE", "TXN_STATE_PRODUCER_ID_BASE", "FencedOffsetsWriter"]

log = structlog.get_logger(__name__)

OFFSETS_PRODUCER_ID_BASE: Final = 1 << 62  # far above any id InitProducerId hands out
TXN_STATE_PRODUCER_ID_BASE: Final = OFFSETS_PRODUCER_ID_BASE + (1 << 32)
RETRY_BACKOFF_S: Final = 0.05


@dataclasses.dataclass(slots=True)
class _Owned:
    epoch: int
    next_sequence: int = 0
    broken: bool = False
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


class FencedOffsetsWriter:
    def __init__(
        self,
        metadata: ClusterMetadata,
        connections: Connections,
        *,
        timeout_s: float = 30.0,
        topic: str = CONSUMER_OFFSETS_TOPIC,
        producer_id_base: int = OFFSETS_PRODUCER_ID_BASE,
    ) -> None:
        self.metadata = metadata
        self.connections = connections
        self.timeout_s = timeout_s
        self.topic = topic
        self.producer_id_base = producer_id_base
        self._owned: dict[int, _Owned] = {}

    def own(self, partition: int, epoch: int) -> None:
        assert 0 <= epoch < 2**15, "claim epochs are producer epochs (int16)"
        self._owned[partition] = _Owned(epoch)

    def disown(self, partition: int) -> None:
        self._owned.pop(partition, None)

    def broken(self) -> list[int]:
        return [partition for partition, owned in self._owned.items() if owned.broken]

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        await self.append_at(partition, records)

    async def append_at(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append and return the batch's base offset."""
        owned = self._owned.get(partition)
        if owned is None or owned.broken:
            raise RemoteError(ErrorCode.NOT_COORDINATOR, f"{self.topic}-{partition} is not written here")
        async with owned.lock:
            if owned.broken or self._owned.get(partition) is not owned:
                # An append before this one failed with its fate unknown: its batch may be in the
                # log under the sequence this one would take, and a resend of that sequence is
                # answered as a duplicate — "written" without being written.
                raise RemoteError(ErrorCode.NOT_COORDINATOR, f"{self.topic}-{partition} is not written here")
            batch = encode_batch(
                [value for _, value in records],
                keys=[key for key, _ in records],
                timestamps=wall_clock_ms(),
                producer_id=self.producer_id_base + partition,
                producer_epoch=owned.epoch,
                base_sequence=owned.next_sequence,
            )
            try:
                offset = await self._send(partition, batch)
            except BaseException as error:  # cancelled too: the batch may have landed all the same
                owned.broken = True
                log.warning("offsets_append_failed", partition=partition, error=repr(error))
                raise
            owned.next_sequence = next_sequence(owned.next_sequence, len(records))
            if self._owned.get(partition) is not owned:
                # Written, but the partition changed hands meanwhile: its new owner's load
                # replays the batch; this instance's state must not apply it after that load.
                raise RemoteError(ErrorCode.NOT_COORDINATOR, f"{self.topic}-{partition} changed owner")
            return offset

    async def append_transactional(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> None:
        """A TxnOffsetCommit's records, as the transactional producer's own batch without a sequence
        (brokers take one from a coordinator only, Kafka's AppendOrigin.COORDINATOR): they count
        once its producer's COMMIT marker follows them in the partition."""
        owned = self._owned.get(partition)
        if owned is None or owned.broken:
            raise RemoteError(ErrorCode.NOT_COORDINATOR, f"{self.topic}-{partition} is not written here")
        batch = encode_batch(
            [value for _, value in records],
            keys=[key for key, _ in records],
            timestamps=wall_clock_ms(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=True,
        )
        await self._send(partition, batch)

    async def _send(self, partition: int, batch: bytes) -> int:
        deadline = time.monotonic() + self.timeout_s
        request = broker_pb2.ProduceRequest(
            acks=-1,
            timeout_ms=int(self.timeout_s * 1000),
            partitions=[broker_pb2.ProducePartition(topic=self.topic, partition=partition, record_batches=batch)],
        )
        last = "no attempt"
        while time.monotonic() < deadline:
            try:
                if self.topic not in self.metadata.partitions:
                    await self.metadata.refresh([self.topic])
                endpoint = self.metadata.leader_endpoint(self.topic, partition)
                response = await self.connections.broker(endpoint).Produce(
                    request, timeout=max(deadline - time.monotonic(), 0.1)
                )
                result = response.partitions[0]
                if result.error_code == 0:
                    return int(result.base_offset)
                if result.error_code not in RETRIABLE_CODES:
                    raise error_for(result.error_code, result.error_message)
                last = ErrorCode(result.error_code).name
            except grpc.aio.AioRpcError as error:
                last = error.code().name
            except ConnectionError as error:
                last = str(error)
            except TidelogError as error:  # no leader known yet, or a refusal
                if not error.retriable:
                    raise
                last = str(error)
            await asyncio.sleep(RETRY_BACKOFF_S)
            with contextlib.suppress(ConnectionError):
                await self.metadata.refresh([self.topic])
        raise RemoteError(ErrorCode.REQUEST_TIMED_OUT, f"{self.topic}-{partition}: {last}")
