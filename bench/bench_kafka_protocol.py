"""Kafka-protocol listener benchmark (issue 35): librdkafka (confluent-kafka) against the brokers'
Kafka listeners, with the native client over gRPC as the same-run reference.

    .venv/bin/python bench/bench_kafka_protocol.py [--records 1000000] [--replication-factor 1 3]

Starts etcd, a controller and 3 brokers (tidelog.dev.local_cluster) for each replication factor
asked (default 1, Kafka's own default.replication.factor, then 3), one 6-partition topic per
client, 100-byte values, acks=all. Prints:
- librdkafka's enqueue-only rate: produce() into a producer whose broker does not exist, the
  client's own ceiling on this machine (no broker, no network);
- native bulk produce (Producer.send_batch, gRPC): records/s — the reference;
- confluent-kafka produce (linger.ms 5): records/s, and its ratio to the native rate
  (targets: >= 70% of native, >= 500,000 records/s), twice: with a delivery report handed to
  Python for every record, and with delivery.report.only.error (failures are still reported and
  counted; the successes' per-record Python callbacks are the client's CPU, taken from the brokers
  on this shared machine);
- native consume (Consumer.poll of every partition from the start) and confluent-kafka consume
  (Consumer.consume, assign from the start): records/s and the ratio (target >= 70%), with
  librdkafka's defaults and with fetch.queue.backoff.ms 10 (its default, 1 s, pauses a
  partition's fetching whenever the local queue holds queued.min.messages: the defaults' rate is
  mostly that pause, whatever the broker).
The client and the cluster share this machine's cores; both sides of each ratio pay that alike.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition as RdPartition

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

VALUE = b"x" * 100
PARTITIONS = 6
NATIVE_CHUNK = 10_000  # records per send_batch call
RD_CONSUME_BATCH = 10_000


def enqueue_only(records: int) -> float:
    """librdkafka's produce() with no broker at all: what the client alone can do here."""
    producer = RdProducer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # nothing listens: every record stays queued
            "queue.buffering.max.messages": records + 1,
            "queue.buffering.max.kbytes": 2**21,
            "log_level": 0,
        }
    )
    started = time.perf_counter()
    for number in range(records):
        producer.produce("t", VALUE, partition=number % PARTITIONS)
    elapsed = time.perf_counter() - started
    producer.purge()
    return records / elapsed


async def native_produce(bootstrap: list[str], topic: str, records: int) -> float:
    values = [VALUE] * NATIVE_CHUNK
    async with Producer(bootstrap, linger_ms=5) as producer:
        started = time.perf_counter()
        deliveries = []
        for number in range(records // NATIVE_CHUNK):
            deliveries.append(await producer.send_batch(topic, values, partition=number % PARTITIONS))
        await asyncio.gather(*deliveries)
        return records / (time.perf_counter() - started)


def confluent_produce(bootstrap: str, topic: str, records: int, *, errors_only: bool = False) -> float:
    """confluent-kafka's produce() of every record, then flush(); every failure is counted, either
    way. `errors_only` (librdkafka's delivery.report.only.error): the success reports are not
    handed to Python one by one, a per-record callback that costs this machine's shared cores
    about 0.5 µs a record."""
    failed: list[object] = []

    def delivered(error: object, _: object) -> None:
        if error is not None:
            failed.append(error)

    producer = RdProducer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "queue.buffering.max.messages": 1_000_000,
            "on_delivery": delivered,
            "delivery.report.only.error": errors_only,
        }
    )
    producer.list_topics(topic, timeout=30)  # metadata first: the timing is of records alone

    started = time.perf_counter()
    for number in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, partition=number % PARTITIONS)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
        if number % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert left == 0 and not failed, (left, len(failed), failed[:1])
    return records / elapsed


async def native_consume(bootstrap: list[str], topic: str, records: int) -> float:
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, partition) for partition in range(PARTITIONS)])
        got = 0
        started = time.perf_counter()
        while got < records:
            got += len(await consumer.poll(1000))
        return got / (time.perf_counter() - started)


def confluent_consume(bootstrap: str, topic: str, records: int, **config: object) -> float:
    consumer = RdConsumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, **config})
    consumer.assign([RdPartition(topic, partition, 0) for partition in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    while got < records:
        for message in consumer.consume(RD_CONSUME_BATCH, 1.0):
            assert message.error() is None, message.error()
            got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return got / elapsed


async def run_once(records: int, replication_factor: int) -> None:
    """One cluster, one replication factor: every figure above."""
    with tempfile.TemporaryDirectory() as data:
        cluster = LocalCluster(Path(data), brokers=3, controllers=1)
        cluster.start()
        try:
            await cluster.wait_ready()
            async with AdminClient(cluster.bootstrap) as admin:
                for name in ("native", "kafka"):
                    await admin.create_topic(name, num_partitions=PARTITIONS, replication_factor=replication_factor)
            print(f"{records:,} records of {len(VALUE)} B, {PARTITIONS} partitions, RF {replication_factor}, acks=all")
            native = await native_produce(cluster.bootstrap, "native", records)
            print(f"  native produce (send_batch, gRPC):       {native:12,.0f} records/s")
            reported = await asyncio.to_thread(confluent_produce, cluster.kafka_bootstrap, "kafka", records)
            print(
                f"  confluent-kafka produce (linger.ms 5), a report per record:   {reported:12,.0f} records/s = "
                f"{reported / native:.2f} x native"
            )
            kafka = await asyncio.to_thread(
                confluent_produce, cluster.kafka_bootstrap, "kafka", records, errors_only=True
            )
            print(
                f"  confluent-kafka produce (linger.ms 5), delivery.report.only.error: {kafka:12,.0f} records/s = "
                f"{kafka / native:.2f} x native   (targets >= 0.70 x and >= 500,000/s)"
            )
            native_read = await native_consume(cluster.bootstrap, "native", records)
            print(f"  native consume (poll):                   {native_read:12,.0f} records/s")
            kafka_read = await asyncio.to_thread(confluent_consume, cluster.kafka_bootstrap, "kafka", records)
            print(
                f"  confluent-kafka consume, librdkafka's defaults:       {kafka_read:12,.0f} records/s = "
                f"{kafka_read / native_read:.2f} x native"
            )
            # librdkafka postpones a partition's next fetch by fetch.queue.backoff.ms (1 s) whenever
            # its local queue is past queued.min.messages: the defaults' rate is mostly that pause.
            tuned = await asyncio.to_thread(
                confluent_consume, cluster.kafka_bootstrap, "kafka", records, **{"fetch.queue.backoff.ms": 10}
            )
            print(
                f"  confluent-kafka consume, fetch.queue.backoff.ms 10:   {tuned:12,.0f} records/s = "
                f"{tuned / native_read:.2f} x native   (target >= 0.70 x)"
            )
        finally:
            cluster.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--replication-factor",
        type=int,
        nargs="+",
        default=[1, 3],
        help="one cluster each (default: 1, Kafka's default.replication.factor, then 3)",
    )
    args = parser.parse_args()
    records = args.records - args.records % NATIVE_CHUNK
    print(f"librdkafka enqueue only (no broker): {enqueue_only(records):,.0f} records/s")
    for replication_factor in args.replication_factor:
        await run_once(records, replication_factor)


if __name__ == "__main__":
    asyncio.run(main())
