"""WriteTxnMarkers (KIP-98): a transaction coordinator ends producers' transactions in the
partitions this broker leads by appending COMMIT or ABORT markers as leader, with acks=all, as
Kafka's ReplicaManager does for them (the coordinator completes a transaction only once every
marker is replicated).

A request may name one partition for several producers; appends to one partition go in rounds,
each round one append per partition (ReplicaManager.append_rounds' rule), in request order, the
ISRs awaited once after the last round.
"""

from __future__ import annotations

from typing import Final

from tidelog.broker.replica_manager import MarkerWrite, ReplicaManager, in_rounds
from tidelog.broker.storage import AppendInfo
from tidelog.common.errors import ErrorCode, InvalidRequestError, TidelogError
from tidelog.common.record.control import ControlType, Marker
from tidelog.v1 import broker_pb2

__all__ = ["MARKERS_PER_REQUEST_MAX", "MARKER_TIMEOUT_S", "refused_markers", "write_txn_markers"]

MARKERS_PER_REQUEST_MAX: Final = 10_000  # marker × partition pairs in one request
MARKER_TIMEOUT_S: Final = 30.0  # the longest wait for the ISR (Kafka: request.timeout.ms), less with a deadline


Pending = tuple[broker_pb2.TxnMarkerPartitionResult, tuple[str, int, MarkerWrite]]


def refused_markers(request: broker_pb2.WriteTxnMarkersRequest, code: ErrorCode) -> broker_pb2.WriteTxnMarkersResponse:
    """Every partition of every marker answered with `code`."""
    response = broker_pb2.WriteTxnMarkersResponse()
    for marker in request.markers:
        result = response.markers.add(producer_id=marker.producer_id)
        for entry in marker.partitions:
            result.partitions.add(topic=entry.topic, partition=entry.partition, error_code=int(code))
    return response


async def write_txn_markers(
    replicas: ReplicaManager, request: broker_pb2.WriteTxnMarkersRequest, *, timeout_s: float
) -> broker_pb2.WriteTxnMarkersResponse:
    pending: list[Pending] = []
    response = broker_pb2.WriteTxnMarkersResponse()
    total = sum(len(marker.partitions) for marker in request.markers)
    for marker in request.markers:
        result = response.markers.add(producer_id=marker.producer_id)
        control = ControlType.COMMIT if marker.committed else ControlType.ABORT
        write = MarkerWrite(marker.producer_id, marker.producer_epoch, Marker(control, marker.coordinator_epoch))
        for entry in marker.partitions:
            outcome = result.partitions.add(topic=entry.topic, partition=entry.partition)
            if total > MARKERS_PER_REQUEST_MAX or marker.producer_id < 0 or not 0 <= marker.producer_epoch < 2**15:
                error = InvalidRequestError(
                    f"a marker needs a producer id and epoch, and a request at most {MARKERS_PER_REQUEST_MAX}"
                )
                outcome.error_code, outcome.error_message = int(error.code), error.message
                continue
            pending.append((outcome, (entry.topic, entry.partition, write)))
    rounds = in_rounds(pending, lambda item: item[1][:2])  # a partition's markers a round each, in order
    outcomes = await replicas.append_rounds(
        [[entry for _, entry in round_] for round_ in rounds], acks=-1, timeout_s=timeout_s
    )
    for round_, round_outcomes in zip(rounds, outcomes, strict=True):
        for (result, _), outcome in zip(round_, round_outcomes, strict=True):
            if isinstance(outcome, TidelogError):
                result.error_code, result.error_message = int(outcome.code), outcome.message
            else:
                assert isinstance(outcome, AppendInfo)
    return response
