"""Topic lifecycle and bad input, through the admin client, against real processes."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from etcd3aio import Etcd3Client, prefix_range_end

from tidelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from tidelog.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidelog.common.settings import SecuritySettings
from tidelog.coordinator.main import _ensure_offsets_topic
from tidelog.dev.local_cluster import LocalCluster
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC, TOPICS_PREFIX
from tidelog.v1 import controller_pb2

from .conftest import wait_until


async def _etcd_topic_keys(cluster: LocalCluster, topic: str) -> list[str]:
    etcd = Etcd3Client([cluster.etcd.endpoint])
    await etcd.connect()
    try:
        assert etcd.kv is not None
        prefix = f"{TOPICS_PREFIX}{topic}".encode()
        response = await etcd.kv.get(prefix, prefix_range_end(prefix))
        return sorted(kv.key.decode() for kv in response.kvs)
    finally:
        await etcd.close()


async def test_topic_lifecycle(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    await admin.create_topic(topic_name, 4, 2, {"retention.ms": "3600000"})
    described = (await admin.describe_topics([topic_name]))[topic_name]
    assert not isinstance(described, Exception)
    assert [state.partition for state in described.partitions] == [0, 1, 2, 3]
    assert all(len(state.replicas) == 2 and state.leader == state.replicas[0] for state in described.partitions)
    assert described.configs == {"retention.ms": "3600000"}
    assert topic_name in await admin.list_topics()
    assert len(await _etcd_topic_keys(cluster, topic_name)) == 1 + 4  # the topic record and 4 states

    assert (await admin.alter_configs(topic_name, {"cleanup.policy": "compact"}, ["retention.ms"]))[topic_name] is None
    assert (await admin.create_partitions({topic_name: 6}))[topic_name] is None

    async def grown() -> bool:
        topic = (await admin.describe_topics([topic_name]))[topic_name]
        return (
            not isinstance(topic, Exception)
            and len(topic.partitions) == 6
            and topic.configs == {"cleanup.policy": "compact"}
        )

    await wait_until(grown, what="six partitions and the new config")
    assert (await admin.delete_topics([topic_name]))[topic_name] is None
    assert await _etcd_topic_keys(cluster, topic_name) == []
    gone = (await admin.describe_topics([topic_name]))[topic_name]
    assert isinstance(gone, UnknownTopicOrPartitionError)


async def test_a_recreated_topic_starts_empty(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    await admin.create_topic(topic_name, 1, 1)
    async with Producer(cluster.bootstrap) as producer:
        await (await producer.send_batch(topic_name, [b"old"] * 10))
    await admin.delete_topics([topic_name])
    await admin.create_topic(topic_name, 1, 1)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic_name, 0)])
        assert await wait_until(lambda: consumer.list_offsets([TopicPartition(topic_name, 0)], -1)) == {
            TopicPartition(topic_name, 0): 0
        }


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        (NewTopic("bad name", 1, 1), InvalidTopicError),
        (NewTopic("x" * 250, 1, 1), InvalidTopicError),
        (NewTopic("..", 1, 1), InvalidTopicError),
        (NewTopic("ok-name-p0", 0, 1), InvalidPartitionsError),
        (NewTopic("ok-name-rf4", 1, 4), InvalidReplicationFactorError),
        (NewTopic("ok-name-rf0", 1, 0), InvalidReplicationFactorError),
    ],
)
async def test_bad_topics_are_refused_and_nothing_is_written(
    admin: AdminClient, cluster: LocalCluster, topic: NewTopic, error: type[Exception]
) -> None:
    result = (await admin.create_topics([topic]))[topic.name]
    assert isinstance(result, error)
    assert await _etcd_topic_keys(cluster, topic.name) == []


async def test_bad_configs_and_duplicates(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    result = (await admin.create_topics([NewTopic(topic_name, 1, 1, {"segment.bytes": "12"})]))[topic_name]
    assert result is not None and result.code == ErrorCode.INVALID_CONFIG
    result = (await admin.create_topics([NewTopic(topic_name, 1, 1, {"no.such": "1"})]))[topic_name]
    assert result is not None and result.code == ErrorCode.INVALID_CONFIG
    assert await _etcd_topic_keys(cluster, topic_name) == []
    await admin.create_topic(topic_name, 1, 1)
    with pytest.raises(TopicAlreadyExistsError):
        await admin.create_topic(topic_name, 3, 1)
    assert len(await _etcd_topic_keys(cluster, topic_name)) == 2  # the first creation, untouched
    unknown = await admin.delete_topics(["no-such-topic"])
    assert isinstance(unknown["no-such-topic"], UnknownTopicOrPartitionError)


async def test_validate_only_writes_nothing(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    assert (await admin.create_topics([NewTopic(topic_name, 3, 2)], validate_only=True))[topic_name] is None
    assert await _etcd_topic_keys(cluster, topic_name) == []


async def test_oversized_request_is_refused_with_a_status(admin: AdminClient, cluster: LocalCluster) -> None:
    stub = admin.connections.controller(cluster.controller_endpoints[0])
    huge = controller_pb2.CreateTopicsRequest(
        topics=[controller_pb2.NewTopic(name="big", num_partitions=1, configs={"x": "y" * (101 * 1024 * 1024)})]
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateTopics(huge, timeout=30)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await _etcd_topic_keys(cluster, "big") == []


async def test_topics_created_concurrently_all_serve(admin: AdminClient, cluster: LocalCluster) -> None:
    names = [f"burst-{number}" for number in range(12)]
    await asyncio.gather(*(admin.create_topic(name, 2, 1) for name in names))
    async with Producer(cluster.bootstrap, acks=1, delivery_timeout_ms=20_000) as producer:
        deliveries = [await producer.send(name, b"x", partition=partition) for name in names for partition in (0, 1)]
        await producer.flush()
        offsets = [(await delivery).offset for delivery in deliveries]
    assert offsets == [0] * len(deliveries)
    await admin.delete_topics(names)


async def test_altered_configs_reach_the_brokers(admin: AdminClient, cluster: LocalCluster, topic_name: str) -> None:
    await admin.create_topic(topic_name, 1, 1)
    async with Producer(cluster.bootstrap, retries=0) as producer:
        assert (await (await producer.send(topic_name, b"x" * 2000, partition=0))).offset == 0
        assert (await admin.alter_configs(topic_name, {"max.message.bytes": "1000"}))[topic_name] is None

        async def refused() -> bool:
            try:
                await (await producer.send(topic_name, b"x" * 2000, partition=0))
            except RecordTooLargeError:
                return True
            return False

        await wait_until(refused, what="the broker to apply max.message.bytes=1000")
        assert (await (await producer.send(topic_name, b"small", partition=0))).offset >= 1


async def test_the_offsets_topic_waits_for_its_replication_factor_in_live_brokers(cluster: LocalCluster) -> None:
    """Issue 32: __consumer_offsets came out with RF 2 in some dev clusters (a coordinator started
    before the third broker registered). As Kafka, it is created with offsets.topic.replication.factor
    replicas or not at all: here 4 of 3 brokers, so a coordinator waits, then says why."""
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        described = (await admin.describe_topics([CONSUMER_OFFSETS_TOPIC]))[CONSUMER_OFFSETS_TOPIC]
    assert isinstance(described, Exception), "the shared cluster runs no coordinator: nobody made it"
    with pytest.raises(RuntimeError, match=r"offsets.topic.replication.factor=4 live brokers; 3 registered"):
        await _ensure_offsets_topic(cluster.bootstrap, 1, 4, security=SecuritySettings.from_configs(), wait_s=1.0)
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        assert isinstance((await admin.describe_topics([CONSUMER_OFFSETS_TOPIC]))[CONSUMER_OFFSETS_TOPIC], Exception)
