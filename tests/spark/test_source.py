"""The `tidelog` data source read and written by real Spark: batch reads exactly once with the
Kafka source's schema, headers, offsets and timestamps; time and offset bounded ranges; writes
read back; streaming across micro-batches and a restart from the checkpoint; bad options refused
with the option named."""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.cluster.conftest import wait_until
from tests.transactional_writes import COMMITTED, EVERY_RECORD, end_transactions, write_open_transactions
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster
from tidelog.spark.writing import WRITE_ID_HEADER
from tidelog.v1 import broker_pb2_grpc

BASE_MS = 1_700_000_000_000  # record timestamps the tests set: 1 s apart from here
RETENTION_SETTLED_S = 0.6  # three of the test cluster's retention runs (log.retention.check.interval.ms 200)


def _topic() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


async def _fill(cluster: LocalCluster, topic: str, partitions: int, per_partition: int) -> None:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, partitions, 1)
    async with Producer(cluster.bootstrap, acks="all") as producer:
        deliveries = []
        for partition in range(partitions):
            for n in range(per_partition):
                deliveries.append(
                    await producer.send(
                        topic,
                        f"{partition}:{n}".encode(),
                        key=f"k{n}".encode(),
                        partition=partition,
                        headers=(("n", str(n).encode()),) if n % 2 else (),
                        timestamp=BASE_MS + n * 1000,
                    )
                )
        for delivery in deliveries:
            await delivery


def _trimmed(cluster: LocalCluster, topic: str) -> int:
    """A topic whose oldest records retention deleted: its log start (> 0)."""

    async def trim() -> int:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic(topic, 1, 1, configs={"segment.bytes": "4096", "retention.bytes": "4096"})
        async with Producer(cluster.bootstrap) as producer:
            for _ in range(40):  # 40 batches of ~1 KiB: segments roll, retention deletes the oldest
                await (await producer.send_batch(topic, [b"x" * 100] * 10, partition=0))
        tp = TopicPartition(topic, 0)
        held: list[tuple[int, float]] = [(0, time.monotonic())]  # the log start, and since when
        async with Consumer(cluster.bootstrap) as consumer:

            async def settled_log_start() -> int | None:
                # Retention runs every 200 ms here and deleted segments while they were written:
                # a log start taken at once (30) moved on at the next run (360: a test failed on it).
                # Taken once it has held above 0 through three runs, it is where retention ends.
                start = (await consumer.beginning_offsets([tp]))[tp]
                if start != held[-1][0]:
                    held.append((start, time.monotonic()))
                return start if start > 0 and time.monotonic() - held[-1][1] >= RETENTION_SETTLED_S else None

            return await wait_until(settled_log_start, what="retention deleting the oldest segments")

    return asyncio.run(trim())


def _reader(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("tidelog").option("tidelog.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_a_batch_read_returns_every_record_once_with_the_kafka_schema(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 50))
    frame = _reader(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    rows = frame.collect()
    assert len(rows) == 100
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(2) for o in range(50)}
    for row in rows:
        n = row.offset
        assert (bytes(row.key), bytes(row.value), row.topic) == (
            f"k{n}".encode(),
            f"{row.partition}:{n}".encode(),
            topic,
        )
        expected = datetime.datetime.fromtimestamp((BASE_MS + n * 1000) / 1000, tz=datetime.UTC).replace(tzinfo=None)
        assert row.timestamp == expected and row.timestampType == 0
        # as Spark's Kafka source: null, not an empty list, for a record without headers
        assert (None if row.headers is None else [(h.key, bytes(h.value)) for h in row.headers]) == (
            [("n", str(n).encode())] if n % 2 else None
        )
    without = _reader(spark, bootstrap, subscribe=topic)
    assert "headers" not in without.columns and without.count() == 100


async def _transactions(cluster: LocalCluster, topic: str) -> None:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 1, 1)
    async with grpc.aio.insecure_channel(cluster.broker_endpoint(1)) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await end_transactions(stub, topic, *await write_open_transactions(stub, topic))


def test_kafka_isolation_level_read_committed_skips_aborted_transactions(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    """As Spark's Kafka source with kafka.isolation.level; no row is ever a transaction marker,
    and a range that ends in markers ends (its last offsets hold no record)."""
    topic = _topic()
    asyncio.run(_transactions(spark_cluster, topic))
    committed = _reader(spark, bootstrap, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    assert [bytes(row.value) for row in committed.orderBy("offset").collect()] == COMMITTED
    everything = _reader(spark, bootstrap, subscribe=topic)
    assert [bytes(row.value) for row in everything.orderBy("offset").collect()] == EVERY_RECORD
    markers_only = json.dumps({topic: {"0": 4}})  # offsets 4-5: the two markers, no record
    tail = _reader(
        spark, bootstrap, subscribe=topic, startingOffsets=markers_only, **{"kafkaConsumer.pollTimeoutMs": "5000"}
    )
    assert tail.count() == 0


def test_offset_and_time_bounded_ranges_and_min_partitions(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 50))
    ranged = _reader(
        spark,
        bootstrap,
        assign=json.dumps({topic: [0, 1]}),
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": -1}}),
    )
    got = {(r.partition, r.offset) for r in ranged.select("partition", "offset").collect()}
    assert got == {(0, o) for o in range(10, 20)} | {(1, o) for o in range(50)}

    timed = _reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 5_000, "1": BASE_MS + 45_000}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": BASE_MS + 8_000, "1": BASE_MS + 999_000}}),
    )
    got = {(r.partition, r.offset) for r in timed.select("partition", "offset").collect()}
    assert got == {(0, o) for o in range(5, 8)} | {(1, o) for o in range(45, 50)}

    future = str(BASE_MS + 10_000_000)  # after every record
    with pytest.raises(Exception, match="has no record at or after"):
        _reader(spark, bootstrap, subscribe=topic, startingTimestamp=future).count()
    at_end = _reader(
        spark, bootstrap, subscribe=topic, startingTimestamp=future, startingOffsetsByTimestampStrategy="latest"
    )
    assert at_end.count() == 0

    split = _reader(spark, bootstrap, subscribe=topic, minPartitions="10")
    assert split.rdd.getNumPartitions() >= 10 and split.count() == 100


def test_a_batch_write_is_read_back_exactly(spark: Any, spark_cluster: LocalCluster, bootstrap: str) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 3, 0))
    rows = [(f"key-{n}", f"value-{n}", n % 3) for n in range(300)]
    frame = spark.createDataFrame(rows, "key string, value string, partition int")
    frame.write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).option("topic", topic).mode(
        "append"
    ).save()

    async def read_back() -> dict[int, list[tuple[bytes | None, bytes | None]]]:
        found: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        async with Consumer(spark_cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            partitions = [TopicPartition(topic, p) for p in range(3)]
            consumer.assign(partitions)
            ends = await consumer.end_offsets(partitions)
            while sum(len(v) for v in found.values()) < sum(ends.values()):
                for record in await consumer.poll(1000):
                    found.setdefault(record.partition, []).append((record.key, record.value))
        return found

    found = asyncio.run(read_back())
    for partition in range(3):  # each partition's rows, in the DataFrame's order, once each
        wanted = [(k.encode(), v.encode()) for k, v, p in rows if p == partition]
        assert sorted(found[partition]) == sorted(wanted)
    assert sum(len(v) for v in found.values()) == 300


def test_streaming_reads_micro_batches_and_restarts_from_its_checkpoint(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 10))
    # By batch id: a query stopped after running a batch and before committing it runs that batch
    # again on restart (foreachBatch is at-least-once; the batch id is what makes it idempotent),
    # with the very same offsets, which the replay is held to.
    batches: dict[int, list[tuple[int, int]]] = {}  # batch id → (partition, offset) of its records

    def collect(frame: Any, batch_id: int) -> None:
        rows = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
        if batch_id in batches:
            assert batches[batch_id] == rows, f"batch {batch_id} replayed with other offsets"
        batches[batch_id] = rows

    def run_until_caught_up(records: int) -> None:
        stream = (
            spark.readStream.format("tidelog")
            .option("tidelog.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "8")
            .load()
        )
        query = (
            stream.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        deadline = time.monotonic() + 120
        while sum(map(len, batches.values())) < records and time.monotonic() < deadline and query.exception() is None:
            query.awaitTermination(0.2)
        query.stop()
        assert query.exception() is None

    run_until_caught_up(20)
    assert len(batches) >= 3  # 20 records, at most 8 per trigger
    assert sorted(row for rows in batches.values() for row in rows) == [(p, o) for p in range(2) for o in range(10)]

    async def more() -> None:
        async with AdminClient(spark_cluster.bootstrap, controllers=spark_cluster.controller_endpoints) as admin:
            assert (await admin.create_partitions({topic: 3}))[topic] is None  # a partition appears
        async with Producer(spark_cluster.bootstrap) as producer:
            for partition in range(3):
                await (await producer.send_batch(topic, [b"late"] * 5, partition=partition))

    asyncio.run(more())
    run_until_caught_up(35)  # a new query on the same checkpoint: only what came since
    offsets = sorted(row for rows in batches.values() for row in rows)
    # nothing skipped, nothing twice, and the new partition read from its beginning
    assert offsets == [(p, o) for p in range(2) for o in range(15)] + [(2, o) for o in range(5)]


def test_a_streaming_write_copies_a_topic(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    source, target = _topic(), _topic()
    asyncio.run(_fill(spark_cluster, source, 1, 40))
    asyncio.run(_fill(spark_cluster, target, 1, 0))
    stream = (
        spark.readStream.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value")
    )
    query = (
        stream.writeStream.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copied = _reader(spark, bootstrap, subscribe=target).selectExpr("CAST(value AS STRING) AS v").collect()
    assert sorted(r.v for r in copied) == sorted(f"0:{n}" for n in range(40))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "t", "startingOffset": "earliest"}, "startingOffset"),  # a misspelling
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "assign"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "t", "endingOffsets": "{not json"}, "endingOffsets"),
        ({"subscribe": "t", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "t", "tidelog.fetch.max.bytes": "many"}, "tidelog.fetch.max.bytes"),
        ({"subscribe": "t", "tidelog.no.such.setting": "1"}, "tidelog.no.such.setting"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    spark: Any, bootstrap: str, options: dict[str, str], named: str
) -> None:
    with pytest.raises(Exception, match="(?i)" + re.escape(f"option '{named}'")):  # Spark lower-cases unknown names
        _reader(spark, bootstrap, **options).count()


def test_a_missing_bootstrap_is_named(spark: Any) -> None:
    with pytest.raises(Exception, match=re.escape("option 'tidelog.bootstrap.servers'")):
        spark.read.format("tidelog").option("subscribe", "t").load().count()


def test_a_write_routes_rows_by_topic_column_and_carries_headers(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    first, second = _topic(), _topic()
    asyncio.run(_fill(spark_cluster, first, 1, 0))
    asyncio.run(_fill(spark_cluster, second, 1, 0))
    rows = [
        (first if n % 2 else second, f"k{n}", f"v{n}".encode(), [("n", str(n).encode())] if n % 3 == 0 else [])
        for n in range(30)
    ]
    frame = spark.createDataFrame(
        rows, "topic string, key string, value binary, headers array<struct<key: string, value: binary>>"
    )
    frame.write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).mode("append").save()
    for topic, parity in ((first, 1), (second, 0)):
        back = _reader(spark, bootstrap, subscribe=topic, includeHeaders="true").collect()
        wanted = {n for n in range(30) if n % 2 == parity}
        assert {int(bytes(r.value)[1:]) for r in back} == wanted
        for row in back:  # headers round-trip exactly: nothing added to them
            n = int(bytes(row.value)[1:])
            assert bytes(row.key) == f"k{n}".encode()
            theirs = None if row.headers is None else [(h.key, bytes(h.value)) for h in row.headers]
            assert theirs == ([("n", str(n).encode())] if n % 3 == 0 else None)


def test_a_task_that_fails_midway_is_retried_without_duplicates(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()
    asyncio.run(_fill(spark_cluster, topic, 2, 0))
    frame = spark.range(3000, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(id % 2 AS INT) AS partition"
    )
    (
        frame.write.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("idempotentRetries", "true")
        .option("failFirstAttemptAfterRecords", "500")  # each task's first attempt dies after 500 acknowledged
        .mode("append")
        .save()
    )
    values = [
        r.v for r in _reader(spark, bootstrap, subscribe=topic).selectExpr("CAST(value AS STRING) AS v").collect()
    ]
    assert len(values) == 3000 and sorted(map(int, values)) == list(range(3000))  # every row once
    markers = _reader(spark, bootstrap, subscribe=topic, includeHeaders="true").selectExpr(
        f"filter(headers, h -> h.key = '{WRITE_ID_HEADER}') AS m"
    )
    assert markers.where("size(m) > 0").count() >= 1  # the price: a visible header per producer batch


def test_a_frame_the_sink_cannot_write_is_refused_before_any_task(spark: Any, bootstrap: str) -> None:
    no_value = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception, match="value column"):
        no_value.write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).option("topic", "t").mode(
            "append"
        ).save()
    nowhere = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="no topic column and no topic option"):
        nowhere.write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).mode("append").save()


def test_records_lost_to_retention_fail_the_query_unless_told_otherwise(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str
) -> None:
    topic = _topic()

    log_start = _trimmed(spark_cluster, topic)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="are gone"):
        _reader(spark, bootstrap, subscribe=topic, startingOffsets=from_zero).count()
    kept = _reader(spark, bootstrap, subscribe=topic, startingOffsets=from_zero, failOnDataLoss="false")
    offsets = sorted(r.offset for r in kept.select("offset").collect())
    assert offsets[0] >= log_start and offsets[-1] == 399 and offsets == list(range(offsets[0], 400))
