"""How the Kafka listener forwards a request to a coordinator over gRPC: the group's coordinator or
the transactional id's transaction coordinator, found as any broker finds it (coordinator_lookup),
called on the client's behalf (its principal and host go along), with one error for "no answer"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import grpc

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.coordinator_lookup import find_coordinator
from tidelog.broker.kafka_api.request_context import KafkaRequestContext, on_behalf_of
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.v1 import coordinator_pb2, coordinator_pb2_grpc, transaction_pb2_grpc

__all__ = ["CoordinatorUnavailableError", "committed_partitions", "coordinator_stub", "forward", "offsets_to_commit"]

Message = dict[str, Any]


class CoordinatorUnavailableError(Exception):
    """No coordinator serves the key, or the call to it failed: the Kafka error code to answer
    (COORDINATOR_NOT_AVAILABLE and its kind: the client finds the coordinator again and retries)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def coordinator_stub(
    service: BrokerService,
    channels: ChannelPool,
    lookup: coordinator_pb2.FindCoordinatorRequest,
    context: KafkaRequestContext,
) -> Any:
    """A stub to the coordinator of `lookup`'s group or transactional id."""
    found = await find_coordinator(
        lookup, service.access.caller(context), service.access, service.metadata, service.etcd
    )
    if found.error_code:
        raise CoordinatorUnavailableError(found.error_code, found.error_message)
    channel = channels.channel(found.endpoint)
    if lookup.transactional_id:
        return transaction_pb2_grpc.TransactionCoordinatorStub(channel)
    return coordinator_pb2_grpc.CoordinatorStub(channel)


async def forward(  # noqa: PLR0917 - where to, who for, what, and how long
    service: BrokerService,
    channels: ChannelPool,
    lookup: coordinator_pb2.FindCoordinatorRequest,
    context: KafkaRequestContext,
    method: str,
    request: Any,
    timeout_s: float,
) -> Any:
    """The coordinator's answer to `request`; CoordinatorUnavailableError without one."""
    stub = await coordinator_stub(service, channels, lookup, context)
    try:
        metadata = on_behalf_of(service.access, context)
        return await getattr(stub, method)(request, timeout=timeout_s, metadata=metadata)
    except grpc.aio.AioRpcError as error:
        code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        raise CoordinatorUnavailableError(code, f"{method}: {error.code().name}") from error


def offsets_to_commit(topics: Iterable[Message]) -> list[coordinator_pb2.OffsetCommitPartition]:
    """OffsetCommit's and TxnOffsetCommit's partitions, as the coordinator takes them."""
    return [
        coordinator_pb2.OffsetCommitPartition(
            topic=topic["Name"],
            partition=partition["PartitionIndex"],
            offset=partition["CommittedOffset"],
            metadata=partition["CommittedMetadata"] or "",
        )
        for topic in topics
        for partition in topic["Partitions"]
    ]


def committed_partitions(
    topics: Iterable[Message], codes: Mapping[tuple[str, int], int], default: int
) -> list[Message]:
    """OffsetCommit's and TxnOffsetCommit's answer: each asked partition's error (`default` for one
    the coordinator did not name)."""
    return [
        {
            "Name": topic["Name"],
            "Partitions": [
                {
                    "PartitionIndex": partition["PartitionIndex"],
                    "ErrorCode": codes.get((topic["Name"], partition["PartitionIndex"]), default),
                }
                for partition in topic["Partitions"]
            ],
        }
        for topic in topics
    ]
