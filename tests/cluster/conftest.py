"""A real local cluster (etcd, 2 controllers, 3 brokers as processes) for the cluster tests.

`cluster` is shared by the tests that leave it as they found it; tests that kill processes take
`fresh_cluster`, their own. Tests wait on conditions with deadlines (`wait_until`), never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidelog.client import AdminClient, ConsumerRecord
from tidelog.dev.local_cluster import LocalCluster

T = TypeVar("T")

# Coordinators for tests: few offsets and transaction state partitions, no initial rebalance delay,
# short sessions allowed.
COORDINATOR_ARGS = [
    "--offsets-topic-num-partitions",
    "6",
    "--transaction-state-log-num-partitions",
    "6",
    "--group-initial-rebalance-delay-ms",
    "0",
    "--group-min-session-timeout-ms",
    "1000",
]


@contextlib.contextmanager
def running_cluster(data_dir: Path, **options: object) -> Iterator[LocalCluster]:
    options.setdefault("session_timeout_ms", 3000)
    local = LocalCluster(data_dir, **options)  # type: ignore[arg-type]
    local.start()
    try:
        asyncio.run(local.wait_ready())
        yield local
    finally:
        local.stop()


@contextlib.asynccontextmanager
async def started_cluster(data_dir: Path, **options: object) -> AsyncIterator[LocalCluster]:
    """`running_cluster` for use inside an async test (whose event loop is already running)."""
    options.setdefault("session_timeout_ms", 3000)
    local = LocalCluster(data_dir, **options)  # type: ignore[arg-type]
    local.start()
    try:
        await local.wait_ready()
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("cluster")), metrics=True) as local:
        yield local


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path / "cluster") as local:
        yield local


@pytest.fixture
async def admin(cluster: LocalCluster) -> AsyncIterator[AdminClient]:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as client:
        yield client


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


async def wait_until(condition: Callable[[], Awaitable[T | None]], *, timeout_s: float = 30.0, what: str = "") -> T:
    """Poll an async condition until it returns something truthy, or fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = await condition()
            if result:
                return result
            last = result
        except Exception as error:  # the condition may fail while the cluster settles
            last = error
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what or condition}: last {last!r}")


async def poll_until(consumer: Any, count: int, *, what: str = "records read") -> list[ConsumerRecord]:
    """Poll a Consumer or GroupConsumer until it has returned at least `count` records."""
    records: list[ConsumerRecord] = []

    async def enough() -> bool:
        records.extend(await consumer.poll(200))
        return len(records) >= count

    await wait_until(enough, what=what)
    return records
