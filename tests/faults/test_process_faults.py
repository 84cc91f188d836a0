"""Faults inside one running broker (issue 19), injected with LD_PRELOAD (tests/faults/injection.py)
under an acks=all producer (3 brokers, RF 3, min.insync.replicas=2):

- a slow disk on a follower (every write and sync under its data directory waits 3 s, longer
  than replica.lag.time.max.ms): it leaves the ISR, the producer goes on with the other two, and
  it returns to the ISR once the disk is healthy again;
- the leader's wall clock jumping a day back, two days forward, an hour back, then true again
  while it appends with LogAppendTime: offsets stay dense and in order, nothing acknowledged is
  lost, each record carries the time the leader's clock read when it appended it, and retention
  (7 days) deletes nothing, since no jump went past it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cluster.conftest import started_cluster, wait_until
from tests.faults.harness import TOPIC, isr_size, leader, verify, writing
from tests.faults.injection import FaultControl, injection_unavailable
from tidelog.client import AdminClient, Consumer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

pytestmark = pytest.mark.skipif(bool(injection_unavailable()), reason=injection_unavailable() or "runs")

LAG_MS = 2000
DAY_S = 86_400.0
HOUR_S = 3_600.0
TOLERANCE_S = 60.0  # a record's LogAppendTime against the leader's shifted clock


@contextlib.asynccontextmanager
async def injected_cluster(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, dict[int, FaultControl]]]:
    data_dir = tmp_path / "cluster"
    controls = {
        broker: FaultControl(tmp_path / f"faults-broker-{broker}", slow_dir=data_dir / f"broker-{broker}")
        for broker in (1, 2, 3)
    }
    async with started_cluster(
        data_dir,
        session_timeout_ms=2000,
        broker_args=["--replica-lag-time-max-ms", str(LAG_MS)],
        environments={f"broker-{broker}": control.environment for broker, control in controls.items()},
    ) as cluster:
        yield cluster, controls


async def _isr_is(admin: AdminClient, size: int) -> bool:
    return await isr_size(admin) == size


async def test_slow_disk_on_a_follower_leaves_the_isr_and_returns(tmp_path: Path) -> None:
    async with injected_cluster(tmp_path) as (cluster, controls):
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin) as producer,
        ):
            current = await leader(admin)
            follower = next(broker for broker in cluster.broker_ids if broker != current)
            controls[follower].slow_disk(3000)
            await wait_until(lambda: _isr_is(admin, 2), timeout_s=30, what="the slow follower out of the ISR")
            await producer.wait_acks(300)  # the other two keep acknowledging at full speed
            controls[follower].slow_disk(0)
            await wait_until(lambda: _isr_is(admin, 3), timeout_s=60, what="the follower back in the ISR")
            await producer.wait_acks(100)
        await verify(cluster, producer, "slow disk (3 s a write) on a follower, then healthy")


async def test_wall_clock_jumps_on_the_leader(tmp_path: Path) -> None:
    async with injected_cluster(tmp_path) as (cluster, controls):
        phases: list[tuple[float, float, float]] = []  # (clock offset s, from, to) in monotonic time
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin, {"message.timestamp.type": "LogAppendTime", "segment.ms": "3600000"}) as producer,
        ):
            current = await leader(admin)
            for offset_s in (-DAY_S, 2 * DAY_S, -HOUR_S, 0.0):
                controls[current].shift_clock(offset_s)
                began = time.monotonic()
                await producer.wait_acks(150)
                phases.append((offset_s, began, time.monotonic()))
            assert await leader(admin) == current, "the jumps moved no leadership"
        await verify(cluster, producer, "leader's wall clock: -1 day, +2 days, -1 hour, true")

        stamps: dict[int, int] = {}
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            end = producer.acknowledged[-1][0] + 1

            async def everything() -> bool:
                stamps.update((record.offset, record.timestamp) for record in await consumer.poll(500))
                return len(stamps) >= end

            await wait_until(everything, timeout_s=60, what="every record's timestamp")
        assert min(stamps) == 0, "retention deleted nothing: no jump went past retention.ms"
        wall_minus_monotonic = time.time() - time.monotonic()
        checked = 0
        for (offset, _), (sent_at, acked_at) in zip(producer.acknowledged, producer.ack_times, strict=True):
            for offset_s, began, ended in phases:
                if began < sent_at and acked_at < ended:  # sent after the jump, appended before the next
                    expected_s = acked_at + wall_minus_monotonic + offset_s
                    assert abs(stamps[offset] / 1000 - expected_s) < TOLERANCE_S, (offset, stamps[offset], offset_s)
                    checked += 1
        assert checked >= 100, f"too few records clear of the jumps to check: {checked}"
