"""`tidelog.kube_emulator`: the bookkeeping kopf relies on that kmock leaves out, and a request
history that does not grow with the requests served."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest

from tidelog.kube_emulator import Emulator, serve_crds
from tidelog.operator.crds import TOPIC_CRD

TOPICS = "/apis/tidelog.io/v1beta1/namespaces/default/topics"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
async def served() -> AsyncIterator[tuple[Emulator, str, aiohttp.ClientSession]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server, aiohttp.ClientSession() as session:
        serve_crds(emulator, [TOPIC_CRD])
        yield emulator, str(server.url).rstrip("/"), session


async def _call(session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with session.request(method, url, **kwargs) as answer:
        return answer.status, await answer.json(content_type=None)


async def test_writes_are_stamped_as_the_api_server_stamps_them(
    served: tuple[Emulator, str, aiohttp.ClientSession],
) -> None:
    _, url, session = served
    body = {"apiVersion": "tidelog.io/v1beta1", "kind": "Topic", "metadata": {"name": "a"}, "spec": {"partitions": 1}}
    status, created = await _call(session, "POST", f"{url}{TOPICS}", json=body)
    assert status in (200, 201)
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"]
    first = int(meta["resourceVersion"])

    _, patched = await _call(session, "PATCH", f"{url}{TOPICS}/a/status", json={"status": {"x": 1}}, headers=MERGE)
    assert int(patched["metadata"]["resourceVersion"]) > first
    assert patched["metadata"]["generation"] == 1  # status is not spec

    _, patched = await _call(session, "PATCH", f"{url}{TOPICS}/a", json={"spec": {"partitions": 2}}, headers=MERGE)
    assert patched["metadata"]["generation"] == 2

    stale = [{"op": "test", "path": "/metadata/resourceVersion", "value": str(first)}]
    status, _ = await _call(
        session, "PATCH", f"{url}{TOPICS}/a", json=stale, headers={"Content-Type": "application/json-patch+json"}
    )
    assert status == 422  # as the API server answers a failed test; kmock alone answers 500


async def test_request_history_holds_only_requests_in_flight(
    served: tuple[Emulator, str, aiohttp.ClientSession],
) -> None:
    emulator, url, session = served
    for n in range(50):
        body = {"apiVersion": "tidelog.io/v1beta1", "kind": "Topic", "metadata": {"name": f"t{n}"}, "spec": {}}
        status, _ = await _call(session, "POST", f"{url}{TOPICS}", json=body)
        assert status in (200, 201)
        status, _ = await _call(session, "GET", f"{url}{TOPICS}/t{n}")
        assert status == 200
    assert len(list(emulator)) <= 1  # kmock kept all 100, and matched each new request against them
    status, listed = await _call(session, "GET", f"{url}{TOPICS}")
    assert status == 200 and len(listed["items"]) == 50
