"""Cluster benchmark: produce and consume 100-byte records through a local cluster of real processes.

    .venv/bin/python bench/bench_cluster.py [--records 500000] [--partitions 6]
        [--replication-factor 1] [--acks 1]      (issue 4's figure: --replication-factor 3 --acks all)

Starts etcd, 2 controllers and 3 brokers (tidelog.dev.local_cluster), one topic of 6 partitions (RF=1),
then in this one Python process:
- produce with the per-record `send` API (acks from --acks, default 1);
- p50/p99 send → acknowledgement latency at a steady 20,000 records/s (latency under saturation
  only measures the producer's buffer), with acks=1 in the same run as its reference, and where
  the time went (issue 18): the brokers' own Produce metrics scraped before and after — time in
  the broker (Kafka's TotalTimeMs), of which waiting for an I/O thread (RequestQueueTimeMs), the
  leader's append (LocalTimeMs) and waiting for the followers to move the high watermark
  (RemoteTimeMs), the followers' appends (tidelog_replica_fetch_append_ms) — and the rest, the
  client's linger and queue and the network, as the client's latency minus the broker's, and
  this process's full garbage collections meanwhile (each one stops the event loop);
- produce with the bulk `send_batch` API;
- consume everything with `poll_batches` (every record decoded to Python objects).
Reference printed in the same run: the storage engine alone, in this process, encoding the same
records and appending them to a local partition log (no network, no other process) — the ceiling a
produce path on this machine is measured against — and LinkedIn's 2014 Kafka figures on 6-core
machines (821,557 records/s produce, 940,521 records/s consume) for orientation.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import gc
import math
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.client import AdminClient, Consumer, Producer, RecordDelivery, TopicPartition
from tidelog.common.record.batch import encode_batch
from tidelog.dev.local_cluster import LocalCluster

VALUE_BYTES = 100
BATCH_RECORDS = 1000
LATENCY_RATE = 20_000
LATENCY_SECONDS = 10
STAGES = (  # (label, metric, its request label or "")
    ("in the broker (TotalTimeMs)", "kafka_network_requestmetrics_totaltimems", "Produce"),
    ("  waiting for an I/O thread (RequestQueueTimeMs)", "kafka_network_requestmetrics_requestqueuetimems", "Produce"),
    ("  leader append (LocalTimeMs)", "kafka_network_requestmetrics_localtimems", "Produce"),
    ("  followers moving the HW (RemoteTimeMs)", "kafka_network_requestmetrics_remotetimems", "Produce"),
    ("    a follower's append", "tidelog_replica_fetch_append_ms", ""),
)


@dataclasses.dataclass
class Histogram:
    total: float = 0.0
    count: float = 0.0
    buckets: dict[float, float] = dataclasses.field(default_factory=dict)  # upper bound → cumulative count


def scrape_histograms(cluster: LocalCluster) -> dict[tuple[str, str], Histogram]:
    """Every broker's histograms summed, by (metric, request label)."""
    found: dict[tuple[str, str], Histogram] = collections.defaultdict(Histogram)
    for broker_id in cluster.broker_ids:
        with urllib.request.urlopen(cluster.metrics_endpoint(f"broker-{broker_id}"), timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                histogram = found[(family.name, sample.labels.get("request", ""))]
                if sample.name.endswith("_sum"):
                    histogram.total += sample.value
                elif sample.name.endswith("_count"):
                    histogram.count += sample.value
                elif sample.name.endswith("_bucket"):
                    bound = float(sample.labels["le"])
                    histogram.buckets[bound] = histogram.buckets.get(bound, 0.0) + sample.value
    return found


def stage_figures(
    before: dict[tuple[str, str], Histogram], after: dict[tuple[str, str], Histogram], metric: str, request: str
) -> tuple[float, float, int]:
    """(mean ms, p99's bucket upper bound ms, count) of a histogram between two scrapes."""
    now, then = after.get((metric, request)), before.get((metric, request), Histogram())
    if now is None or now.count - then.count <= 0:
        return 0.0, 0.0, 0
    count = int(now.count - then.count)
    p99 = next(
        (bound for bound in sorted(now.buckets) if now.buckets[bound] - then.buckets.get(bound, 0.0) >= 0.99 * count),
        math.inf,
    )
    return (now.total - then.total) / count, p99, count


def reference_local_append(values: list[bytes], workdir: Path) -> float:
    """records/s to encode batches and append them to a partition log, in this process."""
    partition_log = PartitionLog.open(workdir / "reference-0", LogConfig.from_configs({}))
    started = time.perf_counter()
    for start in range(0, len(values), BATCH_RECORDS):
        partition_log.append_as_leader(encode_batch(values[start : start + BATCH_RECORDS], timestamps=0), 0)
    elapsed = time.perf_counter() - started
    partition_log.close()
    return len(values) / elapsed


async def produce_per_record(cluster: LocalCluster, topic: str, values: list[bytes], acks: str) -> float:
    async with Producer(cluster.bootstrap, acks=acks, linger_ms=5, batch_size=256 * 1024) as producer:
        started = time.perf_counter()
        for value in values:
            await producer.send(topic, value)
        await producer.flush()
        elapsed = time.perf_counter() - started
    return len(values) / elapsed


class FullCollections:
    """This process's full (generation 2) garbage collections while it is entered: count and pauses."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._started = time.perf_counter()
            else:
                self.pauses.append(time.perf_counter() - self._started)

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._callback)


async def produce_latency(cluster: LocalCluster, topic: str, rate: int, seconds: float, acks: str) -> list[float]:
    """send() → acknowledgement latency of every record, at a steady `rate` (not saturated)."""
    latencies: list[float] = []  # floats: a list of them holds nothing the collector tracks
    tick_s = 0.005
    per_tick = max(1, int(rate * tick_s))
    async with Producer(cluster.bootstrap, acks=acks, linger_ms=1) as producer:
        started = time.perf_counter()
        for tick in range(int(seconds / tick_s)):
            for _ in range(per_tick):
                delivery = await producer.send(topic, b"x" * VALUE_BYTES)
                sent_at = time.perf_counter()

                def done(_: RecordDelivery, sent_at: float = sent_at) -> None:
                    latencies.append(time.perf_counter() - sent_at)

                delivery.add_done_callback(done)
            await asyncio.sleep(max(0.0, started + (tick + 1) * tick_s - time.perf_counter()))
        await producer.flush()
    return latencies


async def produce_bulk(cluster: LocalCluster, topic: str, values: list[bytes], acks: str) -> float:
    async with Producer(
        cluster.bootstrap, acks=acks, batch_size=1024 * 1024, max_request_size=8 * 1024 * 1024
    ) as producer:
        started = time.perf_counter()
        chunk = 50_000
        deliveries = [
            await producer.send_batch(topic, values[start : start + chunk]) for start in range(0, len(values), chunk)
        ]
        for delivery in deliveries:
            await delivery
        elapsed = time.perf_counter() - started
    return len(values) / elapsed


async def consume_all(cluster: LocalCluster, topic: str, partitions: int, expected: int) -> float:
    async with Consumer(
        cluster.bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=4 * 1024 * 1024
    ) as consumer:
        consumer.assign([TopicPartition(topic, partition) for partition in range(partitions)])
        await consumer.seek_to_beginning()
        consumed = 0
        started = time.perf_counter()
        while consumed < expected:
            for fetched in (await consumer.poll_batches(2000)).values():
                for batch in fetched.batches:
                    consumed += sum(1 for offset in batch.offsets if offset >= fetched.start_offset)
        return consumed / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--acks", default="1", choices=["0", "1", "all"])
    args = parser.parse_args()
    values = [os.urandom(VALUE_BYTES) for _ in range(args.records)]
    with tempfile.TemporaryDirectory() as temporary:
        workdir = Path(temporary)
        local_rate = reference_local_append(values, workdir)
        cluster = LocalCluster(workdir / "cluster", brokers=3, controllers=2, metrics=True)
        cluster.start()
        try:
            await cluster.wait_ready()
            async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
                for name in ("bench-send", "bench-bulk", "bench-latency"):
                    await admin.create_topic(name, args.partitions, args.replication_factor)
            send_rate = await produce_per_record(cluster, "bench-send", values, args.acks)
            before = await asyncio.to_thread(scrape_histograms, cluster)
            with FullCollections() as collections_during:
                latencies = await produce_latency(cluster, "bench-latency", LATENCY_RATE, LATENCY_SECONDS, args.acks)
            after = await asyncio.to_thread(scrape_histograms, cluster)
            reference = (
                await produce_latency(cluster, "bench-latency", LATENCY_RATE, LATENCY_SECONDS, "1")
                if args.acks != "1"
                else latencies
            )
            bulk_rate = await produce_bulk(cluster, "bench-bulk", values, args.acks)
            consume_rate = await consume_all(cluster, "bench-bulk", args.partitions, args.records)
        finally:
            cluster.stop()
    quantiles = statistics.quantiles(latencies, n=100)
    reference_quantiles = statistics.quantiles(reference, n=100)
    # issue 3: >= 500,000 records/s with acks=1; issue 4: >= 300,000 with acks=all and RF=3
    target = "300,000" if args.acks == "all" and args.replication_factor >= 3 else "500,000"
    print(
        f"{args.records:,} records of {VALUE_BYTES} bytes, topic of {args.partitions} partitions on 3 brokers, "
        f"replication factor {args.replication_factor}, acks={args.acks}"
    )
    print(f"  reference: encode + append to a local log, this process   {local_rate:12,.0f} records/s")
    print("  reference: LinkedIn 2014, 6-core machines                    821,557 produce / 940,521 consume")
    print(
        f"  produce, per-record send()      {send_rate:12,.0f} records/s   {send_rate / local_rate:6.1%} of local"
        f"   (target >= {target})"
    )
    print(
        f"  produce, bulk send_batch()      {bulk_rate:12,.0f} records/s   {bulk_rate / local_rate:6.1%} of local"
        f"   (target >= {target})"
    )
    print(f"  consume, poll_batches()         {consume_rate:12,.0f} records/s   (target >= 800,000)")
    print(
        f"  produce latency at a steady {LATENCY_RATE:,} records/s, linger.ms=1, acks={args.acks}:"
        f" p50 {quantiles[49] * 1000:.2f} ms  p99 {quantiles[98] * 1000:.2f} ms  ({len(latencies):,} records)"
        f"   (target p99 <= 10 ms)"
    )
    print(
        f"  reference: the same with acks=1                  p50 {reference_quantiles[49] * 1000:.2f} ms"
        f"  p99 {reference_quantiles[98] * 1000:.2f} ms"
    )
    print(f"  where the time went, acks={args.acks} (broker histograms; p99 as its bucket's upper bound):")
    client_mean_ms = statistics.fmean(latencies) * 1000
    print(f"    {'client: send() -> acknowledgement':52s} mean {client_mean_ms:7.2f} ms")
    broker_mean_ms = 0.0
    for label, metric, request in STAGES:
        mean, p99, count = stage_figures(before, after, metric, request)
        if metric.endswith("totaltimems"):
            broker_mean_ms = mean
        print(f"    {label:52s} mean {mean:7.2f} ms   p99 <= {p99:6.1f} ms   ({count:,} requests)")
    print(
        f"    {'client linger + queue + network (client - broker)':52s} mean "
        f"{client_mean_ms - broker_mean_ms:7.2f} ms   (linger.ms=1; a request per record batch)"
    )
    pauses = collections_during.pauses
    print(
        f"    {'client: full garbage collections (event loop stopped)':52s} {len(pauses):3d} in {LATENCY_SECONDS} s"
        + (f", longest {max(pauses) * 1000:.1f} ms" if pauses else "")
    )


if __name__ == "__main__":
    asyncio.run(main())
