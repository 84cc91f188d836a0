"""The stream reader's offsets, driven call by call as PySpark drives them (initialOffset,
latestOffset, partitions), against a real cluster, with producers racing the calls: no record after
a query's start is skipped, and data loss is reported as Spark's Kafka source reports it.

These are the deterministic regression tests of issue 33's two silent losses: each fails on the
reader before it (the initial offset answered anew at every call; a re-created topic read on from
the old topic's offsets)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tests.cluster.conftest import wait_until
from tests.spark.test_source import _topic, _trimmed
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster
from tidelog.spark.data_loss import DataLossError
from tidelog.spark.options import read_options
from tidelog.spark.reading import OffsetRange
from tidelog.spark.source import StreamReader

ALL = ReadAllAvailable()


def _reader(cluster: LocalCluster, topic: str, **options: str) -> StreamReader:
    given = {"tidelog.bootstrap.servers": ",".join(cluster.bootstrap), "subscribe": topic, **options}
    return StreamReader(read_options(given, streaming=True))


def _create(cluster: LocalCluster, topic: str, partitions: int = 1) -> None:
    async def create() -> None:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic(topic, partitions, 1)

    asyncio.run(create())


def _produce(cluster: LocalCluster, topic: str, count: int, partition: int = 0) -> None:
    async def produce() -> None:
        async with Producer(cluster.bootstrap) as producer:
            await (await producer.send_batch(topic, [b"v"] * count, partition=partition))

    asyncio.run(produce())


def _recreate(cluster: LocalCluster, topic: str, records: int) -> None:
    """Delete `topic`, create it again (a new topic id) and write `records` to it."""

    async def recreate() -> None:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            assert (await admin.delete_topics([topic]))[topic] is None
            await admin.create_topic(topic, 1, 1)
        tp = TopicPartition(topic, 0)
        async with Consumer(cluster.bootstrap) as consumer:  # the new, empty log is served
            await wait_until(lambda: _is_empty(consumer, tp), what="the re-created topic served empty")

    asyncio.run(recreate())
    _produce(cluster, topic, records)


async def _is_empty(consumer: Consumer, tp: TopicPartition) -> bool:
    return (await consumer.end_offsets([tp]))[tp] == 0


def _offsets(*plans: list[OffsetRange]) -> list[int]:
    return sorted(o for plan in plans for r in plan for o in range(r.start, r.end))


def test_batch_0_runs_the_range_it_was_planned_with_while_a_producer_races(spark_cluster: LocalCluster) -> None:
    topic = _topic()
    _create(spark_cluster, topic)
    _produce(spark_cluster, topic, 10)  # before the query: not read with startingOffsets=latest
    reader = _reader(spark_cluster, topic, startingOffsets="latest")
    first = reader.initialOffset()  # PySpark's first call: to plan batch 0
    assert first == {topic: {"0": 10}}
    _produce(spark_cluster, topic, 5)  # after the query started, before batch 0 is planned
    end0 = reader.latestOffset(first, ALL)
    _produce(spark_cluster, topic, 5)  # between planning batch 0 and running it
    again = reader.initialOffset()  # PySpark's second call: to run batch 0
    assert again == first
    batch0 = reader.partitions(again, end0)
    end1 = reader.latestOffset(end0, ALL)
    batch1 = reader.partitions(end0, end1)
    assert _offsets(batch0, batch1) == list(range(10, 20))  # everything after the start, once


def test_batch_0_run_again_after_a_restart_skips_nothing(spark_cluster: LocalCluster) -> None:
    topic = _topic()
    _create(spark_cluster, topic)
    _produce(spark_cluster, topic, 10)
    before = _reader(spark_cluster, topic, startingOffsets="latest")
    first = before.initialOffset()
    _produce(spark_cluster, topic, 5)
    end0 = before.latestOffset(first, ALL)  # Spark writes this to offsets/0, then the driver dies
    _produce(spark_cluster, topic, 5)
    after = _reader(spark_cluster, topic, startingOffsets="latest")  # the restarted query's reader
    fresh = after.initialOffset()  # batch 0 runs again, from a fresh (later) initial offset
    batch0 = after.partitions(fresh, end0)
    end1 = after.latestOffset(end0, ALL)
    batch1 = after.partitions(end0, end1)
    assert _offsets(batch0, batch1) == list(range(10, 20))


def test_a_limited_first_batch_starts_where_the_query_started(spark_cluster: LocalCluster) -> None:
    topic = _topic()
    _create(spark_cluster, topic)
    _produce(spark_cluster, topic, 4)
    reader = _reader(spark_cluster, topic, startingOffsets="earliest", maxOffsetsPerTrigger="3")
    first = reader.initialOffset()
    _produce(spark_cluster, topic, 4)
    end0 = reader.latestOffset(first, ReadMaxRows(3))
    assert end0 == {topic: {"0": 3}}  # earliest-started partitions are read from batch 0 on
    assert _offsets(reader.partitions(reader.initialOffset(), end0)) == [0, 1, 2]


def test_a_topic_re_created_under_a_query_fails_it(spark_cluster: LocalCluster) -> None:
    topic = _topic()
    _create(spark_cluster, topic)
    _produce(spark_cluster, topic, 20)
    reader = _reader(spark_cluster, topic, startingOffsets="earliest")
    start = reader.initialOffset()
    end0 = reader.latestOffset(start, ALL)
    assert _offsets(reader.partitions(start, end0)) == list(range(20))
    _recreate(spark_cluster, topic, 25)  # more records than the query read: offsets alone hide it
    end1 = reader.latestOffset(end0, ALL)
    with pytest.raises(DataLossError, match=rf"Topic {topic} was deleted and re-created.*{topic}-0's offset 20"):
        reader.partitions(end0, end1)


def test_a_topic_re_created_under_a_query_is_read_from_its_start_without_fail_on_data_loss(
    spark_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _topic()
    _create(spark_cluster, topic)
    _produce(spark_cluster, topic, 20)
    reader = _reader(spark_cluster, topic, startingOffsets="earliest", failOnDataLoss="false")
    start = reader.initialOffset()
    end0 = reader.latestOffset(start, ALL)
    reader.partitions(start, end0)
    _recreate(spark_cluster, topic, 25)
    end1 = reader.latestOffset(end0, ALL)
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        assert _offsets(reader.partitions(end0, end1)) == list(range(25))
    assert "re-created" in caplog.text
    end2 = reader.latestOffset(end1, ALL)  # the new topic is the one followed from then on
    _produce(spark_cluster, topic, 2)
    end3 = reader.latestOffset(end2, ALL)
    assert _offsets(reader.partitions(end2, end3)) == [25, 26]


def test_offsets_that_went_backwards_are_data_loss(spark_cluster: LocalCluster) -> None:
    topic = _topic()
    _create(spark_cluster, topic)
    _produce(spark_cluster, topic, 20)
    _recreate(spark_cluster, topic, 5)
    # A query restarted from a checkpoint at offset 20 finds the topic at 5 (its reader never saw
    # the old topic id): Spark's Kafka source's check.
    checkpointed = {topic: {"0": 20}}
    strict = _reader(spark_cluster, topic)
    end = strict.latestOffset(checkpointed, ALL)
    assert end == {topic: {"0": 5}}
    with pytest.raises(DataLossError, match=rf"Partition {topic}-0's offset was changed from 20 to 5"):
        strict.partitions(checkpointed, end)
    lenient = _reader(spark_cluster, topic, failOnDataLoss="false")
    assert _offsets(lenient.partitions(checkpointed, lenient.latestOffset(checkpointed, ALL))) == list(range(5))


def test_partitions_gone_are_data_loss(spark_cluster: LocalCluster) -> None:
    topic = _topic()
    _create(spark_cluster, topic)
    _produce(spark_cluster, topic, 3)
    reader = _reader(spark_cluster, topic)
    checkpointed = {topic: {"0": 3}}

    async def delete() -> None:
        async with AdminClient(spark_cluster.bootstrap, controllers=spark_cluster.controller_endpoints) as admin:
            await admin.delete_topics([topic])

    asyncio.run(delete())
    end = reader.latestOffset(checkpointed, ALL)
    assert end == {}  # a subscribed topic that does not exist: nothing of it to read
    with pytest.raises(DataLossError, match=rf"Partitions {topic}-0 are gone"):
        reader.partitions(checkpointed, end)


def test_a_new_partition_that_does_not_start_at_0_and_a_start_retention_deleted_are_data_loss(
    spark_cluster: LocalCluster,
) -> None:
    topic = _topic()
    log_start = _trimmed(spark_cluster, topic)
    reader = _reader(spark_cluster, topic)
    nothing_known: dict[str, dict[str, int]] = {}  # e.g. a topic a pattern matches from now on
    end = reader.latestOffset(nothing_known, ALL)
    with pytest.raises(DataLossError, match=rf"Added partition {topic}-0 starts from {log_start} instead of 0"):
        reader.partitions(nothing_known, end)
    behind = {topic: {"0": 0}}
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets 0\.\.{log_start - 1} are gone"):
        reader.partitions(behind, end)
    lenient = _reader(spark_cluster, topic, failOnDataLoss="false")
    assert _offsets(lenient.partitions(behind, end))[0] == log_start
