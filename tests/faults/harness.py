"""What every fault scenario shares: a producer writing continuously with acks=all, and the check.

The check: every acknowledged record is consumed, offsets in order and each once, acknowledged
records in acknowledgement order; then one line with records acked / consumed / lost / duplicated
and failover times (kill → next acknowledged produce).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator

from tests.cluster.conftest import wait_until
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.local_cluster import LocalCluster

TOPIC = "faults"


class ContinuousProducer:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.acknowledged: list[tuple[int, bytes]] = []
        self.last_ack = time.monotonic()
        self.failovers: list[float] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        number = 0
        async with Producer(self.cluster.bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50) as producer:
            while not self._stop.is_set():
                value = b"%07d" % number
                number += 1
                try:
                    metadata = await (await producer.send(TOPIC, value, partition=0))
                except Exception:  # a failed delivery is not acknowledged: not counted
                    continue
                self.acknowledged.append((metadata.offset, value))
                self.last_ack = time.monotonic()

    async def wait_acks(self, count: int) -> None:
        target = len(self.acknowledged) + count

        async def enough() -> bool:
            return len(self.acknowledged) >= target

        await wait_until(enough, timeout_s=60, what=f"{count} more acknowledgements")

    async def time_failover(self, since: float) -> None:
        async def acked_after() -> bool:
            return self.last_ack > since

        await wait_until(acked_after, timeout_s=60, what="an acknowledgement after the fault")
        self.failovers.append(self.last_ack - since)

    def stop(self) -> None:
        self._stop.set()


@contextlib.asynccontextmanager
async def writing(cluster: LocalCluster, admin: AdminClient) -> AsyncIterator[ContinuousProducer]:
    await admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
    producer = ContinuousProducer(cluster)
    task = asyncio.create_task(producer.run())
    try:
        await producer.wait_acks(100)
        yield producer
    finally:
        producer.stop()
        await asyncio.wait_for(task, 120)


async def isr_size(admin: AdminClient) -> int:
    described = (await admin.describe_topics([TOPIC]))[TOPIC]
    return 0 if isinstance(described, Exception) else len(described.partitions[0].isr)


async def leader(admin: AdminClient) -> int:
    described = (await admin.describe_topics([TOPIC]))[TOPIC]
    assert not isinstance(described, Exception)
    return int(described.partitions[0].leader)


async def verify(cluster: LocalCluster, producer: ContinuousProducer, scenario: str) -> None:
    acknowledged = producer.acknowledged
    consumed: list[tuple[int, bytes]] = []
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        end = max(offset for offset, _ in acknowledged) + 1

        async def everything() -> bool:
            consumed.extend((record.offset, record.value or b"") for record in await consumer.poll(500))
            return bool(consumed) and consumed[-1][0] + 1 >= end

        await wait_until(everything, timeout_s=60, what="the whole log")
    by_offset = dict(consumed)
    lost = [(offset, value) for offset, value in acknowledged if by_offset.get(offset) != value]
    values = [value for _, value in consumed]
    failovers = producer.failovers
    print(
        f"\n{scenario}: acked {len(acknowledged)}, consumed {len(consumed)}, lost {len(lost)}, "
        f"duplicated {len(values) - len(set(values))}, failover s: "
        f"{', '.join(f'{t:.2f}' for t in failovers) or '-'}"
        + (f" (p50 {statistics.median(failovers):.2f})" if failovers else "")
    )
    assert not lost, f"acknowledged records lost: {lost[:5]}"
    offsets = [offset for offset, _ in consumed]
    assert offsets == sorted(set(offsets)), "offsets in order, each once"
    first_seen: dict[bytes, int] = {}
    for offset, value in consumed:
        first_seen.setdefault(value, offset)
    order = [first_seen[value] for _, value in acknowledged]
    assert order == sorted(order), "acknowledged records appear in the order they were acknowledged"
