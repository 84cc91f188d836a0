"""A real local cluster with two REST gateways behind which the gateway tests run.

Both gateways share etcd, so a consumer instance created through one is reachable through the
other. Tests wait on conditions (`wait_until`), never on bare sleeps.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tidelog.dev.local_cluster import LocalCluster

from ..cluster.conftest import COORDINATOR_ARGS, running_cluster

INSTANCE_TIMEOUT_MS = 6000
REQUEST_MAX_BYTES = 1024 * 1024
V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


@pytest.fixture(scope="module")
def gateway_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        Path(tmp_path_factory.mktemp("gateway")),
        metrics=True,
        coordinators=2,
        coordinator_args=COORDINATOR_ARGS,
        gateways=2,
        gateway_args=[
            "--consumer-instance-timeout-ms",
            str(INSTANCE_TIMEOUT_MS),
            "--rest-request-max-bytes",
            str(REQUEST_MAX_BYTES),
        ],
    ) as cluster:
        yield cluster


@pytest.fixture
async def gateways(gateway_cluster: LocalCluster) -> AsyncIterator[list[httpx.AsyncClient]]:
    clients = [httpx.AsyncClient(base_url=url, timeout=30) for url in gateway_cluster.gateway_urls]
    yield clients
    for client in clients:
        await client.aclose()


@pytest.fixture
def name() -> str:
    return f"n-{uuid.uuid4().hex[:10]}"
