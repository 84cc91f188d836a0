"""What the monitoring tests share: a real local cluster scraped by a real Prometheus."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster
from tidelog.dev.etcd_server import free_port
from tidelog.dev.local_cluster import LocalCluster
from tidelog.dev.local_prometheus import LocalPrometheus, scrape_config

SCRAPE_S = 1.0


@pytest.fixture
async def monitored(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, LocalPrometheus]]:
    async with started_cluster(
        tmp_path / "cluster", coordinators=1, coordinator_args=COORDINATOR_ARGS, gateways=1, metrics=True
    ) as cluster:
        config = scrape_config(cluster, interval_s=SCRAPE_S)
        prometheus = LocalPrometheus(config, tmp_path / "prometheus", free_port())
        prometheus.start()
        try:
            await asyncio.to_thread(prometheus.wait_ready)
            yield cluster, prometheus
        finally:
            prometheus.stop()
