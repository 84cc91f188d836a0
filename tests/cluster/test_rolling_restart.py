"""A rolling restart under acks=all load, as a StatefulSet update does it: each broker stopped
(SIGTERM) and started again in turn, the next one only once the restarted one is ready (no
partition it hosts under-replicated: the file its pod's readiness probe reads)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition

from .conftest import started_cluster, wait_until

TOPIC = "rolling"
PARTITIONS = 3
# No wait between two acknowledgements longer than this beyond the longest one while nothing
# restarts: a handover that waited out a lease (3 s here) or a request timeout would. Issue 37's
# target, 100 ms, is a speed figure: bench_scale prints it ("rolling restart: longest wait"). As a
# test bound it failed a full suite at 0.245 s on a loaded machine (the guide: speed is measured
# by benchmarks, never by timed tests).
STALL_MAX_S = 1.0
STEADY_S = 1.0  # the steady window before the restarts (this machine's own noise)


class Writers:
    """One writer per partition, one record in flight each: every wait for an acknowledgement is
    a gap a client would see."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.acked: dict[int, list[bytes]] = {partition: [] for partition in range(PARTITIONS)}
        self.gaps: list[float] = []
        self.ends: list[float] = []  # when each gap ended
        self.partitions: list[int] = []  # whose writer waited
        self.events: list[tuple[float, str]] = []  # the restarts' steps, to name a long gap's cause
        self.failures: list[BaseException] = []
        self.stop = asyncio.Event()

    def _longest(self, start: float) -> int | None:
        """The index of the longest wait that began at or after `start` (None: none did)."""
        since = [index for index, (gap, end) in enumerate(zip(self.gaps, self.ends, strict=True)) if end - gap >= start]
        return max(since, key=self.gaps.__getitem__, default=None)

    def longest_since(self, start: float) -> float:
        index = self._longest(start)
        return 0.0 if index is None else self.gaps[index]

    def explain_longest(self, start: float, steady_max: float) -> str:
        """The longest wait since `start`: its partition, its wall-clock time, the restarts near it."""
        index = self._longest(start)
        if index is None:
            return "no acknowledgement since the restarts began"
        began = self.ends[index] - self.gaps[index]
        near = [f"{name} at {at - began:+.3f} s" for at, name in self.events if abs(at - began) < 2]
        wall = time.time() - (time.monotonic() - began)
        return (
            f"longest wait for an acknowledgement {self.gaps[index]:.3f} s (steady: {steady_max:.3f} s),"
            f" partition {self.partitions[index]}, from {wall:.3f}; near its start: {near}"
        )

    async def write(self, partition: int) -> None:
        number = 0
        last = time.monotonic()
        while not self.stop.is_set():
            value = b"%d-%08d" % (partition, number)
            try:
                await (await self.producer.send(TOPIC, value, partition=partition))
            except Exception as error:  # every failure is the test's finding
                self.failures.append(error)
            else:
                self.acked[partition].append(value)
            now = time.monotonic()
            self.gaps.append(now - last)
            self.ends.append(now)
            self.partitions.append(partition)
            last = now
            number += 1


async def test_a_rolling_restart_under_acks_all_load_fails_no_produce_and_stalls_none(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster") as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})

            async def all_ready() -> bool:
                return all(cluster.broker_ready(broker) for broker in cluster.broker_ids)

            await wait_until(all_ready, what="every broker ready (every ISR whole)")
            async with Producer(cluster.bootstrap, acks="all", linger_ms=0, retry_backoff_ms=20) as producer:
                writers = Writers(producer)
                tasks = [asyncio.create_task(writers.write(partition)) for partition in range(PARTITIONS)]
                await wait_until(_acked_some(writers), what="writing under way")
                steady_from = time.monotonic()
                await asyncio.sleep(STEADY_S)  # (a measurement window, not a wait for a condition)
                steady_max = writers.longest_since(steady_from)
                restarts_from = time.monotonic()
                for broker in cluster.broker_ids:
                    writers.events.append((time.monotonic(), f"SIGTERM broker {broker}"))
                    await asyncio.to_thread(cluster.signal, f"broker-{broker}", signal.SIGTERM)
                    writers.events.append((time.monotonic(), f"broker {broker} gone"))
                    assert not cluster.broker_ready(broker)  # it took its file with it
                    cluster.start_broker(broker)
                    writers.events.append((time.monotonic(), f"broker {broker} started"))

                    async def ready(broker: int = broker) -> bool:
                        return cluster.broker_ready(broker)

                    await wait_until(ready, timeout_s=60, what=f"broker {broker} ready again")
                    writers.events.append((time.monotonic(), f"broker {broker} ready"))
                await wait_until(_acked_some(writers), what="writing after the last restart")
                writers.stop.set()
                await asyncio.gather(*tasks)

        assert not writers.failures, f"produce failed: {writers.failures[:3]}"
        longest = writers.longest_since(restarts_from)
        assert longest <= STALL_MAX_S + steady_max, writers.explain_longest(restarts_from, steady_max)
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(TOPIC, partition) for partition in range(PARTITIONS)])
            read: dict[int, list[bytes]] = {partition: [] for partition in range(PARTITIONS)}
            expected = sum(len(values) for values in writers.acked.values())
            deadline = time.monotonic() + 30
            while sum(len(values) for values in read.values()) < expected and time.monotonic() < deadline:
                for record in await consumer.poll(500):
                    read[record.partition].append(record.value)
        for partition in range(PARTITIONS):
            assert read[partition] == writers.acked[partition], f"partition {partition}: lost or reordered"


def _acked_some(writers: Writers) -> object:
    counts = {partition: len(values) for partition, values in writers.acked.items()}

    async def more() -> bool:
        return all(len(writers.acked[partition]) > counts[partition] + 10 for partition in counts)

    return more
