"""Fault scenario: kill -9 the partition leader several times while a producer writes (acks=all).

3 brokers, RF=3, min.insync.replicas=2, acks=all. Modelled on Kafka's replication_test (hard bounce
of the leader). After the kills: every acknowledged record is consumed, in order per partition.
Printed: records acknowledged / consumed / lost / duplicated, and each failover time (kill → next
acknowledged produce). Duplicates are counted, not yet refused: the idempotent producer that
removes them comes later in issue 4.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import statistics
import time
from pathlib import Path

from tests.cluster.conftest import started_cluster, wait_until
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.local_cluster import LocalCluster

KILLS = 3
TOPIC = "faults"


async def _leader(admin: AdminClient) -> int:
    described = (await admin.describe_topics([TOPIC]))[TOPIC]
    assert not isinstance(described, Exception)
    return described.partitions[0].leader


async def test_kill_the_leader_again_and_again(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", session_timeout_ms=2000) as cluster:
        await _run(cluster)


async def _run(cluster: LocalCluster) -> None:
    acknowledged: list[tuple[int, bytes]] = []  # (offset, value) in acknowledgement order
    failovers: list[float] = []
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        stop = asyncio.Event()
        last_ack = [time.monotonic()]

        async def produce() -> None:
            number = 0
            async with Producer(cluster.bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50) as producer:
                while not stop.is_set():
                    value = b"%07d" % number
                    number += 1
                    try:
                        metadata = await (await producer.send(TOPIC, value, partition=0))
                    except Exception:  # a delivery that failed is not acknowledged: not counted
                        continue
                    acknowledged.append((metadata.offset, value))
                    last_ack[0] = time.monotonic()

        producing = asyncio.create_task(produce())
        try:
            await wait_until(lambda: _count(acknowledged, 200), what="the producer to get going")
            for _ in range(KILLS):
                leader = await _leader(admin)
                killed_at = time.monotonic()
                cluster.signal(f"broker-{leader}", signal.SIGKILL)
                await wait_until(
                    functools.partial(_acked_after, last_ack, killed_at), timeout_s=30, what="an ack after the kill"
                )
                failovers.append(last_ack[0] - killed_at)
                cluster.start_broker(leader)
                await cluster.wait_ready()

                async def whole_isr() -> bool:
                    described = (await admin.describe_topics([TOPIC]))[TOPIC]
                    return not isinstance(described, Exception) and len(described.partitions[0].isr) == 3

                await wait_until(whole_isr, timeout_s=30, what="the restarted broker to rejoin the ISR")
        finally:
            stop.set()
            await asyncio.wait_for(producing, 60)
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
    duplicated = len(values) - len(set(values))
    print(
        f"\nleader kills: acked {len(acknowledged)}, consumed {len(consumed)}, lost {len(lost)}, "
        f"duplicated {duplicated}, failover s: {', '.join(f'{t:.2f}' for t in failovers)} "
        f"(p50 {statistics.median(failovers):.2f})"
    )
    assert not lost, f"acknowledged records lost: {lost[:5]}"
    offsets = [offset for offset, _ in consumed]
    assert offsets == sorted(set(offsets)), "offsets in order, each once"
    first_seen: dict[bytes, int] = {}
    for offset, value in consumed:
        first_seen.setdefault(value, offset)
    order = [first_seen[value] for _, value in acknowledged]
    assert order == sorted(order), "acknowledged records appear in the order they were acknowledged"


async def _count(acknowledged: list[tuple[int, bytes]], at_least: int) -> bool:
    return len(acknowledged) >= at_least


async def _acked_after(last_ack: list[float], moment: float) -> bool:
    return last_ack[0] > moment
