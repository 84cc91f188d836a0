"""Conformance with Spark's Structured Streaming + Kafka Integration Guide, option by option, with
real Spark against a real local cluster: each test names the guide's section it holds the
`tidelog` format to. Where the format deliberately differs, docs/spark.md's table says so and the
test says which row.

Sections: schema; offsets (each form, batch and streaming, precedence, the all-partitions rule,
inverted ranges); trigger options (maxOffsetsPerTrigger, minOffsetsPerTrigger with maxTriggerDelay,
Trigger.AvailableNow); partitioning (minPartitions, maxRecordsPerPartition); data loss (each case,
failOnDataLoss both ways); consumer options passed through; the sink (column and option
precedence, headers, at-least-once retries)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.spark.test_source import BASE_MS, _fill, _reader, _topic
from tests.spark.test_stream_offsets import _produce, _recreate
from tidelog.client import AdminClient, Consumer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

QUERY_DEADLINE_S = 90


def _offsets(frame: Any) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())


class Stream:
    """A streaming query over the tidelog format whose micro-batches are collected by batch id."""

    def __init__(self, spark: Any, bootstrap: str, checkpoint: Path, trigger: dict[str, Any], **options: str) -> None:
        self.batches: dict[int, list[tuple[int, int]]] = {}
        reader = spark.readStream.format("tidelog").option("tidelog.bootstrap.servers", bootstrap)
        for name, value in options.items():
            reader = reader.option(name, value)

        def collect(frame: Any, batch_id: int) -> None:
            self.batches[batch_id] = _offsets(frame)

        self.query = (
            reader.load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    def rows(self) -> list[tuple[int, int]]:
        return sorted(row for rows in list(self.batches.values()) for row in rows)

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + QUERY_DEADLINE_S
        while not condition():
            assert self.query.exception() is None, self.query.exception()
            assert time.monotonic() < deadline, f"timed out waiting for {what}; batches {self.batches}"
            self.query.awaitTermination(0.1)

    def failure(self) -> str:
        """The error the query stopped with (awaitTermination raises it)."""
        with pytest.raises(Exception) as stopped:
            self.query.awaitTermination(QUERY_DEADLINE_S)
            raise AssertionError(f"the query did not fail; batches {self.batches}")
        return str(stopped.value)

    def stop(self) -> None:
        self.query.stop()


# ---- schema ---------------------------------------------------------------------------------


def test_schema_is_the_kafka_sources_and_headers_are_null_when_a_record_has_none(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 4))
    frame = _reader(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    headers = {r.offset: r.headers for r in frame.collect()}
    assert headers[0] is None and headers[2] is None  # even n: written without headers
    assert [(h.key, bytes(h.value)) for h in headers[1]] == [("n", b"1")]


# ---- offsets --------------------------------------------------------------------------------


def test_batch_offsets_each_form_and_the_precedence_of_timestamps(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 10))  # record n at BASE_MS + n s
    everything = [(p, o) for p in range(2) for o in range(10)]
    assert _offsets(_reader(spark, bootstrap, subscribe=topic)) == everything  # earliest → latest by default
    by_json = _reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": -2, "1": 7}}),
        endingOffsets=json.dumps({topic: {"0": 3, "1": -1}}),
    )
    assert _offsets(by_json) == [(0, 0), (0, 1), (0, 2), (1, 7), (1, 8), (1, 9)]
    # endingTimestamp wins over endingOffsetsByTimestamp, which wins over endingOffsets
    timed = _reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=str(BASE_MS + 6_000),
        startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS, "1": BASE_MS}}),
        startingOffsets="earliest",
        endingTimestamp=str(BASE_MS + 8_000),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 7_000, "1": BASE_MS + 7_000}}),
    )
    assert _offsets(timed) == [(0, 6), (0, 7), (1, 6), (1, 7)]
    per_partition = _reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 8_000, "1": BASE_MS + 9_000}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 999_000, "1": BASE_MS + 999_000}}),
    )
    assert _offsets(per_partition) == [(0, 8), (0, 9), (1, 9)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": '{"%s": {"0": 1}}'}, "name every partition"),  # Spark: all TopicPartitions
        ({"endingOffsets": '{"%s": {"1": -1}}'}, "name every partition"),
        ({"startingOffsetsByTimestamp": '{"%s": {"0": 1}}'}, "name every partition"),
        (
            {"startingOffsets": '{"%s": {"0": 9, "1": 0}}', "endingOffsets": '{"%s": {"0": 4, "1": 1}}'},
            "Beginning offset 9 is after the ending offset 4",
        ),
    ],
)
def test_offsets_given_per_partition_must_name_all_and_not_invert(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, options: dict[str, str], message: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 10))
    given = {name: value.replace("%s", topic) for name, value in options.items()}
    with pytest.raises(Exception, match=message):
        _reader(spark, bootstrap, subscribe=topic, **given).count()


def test_a_stream_starts_at_latest_by_default_and_at_json_offsets_when_given(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 5))
    latest = Stream(spark, bootstrap, tmp_path / "latest", {"processingTime": "100 milliseconds"}, subscribe=topic)
    latest.wait(lambda: 0 in latest.batches, "batch 0")
    _produce(spark_cluster, topic, 3)
    latest.wait(lambda: len(latest.rows()) >= 3, "the records after the start")
    latest.stop()
    assert latest.rows() == [(0, 5), (0, 6), (0, 7)]  # nothing from before the query started
    assert latest.batches[0] == []  # batch 0 holds a latest start where it is (docs/spark.md)
    given = Stream(
        spark,
        bootstrap,
        tmp_path / "json",
        {"availableNow": True},
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 6}}),
    )
    assert given.query.awaitTermination(QUERY_DEADLINE_S) is not False
    assert given.rows() == [(0, 6), (0, 7)]


def test_a_query_that_fails_in_batch_0_and_restarts_skips_nothing(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 5))
    stream = (
        spark.readStream.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).option("subscribe", topic)
    )

    def fail(frame: Any, batch_id: int) -> None:
        raise RuntimeError(f"batch {batch_id} fails before it commits")

    first = (
        stream.load()
        .writeStream.foreachBatch(fail)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    with pytest.raises(Exception, match="fails before it commits"):
        first.awaitTermination(QUERY_DEADLINE_S)
    assert (tmp_path / "checkpoint" / "offsets" / "0").exists()
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists()
    _produce(spark_cluster, topic, 4)  # after the query started: every one of them is read
    again = Stream(spark, bootstrap, tmp_path / "checkpoint", {"processingTime": "100 milliseconds"}, subscribe=topic)
    again.wait(lambda: len(again.rows()) >= 4, "the records after the first start")
    again.stop()
    assert again.rows() == [(0, 5), (0, 6), (0, 7), (0, 8)]


# ---- trigger options ------------------------------------------------------------------------


def test_available_now_reads_what_is_there_in_batches_of_max_offsets_per_trigger(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 10))
    stream = Stream(
        spark,
        bootstrap,
        tmp_path / "checkpoint",
        {"availableNow": True},
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="6",
    )
    assert stream.query.awaitTermination(QUERY_DEADLINE_S) is not False  # it stops by itself
    assert stream.query.exception() is None
    assert stream.rows() == [(p, o) for p in range(2) for o in range(10)]
    sizes = [len(rows) for _, rows in sorted(stream.batches.items())]
    assert max(sizes) <= 6 and len([s for s in sizes if s]) >= 4


def test_max_offsets_per_trigger_is_ignored_by_a_batch_read(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 10))
    frame = _reader(spark, bootstrap, subscribe=topic, maxOffsetsPerTrigger="3", minOffsetsPerTrigger="2")
    assert frame.count() == 10


def test_min_offsets_per_trigger_holds_a_batch_back_until_enough_or_max_trigger_delay(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 0))
    stream = Stream(
        spark,
        bootstrap,
        tmp_path / "checkpoint",
        {"processingTime": "100 milliseconds"},
        subscribe=topic,
        startingOffsets="earliest",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="4s",
    )
    stream.wait(lambda: 0 in stream.batches, "batch 0")
    started = time.monotonic()
    _produce(spark_cluster, topic, 4)  # fewer than 10: held back until 4 s after the last batch
    stream.wait(lambda: len(stream.rows()) == 4, "the held-back records")
    waited = time.monotonic() - started
    _produce(spark_cluster, topic, 12)  # enough: goes at the next trigger
    stream.wait(lambda: len(stream.rows()) == 16, "a batch of at least 10")
    stream.stop()
    assert waited >= 1.5, f"4 records went after {waited:.1f} s; maxTriggerDelay is 4 s"
    assert [len(rows) for _, rows in sorted(stream.batches.items()) if rows] == [4, 12]


# ---- partitioning ---------------------------------------------------------------------------


def test_min_partitions_and_max_records_per_partition_split_the_ranges(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 30))
    capped = _reader(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="7")
    assert capped.rdd.getNumPartitions() == 10 and capped.count() == 60  # ceil(30 / 7) = 5 per partition
    both = _reader(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="15", minPartitions="8")
    assert both.rdd.getNumPartitions() >= 8 and _offsets(both) == [(p, o) for p in range(2) for o in range(30)]


# ---- data loss ------------------------------------------------------------------------------


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_re_created_under_a_running_query(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 20))
    stream = Stream(
        spark,
        bootstrap,
        tmp_path / "checkpoint",
        {"processingTime": "100 milliseconds"},
        subscribe=topic,
        startingOffsets="earliest",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    stream.wait(lambda: len(stream.rows()) == 20, "the first topic's records")
    _recreate(spark_cluster, topic, 25)
    if fail_on_data_loss:
        # A trigger that falls between the deletion and the re-creation sees the partition gone,
        # one after it sees a new topic id: both are this data loss, reported as such.
        failure = stream.failure()
        assert f"Topic {topic} was deleted and re-created" in failure or f"Partitions {topic}-0 are gone" in failure
        return
    stream.wait(lambda: len(stream.rows()) == 45, "the new topic from its start")
    stream.stop()
    assert stream.rows() == sorted([(0, o) for o in range(20)] + [(0, o) for o in range(25)])


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_deleted_under_a_running_query(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 3))
    stream = Stream(
        spark,
        bootstrap,
        tmp_path / "checkpoint",
        {"processingTime": "100 milliseconds"},
        subscribe=topic,
        startingOffsets="earliest",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    )
    stream.wait(lambda: len(stream.rows()) == 3, "the records")

    async def delete() -> None:
        async with AdminClient(spark_cluster.bootstrap, controllers=spark_cluster.controller_endpoints) as admin:
            await admin.delete_topics([topic])

    asyncio.run(delete())
    if fail_on_data_loss:
        assert f"Partitions {topic}-0 are gone" in stream.failure()
        return
    batches = len(stream.batches)
    stream.wait(lambda: len(stream.batches) > batches, "a batch after the deletion")  # the query goes on
    stream.stop()


def test_offsets_behind_the_checkpoint_fail_a_restarted_query(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 20))
    first = Stream(
        spark, bootstrap, tmp_path / "checkpoint", {"availableNow": True}, subscribe=topic, startingOffsets="earliest"
    )
    first.query.awaitTermination(QUERY_DEADLINE_S)
    assert first.rows() == [(0, o) for o in range(20)]
    _recreate(spark_cluster, topic, 5)  # while the query is down: its restart finds offset 5 < 20
    again = Stream(spark, bootstrap, tmp_path / "checkpoint", {"processingTime": "100 milliseconds"}, subscribe=topic)
    assert f"Partition {topic}-0's offset was changed from 20 to 5" in again.failure()


# ---- consumer options -----------------------------------------------------------------------


def test_consumer_options_of_the_guide_are_taken(spark: Any, spark_cluster: LocalCluster, bootstrap: str) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 1, 5))
    taken = _reader(
        spark,
        bootstrap,
        subscribe=topic,
        groupIdPrefix="reports",  # no consumer group is joined: accepted, unused (docs/spark.md)
        **{
            "kafka.group.id": "reports-1",
            "fetchOffset.numRetries": "5",
            "fetchOffset.retryIntervalMs": "20",
            "kafkaConsumer.pollTimeoutMs": "30000",
        },
    )
    assert taken.count() == 5
    # pollTimeoutMs bounds how long a task waits for records that never come
    beyond = _reader(
        spark,
        bootstrap,
        subscribe=topic,
        endingOffsets=json.dumps({topic: {"0": 9}}),  # four past the end
        **{"kafkaConsumer.pollTimeoutMs": "500"},
    )
    with pytest.raises(Exception, match=r"kafkaConsumer\.pollTimeoutMs"):
        beyond.count()


# ---- the sink -------------------------------------------------------------------------------


def test_the_topic_option_wins_over_the_topic_column(spark: Any, spark_cluster: LocalCluster, bootstrap: str) -> None:
    chosen, ignored = _topic(), _topic()
    asyncio.run(_fill(spark_cluster, chosen, 1, 0))
    asyncio.run(_fill(spark_cluster, ignored, 1, 0))
    frame = spark.createDataFrame([(ignored, "a"), (ignored, "b"), (None, "c")], "topic string, value string")
    writer = frame.write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap)
    writer.option("topic", chosen).mode("append").save()
    assert sorted(bytes(r.value) for r in _reader(spark, bootstrap, subscribe=chosen).collect()) == [b"a", b"b", b"c"]
    assert _reader(spark, bootstrap, subscribe=ignored).count() == 0


def test_a_null_topic_without_the_option_fails_the_write(spark: Any, bootstrap: str) -> None:
    frame = spark.createDataFrame([(None, "a")], "topic string, value string")
    with pytest.raises(Exception, match="topic is null"):
        frame.write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).mode("append").save()


def test_keys_values_partitions_and_headers_round_trip(spark: Any, spark_cluster: LocalCluster, bootstrap: str) -> None:
    source, copy = _topic(), _topic()
    asyncio.run(_fill(spark_cluster, source, 2, 6))
    asyncio.run(_fill(spark_cluster, copy, 2, 0))
    original = _reader(spark, bootstrap, subscribe=source, includeHeaders="true")
    original.select("key", "value", "partition", "headers").write.format("tidelog").option(
        "tidelog.bootstrap.servers", bootstrap
    ).option("topic", copy).mode("append").save()
    columns = ("key", "value", "partition", "offset", "headers")
    assert sorted(
        _reader(spark, bootstrap, subscribe=copy, includeHeaders="true").select(*columns).collect()
    ) == sorted(original.select(*columns).collect())


def test_a_retried_task_writes_at_least_once_unless_idempotent_retries(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 0))
    frame = spark.range(1000, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(id % 2 AS INT) AS partition"
    )
    (
        frame.write.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("failFirstAttemptAfterRecords", "200")  # each task's first attempt dies after 200 acknowledged
        .mode("append")
        .save()
    )
    values = [
        int(r.v) for r in _reader(spark, bootstrap, subscribe=topic).selectExpr("CAST(value AS STRING) AS v").collect()
    ]
    # every row, and what the failed attempts wrote a second time, as Spark's Kafka sink may
    assert sorted(set(values)) == list(range(1000)) and len(values) >= 1400

    async def ends() -> dict[TopicPartition, int]:
        async with Consumer(spark_cluster.bootstrap) as consumer:
            return await consumer.end_offsets([TopicPartition(topic, 0), TopicPartition(topic, 1)])

    assert sum(asyncio.run(ends()).values()) == len(values)
