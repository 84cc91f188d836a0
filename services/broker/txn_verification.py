"""KIP-890 part 1: a partition verifies a transaction with its coordinator before the
transaction's first batch there (Kafka's AddPartitionsToTxnManager and VerificationGuard).

Without it, a producer that never added a partition to its transaction (a bug, a client that
skips AddPartitionsToTxn) or a batch delayed past its transaction's end could open a transaction in
the partition that no coordinator will ever end: a hanging transaction, holding the last stable
offset and every read_committed reader back until an administrator aborts it. Before appending a
transactional batch of (producer id, epoch) to a partition for the first time, the broker asks the
transaction coordinator of the request's transactional.id (`AddPartitionsToTxn` with
`verify_only`): INVALID_TXN_STATE (or the coordinator's error) refuses the batch, writing nothing.
A transaction's later batches there go unasked: the epoch moves on at every transaction end
(KIP-890 part 2), so (producer id, epoch, partition) names one transaction, and the verified ones
are remembered (a bounded number, oldest forgotten first).

A group coordinator's transactional offset commits (its own writes, CoordinatorWrite) are not
verified: the coordinator added their partition itself (AddOffsetsToTxn).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Final

import grpc
from etcd3aio import Etcd3Client

from tidelog.broker.coordinator_lookup import find_coordinator
from tidelog.broker.metadata_cache import MetadataCache
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode, RemoteError, TidelogError
from tidelog.common.record.batch import BATCH_OVERHEAD, read_header
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC
from tidelog.server_common.security.authorization.access_control import AccessControl, Caller
from tidelog.v1 import broker_pb2, coordinator_pb2, transaction_pb2, transaction_pb2_grpc

__all__ = ["VERIFIED_MAX", "TxnVerifier"]

VERIFIED_MAX: Final = 100_000  # (transaction, partition) pairs remembered as verified
VERIFY_TIMEOUT_S: Final = 10.0

Verified = tuple[str, int, int, str, int]  # transactional id, producer id, epoch, topic, partition


class TxnVerifier:
    def __init__(
        self,
        etcd: Etcd3Client | None,
        metadata: MetadataCache,
        channels: ChannelPool | None,
        access: AccessControl,
        *,
        enabled: bool,
    ) -> None:
        self.etcd = etcd
        self.metadata = metadata
        self.channels = channels
        self.access = access
        self.enabled = enabled and channels is not None
        self._verified: collections.OrderedDict[Verified, None] = collections.OrderedDict()

    async def refusals(
        self, request: broker_pb2.ProduceRequest, caller: Caller, coordinator: bool
    ) -> dict[int, TidelogError]:
        """The entries of a produce request refused by verification, by index (none: all may go)."""
        if not self.enabled:
            return {}
        wanted: dict[int, Verified] = {}
        for index, entry in enumerate(request.partitions):
            if coordinator and entry.topic == CONSUMER_OFFSETS_TOPIC:
                continue  # a group coordinator's transactional offsets: it added the partition itself
            data = entry.record_batches
            if len(data) < BATCH_OVERHEAD:
                continue  # (the append refuses it: CORRUPT_MESSAGE)
            header = read_header(data)
            if not header.is_transactional or header.is_control or header.producer_id < 0:
                continue
            key = (request.transactional_id, header.producer_id, header.producer_epoch, entry.topic, entry.partition)
            if key in self._verified:
                self._verified.move_to_end(key)
                continue
            wanted[index] = key
        if not wanted:
            return {}
        if not request.transactional_id:
            error = RemoteError(
                ErrorCode.INVALID_TXN_STATE, "a transactional batch without the producer's transactional.id"
            )
            return dict.fromkeys(wanted, error)
        refused: dict[int, TidelogError] = {}
        for (producer_id, epoch), indexes in _by_producer(wanted).items():
            try:
                await self._verify(request.transactional_id, producer_id, epoch, [wanted[i] for i in indexes], caller)
            except TidelogError as error:
                refused.update(dict.fromkeys(indexes, error))
                continue
            for index in indexes:
                self._remember(wanted[index])
        return refused

    async def _verify(
        self, transactional_id: str, producer_id: int, epoch: int, keys: Iterable[Verified], caller: Caller
    ) -> None:
        assert self.channels is not None
        found = await find_coordinator(
            coordinator_pb2.FindCoordinatorRequest(transactional_id=transactional_id),
            caller,
            self.access,
            self.metadata,
            self.etcd,
        )
        if found.error_code:
            raise RemoteError(ErrorCode(found.error_code), found.error_message)
        request = transaction_pb2.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            partitions=[transaction_pb2.TxnTopicPartition(topic=key[3], partition=key[4]) for key in keys],
            verify_only=True,
        )
        stub = transaction_pb2_grpc.TransactionCoordinatorStub(self.channels.channel(found.endpoint))
        try:
            answer = await stub.AddPartitionsToTxn(request, timeout=VERIFY_TIMEOUT_S)
        except grpc.aio.AioRpcError as error:
            raise RemoteError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{found.endpoint}: {error.code().name}") from error
        if answer.error_code:
            raise RemoteError(ErrorCode(answer.error_code), answer.error_message)

    def _remember(self, key: Verified) -> None:
        self._verified[key] = None
        if len(self._verified) > VERIFIED_MAX:
            self._verified.popitem(last=False)


def _by_producer(wanted: dict[int, Verified]) -> dict[tuple[int, int], list[int]]:
    grouped: dict[tuple[int, int], list[int]] = {}
    for index, key in wanted.items():
        grouped.setdefault((key[1], key[2]), []).append(index)
    return grouped
