"""Transactions on real brokers, below the producer API: transactional batches and the markers a
transaction coordinator writes (WriteTxnMarkers), read back with each isolation level, and the
same answers from a new leader after the old one dies."""

from __future__ import annotations

import signal

import grpc

from tidelog.client import AdminClient, Consumer, TopicPartition
from tidelog.common.errors import ErrorCode
from tidelog.common.record.batch import encode_batch
from tidelog.dev.local_cluster import LocalCluster
from tidelog.v1 import broker_pb2, broker_pb2_grpc

from .conftest import wait_until


def _transactional(producer_id: int, values: list[bytes], sequence: int = 0) -> bytes:
    return encode_batch(values, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True)


def _marker(producer_id: int, topic: str, *, committed: bool) -> broker_pb2.WriteTxnMarkersRequest:
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


async def _leader(admin: AdminClient, cluster: LocalCluster, topic: str) -> tuple[int, str]:
    described = (await admin.describe_topics([topic]))[topic]
    assert not isinstance(described, Exception)
    leader = described.partitions[0].leader
    return leader, cluster.broker_endpoint(leader) if leader >= 0 else ""


async def _produce(stub: broker_pb2_grpc.BrokerStub, topic: str, data: bytes) -> int:
    response = await stub.Produce(
        broker_pb2.ProduceRequest(
            acks=-1, timeout_ms=10_000, partitions=[broker_pb2.ProducePartition(topic=topic, record_batches=data)]
        )
    )
    result = response.partitions[0]
    assert result.error_code == 0, result.error_message
    return int(result.base_offset)


async def _read(cluster: LocalCluster, topic: str, isolation: str, end: int) -> list[bytes | None]:
    """Every record a consumer with `isolation` returns from the start until its position is `end`."""
    tp = TopicPartition(topic, 0)
    values: list[bytes | None] = []
    async with Consumer(cluster.bootstrap, isolation_level=isolation) as consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning([tp])

        async def at_end() -> bool:
            values.extend(record.value for record in await consumer.poll(200))
            return await consumer.position(tp) >= end

        await wait_until(at_end, what=f"a {isolation} consumer at offset {end}")
    return values


async def _ends(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    """(end offset for read_uncommitted, for read_committed): the high and last stable offsets."""
    tp = TopicPartition(topic, 0)
    ends = []
    for isolation in ("read_uncommitted", "read_committed"):
        async with Consumer(cluster.bootstrap, isolation_level=isolation) as consumer:
            ends.append((await consumer.end_offsets([tp]))[tp])
    return ends[0], ends[1]


async def _write_transactions(cluster: LocalCluster, admin: AdminClient, topic: str) -> None:
    """Offsets: 0-1 producer A (aborted), 2 producer B (committed), 3 plain, 4 A's ABORT, 5 B's COMMIT."""
    await admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    _, endpoint = await wait_until(lambda: _leader(admin, cluster, topic), what="a leader")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        a, b = [(await stub.InitProducerId(broker_pb2.InitProducerIdRequest())).producer_id for _ in range(2)]
        assert await _produce(stub, topic, _transactional(a, [b"a0", b"a1"])) == 0
        assert await _produce(stub, topic, _transactional(b, [b"b0"])) == 2
        assert await _produce(stub, topic, encode_batch([b"plain"])) == 3
        # Both transactions open: read_committed ends at the first one's start.
        assert await _ends(cluster, topic) == (4, 0)
        refused = await stub.Produce(
            broker_pb2.ProduceRequest(
                acks=-1,
                timeout_ms=10_000,
                partitions=[
                    broker_pb2.ProducePartition(
                        topic=topic,
                        record_batches=encode_batch([b"x"], producer_id=a, producer_epoch=0, base_sequence=2),
                    )
                ],
            )
        )
        assert refused.partitions[0].error_code == ErrorCode.INVALID_TXN_STATE
        for producer_id, committed in ((a, False), (b, True)):
            answer = await stub.WriteTxnMarkers(_marker(producer_id, topic, committed=committed))
            assert [result.error_code for result in answer.markers[0].partitions] == [0]
    # Markers go with acks=all: answered, they are below the high watermark and the partition is stable.
    assert await _ends(cluster, topic) == (6, 6)


async def test_read_committed_skips_aborted_transactions_and_no_reader_sees_markers(
    cluster: LocalCluster, topic_name: str
) -> None:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await _write_transactions(cluster, admin, topic_name)
    assert await _read(cluster, topic_name, "read_committed", 6) == [b"b0", b"plain"]
    assert await _read(cluster, topic_name, "read_uncommitted", 6) == [b"a0", b"a1", b"b0", b"plain"]


async def test_a_new_leader_answers_read_committed_as_the_old_one(fresh_cluster: LocalCluster) -> None:
    """Followers replicate the markers and build the aborted-transaction index themselves."""
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await _write_transactions(fresh_cluster, admin, "moved")
        leader, _ = await _leader(admin, fresh_cluster, "moved")
        fresh_cluster.signal(f"broker-{leader}", signal.SIGKILL)

        async def moved() -> int | None:
            found, _ = await _leader(admin, fresh_cluster, "moved")
            return found if found not in (leader, -1) else None

        await wait_until(moved, what="a new leader")
    assert await _read(fresh_cluster, "moved", "read_committed", 6) == [b"b0", b"plain"]
    assert await _ends(fresh_cluster, "moved") == (6, 6)
