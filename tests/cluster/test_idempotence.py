"""The idempotent producer against real brokers: ids, dedupe across restarts and leader changes."""

from __future__ import annotations

import asyncio
import signal

import grpc

from tests.kafka_frames import idempotent_batch, produce_frame, read_produce_answer
from tidelog.client import AdminClient, Producer
from tidelog.common.errors import ErrorCode
from tidelog.common.record.batch import encode_batch
from tidelog.dev.local_cluster import LocalCluster
from tidelog.v1 import broker_pb2, broker_pb2_grpc

from .conftest import wait_until


async def _stub(endpoint: str) -> tuple[grpc.aio.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.aio.insecure_channel(endpoint)
    return channel, broker_pb2_grpc.BrokerStub(channel)


async def test_producer_ids_are_unique_across_brokers(cluster: LocalCluster) -> None:
    channels = [await _stub(endpoint) for endpoint in cluster.bootstrap]
    try:
        answers = await asyncio.gather(
            *(stub.InitProducerId(broker_pb2.InitProducerIdRequest()) for _ in range(20) for _, stub in channels)
        )
        assert all(answer.error_code == 0 and answer.producer_epoch == 0 for answer in answers)
        ids = [answer.producer_id for answer in answers]
        assert len(set(ids)) == len(ids) and min(ids) >= 0
        refused = await channels[0][1].InitProducerId(broker_pb2.InitProducerIdRequest(transactional_id="tx"))
        assert refused.error_code == ErrorCode.INVALID_REQUEST and "transaction coordinator" in refused.error_message
    finally:
        for channel, _ in channels:
            await channel.close()


def _batch(producer_id: int, sequence: int, count: int = 2) -> bytes:
    return encode_batch(
        [b"seq-%d" % (sequence + index) for index in range(count)],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    )


async def _produce(stub: broker_pb2_grpc.BrokerStub, topic: str, data: bytes) -> broker_pb2.ProducePartitionResult:
    response = await stub.Produce(
        broker_pb2.ProduceRequest(
            acks=-1, timeout_ms=10_000, partitions=[broker_pb2.ProducePartition(topic=topic, record_batches=data)]
        )
    )
    result: broker_pb2.ProducePartitionResult = response.partitions[0]
    return result


async def _leader_endpoint(admin: AdminClient, cluster: LocalCluster, topic: str) -> tuple[int, str]:
    described = (await admin.describe_topics([topic]))[topic]
    assert not isinstance(described, Exception)
    leader = described.partitions[0].leader
    return leader, cluster.broker_endpoint(leader) if leader >= 0 else ""


async def test_a_retried_batch_is_written_once_even_after_a_restart_and_a_leader_change(
    fresh_cluster: LocalCluster,
) -> None:
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic("once", 1, 3, {"min.insync.replicas": "2"})
        leader, endpoint = await _leader_endpoint(admin, fresh_cluster, "once")
        channel, stub = await _stub(endpoint)
        producer_id = (await stub.InitProducerId(broker_pb2.InitProducerIdRequest())).producer_id
        first = await _produce(stub, "once", _batch(producer_id, 0))
        assert first.error_code == 0 and first.base_offset == 0
        second = await _produce(stub, "once", _batch(producer_id, 2))
        repeat = await _produce(stub, "once", _batch(producer_id, 0))
        assert repeat.error_code == 0 and repeat.base_offset == first.base_offset  # the original offset
        gap = await _produce(stub, "once", _batch(producer_id, 7))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        await channel.close()

        # The leader dies: the new one (a follower until now) knows the producer from replication.
        fresh_cluster.signal(f"broker-{leader}", signal.SIGKILL)

        async def moved() -> tuple[int, str] | None:
            found = await _leader_endpoint(admin, fresh_cluster, "once")
            return found if found[0] not in (leader, -1) else None

        _, endpoint = await wait_until(moved, what="a new leader")
        channel, stub = await _stub(endpoint)
        again = await _produce(stub, "once", _batch(producer_id, 2))
        assert again.error_code == 0 and again.base_offset == second.base_offset
        await channel.close()

        # Every broker restarts (clean stop): the state comes back from the snapshots.
        fresh_cluster.start_broker(leader)
        for broker in (1, 2, 3):
            if broker != leader:
                assert fresh_cluster.signal(f"broker-{broker}", signal.SIGTERM) == 0
                fresh_cluster.start_broker(broker)

        async def led() -> str | None:
            found = await _leader_endpoint(admin, fresh_cluster, "once")
            return found[1] if found[0] != -1 else None

        async def answered() -> broker_pb2.ProducePartitionResult | None:
            channel, stub = await _stub(await led() or fresh_cluster.bootstrap[0])
            try:
                result = await _produce(stub, "once", _batch(producer_id, 2))
                return result if result.error_code == 0 else None
            finally:
                await channel.close()

        after = await wait_until(answered, timeout_s=60, what="the restarted cluster to take produce requests")
        assert after.base_offset == second.base_offset


async def test_the_client_turns_idempotence_on_with_acks_all(cluster: LocalCluster, topic_name: str) -> None:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 2, 3)
    async with Producer(cluster.bootstrap) as producer:
        assert producer.settings.idempotent and producer.settings.required_acks == -1
        deliveries = [await producer.send(topic_name, b"%d" % number, partition=number % 2) for number in range(100)]
        offsets = [(await delivery).offset for delivery in deliveries]
        assert sorted(offsets[0::2]) == list(range(50)) and sorted(offsets[1::2]) == list(range(50))
    async with Producer(cluster.bootstrap, acks=1) as producer:
        assert not producer.settings.idempotent


async def test_a_kafka_connection_hears_a_refused_batchs_error_not_out_of_order_for_the_next_one(
    cluster: LocalCluster, topic_name: str
) -> None:
    """The librdkafka window (kafka_api/produce_sequences.py) on real brokers: a batch refused for
    too small an ISR, the ISR large enough again, the next batch of the same producer on the same
    connection. It would fail the sequence check (OUT_OF_ORDER: librdkafka bumps its epoch and can
    write twice); it gets NOT_ENOUGH_REPLICAS, as the refused one did, and both go in when resent.
    The ISR size is moved by min.insync.replicas (4 of 3 replicas refuses every acks=all batch)."""
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
        leader, endpoint = await _leader_endpoint(admin, cluster, topic_name)
        channel, stub = await _stub(endpoint)
        producer_id = (await stub.InitProducerId(broker_pb2.InitProducerIdRequest())).producer_id
        await channel.close()
        host, port = cluster.host_of(f"broker-{leader}"), cluster.ports.kafka[leader]
        reader, writer = await asyncio.open_connection(host, port)
        correlation = iter(range(1000))

        async def send(sequence: int, on: tuple[asyncio.StreamReader, asyncio.StreamWriter] = (reader, writer)) -> dict:
            on[1].write(produce_frame(next(correlation), topic_name, 0, idempotent_batch(producer_id, sequence)))
            return (await read_produce_answer(on[0]))[1]

        async def min_insync(value: str, answers: int) -> None:
            """Set it, and wait until the leader answers a plain acks=all batch with `answers`."""
            assert (await admin.alter_configs(topic_name, {"min.insync.replicas": value}))[topic_name] is None
            probe_reader, probe_writer = await asyncio.open_connection(host, port)

            async def applied() -> bool:
                probe_writer.write(produce_frame(next(correlation), topic_name, 0, encode_batch([b"probe"])))
                return (await read_produce_answer(probe_reader))[1]["ErrorCode"] == answers

            try:
                await wait_until(applied, what=f"min.insync.replicas={value} in force")
            finally:
                probe_writer.close()

        try:
            assert (await send(0))["ErrorCode"] == 0
            await min_insync("4", ErrorCode.NOT_ENOUGH_REPLICAS)
            assert (await send(2))["ErrorCode"] == ErrorCode.NOT_ENOUGH_REPLICAS
            await min_insync("2", 0)
            held = await send(4)  # sequence 2 is missing: the sequence check would say OUT_OF_ORDER
            assert held["ErrorCode"] == ErrorCode.NOT_ENOUGH_REPLICAS, held
            assert "refused on this connection" in held["ErrorMessage"]
            resent, then = await send(2), await send(4)
            assert (resent["ErrorCode"], then["ErrorCode"]) == (0, 0)
            assert then["BaseOffset"] == resent["BaseOffset"] + 2
            # Another connection has no refusal behind it: a real gap is OUT_OF_ORDER there.
            other = await asyncio.open_connection(host, port)
            try:
                assert (await send(10, other))["ErrorCode"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            finally:
                other[1].close()
        finally:
            writer.close()
