"""`tidelog.dev.kube_emulator`: the bookkeeping kopf relies on that kmock leaves out, and a request
history that does not grow with the requests served."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest

from tidelog.dev.kube_emulator import Emulator, serve_crds
from tidelog.operator.crds import TOPIC_CRD

TOPICS = "/apis/tidelog.io/v1beta1/namespaces/default/topics"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
SPEC = {"partitions": 1, "replicas": 1}


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
    body = {
        "apiVersion": "tidelog.io/v1beta1",
        "kind": "Topic",
        "metadata": {"name": "a"},
        "spec": {"partitions": 1, "replicas": 1},
    }
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
        body = {"apiVersion": "tidelog.io/v1beta1", "kind": "Topic", "metadata": {"name": f"t{n}"}, "spec": SPEC}
        status, _ = await _call(session, "POST", f"{url}{TOPICS}", json=body)
        assert status in (200, 201)
        status, _ = await _call(session, "GET", f"{url}{TOPICS}/t{n}")
        assert status == 200
    assert len(list(emulator)) <= 1  # kmock kept all 100, and matched each new request against them
    status, listed = await _call(session, "GET", f"{url}{TOPICS}")
    assert status == 200 and len(listed["items"]) == 50


def _topic(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "tidelog.io/v1beta1", "kind": "Topic", "metadata": {"name": name}, "spec": spec}


async def test_a_resource_is_admitted_as_the_api_server_admits_it(
    served: tuple[Emulator, str, aiohttp.ClientSession],
) -> None:
    _, url, session = served
    # schema: a required field missing, a value out of bounds → 422 Invalid, nothing stored
    status, refused = await _call(session, "POST", f"{url}{TOPICS}", json=_topic("bad", partitions=0))
    assert status == 422 and "replicas" in refused["message"] and "minimum" in refused["message"]
    assert (await _call(session, "GET", f"{url}{TOPICS}/bad"))[0] == 404
    # CEL rules of the CRD
    status, refused = await _call(
        session, "POST", f"{url}{TOPICS}", json=_topic("cel", partitions=2, replicas=1, assignment=[[1]])
    )
    assert status == 422 and "assignment must list every partition" in refused["message"]
    # pruning and defaults: an unknown field is dropped, deletionPolicy defaults to Delete
    body = _topic("ok", partitions=1, replicas=1, unknownField=True)
    body["status"] = {"topicId": "made-up"}  # the status subresource: a create's status is dropped
    status, created = await _call(session, "POST", f"{url}{TOPICS}", json=body)
    assert status in (200, 201), created
    assert created["spec"] == {"partitions": 1, "replicas": 1, "deletionPolicy": "Delete"}
    assert "status" not in created
    # a transition rule: topicName cannot change once set
    await _call(session, "PATCH", f"{url}{TOPICS}/ok", json={"spec": {"topicName": "first"}}, headers=MERGE)
    status, refused = await _call(
        session, "PATCH", f"{url}{TOPICS}/ok", json={"spec": {"topicName": "second"}}, headers=MERGE
    )
    assert status == 422 and "topicName cannot change" in refused["message"]
    # the status subresource: /status changes only status, the resource never its status
    status, written = await _call(
        session,
        "PATCH",
        f"{url}{TOPICS}/ok/status",
        json={"status": {"partitions": 1}, "spec": {"partitions": 9}},
        headers=MERGE,
    )
    assert status == 200 and written["status"] == {"partitions": 1} and written["spec"]["partitions"] == 1
    _, written = await _call(
        session,
        "PATCH",
        f"{url}{TOPICS}/ok",
        json={"status": {"partitions": 5}, "spec": {"partitions": 2}},
        headers=MERGE,
    )
    assert written["status"] == {"partitions": 1} and written["spec"]["partitions"] == 2
    assert written["metadata"]["generation"] == 3  # two changes of spec: topicName, partitions
    # a JSON patch is admitted the same way
    status, refused = await _call(
        session,
        "PATCH",
        f"{url}{TOPICS}/ok",
        json=[{"op": "replace", "path": "/spec/replicas", "value": 0}],
        headers=JSON_PATCH,
    )
    assert status == 422 and "minimum" in refused["message"]
