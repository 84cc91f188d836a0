"""Spark data source benchmark: records/s of a batch read and a batch write through the `tidelog`
format, each beside the native client on the same data in the same run.

    .venv/bin/python bench/bench_spark.py [--records 1000000] [--partitions 4]

Starts etcd, one controller and one broker (tidelog.dev.local_cluster) and a local Spark (local[2], the
machine's two cores). Then:
- reference, writer: `Producer.send_batch` of `--records` 100-byte values spread over the
  partitions, from this process;
- reference, reader: `Consumer.poll_batches` of all of them back (the client's bulk path);
- reader: `spark.read.format("tidelog")...load().count()` — Spark counts rows it decoded, so every
  record crosses the source's Arrow path (columns built from the fetched bytes, arrow_rows.py);
- writer: a DataFrame of as many rows (`value` binary, `partition`) written with
  `.write.format("tidelog")`.
Targets: reader ≥ 0.8× the native consumer (issue 33), writer ≥ 0.5× send_batch (issue 16).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

VALUE = b"x" * 100


async def _produce(cluster: LocalCluster, topic: str, records: int, partitions: int) -> float:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, partitions, 1)
    started = time.perf_counter()
    async with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
        per = records // partitions
        deliveries = [await producer.send_batch(topic, [VALUE] * per, partition=p) for p in range(partitions)]
        for delivery in deliveries:
            await delivery
    return time.perf_counter() - started


async def _consume(cluster: LocalCluster, topic: str, records: int, partitions: int) -> float:
    started = time.perf_counter()
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        seen = 0
        while seen < records:
            for fetched in (await consumer.poll_batches(1000)).values():
                for batch in fetched.batches:
                    seen += sum(1 for offset in batch.offsets if offset >= fetched.start_offset)
    return time.perf_counter() - started


def _null_sink() -> type:
    """A Python data source whose writer only counts the Arrow rows Spark hands it."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage  # noqa: PLC0415

    class NullWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            sum(batch.num_rows for batch in iterator)
            return WriterCommitMessage()

    class NullSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "null-sink"

        def writer(self, schema: Any, overwrite: bool) -> NullWriter:
            return NullWriter()

    return NullSink


def run(records: int, partitions: int) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415 - optional dependency, only here

    import tidelog.spark  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as folder:
        cluster = LocalCluster(Path(folder) / "cluster", brokers=1, controllers=1)
        cluster.start()
        spark = None
        try:
            asyncio.run(cluster.wait_ready())
            records -= records % partitions
            produce_s = asyncio.run(_produce(cluster, "bench-in", records, partitions))
            consume_s = asyncio.run(_consume(cluster, "bench-in", records, partitions))
            print(
                f"reference: send_batch {records / produce_s:,.0f} records/s; "
                f"consumer {records / consume_s:,.0f} records/s"
            )

            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            tidelog.spark.register(spark)
            bootstrap = ",".join(cluster.bootstrap)
            frame = (
                spark.read.format("tidelog")
                .option("tidelog.bootstrap.servers", bootstrap)
                .option("subscribe", "bench-in")
            )
            frame.load().count()  # warm: Python workers started, classes loaded
            started = time.perf_counter()
            counted = frame.load().count()
            read_s = time.perf_counter() - started
            assert counted == records, (counted, records)
            read_rate = records / read_s
            ratio = read_rate / (records / consume_s)
            print(f"spark read → count(): {read_rate:,.0f} records/s, {ratio:.2f}× the consumer; target ≥ 0.8×")

            asyncio.run(_produce(cluster, "bench-out", 0, partitions))  # the topic only
            rows = (
                spark.range(records)
                .selectExpr(
                    f"CAST(repeat('x', {len(VALUE)}) AS BINARY) AS value",
                    f"CAST(id % {partitions} AS INT) AS partition",
                )
                .cache()
            )
            rows.count()  # materialised first: the write measures the sink, not generating rows
            rows.limit(1000).write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).option(
                "topic", "bench-out"
            ).mode("append").save()  # warm: the Python workers have imported the sink, as the reader's were
            started = time.perf_counter()
            rows.write.format("tidelog").option("tidelog.bootstrap.servers", bootstrap).option(
                "topic", "bench-out"
            ).mode("append").save()
            write_s = time.perf_counter() - started
            write_rate = records / write_s
            print(
                f"spark write: {write_rate:,.0f} records/s, {write_rate / (records / produce_s):.2f}× send_batch;"
                " target ≥ 0.5×"
            )
            # Spark's own floor for a Python sink: the same rows into a sink that only counts them.
            spark.dataSource.register(_null_sink())
            started = time.perf_counter()
            rows.write.format("null-sink").mode("append").save()
            floor_s = time.perf_counter() - started
            print(
                f"spark's floor (the same write into a Python sink that discards): {records / floor_s:,.0f} records/s;"
                f" the tidelog sink takes {write_s / floor_s:.1f}× its time"
            )
        finally:
            if spark is not None:
                spark.stop()
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    run(args.records, args.partitions)


if __name__ == "__main__":
    main()
