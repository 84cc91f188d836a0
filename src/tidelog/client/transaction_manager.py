"""A transactional producer's side of transactions (the transactional half of Kafka's
TransactionManager, KIP-98 with KIP-890's epoch bump): its states, and its requests to the
transaction coordinator of its transactional.id.

    UNINITIALIZED ──init──▶ INITIALIZING ──▶ READY ──begin──▶ IN_TRANSACTION ──commit──▶ COMMITTING ──▶ READY
                                               ▲                  │   │                                 ▲
                                               │                  │   └──abort──▶ ABORTING ──────────────┘
                                               │                  └──a batch failed──▶ ABORTABLE_ERROR ──abort──┘
                                   FATAL_ERROR ◀── fenced by a newer instance, refused authorisation

Before a partition's first batch of a transaction is sent, the sender adds the partition to the
transaction (AddPartitionsToTxn); EndTxn answers with the producer's next epoch, and every
partition's sequences restart at 0 in it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import time
from collections.abc import Collection, Mapping
from typing import Any, Final

from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import ClusterMetadata, TopicPartition
from tidelog.client.connections import Connections
from tidelog.client.coordinator_link import CoordinatorLink
from tidelog.client.producer_sequences import ProducerSequences
from tidelog.common.errors import ErrorCode, ProducerFencedError, TidelogError, error_for
from tidelog.common.state_machine import Transitions
from tidelog.v1 import coordinator_pb2, transaction_pb2, transaction_pb2_grpc

__all__ = [
    "TRANSITIONS",
    "ConsumerGroupMetadata",
    "StaleTransactionError",
    "TransactionAbortedError",
    "TransactionManager",
    "TxnClientState",
]

log = get_logger(__name__)

# A coordinator busy with the id (ending the previous transaction, loading) asks for a retry, soon
# (Kafka's producer retries AddPartitionsToTxn after 20 ms, not retry.backoff.ms).
RETRY_BUSY_S: Final = 0.02
_RETRY: Final = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
# The producer cannot go on: only closing it is left (Kafka's fatal errors).
_FATAL: Final = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    }
)


class TransactionAbortedError(TidelogError):
    """The record was not sent: its transaction was aborted first (client-side, as Kafka's
    TransactionAbortedException; no error code of its own)."""

    code = ErrorCode.INVALID_TXN_STATE


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Who consumed what a transaction commits offsets for (Kafka's ConsumerGroupMetadata): with a
    member's generation, the group coordinator refuses the commit of a member it has fenced
    (KIP-447), as it refuses its OffsetCommit."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str = ""

    @classmethod
    def of(cls, consumer: Any) -> ConsumerGroupMetadata:
        """A GroupConsumer's, as it stands (Kafka's KafkaConsumer.groupMetadata())."""
        return cls(consumer.group_id, consumer.generation_id, consumer.member_id, consumer.settings.group_instance_id)


class StaleTransactionError(TransactionAbortedError):
    """A request for a transaction that ended while it was under way (nothing for the caller to do)."""


class TxnClientState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in-transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable-error"
    FATAL_ERROR = "fatal-error"


TRANSITIONS: Final = Transitions(
    "a transactional producer",
    {
        TxnClientState.UNINITIALIZED: {TxnClientState.INITIALIZING, TxnClientState.FATAL_ERROR},
        TxnClientState.INITIALIZING: {TxnClientState.READY, TxnClientState.UNINITIALIZED, TxnClientState.FATAL_ERROR},
        TxnClientState.READY: {TxnClientState.IN_TRANSACTION, TxnClientState.INITIALIZING, TxnClientState.FATAL_ERROR},
        TxnClientState.IN_TRANSACTION: {
            TxnClientState.COMMITTING,
            TxnClientState.ABORTING,
            TxnClientState.ABORTABLE_ERROR,
            TxnClientState.FATAL_ERROR,
        },
        TxnClientState.COMMITTING: {TxnClientState.READY, TxnClientState.ABORTABLE_ERROR, TxnClientState.FATAL_ERROR},
        TxnClientState.ABORTING: {TxnClientState.READY, TxnClientState.ABORTING, TxnClientState.FATAL_ERROR},
        TxnClientState.ABORTABLE_ERROR: {
            TxnClientState.ABORTING,
            TxnClientState.ABORTABLE_ERROR,
            TxnClientState.FATAL_ERROR,
        },
        TxnClientState.FATAL_ERROR: {TxnClientState.FATAL_ERROR},
    },
)


class TransactionManager:
    def __init__(
        self,
        transactional_id: str,
        timeout_ms: int,
        sequences: ProducerSequences,
        metadata: ClusterMetadata,
        connections: Connections,
        *,
        request_timeout_s: float,
        retry_backoff_s: float,
        max_block_s: float,
    ) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.sequences = sequences
        self.retry_backoff_s = retry_backoff_s
        self.max_block_s = max_block_s
        self.link = CoordinatorLink(
            "",
            metadata,
            connections,
            request_timeout_s=request_timeout_s,
            retry_backoff_s=retry_backoff_s,
            transactional_id=transactional_id,
            stub_type=transaction_pb2_grpc.TransactionCoordinatorStub,
        )
        self.state = TxnClientState.UNINITIALIZED
        self.partitions: set[tuple[str, int]] = set()  # in the open transaction, as the coordinator knows
        self.error: BaseException | None = None  # why the state is ABORTABLE_ERROR or FATAL_ERROR
        self._group_links: dict[str, CoordinatorLink] = {}

    def _move(self, state: TxnClientState) -> None:
        TRANSITIONS.check(self.state, state)
        self.state = state

    def require(self, *states: TxnClientState, doing: str) -> None:
        """Refuse a call the state does not allow (Kafka's IllegalStateException), or the error
        that ended the producer."""
        if self.state is TxnClientState.FATAL_ERROR:
            assert self.error is not None
            raise self.error
        if self.state not in states:
            raise RuntimeError(f"cannot {doing}: the transactional producer is {self.state.value}")

    # ---- requests --------------------------------------------------------------------------

    async def _call(self, method: str, request: Any) -> Any:
        """One request to the coordinator, retried while it asks to; an error for the rest.

        A request of an epoch the producer has left (the sender's AddPartitionsToTxn for a
        transaction an abort ended meanwhile) is given up (StaleTransactionError): its answer, even
        PRODUCER_FENCED, is about a transaction that is over, not about this producer."""
        deadline = time.monotonic() + self.max_block_s
        epoch = getattr(request, "producer_epoch", None)
        while True:
            response = await self.link.call(method, request)
            code = response.error_code
            if code == ErrorCode.NONE:
                return response
            if epoch is not None and epoch != self.sequences.producer_epoch:
                raise StaleTransactionError(f"{method} of epoch {epoch}: the transaction ended meanwhile")
            if code in _RETRY and time.monotonic() < deadline:
                await asyncio.sleep(min(self.retry_backoff_s, RETRY_BUSY_S))
                continue
            error = error_for(code, response.error_message)
            if code in _FATAL:
                if code != ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                    error = ProducerFencedError(f"{self.transactional_id!r}: {response.error_message}")
                self.fatal(error)
            raise error

    def fatal(self, error: BaseException) -> None:
        self.error = error
        self._move(TxnClientState.FATAL_ERROR)
        log.warning("transactional_producer_fenced", transactional_id=self.transactional_id, error=str(error))

    def abortable(self, error: BaseException) -> None:
        """A batch of the open transaction failed: it can only be aborted now."""
        if self.state in (TxnClientState.IN_TRANSACTION, TxnClientState.COMMITTING, TxnClientState.ABORTABLE_ERROR):
            self.error = self.error or error
            self._move(TxnClientState.ABORTABLE_ERROR)

    async def init(self) -> None:
        """InitProducerId: the id and epoch to write with; any older instance is fenced."""
        self.require(TxnClientState.UNINITIALIZED, TxnClientState.READY, doing="init transactions")
        self._move(TxnClientState.INITIALIZING)
        request = transaction_pb2.TxnInitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms
        )
        try:
            response = await self._call("InitProducerId", request)
        except TidelogError:
            if self.state is TxnClientState.INITIALIZING:
                self._move(TxnClientState.UNINITIALIZED)
            raise
        self.sequences.new_epoch(response.producer_id, response.producer_epoch)
        self._move(TxnClientState.READY)
        log.info("transactional_producer_ready", producer_id=response.producer_id, epoch=response.producer_epoch)

    def resume(self, producer_id: int, producer_epoch: int) -> None:
        """Take over a transaction another instance prepared (two-phase commit, as KIP-939's
        completeTransaction and Flink's resumeTransaction): this producer may then only commit or
        abort it."""
        self.require(TxnClientState.UNINITIALIZED, doing="resume a prepared transaction")
        self.sequences.new_epoch(producer_id, producer_epoch)
        for state in (TxnClientState.INITIALIZING, TxnClientState.READY, TxnClientState.IN_TRANSACTION):
            self._move(state)

    def begin(self) -> None:
        self.require(TxnClientState.READY, doing="begin a transaction")
        self.partitions.clear()
        self._move(TxnClientState.IN_TRANSACTION)

    def missing(self, keys: Collection[tuple[str, int]]) -> set[tuple[str, int]]:
        """The partitions among `keys` not in the transaction yet."""
        return set(keys) - self.partitions

    async def add_partitions(self, keys: Collection[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for the partitions of batches about to be sent."""
        wanted = self.missing(keys)
        if not wanted:
            return
        request = transaction_pb2.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.sequences.producer_id,
            producer_epoch=self.sequences.producer_epoch,
            partitions=[transaction_pb2.TxnTopicPartition(topic=topic, partition=p) for topic, p in sorted(wanted)],
        )
        await self._call("AddPartitionsToTxn", request)
        if request.producer_epoch == self.sequences.producer_epoch:  # (not a transaction ended meanwhile)
            self.partitions |= wanted

    async def add_offsets(self, group_id: str) -> None:
        self.require(TxnClientState.IN_TRANSACTION, doing="send offsets to the transaction")
        request = transaction_pb2.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.sequences.producer_id,
            producer_epoch=self.sequences.producer_epoch,
            group_id=group_id,
        )
        await self._call("AddOffsetsToTxn", request)

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator: the offsets commit with
        the transaction. A refusal (a fenced member, a group rebalancing) makes it abortable."""
        await self.add_offsets(group.group_id)
        link = self._group_links.get(group.group_id)
        if link is None:
            link = self._group_links[group.group_id] = CoordinatorLink(
                group.group_id,
                self.link.metadata,
                self.link.connections,
                request_timeout_s=self.link.request_timeout_s,
                retry_backoff_s=self.retry_backoff_s,
            )
        request = coordinator_pb2.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group.group_id,
            producer_id=self.sequences.producer_id,
            producer_epoch=self.sequences.producer_epoch,
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            partitions=[
                coordinator_pb2.OffsetCommitPartition(topic=tp.topic, partition=tp.partition, offset=offset)
                for tp, offset in sorted(offsets.items())
            ],
        )
        response = await link.call("TxnOffsetCommit", request)
        codes = [response.error_code, *(entry.error_code for entry in response.partitions)]
        if code := next((code for code in codes if code), 0):
            error = error_for(code, response.error_message or f"offsets of group {group.group_id!r} refused")
            if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                self.fatal(ProducerFencedError(f"{self.transactional_id!r}: {error}"))
            else:
                self.abortable(error)
            raise error

    async def end(self, commit: bool) -> None:
        """EndTxn; the producer goes on in the epoch it answers, its sequences from 0."""
        if commit:
            self._move(TxnClientState.COMMITTING)
        else:
            self._move(TxnClientState.ABORTING)
        request = transaction_pb2.EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.sequences.producer_id,
            producer_epoch=self.sequences.producer_epoch,
            committed=commit,
        )
        try:
            response = await self._call("EndTxn", request)
        except TidelogError as error:
            if self.state is TxnClientState.COMMITTING:
                self.abortable(error)
            raise
        self.sequences.new_epoch(response.producer_id, response.producer_epoch)
        self.partitions.clear()
        self.error = None
        self._move(TxnClientState.READY)
