"""The group coordinator owning a busy group killed (kill -9) or frozen (SIGSTOP) under commit load
(issue 19): no acknowledged commit is lost, no committed offset ever goes backwards (a frozen
coordinator's late writes are fenced when it wakes), and the members commit again within the
coordinator's session. Each prints the fault suite's summary line."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster, wait_until
from tests.faults import summary
from tidelog.client import AdminClient, GroupConsumer, Producer, TopicPartition
from tidelog.common.errors import TidelogError
from tidelog.dev.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(240)

TOPIC = "commits"
PARTITIONS = 3
SESSION_MS = 3000  # the coordinators' etcd sessions: a dead owner's partitions move after this


async def _scenario(cluster: LocalCluster, fault: signal.Signals, label: str) -> None:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    async with Producer(cluster.bootstrap, acks="all") as producer:
        for partition in range(PARTITIONS):
            await (await producer.send_batch(TOPIC, [b"%06d" % n for n in range(20_000)], partition=partition))
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    acknowledged: dict[TopicPartition, int] = {}
    observed: dict[TopicPartition, list[int]] = {tp: [] for tp in partitions}
    commits_after: list[float] = []
    fault_at = {"t": float("inf")}
    stop = asyncio.Event()

    def member() -> GroupConsumer:
        consumer = GroupConsumer(
            cluster.bootstrap,
            "busy",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            request_timeout_ms=5000,  # a frozen coordinator is given up on, and looked up again
            max_poll_records=50,
        )
        consumer.subscribe([TOPIC])
        return consumer

    members = [member(), member()]

    async def work(consumer: GroupConsumer) -> None:
        while not stop.is_set():
            with contextlib.suppress(TidelogError, ConnectionError):
                if await consumer.poll(100):
                    wanted = dict(consumer._positions())
                    started = time.monotonic()
                    await consumer.commit(wanted)  # acknowledged: it must stay committed
                    for tp, offset in wanted.items():
                        acknowledged[tp] = max(acknowledged.get(tp, 0), offset)
                    if started > fault_at["t"]:  # a commit asked for after the fault, and answered
                        commits_after.append(time.monotonic() - fault_at["t"])

    async def observe(reader: GroupConsumer) -> None:
        while not stop.is_set():
            with contextlib.suppress(TidelogError, ConnectionError):
                for tp, offset in (await reader.committed(partitions)).items():
                    if offset is not None:
                        observed[tp].append(offset)
            await asyncio.sleep(0.05)

    # Never joins: OffsetFetch only.
    reader = GroupConsumer(cluster.bootstrap, "busy", enable_auto_commit=False, request_timeout_ms=5000)
    tasks = [asyncio.create_task(work(m)) for m in members] + [asyncio.create_task(observe(reader))]
    try:
        await wait_until(lambda: _committed_some(acknowledged), timeout_s=30, what="commits before the fault")
        owner_endpoint = members[0].link.endpoint or members[1].link.endpoint
        owner = f"coordinator-{cluster.coordinator_endpoints.index(owner_endpoint) + 1}"
        fault_at["t"] = time.monotonic()
        cluster.signal(owner, fault)
        await wait_until(lambda: _at_least(commits_after, 20), timeout_s=30, what="commits again after the fault")
        if fault == signal.SIGSTOP:
            cluster.signal(owner, signal.SIGCONT)  # it wakes believing it owns the group: fenced
        else:
            cluster.start_coordinator(int(owner.rsplit("-", 1)[1]))
        before = len(commits_after)
        await wait_until(lambda: _at_least(commits_after, before + 20), timeout_s=30, what="commits after the heal")
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await task
    final = await reader.committed(partitions)
    for consumer in (*members, reader):
        await consumer.close()
    lost = {tp: (acknowledged[tp], final[tp]) for tp in acknowledged if (final[tp] or 0) < acknowledged[tp]}
    backwards = {
        tp: [(a, b) for a, b in itertools.pairwise(values) if b < a][:3]
        for tp, values in observed.items()
        if any(b < a for a, b in itertools.pairwise(values))
    }
    print(
        f"{label}: commits acknowledged up to {sum(acknowledged.values())} records, lost {len(lost)} partitions, "
        f"went backwards {len(backwards)}, first commit after the fault {commits_after[0]:.2f} s "
        f"(coordinator session {SESSION_MS / 1000:.0f} s), observations {sum(len(v) for v in observed.values())}"
    )
    summary.record(
        label,
        acknowledged=sum(acknowledged.values()),
        lost=len(lost),
        duplicated=0,
        reordered=len(backwards),  # a committed offset that went backwards
        longest_unavailability_s=commits_after[0],
        unit="offs",
    )
    assert lost == {}, lost
    assert backwards == {}, backwards
    assert commits_after[0] <= SESSION_MS / 1000 + 6  # its session, then the rejoin and a commit


async def _committed_some(acknowledged: dict[TopicPartition, int]) -> bool:
    return sum(acknowledged.values()) >= 2000


async def _at_least(values: list[float], count: int) -> bool:
    return len(values) >= count


async def test_kill_the_coordinator_owning_a_busy_group(tmp_path: Path) -> None:
    async with started_cluster(
        tmp_path / "cluster", coordinators=2, coordinator_args=COORDINATOR_ARGS, session_timeout_ms=SESSION_MS
    ) as cluster:
        await _scenario(cluster, signal.SIGKILL, "coordinator kill -9 under commit load")


async def test_freeze_the_coordinator_owning_a_busy_group(tmp_path: Path) -> None:
    async with started_cluster(
        tmp_path / "cluster", coordinators=2, coordinator_args=COORDINATOR_ARGS, session_timeout_ms=SESSION_MS
    ) as cluster:
        await _scenario(cluster, signal.SIGSTOP, "coordinator SIGSTOP then SIGCONT under commit load")
