"""Producing and consuming through real brokers."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Coroutine
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.cluster.conftest import poll_until
from tidelog.client import EARLIEST, LATEST, AdminClient, Consumer, Producer, TopicPartition
from tidelog.client.murmur2 import partition_for_key
from tidelog.client.sync import SyncAdminClient, SyncConsumer, SyncProducer
from tidelog.common.errors import ErrorCode, TidelogError, UnknownTopicOrPartitionError
from tidelog.common.record.batch import encode_batch
from tidelog.dev.local_cluster import LocalCluster
from tidelog.v1 import broker_pb2

RECORDS = 100_000


async def _consume_all(cluster: LocalCluster, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    by_partition: dict[int, list[bytes]] = {partition: [] for partition in range(partitions)}
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([TopicPartition(topic, partition) for partition in range(partitions)])
        total = 0
        for _ in range(2000):
            if total >= expected:
                break
            for tp, fetched in (await consumer.poll_batches(1000)).items():
                for batch in fetched.batches:
                    for offset, value in zip(batch.offsets, batch.values, strict=True):
                        if offset >= fetched.start_offset:
                            assert offset == len(by_partition[tp.partition]), "offsets are dense and in order"
                            by_partition[tp.partition].append(value or b"")
                            total += 1
    return by_partition


async def test_100k_records_through_3_brokers(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    await admin.create_topic(topic_name, 6, 1)
    values = [b"%08d" % number for number in range(RECORDS)]
    async with Producer(cluster.bootstrap, acks="all", linger_ms=2) as producer:
        first = [await producer.send(topic_name, value) for value in values[: RECORDS // 2]]
        bulk = await producer.send_batch(topic_name, values[RECORDS // 2 :])
        await producer.flush()
        acknowledged = [await delivery for delivery in first]
        bulk_results = await bulk
    assert len(acknowledged) == RECORDS // 2
    assert sum(count for _, _, count in bulk_results) == RECORDS // 2
    leaders = {state.leader for state in (await admin.describe_topics([topic_name]))[topic_name].partitions}  # type: ignore[union-attr]
    assert leaders == {1, 2, 3}
    consumed = await _consume_all(cluster, topic_name, 6, RECORDS)
    everything = sorted(value for partition in consumed.values() for value in partition)
    assert everything == values  # every record, once


async def test_keys_land_where_kafka_puts_them(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    await admin.create_topic(topic_name, 5, 1)
    keys = [b"user-%d" % number for number in range(200)]
    async with Producer(cluster.bootstrap) as producer:
        deliveries = [await producer.send(topic_name, b"v", key=key) for key in keys]
        await producer.flush()
        placed = [(await delivery).partition for delivery in deliveries]
    assert placed == [partition_for_key(key, 5) for key in keys]


async def test_consumer_long_polls_and_seeks(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    await admin.create_topic(topic_name, 1, 1)
    tp = TopicPartition(topic_name, 0)
    async with Consumer(cluster.bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=5000) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 0
        polling = asyncio.create_task(consumer.poll(10_000))
        async with Producer(cluster.bootstrap, linger_ms=0) as producer:
            await (await producer.send(topic_name, b"hello", headers=(("trace", b"1"),), timestamp=1234))
        records = await asyncio.wait_for(polling, 10)  # answered by the append, not by the timeout
        assert [(r.offset, r.value, r.timestamp, r.headers) for r in records] == [
            (0, b"hello", 1234, (("trace", b"1"),))
        ]
        async with Producer(cluster.bootstrap) as producer:
            await (await producer.send_batch(topic_name, [b"a", b"b", b"c"], partition=0))
        consumer.seek(tp, 2)
        assert [record.value for record in await consumer.poll(5000)] == [b"b", b"c"]
        await consumer.seek_to_beginning()
        assert [record.offset for record in await consumer.poll(5000)] == [0, 1, 2, 3]
        offsets = await consumer.list_offsets([tp], 1234)
        assert offsets == {tp: 0}
        await consumer.seek_to_end()
        assert await consumer.position(tp) == 4


async def test_broker_answers_bad_requests_per_partition(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    await admin.create_topic(topic_name, 1, 1)
    leader = (await admin.describe_topics([topic_name]))[topic_name].partitions[0].leader  # type: ignore[union-attr]
    other = next(broker for broker in cluster.broker_ids if broker != leader)
    follower_stub = admin.connections.broker(cluster.bootstrap[other - 1])
    leader_stub = admin.connections.broker(cluster.bootstrap[leader - 1])
    batch = encode_batch([b"x"])

    def produce(topic: str, partition: int, data: bytes, acks: int = 1) -> broker_pb2.ProduceRequest:
        return broker_pb2.ProduceRequest(
            acks=acks, partitions=[broker_pb2.ProducePartition(topic=topic, partition=partition, record_batches=data)]
        )

    not_leader = (await follower_stub.Produce(produce(topic_name, 0, batch))).partitions[0]
    assert (not_leader.error_code, not_leader.leader_hint) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, leader)
    corrupt = bytearray(batch)
    corrupt[-1] ^= 1
    assert (await leader_stub.Produce(produce(topic_name, 0, bytes(corrupt)))).partitions[
        0
    ].error_code == ErrorCode.CORRUPT_MESSAGE
    assert (await leader_stub.Produce(produce(topic_name, 0, batch, acks=5))).partitions[
        0
    ].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert (await leader_stub.Produce(produce(topic_name, 7, batch))).partitions[
        0
    ].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    fetch = broker_pb2.FetchRequest(
        max_wait_ms=0, partitions=[broker_pb2.FetchPartition(topic=topic_name, partition=0, fetch_offset=99)]
    )
    assert (await leader_stub.Fetch(fetch)).partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_one_produce_of_many_partitions_answers_each_and_keeps_a_partitions_batches_in_order(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    # The broker appends a request's partitions together (ReplicaManager.append_all): one bad
    # partition fails alone, and two batches of one partition land in the request's order.
    await admin.create_topic(topic_name, 6, 1)
    described = (await admin.describe_topics([topic_name]))[topic_name]
    assert not isinstance(described, Exception)
    leader = described.partitions[0].leader
    led = [state.partition for state in described.partitions if state.leader == leader]
    elsewhere = [state.partition for state in described.partitions if state.leader != leader]
    corrupt = bytearray(encode_batch([b"bad"]))
    corrupt[-1] ^= 1
    entries = [(partition, encode_batch([b"first-%d" % partition])) for partition in led]
    entries += [(led[0], encode_batch([b"second"])), (led[0], bytes(corrupt)), (99, encode_batch([b"x"]))]
    entries += [(partition, encode_batch([b"y"])) for partition in elsewhere]  # hosted elsewhere (RF 1)
    request = broker_pb2.ProduceRequest(
        acks=-1,
        partitions=[
            broker_pb2.ProducePartition(topic=topic_name, partition=partition, record_batches=data)
            for partition, data in entries
        ],
    )
    answers = (await admin.connections.broker(cluster.bootstrap[leader - 1]).Produce(request)).partitions
    assert [answer.partition for answer in answers] == [partition for partition, _ in entries]
    unknown = {99, *elsewhere}
    for (partition, data), answer in zip(entries, answers, strict=True):
        if data == bytes(corrupt):
            assert answer.error_code == ErrorCode.CORRUPT_MESSAGE
        elif partition in unknown:
            assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            assert (answer.error_code, answer.base_offset) == (0, 1 if data.endswith(b"second") else 0), answer
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic_name, led[0])])
        assert [record.value for record in await poll_until(consumer, 2)] == [b"first-%d" % led[0], b"second"]


async def test_every_service_has_health_and_metrics(cluster: LocalCluster) -> None:
    for endpoint, service in [
        *((endpoint, "tidelog.v1.Broker") for endpoint in cluster.bootstrap),
        *((endpoint, "tidelog.v1.Controller") for endpoint in cluster.controller_endpoints),
    ]:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    for name, family in [("broker-1", b"kafka_server_"), ("controller-1", b"kafka_controller_")]:
        text = await asyncio.to_thread(_get, cluster.metrics_endpoint(name))
        assert family in text and b"process_cpu_seconds_total" in text


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


def test_sync_facade_for_scripts(cluster: LocalCluster, topic_name: str) -> None:
    admin = SyncAdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints)
    producer = SyncProducer(cluster.bootstrap, acks="all")
    consumer = SyncConsumer(cluster.bootstrap, auto_offset_reset="earliest")
    try:
        admin.create_topic(topic_name, 2, 1)
        assert topic_name in admin.list_topics()
        futures = [producer.send(topic_name, b"v%d" % number, partition=number % 2) for number in range(10)]
        metadata = [future.result(timeout=30) for future in futures]
        assert sorted((m.partition, m.offset) for m in metadata) == [(p, o) for p in (0, 1) for o in range(5)]
        assert sum(count for _, _, count in producer.send_batch(topic_name, [b"bulk"] * 100, partition=1)) == 100
        consumer.assign([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        records: list[bytes] = []
        for _ in range(50):
            records.extend(record.value or b"" for record in consumer.poll(500))
            if len(records) >= 110:
                break
        assert sorted(records) == sorted([b"v%d" % number for number in range(10)] + [b"bulk"] * 100)
        assert consumer.position(TopicPartition(topic_name, 1)) == 105
    finally:
        consumer.close()
        producer.close()
        admin.close()


async def test_controller_requests_for_another_broker_life_are_refused(
    admin: AdminClient, cluster: LocalCluster
) -> None:
    described = await admin.describe_cluster()
    broker = described.brokers[0]
    assert broker.incarnation  # every registration carries its process's incarnation
    stub = admin.connections.broker(f"{broker.host}:{broker.port}")
    stale = broker_pb2.LeaderAndIsrRequest(
        controller_id=described.controller_id,
        controller_epoch=described.controller_epoch,
        full=True,
        broker_incarnation="a-previous-life",
    )
    assert (await stub.LeaderAndIsr(stale, timeout=5)).error_code == ErrorCode.STALE_BROKER_EPOCH
    stop = broker_pb2.StopReplicaRequest(
        controller_id=described.controller_id,
        controller_epoch=described.controller_epoch,
        broker_incarnation="a-previous-life",
        delete_partitions=True,
    )
    assert (await stub.StopReplica(stop, timeout=5)).error_code == ErrorCode.STALE_BROKER_EPOCH


async def test_a_bulk_send_larger_than_buffer_memory_is_sent_as_it_is_buffered(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    await admin.create_topic(topic_name, 2, 1)
    values = [b"%099d" % number for number in range(20_000)]  # ~2 MiB through a 256 KiB buffer
    async with Producer(cluster.bootstrap, buffer_memory=256 * 1024, delivery_timeout_ms=20_000) as producer:
        delivery = await asyncio.wait_for(producer.send_batch(topic_name, values), 30)
        assert sum(count for _, _, count in await delivery) == len(values)
    consumed = await _consume_all(cluster, topic_name, 2, len(values))
    assert sorted(value for partition in consumed.values() for value in partition) == values


async def _refused(coroutine: Coroutine[Any, Any, object]) -> UnknownTopicOrPartitionError:
    with pytest.raises(UnknownTopicOrPartitionError) as caught:
        await coroutine
    return caught.value


async def test_send_waits_up_to_max_block_ms_for_a_topic_to_appear(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    async with Producer(cluster.bootstrap, max_block_ms=30_000, retry_backoff_ms=20) as producer:
        # Kafka's send() waits for metadata: a topic created while it waits is produced to.
        sending = asyncio.create_task(producer.send(topic_name, b"early", partition=1))
        await admin.create_topic(topic_name, 2, 1)
        delivered = await (await asyncio.wait_for(sending, 30))
        assert (delivered.partition, delivered.offset) == (1, 0)

    async with Producer(cluster.bootstrap, max_block_ms=300, retry_backoff_ms=20) as producer:
        missing = await _refused(producer.send("never-created", b"x"))
        assert "not present in metadata after max.block.ms=300" in str(missing)
        beyond = await _refused(producer.send(topic_name, b"x", partition=2))
        assert "partition 2" in str(beyond) and "(2 partitions)" in str(beyond)
        negative = await _refused(producer.send_batch(topic_name, [b"x"], partition=-1))
        assert "no partition -1" in str(negative)


async def test_a_delivery_is_future_like_and_offsets_read_without_magic_numbers(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    await admin.create_topic(topic_name, 1, 1, configs={"max.message.bytes": "1024"})
    tp = TopicPartition(topic_name, 0)
    async with Producer(cluster.bootstrap, acks="all", linger_ms=0) as producer:
        delivery = await producer.send(topic_name, b"first", partition=0)
        if not delivery.done():  # in flight: no result yet, as asyncio.Future says
            with pytest.raises(asyncio.InvalidStateError):
                delivery.result()
        settled = asyncio.Event()
        delivery.add_done_callback(lambda _: settled.set())
        metadata = await delivery
        await asyncio.wait_for(settled.wait(), timeout=10)
        assert delivery.done() and delivery.exception() is None
        assert delivery.result() == metadata and metadata.offset == 0
        await (await producer.send_batch(topic_name, [b"more"] * 9, partition=0))
        refused = await producer.send(topic_name, b"x" * 4096, partition=0)  # above the topic's limit
        with pytest.raises(TidelogError) as raised:
            await refused
        assert raised.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert refused.done() and refused.exception() is raised.value
        with pytest.raises(TidelogError):
            refused.result()
    async with Consumer(cluster.bootstrap) as consumer:
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 10}
        assert (await consumer.list_offsets([tp], LATEST), await consumer.list_offsets([tp], EARLIEST)) == (
            {tp: 10},
            {tp: 0},
        )


async def test_send_batch_carries_headers_per_record(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    await admin.create_topic(topic_name, 1, 1)
    headers = [(("n", b"%d" % n),) if n % 2 else () for n in range(500)]
    async with Producer(cluster.bootstrap, acks="all", batch_size=4096) as producer:  # several batches
        with pytest.raises(TidelogError, match="3 headers for 2 values"):
            await producer.send_batch(topic_name, [b"a", b"b"], headers=[(), (), ()])
        await (await producer.send_batch(topic_name, [b"v%d" % n for n in range(500)], partition=0, headers=headers))
    tp = TopicPartition(topic_name, 0)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = []
        while len(got) < 500:
            got += await consumer.poll(1000)
    assert [(r.value, r.headers) for r in got] == [(b"v%d" % n, headers[n]) for n in range(500)]


async def test_a_batch_header_marks_each_batch_with_the_records_it_holds(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    await admin.create_topic(topic_name, 1, 1)
    seen: list[list[int]] = []

    def marker(indexes: list[int]) -> tuple[str, bytes]:
        seen.append(list(indexes))
        return ("held", b"%d-%d" % (indexes[0], indexes[-1]))

    async with Producer(cluster.bootstrap, acks="all", batch_size=2048) as producer:  # several batches
        await (
            await producer.send_batch(topic_name, [b"v%03d" % n for n in range(300)], partition=0, batch_header=marker)
        )
    assert len(seen) > 1 and sorted(i for indexes in seen for i in indexes) == list(range(300))
    tp = TopicPartition(topic_name, 0)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = []
        while len(got) < 300:
            got += await consumer.poll(1000)
    marked = [(r.offset, r.headers) for r in got if r.headers]
    assert [headers for _, headers in marked] == [(("held", b"%d-%d" % (i[0], i[-1])),) for i in seen]
    assert [offset for offset, _ in marked] == [indexes[0] for indexes in seen]  # each batch's first record
