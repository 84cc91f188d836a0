"""A produce request's appends, a round at a time: each round one entry per partition, appended
together (with acks=all, their ISRs awaited together), results in request order; and the answer
for an entry refused before any append."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidelog.broker.replica_manager import CoordinatorWrite, ReplicaManager
from tidelog.broker.topic_metrics import topic_meters
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC
from tidelog.v1 import broker_pb2

__all__ = ["produce_round", "refused_produce"]


def refused_produce(
    entry: Any, reason: str, code: ErrorCode = ErrorCode.TOPIC_AUTHORIZATION_FAILED
) -> broker_pb2.ProducePartitionResult:
    meters = topic_meters(entry.topic)
    meters.total_produce.inc()
    meters.failed_produce.inc()
    return broker_pb2.ProducePartitionResult(
        topic=entry.topic,
        partition=entry.partition,
        error_code=int(code),
        error_message=reason,
        base_offset=-1,
    )


async def produce_round(  # noqa: PLR0917 - one round of a request, and where it goes
    replicas: ReplicaManager,
    request: broker_pb2.ProduceRequest,
    indexes: list[int],
    results: list[broker_pb2.ProducePartitionResult | None],
    timeout_s: float,
    coordinator: bool,
    leader_hint: Callable[[str, int], tuple[int, int]],
) -> None:
    """Append the entries `indexes` of a produce request (one per partition) together; each one's
    result into `results`. A coordinator's writes to __consumer_offsets go without sequences."""
    entries = [request.partitions[index] for index in indexes]
    for entry in entries:
        topic_meters(entry.topic).total_produce.inc()
    outcomes = await replicas.append_all(
        [
            (
                entry.topic,
                entry.partition,
                CoordinatorWrite(entry.record_batches)
                if coordinator and entry.topic == CONSUMER_OFFSETS_TOPIC
                else entry.record_batches,
            )
            for entry in entries
        ],
        acks=request.acks,
        timeout_s=timeout_s,
    )
    for index, entry, outcome in zip(indexes, entries, outcomes, strict=True):
        result = broker_pb2.ProducePartitionResult(topic=entry.topic, partition=entry.partition)
        if isinstance(outcome, TidelogError):
            topic_meters(entry.topic).failed_produce.inc()
            result.error_code = int(outcome.code)
            result.error_message = outcome.message
            result.leader_hint, result.leader_hint_epoch = leader_hint(entry.topic, entry.partition)
            result.base_offset = -1
        else:
            result.base_offset = outcome.first_offset
            result.log_append_time_ms = outcome.log_append_time_ms
            result.log_start_offset = replicas.partitions[(entry.topic, entry.partition)].log.log_start_offset
        results[index] = result
