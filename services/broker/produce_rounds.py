"""A produce request's appends, a round at a time: each round one entry per partition, appended
together, the rounds one after another (a partition's entries keep their order); with acks=all the
ISRs awaited once for all of them; results in request order; and the answer for an entry refused
before any append."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidelog.broker.replica_manager import CoordinatorWrite, ReplicaManager
from tidelog.broker.storage.log_validator import AppendInfo
from tidelog.broker.topic_metrics import topic_meters
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC
from tidelog.v1 import broker_pb2

__all__ = ["produce_rounds", "refused_produce"]


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


async def produce_rounds(  # noqa: PLR0917 - a request's rounds, and where they go
    replicas: ReplicaManager,
    request: broker_pb2.ProduceRequest,
    rounds: list[list[int]],
    results: list[broker_pb2.ProducePartitionResult | None],
    timeout_s: float,
    coordinator: bool,
    leader_hint: Callable[[str, int], tuple[int, int]],
    *,
    on_appended: Callable[[], None] | None = None,
) -> None:
    """Append the entries of a produce request, a round at a time (each round holds the indexes of
    one entry per partition), the ISRs awaited once after the last; each entry's result into
    `results`. A coordinator's writes to __consumer_offsets go without sequences."""
    for indexes in rounds:
        for index in indexes:
            topic_meters(request.partitions[index].topic).total_produce.inc()
    outcomes = await replicas.append_rounds(
        [
            [
                (
                    entry.topic,
                    entry.partition,
                    CoordinatorWrite(entry.record_batches)
                    if coordinator and entry.topic == CONSUMER_OFFSETS_TOPIC
                    else entry.record_batches,
                )
                for entry in (request.partitions[index] for index in indexes)
            ]
            for indexes in rounds
        ],
        acks=request.acks,
        timeout_s=timeout_s,
        on_appended=on_appended,
    )
    for indexes, round_outcomes in zip(rounds, outcomes, strict=True):
        for index, outcome in zip(indexes, round_outcomes, strict=True):
            results[index] = _result(replicas, request.partitions[index], outcome, leader_hint)


def _result(
    replicas: ReplicaManager,
    entry: Any,
    outcome: AppendInfo | TidelogError,
    leader_hint: Callable[[str, int], tuple[int, int]],
) -> broker_pb2.ProducePartitionResult:
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
    return result
