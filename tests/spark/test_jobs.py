"""The jobs in spark_jobs/ against a real cluster: the windowed totals checked against a model of
the same events, and the Parquet export read back."""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
import time
import uuid
from pathlib import Path
from typing import Any

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster
from tidelog.spark_jobs import export_parquet, windowed_totals

START = datetime.datetime(2026, 11, 24, 10, 0, tzinfo=datetime.UTC)
USERS = ("ann", "bob", "cid")


def _events() -> list[dict[str, Any]]:
    """Three minutes of events, a late one within the watermark, one too late, then one far ahead
    to move the watermark past every earlier window."""
    events = []
    for n in range(180):
        events.append({"user": USERS[n % 3], "amount": n % 7 + 0.5, "time": START + datetime.timedelta(seconds=n)})
    events.append({"user": "ann", "amount": 100.0, "time": START + datetime.timedelta(seconds=125)})  # late, in time
    events.append({"user": "bob", "amount": 1000.0, "time": START + datetime.timedelta(seconds=170)})
    events.append({"user": "cid", "amount": 1.0, "time": START + datetime.timedelta(minutes=10)})  # the watermark
    return events


def _model(events: list[dict[str, Any]], watermark_s: int) -> dict[tuple[str, str], tuple[int, float]]:
    """(window start, user) → (events, amount) for the windows the watermark has closed."""
    latest = max(event["time"] for event in events)
    closes_by = latest - datetime.timedelta(seconds=watermark_s)
    totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for event in events:
        start = event["time"].replace(second=0)
        if start + datetime.timedelta(minutes=1) <= closes_by:
            cell = totals[(start.strftime("%Y-%m-%dT%H:%M:%SZ"), event["user"])]
            cell[0] += 1
            cell[1] += event["amount"]
    return {key: (int(count), amount) for key, (count, amount) in totals.items()}


async def _produce(cluster: LocalCluster, topic: str, values: list[bytes], partitions: int = 1) -> None:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, partitions, 1)
    async with Producer(cluster.bootstrap, acks="all") as producer:
        for value in values:
            await (await producer.send(topic, value, partition=0))


async def _read_all(cluster: LocalCluster, topic: str) -> list[bytes]:
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        values: list[bytes] = []
        while await consumer.position(tp) < end:
            values += [record.value or b"" for record in await consumer.poll(1000)]
        return values


def test_windowed_totals_match_the_model(
    spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path
) -> None:
    source, sink = f"events-{uuid.uuid4().hex[:6]}", f"totals-{uuid.uuid4().hex[:6]}"
    events = _events()
    values = [json.dumps({**e, "time": e["time"].strftime("%Y-%m-%dT%H:%M:%SZ")}).encode() for e in events] + [
        b"not json",
        b'{"user": null}',
    ]  # bad input is skipped, not fatal
    asyncio.run(_produce(spark_cluster, source, values))
    asyncio.run(_produce(spark_cluster, sink, []))
    args = windowed_totals.parse_args(
        [
            "--bootstrap",
            bootstrap,
            "--input",
            source,
            "--output",
            sink,
            "--checkpoint",
            str(tmp_path / "cp"),
            "--watermark",
            "30 seconds",
            "--max-offsets-per-trigger",
            "50",
            "--trigger",
            "200 milliseconds",
        ]
    )
    expected = _model(events, 30)
    # Micro-batches as a deployed job runs them: a window is written once the watermark has passed
    # it, in the batch after the one that moved it (an availableNow trigger runs no such batch).
    query = windowed_totals.start(spark, args)
    try:
        deadline = time.monotonic() + 120
        written: list[dict[str, Any]] = []
        while len(written) < len(expected) and time.monotonic() < deadline and query.exception() is None:
            query.awaitTermination(0.5)
            written = [json.loads(value) for value in asyncio.run(_read_all(spark_cluster, sink))]
        assert query.exception() is None
        query.processAllAvailable()  # anything more it would write (it must not) is written now
    finally:
        query.stop()
    written = [json.loads(value) for value in asyncio.run(_read_all(spark_cluster, sink))]
    got = {(row["window_start"], row["user"]): (row["events"], row["amount"]) for row in written}
    assert len(got) == len(written)  # each window once
    assert {key: count for key, (count, _) in got.items()} == {key: count for key, (count, _) in expected.items()}
    for key, (_, amount) in expected.items():
        assert abs(got[key][1] - amount) < 1e-9, key


def test_a_topic_exports_to_parquet(spark: Any, spark_cluster: LocalCluster, bootstrap: str, tmp_path: Path) -> None:
    topic = f"export-{uuid.uuid4().hex[:6]}"
    asyncio.run(_produce(spark_cluster, topic, [b"row %d" % n for n in range(120)]))
    path = tmp_path / "export.parquet"
    count = export_parquet.export(
        spark, bootstrap=bootstrap, topic=topic, path=str(path), starting="earliest", ending="latest"
    )
    assert count == 120
    back = spark.read.parquet(str(path))
    assert sorted(bytes(r.value) for r in back.select("value").collect()) == sorted(b"row %d" % n for n in range(120))
    assert {r.partition for r in back.select("partition").distinct().collect()} == {0}
