"""Fault scenarios (3 brokers, RF=3, min.insync.replicas=2, acks=all, a producer writing all along),
modelled on Kafka's replication_test: hard kills and bounces of leaders, brokers and the controller.
Each prints records acked / consumed / lost / duplicated and the failover times; any loss, any
duplicate, a record the live consumer saw vanishing, or two leaders in one epoch fails it.
Brokers hold 1 s etcd sessions here (broker.session.timeout.ms=1000), so a dead broker is noticed
within about a second: failover times are measured against that.
"""

from __future__ import annotations

import functools
import shutil
import signal
import time
from pathlib import Path

from tests.cluster.conftest import started_cluster, wait_until
from tests.faults.harness import isr_size, leader, verify, writing
from tidelog.client import AdminClient

KILLS = 3
SESSION_MS = 1000


async def test_kill_the_leader_again_and_again(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", session_timeout_ms=SESSION_MS) as cluster:
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin) as producer,
        ):
            for _ in range(KILLS):
                victim = await leader(admin)
                killed_at = time.monotonic()
                cluster.signal(f"broker-{victim}", signal.SIGKILL)
                await producer.time_failover(killed_at)
                cluster.start_broker(victim)
                await cluster.wait_ready()
                await wait_until(lambda: _isr_is(admin, 3), timeout_s=30, what="the ISR to be whole again")
        await verify(cluster, producer, "kill -9 the leader x3")


async def test_kill_two_of_three_then_bring_them_back(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", session_timeout_ms=SESSION_MS) as cluster:
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin) as producer,
        ):
            current = await leader(admin)
            victims = [broker for broker in cluster.broker_ids if broker != current]
            killed_at = time.monotonic()
            for victim in victims:  # min.insync.replicas=2: writes stop, nothing is acknowledged alone
                cluster.signal(f"broker-{victim}", signal.SIGKILL)
            for victim in victims:
                cluster.start_broker(victim)
            await cluster.wait_ready()
            await producer.time_failover(killed_at)
            await producer.wait_acks(100)
        await verify(cluster, producer, "kill -9 two of three brokers, then restart them")


async def test_kill_the_active_controller(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", session_timeout_ms=SESSION_MS) as cluster:
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin) as producer,
        ):
            active = (await admin.describe_cluster()).controller_id
            cluster.signal(f"controller-{active}", signal.SIGKILL)
            await producer.wait_acks(200)  # the data path does not need the controller
            victim = await leader(admin)  # ... and a leader failure is handled by the next one
            killed_at = time.monotonic()
            cluster.signal(f"broker-{victim}", signal.SIGKILL)
            await producer.time_failover(killed_at)
        await verify(cluster, producer, "kill -9 the active controller, then a leader")


async def test_restart_a_broker_with_its_data_wiped(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", session_timeout_ms=SESSION_MS) as cluster:
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin) as producer,
        ):
            current = await leader(admin)
            victim = next(broker for broker in cluster.broker_ids if broker != current)
            old_life = await _incarnation(admin, victim)
            cluster.signal(f"broker-{victim}", signal.SIGKILL)
            shutil.rmtree(cluster.data_dir / f"broker-{victim}")
            cluster.start_broker(victim)
            # Until the old lease expires the old life still looks registered: wait for the new one,
            # which the controller keeps out of every ISR until it has caught up again.
            await wait_until(
                functools.partial(_new_life, admin, victim, old_life), timeout_s=30, what="the new registration"
            )
            await wait_until(lambda: _isr_is(admin, 3), timeout_s=60, what="the wiped broker to catch up")
            survivor = await leader(admin)
            killed_at = time.monotonic()
            cluster.signal(f"broker-{survivor}", signal.SIGKILL)  # the re-filled replica must now serve
            await producer.time_failover(killed_at)
        await verify(cluster, producer, "restart a broker with its data wiped, then kill the leader")


async def test_stop_a_follower_then_resume_it(tmp_path: Path) -> None:
    # The follower is frozen (SIGSTOP), not dead: its lease runs out, or the lag does, and the ISR
    # loses it, so acks=all goes on with two replicas; resumed, it catches up and rejoins.
    async with started_cluster(
        tmp_path / "cluster", session_timeout_ms=SESSION_MS, broker_args=["--replica-lag-time-max-ms", "1000"]
    ) as cluster:
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin) as producer,
        ):
            current = await leader(admin)
            victim = next(broker for broker in cluster.broker_ids if broker != current)
            stopped_at = time.monotonic()
            cluster.signal(f"broker-{victim}", signal.SIGSTOP)
            await wait_until(lambda: _isr_is(admin, 2), timeout_s=30, what="the frozen follower to leave the ISR")
            await producer.wait_acks(100)
            await producer.time_failover(stopped_at)
            cluster.signal(f"broker-{victim}", signal.SIGCONT)
            await wait_until(lambda: _isr_is(admin, 3), timeout_s=60, what="the resumed follower to rejoin")
            await producer.wait_acks(100)
        await verify(cluster, producer, "SIGSTOP a follower, then SIGCONT it")


async def _isr_is(admin: AdminClient, size: int) -> bool:
    return await isr_size(admin) == size


async def _incarnation(admin: AdminClient, broker_id: int) -> str:
    brokers = {broker.broker_id: broker for broker in (await admin.describe_cluster()).brokers}
    return str(brokers[broker_id].incarnation) if broker_id in brokers else ""


async def _new_life(admin: AdminClient, broker_id: int, old: str) -> bool:
    current = await _incarnation(admin, broker_id)
    return bool(current) and current != old
