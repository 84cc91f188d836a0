"""Transactions benchmark (issue 34): what transactions cost a producer, a reader and a commit.

    .venv/bin/python bench/bench_transactions.py [--transactions 200] [--commits 300]

Starts etcd, 2 controllers, 3 brokers and a coordinator (tidelog.dev.local_cluster); topics of 6
partitions, replication factor 3, min.insync.replicas 2. Each figure beside its reference from the
same run:
- produce: `--transactions` transactions of 1,000 records of 100 bytes (send_batch, then commit),
  against the same records sent by an idempotent producer without transactions. Target ≥ 50%.
- read: the topic the transactional producer wrote, with every 10th transaction aborted, read to
  its end by one consumer assigned every partition, read_committed against read_uncommitted, as
  offsets covered per second (the same log either way; read_committed drops the aborted ones).
  Target ≥ 90%.
- commit latency: `--commits` transactions of one record; the time of `commit_transaction()` once
  the record is acknowledged (EndTxn: one acks=all write to __transaction_state; the markers follow
  asynchronously). Reference: one acks=all produce of one record. Target p99 ≤ 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path

import structlog

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

PARTITIONS = 6
RECORDS_PER_TRANSACTION = 1000
VALUE = b"x" * 100
# Where a transaction's fixed cost (about five replicated writes one after another) stops dominating:
# Kafka's own figures are for transactions of 100 ms of data.
LARGER_TRANSACTIONS = (10_000, 50_000)
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
POLL_MS = 20  # the read's poll timeout: the most a poll that returns nothing adds to a read's time


async def _idempotent_rate(cluster: LocalCluster, topic: str, transactions: int) -> float:
    async with Producer(cluster.bootstrap) as producer:
        started = time.perf_counter()
        deliveries = [await producer.send_batch(topic, [VALUE] * RECORDS_PER_TRANSACTION) for _ in range(transactions)]
        for delivery in deliveries:
            await delivery
        return transactions * RECORDS_PER_TRANSACTION / (time.perf_counter() - started)


async def _transactional_rate(
    cluster: LocalCluster,
    topic: str,
    transactions: int,
    *,
    abort_every: int = 0,
    records: int = RECORDS_PER_TRANSACTION,
) -> float:
    async with Producer(cluster.bootstrap, transactional_id=f"bench-{topic}") as producer:
        await producer.init_transactions()
        started = time.perf_counter()
        for number in range(transactions):
            producer.begin_transaction()
            await producer.send_batch(topic, [VALUE] * records)
            if abort_every and number % abort_every == abort_every - 1:
                await producer.flush()  # written, then aborted: read_committed readers skip them
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
        return transactions * records / (time.perf_counter() - started)


async def _read_rate(cluster: LocalCluster, topic: str, isolation: str) -> tuple[float, int]:
    """(offsets covered per second reading the topic to its end, records returned)."""
    tps = [TopicPartition(topic, partition) for partition in range(PARTITIONS)]
    async with Consumer(
        cluster.bootstrap, isolation_level=isolation, auto_offset_reset="earliest", fetch_max_bytes=16 << 20
    ) as consumer:
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(tps)
        returned = 0
        started = time.perf_counter()
        while True:
            # A short poll: a poll whose fetches bring only aborted batches and the abort marker (the
            # topic's last transaction is aborted) returns nothing and waits out its whole timeout;
            # one such 500 ms wait on a read of 0.1 s is the likeliest cause of one run's 17%.
            for run in await consumer.poll_runs(POLL_MS):
                returned += len(run)
            positions = [await consumer.position(tp) for tp in tps]
            if all(position >= ends[tp] for tp, position in zip(tps, positions, strict=True)):
                break
        return sum(ends.values()) / (time.perf_counter() - started), returned


async def _commit_latencies(cluster: LocalCluster, topic: str, commits: int) -> tuple[list[float], list[float]]:
    """(commit_transaction() times, single acks=all produce times), milliseconds."""
    commit_ms: list[float] = []
    async with Producer(cluster.bootstrap, transactional_id=f"bench-latency-{topic}", linger_ms=0) as producer:
        await producer.init_transactions()
        for _ in range(commits):
            producer.begin_transaction()
            await (await producer.send(topic, VALUE, partition=0))
            started = time.perf_counter()
            await producer.commit_transaction()
            commit_ms.append((time.perf_counter() - started) * 1000)
    produce_ms: list[float] = []
    async with Producer(cluster.bootstrap, linger_ms=0) as plain:
        for _ in range(commits):
            started = time.perf_counter()
            await (await plain.send(topic, VALUE, partition=1))
            produce_ms.append((time.perf_counter() - started) * 1000)
    return commit_ms, produce_ms


def _p(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-transactions-") as folder:
        cluster = LocalCluster(
            Path(folder),
            coordinators=1,
            coordinator_args=["--offsets-topic-num-partitions", "6", "--transaction-state-log-num-partitions", "6"],
        )
        cluster.start()
        try:
            await cluster.wait_ready()
            async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
                for topic in ("idempotent", "transactional", "mixed", "latency", "larger"):
                    await admin.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
            reference = await _idempotent_rate(cluster, "idempotent", args.transactions)
            transactional = await _transactional_rate(cluster, "transactional", args.transactions)
            total = args.transactions * RECORDS_PER_TRANSACTION
            larger = {
                size: await _transactional_rate(cluster, "larger", max(1, total // size), records=size)
                for size in LARGER_TRANSACTIONS
            }
            await _transactional_rate(cluster, "mixed", args.transactions, abort_every=10)
            uncommitted, everything = await _read_rate(cluster, "mixed", "read_uncommitted")
            committed, kept = await _read_rate(cluster, "mixed", "read_committed")
            commit_ms, produce_ms = await _commit_latencies(cluster, "latency", args.commits)
        finally:
            cluster.stop()
    print(f"transactions: 3 brokers, RF 3, min.insync.replicas 2, {PARTITIONS} partitions, 100-byte records")
    print(f"  produce, {RECORDS_PER_TRANSACTION:,} records a transaction ({total:,} records)")
    print(f"    reference: idempotent, no transactions   {reference:12,.0f} records/s")
    print(f"    transactional                            {transactional:12,.0f} records/s   ", end="")
    print(f"{transactional / reference:5.0%} of the reference (target >= 50%)")
    for size, rate in larger.items():
        label = f"transactional, {size:,} records a transaction"
        print(f"    {label:<41}{rate:12,.0f} records/s   {rate / reference:5.0%} of the reference")
    print(f"  read to the end, every 10th transaction aborted ({everything:,} records, {kept:,} committed)")
    print(f"    reference: read_uncommitted              {uncommitted:12,.0f} offsets/s")
    print(f"    read_committed                           {committed:12,.0f} offsets/s   ", end="")
    print(f"{committed / uncommitted:5.0%} of the reference (target >= 90%)")
    print(f"  commit latency, {args.commits} transactions of one record")
    print(
        f"    reference: one acks=all produce          p50 {statistics.median(produce_ms):6.2f} ms"
        f"  p99 {_p(produce_ms, 0.99):6.2f} ms"
    )
    print(
        f"    commit_transaction()                     p50 {statistics.median(commit_ms):6.2f} ms"
        f"  p99 {_p(commit_ms, 0.99):6.2f} ms   (target p99 <= 20 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--commits", type=int, default=300)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
