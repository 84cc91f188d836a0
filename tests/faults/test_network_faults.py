"""Network faults (issue 19): brokers, controllers and etcd each in a network namespace of their
own (tests/faults/network.py), the test process on the bridge between them as the client, and
a producer writing with acks=all all along (3 brokers, RF 3, min.insync.replicas=2).

The scenarios follow Kafka's replication and round-trip fault tests and the Jepsen analyses: the
partition leader cut off from the controllers and etcd while producers still reach it (it is
fenced: nothing it acknowledges afterwards may be lost, and a new leader takes over); a follower
cut off (the ISR shrinks), then a second (NOT_ENOUGH_REPLICAS, as min.insync.replicas says); a
symmetric 1|2 split with the active controller on the minority side; one-way loss from the leader
to a follower; and a degraded link on the leader (added latency and jitter through a userspace
proxy, a rate limit, random packet loss). Each ends healed and checked by `verify`: nothing
acknowledged lost, duplicated or reordered, nothing a consumer saw truncated, one leader per epoch.

Needs root, iproute2, nftables and tc; skips with the reason elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cluster.conftest import wait_until
from tests.faults.harness import TOPIC, ContinuousProducer, isr_size, leader, verify, writing
from tests.faults.network import DelayProxy, Network, network, network_unavailable
from tidelog.client import AdminClient, Producer
from tidelog.common.errors import NotEnoughReplicasError
from tidelog.dev.etcd_server import free_port
from tidelog.dev.local_cluster import LocalCluster, Placement

pytestmark = pytest.mark.skipif(bool(network_unavailable()), reason=network_unavailable() or "runs")

SESSION_MS = 2000
LAG_MS = 2000  # replica.lag.time.max.ms: a cut follower leaves the ISR after this
BROKER_ARGS = ["--replica-lag-time-max-ms", str(LAG_MS)]
HOSTS = ["etcd", "controller-1", "controller-2", "broker-1", "broker-2", "broker-3"]
SERVICES = HOSTS[1:]  # what a host can be cut from, beside etcd


@contextlib.asynccontextmanager
async def networked_cluster(
    data_dir: Path, *, proxied: bool = False
) -> AsyncIterator[tuple[Network, LocalCluster, dict[int, DelayProxy]]]:
    """A cluster whose every process has a host of its own. With `proxied`, clients and the other
    brokers reach each broker through a DelayProxy on the bridge (no delay until one is set)."""
    with network(HOSTS) as (net, placements):
        proxies: dict[int, DelayProxy] = {}
        for broker_id in (1, 2, 3) if proxied else ():
            name, port = f"broker-{broker_id}", free_port()
            placed = placements[name]
            placements[name] = Placement(placed.namespace, placed.address, f"{net.client_address}:{port}")
            proxies[broker_id] = DelayProxy((net.client_address, port), (placed.address, 0))
        cluster = LocalCluster(data_dir, session_timeout_ms=SESSION_MS, broker_args=BROKER_ARGS, placements=placements)
        try:
            for broker_id, proxy in proxies.items():
                proxy.target = (placements[f"broker-{broker_id}"].address, cluster.ports.brokers[broker_id])
                await proxy.start()
            cluster.start()
            await cluster.wait_ready()
            yield net, cluster, proxies
        finally:
            cluster.stop()
            for proxy in proxies.values():
                await proxy.close()


async def _isr_is(admin: AdminClient, size: int) -> bool:
    return await isr_size(admin) == size


async def _leader_is_not(admin: AdminClient, old: int) -> bool:
    try:
        return await leader(admin) not in (old, -1)
    except Exception:  # a broker cut off: ask again
        return False


async def _whole_again(admin: AdminClient, producer: ContinuousProducer) -> None:
    await wait_until(lambda: _isr_is(admin, 3), timeout_s=60, what="the ISR to be whole again")
    await producer.wait_acks(100)


@dataclasses.dataclass(frozen=True)
class UnderLoad:
    net: Network
    cluster: LocalCluster
    proxies: dict[int, DelayProxy]
    admin: AdminClient
    producer: ContinuousProducer


@contextlib.asynccontextmanager
async def under_load(tmp_path: Path, scenario: str, *, proxied: bool = False) -> AsyncIterator[UnderLoad]:
    """A networked cluster with the producer and reader running; after the body: every fault
    healed, the ISR whole and acknowledging again, then `verify` under the scenario's name."""
    async with networked_cluster(tmp_path / "cluster", proxied=proxied) as (net, cluster, proxies):
        async with (
            AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
            writing(cluster, admin) as producer,
        ):
            yield UnderLoad(net, cluster, proxies, admin, producer)
            for proxy in proxies.values():
                proxy.delay_ms = proxy.jitter_ms = 0
            net.heal()
            await _whole_again(admin, producer)
        await verify(cluster, producer, scenario)


async def test_leader_cut_off_from_controllers_and_etcd(tmp_path: Path) -> None:
    async with under_load(tmp_path, "net: leader cut from controllers+etcd") as run:
        old = await leader(run.admin)
        cut_at = time.monotonic()
        run.net.cut([f"broker-{old}"], ["etcd", "controller-1", "controller-2"])  # producers still reach it
        await wait_until(lambda: _leader_is_not(run.admin, old), timeout_s=30, what="a new leader")
        await run.producer.time_failover(cut_at)
        await run.producer.wait_acks(200)  # acknowledged by the new leader while the old one still runs


async def test_followers_cut_off_one_then_two(tmp_path: Path) -> None:
    async with under_load(tmp_path, "net: one follower cut, then two") as run:
        current = await leader(run.admin)
        first, second = (f"broker-{b}" for b in run.cluster.broker_ids if b != current)
        everyone = [*HOSTS, "client"]
        run.net.cut([first], [host for host in everyone if host != first])
        await wait_until(lambda: _isr_is(run.admin, 2), timeout_s=30, what="the cut follower out of the ISR")
        await run.producer.wait_acks(200)  # two in sync: min.insync.replicas=2 still met
        run.net.cut([second], [host for host in everyone if host not in (first, second)])
        await wait_until(lambda: _isr_is(run.admin, 1), timeout_s=30, what="the second follower out of the ISR")
        # The leader alone refuses acks=all, as min.insync.replicas says (the idempotent producer
        # above retries that error until its delivery timeout; a producer that does not retry sees it).
        async with Producer(run.cluster.bootstrap, acks="all", enable_idempotence=False, retries=0) as probe:
            with pytest.raises(NotEnoughReplicasError):
                await (await probe.send(TOPIC, b"refused", partition=0))
        healed_at = time.monotonic()
        run.net.heal()
        await run.producer.time_failover(healed_at)


async def test_symmetric_split_leader_and_active_controller_in_the_minority(tmp_path: Path) -> None:
    async with under_load(tmp_path, "net: split 1|2, leader+controller minority") as run:
        old = await leader(run.admin)
        active = (await run.admin.describe_cluster()).controller_id
        minority = [f"broker-{old}", f"controller-{active}"]
        split_at = time.monotonic()
        run.net.cut(minority, [host for host in HOSTS if host not in minority])

        async def other_controller() -> bool:
            try:
                return (await run.admin.describe_cluster()).controller_id not in (active, -1)
            except Exception:  # the controller asked was the cut one
                return False

        await wait_until(other_controller, timeout_s=30, what="the majority side's controller active")
        await wait_until(lambda: _leader_is_not(run.admin, old), timeout_s=30, what="a leader on the majority side")
        await run.producer.time_failover(split_at)
        await run.producer.wait_acks(200)


async def test_one_way_loss_from_the_leader_to_a_follower(tmp_path: Path) -> None:
    async with under_load(tmp_path, "net: one-way loss leader->follower") as run:
        current = await leader(run.admin)
        follower = next(b for b in run.cluster.broker_ids if b != current)
        run.net.drop(f"broker-{current}", f"broker-{follower}")  # its fetch responses never arrive
        await wait_until(lambda: _isr_is(run.admin, 2), timeout_s=30, what="the starved follower out of the ISR")
        await run.producer.wait_acks(200)


async def test_degraded_link_on_the_leader(tmp_path: Path) -> None:
    async with under_load(tmp_path, "net: leader +20±10 ms, 5% loss, 8 Mbit/s", proxied=True) as run:
        current = await leader(run.admin)
        run.proxies[current].delay_ms, run.proxies[current].jitter_ms = 20, 10
        run.net.lose(f"broker-{current}", 5)
        run.net.limit_rate(f"broker-{current}", 8000)
        # Slower, but it goes on (about 5 a second here; 100 took 20 s of the suite, issue 37).
        await run.producer.wait_acks(30)


SOAK_ROUNDS = 12


@pytest.mark.soak
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", [1901, 1902])
async def test_network_soak(tmp_path: Path, seed: int) -> None:
    """`-m soak`: rounds of seeded random network faults (a host cut from everyone, a 1|2 split, a
    one-way drop between two hosts, loss on a host), each held until the cluster reacted, then
    healed and the ISR whole again before the next."""
    chooser = random.Random(seed)
    async with under_load(tmp_path, f"net soak seed {seed} ({SOAK_ROUNDS} rounds)") as run:
        for _ in range(SOAK_ROUNDS):
            fault = chooser.choice(["isolate", "split", "one-way", "loss"])
            victim = chooser.choice(SERVICES)
            if fault == "isolate":
                run.net.cut([victim], [host for host in [*HOSTS, "client"] if host != victim])
            elif fault == "split":
                minority = [victim, chooser.choice([h for h in HOSTS if h != victim])]
                run.net.cut(minority, [host for host in HOSTS if host not in minority])
            elif fault == "one-way":
                run.net.drop(victim, chooser.choice([h for h in HOSTS if h != victim]))
            else:
                run.net.lose(victim, chooser.choice([5, 20, 50]))
            fault_at = time.monotonic()
            await wait_until(functools.partial(_elapsed, fault_at, 4.0), timeout_s=10, what="the fault held 4 s")
            run.net.heal()
            await _whole_again(run.admin, run.producer)


async def _elapsed(since: float, seconds: float) -> bool:
    return time.monotonic() - since >= seconds
