"""A gateway process with authentication on: credentials from a file, instances kept per principal."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tidelog.dev.local_cluster import LocalCluster

from ..cluster.conftest import COORDINATOR_ARGS, running_cluster
from .conftest import V2


@pytest.fixture(scope="module")
def secured_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = Path(tmp_path_factory.mktemp("secured"))
    credentials = folder / "credentials"
    credentials.write_text("alice-key alice\nbob-token bob\n")
    with running_cluster(
        folder / "cluster",
        coordinators=1,
        coordinator_args=COORDINATOR_ARGS,
        gateways=1,
        gateway_args=["--credentials-file", str(credentials)],
    ) as cluster:
        yield cluster


@pytest.fixture
async def gateway(secured_cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=secured_cluster.gateway_urls[0], timeout=30) as client:
        yield client


async def test_requests_need_a_credential_and_instances_answer_only_their_principal(
    gateway: httpx.AsyncClient,
) -> None:
    anonymous = await gateway.get("/topics")
    assert (anonymous.status_code, anonymous.json()["error_code"]) == (401, 40101)
    wrong = await gateway.get("/topics", headers={"x-api-key": "mallory"})
    assert wrong.status_code == 401
    alice = {"x-api-key": "alice-key", "content-type": V2}
    bob = {"authorization": "Bearer bob-token", "content-type": V2}
    assert (await gateway.get("/topics", headers=alice)).status_code == 200
    assert (await gateway.get("/openapi.json")).status_code == 200  # the documents stay open
    assert "swagger" in (await gateway.get("/docs")).text.lower()
    created = await gateway.post("/consumers/shared-group", json={"name": "alices"}, headers=alice)
    assert created.status_code == 200, created.text
    base = "/consumers/shared-group/instances/alices"
    assert (await gateway.get(f"{base}/assignments", headers=alice)).status_code == 200
    missing = await gateway.get("/consumers/shared-group/instances/nobody/assignments", headers=bob)
    for attempt in (gateway.get(f"{base}/assignments", headers=bob), gateway.delete(base, headers=bob)):
        refused = await attempt  # another principal's instance reads as a missing one: no name confirmed
        assert (refused.status_code, refused.json()["error_code"]) == (404, 40403)
        assert refused.json()["message"].replace("alices", "nobody") == missing.json()["message"]
    assert (await gateway.delete(base, headers=alice)).status_code == 204
