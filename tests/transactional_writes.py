"""Transactions written below the producer API, straight to a partition leader: transactional
batches, then the markers a transaction coordinator would write (WriteTxnMarkers). Shared by the
cluster and Spark tests, which read them back with each isolation level.

The layout of partition 0 they leave: 0-1 producer A's records (aborted), 2 producer B's (committed),
3 a plain record, 4 A's ABORT marker, 5 B's COMMIT marker.
"""

from __future__ import annotations

from tidelog.common.record.batch import encode_batch
from tidelog.v1 import broker_pb2, broker_pb2_grpc

__all__ = [
    "COMMITTED",
    "EVERY_RECORD",
    "end_transactions",
    "marker_request",
    "produce",
    "transactional",
    "write_open_transactions",
]

COMMITTED = [b"b0", b"plain"]  # what read_committed readers see
EVERY_RECORD = [b"a0", b"a1", b"b0", b"plain"]  # what read_uncommitted readers see (never the markers)


def transactional(producer_id: int, values: list[bytes], sequence: int = 0) -> bytes:
    return encode_batch(values, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True)


def marker_request(producer_id: int, topic: str, *, committed: bool) -> broker_pb2.WriteTxnMarkersRequest:
    return broker_pb2.WriteTxnMarkersRequest(
        markers=[
            broker_pb2.TxnMarker(
                producer_id=producer_id,
                producer_epoch=0,
                committed=committed,
                coordinator_epoch=0,
                partitions=[broker_pb2.TxnMarkerPartition(topic=topic, partition=0)],
            )
        ]
    )


async def produce(stub: broker_pb2_grpc.BrokerStub, topic: str, data: bytes) -> int:
    response = await stub.Produce(
        broker_pb2.ProduceRequest(
            acks=-1, timeout_ms=10_000, partitions=[broker_pb2.ProducePartition(topic=topic, record_batches=data)]
        )
    )
    result = response.partitions[0]
    assert result.error_code == 0, result.error_message
    return int(result.base_offset)


async def write_open_transactions(stub: broker_pb2_grpc.BrokerStub, topic: str) -> tuple[int, int]:
    """Offsets 0-3; both transactions left open. Returns producer ids (A, B)."""
    a, b = [(await stub.InitProducerId(broker_pb2.InitProducerIdRequest())).producer_id for _ in range(2)]
    assert await produce(stub, topic, transactional(a, [b"a0", b"a1"])) == 0
    assert await produce(stub, topic, transactional(b, [b"b0"])) == 2
    assert await produce(stub, topic, encode_batch([b"plain"])) == 3
    return a, b


async def end_transactions(stub: broker_pb2_grpc.BrokerStub, topic: str, a: int, b: int) -> None:
    """Offsets 4-5: A aborted, B committed (acks=all, as a coordinator's markers go)."""
    for producer_id, committed in ((a, False), (b, True)):
        answer = await stub.WriteTxnMarkers(marker_request(producer_id, topic, committed=committed))
        assert [result.error_code for result in answer.markers[0].partitions] == [0]
