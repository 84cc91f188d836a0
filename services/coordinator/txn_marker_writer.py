"""Writing a transaction's markers into every partition it touched (Kafka's
TransactionMarkerChannelManager): one WriteTxnMarkers per partition leader, sent together, and
again for the partitions not done, until every one holds its marker.

What a partition answers decides what happens to it:

    0                                             done
    retriable (leader moved, ISR short, ...)      again, after a metadata refresh
    UNKNOWN_TOPIC_OR_PARTITION                    again, unless the topic is gone (deleted: nothing to end)
    INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED
                                                  TxnMarkersFencedError: a newer coordinator or producer
                                                  epoch is in the partition; this coordinator stops and
                                                  the partition's new owner finishes the transaction
    anything else                                 again (logged): a marker is never given up

Markers are idempotent: a resent marker ends nothing new (the partition's transaction is already
closed), so a coordinator that takes over resends them all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Final

import grpc
import structlog

from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.common.errors import RETRIABLE_CODES, ErrorCode, RemoteError, TidelogError
from tidelog.coordinator.txn_state import TopicPartitionKey
from tidelog.v1 import broker_pb2

__all__ = ["TxnMarkerWriter", "TxnMarkersFencedError"]

log = structlog.get_logger(__name__)

RETRY_BACKOFF_S: Final = 0.05
REQUEST_TIMEOUT_S: Final = 30.0
_FENCED: Final = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


class TxnMarkersFencedError(RemoteError):
    """A partition holds a newer producer or coordinator epoch than this marker's."""


class TxnMarkerWriter:
    def __init__(self, metadata: ClusterMetadata, connections: Connections) -> None:
        self.metadata = metadata
        self.connections = connections

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartitionKey],
    ) -> None:
        """Return once every partition holds the marker (acks=all) or its topic is gone."""
        remaining = set(partitions)
        attempt = 0
        while remaining:
            if attempt:
                await asyncio.sleep(min(RETRY_BACKOFF_S * attempt, 1.0))
                with contextlib.suppress(ConnectionError, TidelogError):
                    await self.metadata.refresh(sorted({topic for topic, _ in remaining}))
            attempt += 1
            by_leader = self._by_leader(remaining)
            sent = [
                self._send(endpoint, producer_id, producer_epoch, commit, coordinator_epoch, batch)
                for endpoint, batch in by_leader.items()
            ]
            for done in await asyncio.gather(*sent):
                remaining -= done

    def _by_leader(self, remaining: set[TopicPartitionKey]) -> dict[str, list[TopicPartitionKey]]:
        by_leader: dict[str, list[TopicPartitionKey]] = {}
        for topic, partition in sorted(remaining):
            if self.metadata.topic_errors.get(topic) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                log.info("txn_marker_topic_gone", topic=topic, partition=partition)
                remaining.discard((topic, partition))
                continue
            try:
                endpoint = self.metadata.leader_endpoint(topic, partition)
            except TidelogError:
                continue  # no leader known yet: the next round's refresh may find one
            by_leader.setdefault(endpoint, []).append((topic, partition))
        return by_leader

    async def _send(  # noqa: PLR0917 - one marker's fields
        self,
        endpoint: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: list[TopicPartitionKey],
    ) -> set[TopicPartitionKey]:
        """The partitions of `partitions` that hold the marker now."""
        request = broker_pb2.WriteTxnMarkersRequest(
            markers=[
                broker_pb2.TxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    committed=commit,
                    coordinator_epoch=coordinator_epoch,
                    partitions=[broker_pb2.TxnMarkerPartition(topic=topic, partition=p) for topic, p in partitions],
                )
            ]
        )
        try:
            response = await self.connections.broker(endpoint).WriteTxnMarkers(request, timeout=REQUEST_TIMEOUT_S)
        except (grpc.aio.AioRpcError, ConnectionError) as error:
            log.info("txn_markers_send_failed", endpoint=endpoint, error=repr(error))
            return set()
        done: set[TopicPartitionKey] = set()
        for result in response.markers[0].partitions if response.markers else []:
            key = (result.topic, result.partition)
            if result.error_code == ErrorCode.NONE:
                done.add(key)
            elif result.error_code in _FENCED:
                raise TxnMarkersFencedError(ErrorCode(result.error_code), f"{key}: {result.error_message}")
            elif result.error_code not in RETRIABLE_CODES:
                log.warning(
                    "txn_marker_refused",
                    topic=result.topic,
                    partition=result.partition,
                    error=ErrorCode(result.error_code).name,
                    message=result.error_message,
                )
        return done
