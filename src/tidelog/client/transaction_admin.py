"""Transaction administration (KIP-664, as Kafka's Admin and kafka-transactions.sh): list and
describe transactional ids at their coordinators, describe a partition's producers at its leader,
find hanging transactions, and abort one.

A transaction hangs in a partition when the partition holds it open (its last stable offset stuck
there, read_committed readers waiting) while its coordinator no longer does: the coordinator lost
or expired it, or never added the partition. `find_hanging` reports the open transactions older
than `transaction.max.timeout.ms` that no coordinator lists as ongoing in that partition;
`abort_transaction` writes the ABORT marker itself (WriteTxnMarkers to the leader; the caller needs
ClusterAction on the Cluster).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Sequence
from typing import Final

from tidelog.client.cluster_metadata import ClusterMetadata, TopicPartition
from tidelog.client.connections import Connections
from tidelog.client.coordinator_link import CoordinatorLink
from tidelog.common.clock import wall_clock_ms
from tidelog.common.errors import RETRIABLE_CODES, TidelogError, error_for
from tidelog.common.settings import SecuritySettings
from tidelog.v1 import broker_pb2, transaction_pb2, transaction_pb2_grpc

__all__ = ["ProducerState", "TransactionAdmin", "TransactionDescription", "TransactionListing"]

MAX_TIMEOUT_MS_DEFAULT: Final = 900_000  # transaction.max.timeout.ms's default


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1: no transaction open
    partitions: list[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open in the partition


class TransactionAdmin:
    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        security: SecuritySettings | None = None,
    ) -> None:
        self.connections = Connections(security)
        self.metadata = ClusterMetadata(bootstrap, self.connections, request_timeout_s=request_timeout_ms / 1000)
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000

    async def __aenter__(self) -> TransactionAdmin:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.connections.close()

    def _link(self, transactional_id: str) -> CoordinatorLink:
        return CoordinatorLink(
            "",
            self.metadata,
            self.connections,
            request_timeout_s=self.request_timeout_s,
            retry_backoff_s=self.retry_backoff_s,
            transactional_id=transactional_id,
            stub_type=transaction_pb2_grpc.TransactionCoordinatorStub,
        )

    async def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
    ) -> list[TransactionListing]:
        # Any id leads to some instance; that one gathers the others' ids.
        request = transaction_pb2.ListTransactionsRequest(
            state_filters=list(states), producer_id_filters=list(producer_ids)
        )
        response = await self._link("__list__").call("ListTransactions", request)
        if response.error_code:
            raise error_for(response.error_code, response.error_message)
        return [TransactionListing(t.transactional_id, t.producer_id, t.state) for t in response.transactions]

    async def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> dict[str, TransactionDescription | TidelogError]:
        found: dict[str, TransactionDescription | TidelogError] = {}
        for transactional_id in transactional_ids:
            request = transaction_pb2.DescribeTransactionsRequest(transactional_ids=[transactional_id])
            described = (await self._link(transactional_id).call("DescribeTransactions", request)).transactions[0]
            if described.error_code:
                found[transactional_id] = error_for(described.error_code, f"transactional.id {transactional_id!r}")
                continue
            found[transactional_id] = TransactionDescription(
                transactional_id,
                described.state,
                described.producer_id,
                described.producer_epoch,
                described.transaction_timeout_ms,
                described.transaction_start_time_ms,
                [TopicPartition(p.topic, p.partition) for p in described.partitions],
            )
        return found

    async def describe_producers(self, partition: TopicPartition) -> list[ProducerState]:
        await self.metadata.refresh([partition.topic])
        endpoint = self.metadata.leader_endpoint(partition.topic, partition.partition)
        request = broker_pb2.DescribeProducersRequest(
            partitions=[broker_pb2.TxnMarkerPartition(topic=partition.topic, partition=partition.partition)]
        )
        response = await self.connections.broker(endpoint).DescribeProducers(request, timeout=self.request_timeout_s)
        result = response.partitions[0]
        if result.error_code:
            raise error_for(result.error_code, result.error_message or f"{partition}")
        return [
            ProducerState(
                p.producer_id,
                p.producer_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.coordinator_epoch,
                p.current_txn_start_offset,
            )
            for p in result.producers
        ]

    async def find_hanging(
        self, partitions: Iterable[TopicPartition], *, max_timeout_ms: int = MAX_TIMEOUT_MS_DEFAULT
    ) -> list[tuple[TopicPartition, ProducerState]]:
        """Open transactions older than `max_timeout_ms` (transaction.max.timeout.ms: no coordinator
        would have let them live so long) that no coordinator lists as ongoing in the partition."""
        hanging: list[tuple[TopicPartition, ProducerState]] = []
        now = wall_clock_ms()
        for partition in partitions:
            for producer in await self.describe_producers(partition):
                if producer.current_txn_start_offset < 0 or now - producer.last_timestamp <= max_timeout_ms:
                    continue
                listed = await self.list_transactions(producer_ids=[producer.producer_id])
                described = await self.describe_transactions([entry.transactional_id for entry in listed])
                ongoing = any(
                    isinstance(found, TransactionDescription)
                    and found.state == "Ongoing"
                    and found.producer_id == producer.producer_id
                    and partition in found.partitions
                    for found in described.values()
                )
                if not ongoing:
                    hanging.append((partition, producer))
        return hanging

    async def abort_transaction(
        self, partition: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Write the ABORT marker into `partition` for the producer's open transaction there."""
        request = broker_pb2.WriteTxnMarkersRequest(
            markers=[
                broker_pb2.TxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    committed=False,
                    coordinator_epoch=coordinator_epoch,
                    partitions=[broker_pb2.TxnMarkerPartition(topic=partition.topic, partition=partition.partition)],
                )
            ]
        )
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            await self.metadata.refresh([partition.topic])
            endpoint = self.metadata.leader_endpoint(partition.topic, partition.partition)
            response = await self.connections.broker(endpoint).WriteTxnMarkers(request, timeout=self.request_timeout_s)
            result = response.markers[0].partitions[0]
            if not result.error_code:
                return
            if result.error_code not in RETRIABLE_CODES or time.monotonic() > deadline:
                raise error_for(result.error_code, result.error_message or f"abort in {partition}")
            await asyncio.sleep(self.retry_backoff_s)  # the leader moved, or its ISR is short: again
