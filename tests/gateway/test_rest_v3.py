"""v3 record produce, one record and a stream of them, against a real cluster."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator

import httpx

from tidelog.dev.local_cluster import LocalCluster

from .test_rest_v2 import _read_all, _topic


async def _cluster_id(gateway: httpx.AsyncClient) -> str:
    listed = (await gateway.get("/v3/clusters")).json()
    cluster_id: str = listed["data"][0]["cluster_id"]
    assert (await gateway.get(f"/v3/clusters/{cluster_id}")).json()["cluster_id"] == cluster_id
    return cluster_id


async def test_one_record(gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str) -> None:
    await _topic(gateway_cluster, name, 2, 1)
    cluster_id = await _cluster_id(gateways[0])
    assert cluster_id == await _cluster_id(gateways[1])  # one cluster id, whichever replica answers
    answer = await gateways[0].post(
        f"/v3/clusters/{cluster_id}/topics/{name}/records",
        json={
            "partition_id": 1,
            "key": {"type": "STRING", "data": "k"},
            "value": {"type": "JSON", "data": {"a": [1, 2]}},
            "headers": [{"name": "trace", "value": base64.b64encode(b"t-1").decode()}],
            "timestamp": "2026-01-02T03:04:05.678Z",
        },
    )
    report = answer.json()
    assert answer.status_code == 200 and report["error_code"] == 200, report
    assert (report["partition_id"], report["offset"], report["timestamp"]) == (1, 0, "2026-01-02T03:04:05.678Z")
    assert report["key"] == {"type": "STRING", "size": 1} and report["value"]["type"] == "JSON"
    [stored] = await _read_all(gateway_cluster, name, 2, 1)
    assert (stored.key, json.loads(stored.value), stored.headers) == (b"k", {"a": [1, 2]}, (("trace", b"t-1"),))
    assert stored.timestamp == 1767323045678
    other = await gateways[0].post("/v3/clusters/not-this-one/topics/x/records", json={})
    assert (other.status_code, other.json()["error_code"]) == (404, 40406)
    missing = await gateways[0].post(f"/v3/clusters/{cluster_id}/topics/no-such-topic/records", json={})
    assert (missing.status_code, missing.json()["error_code"]) == (404, 40401)


async def test_a_stream_of_records_is_answered_record_by_record_in_order(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 1, 1)
    cluster_id = await _cluster_id(gateways[1])
    records = [json.dumps({"value": {"type": "JSON", "data": n}}).encode() for n in range(300)]
    body = b"\n".join(records) + b' {"value": {"type": "BINARY", "data": "not base64!"}} {"value": 1'

    async def chunks() -> AsyncIterator[bytes]:  # cut anywhere, even inside records: the parser must not care
        for start in range(0, len(body), 77):
            yield body[start : start + 77]

    reports = []
    async with gateways[1].stream(
        "POST",
        f"/v3/clusters/{cluster_id}/topics/{name}/records",
        content=chunks(),
        headers={"content-type": "application/json"},
    ) as answer:
        async for line in answer.aiter_lines():
            if line:
                reports.append(json.loads(line))
    assert [report["offset"] for report in reports[:300]] == list(range(300))
    assert reports[300]["error_code"] == 400 and "base64" in reports[300]["message"]
    assert reports[301]["error_code"] == 400 and len(reports) == 302  # the cut-off record ends the stream
    stored = await _read_all(gateway_cluster, name, 1, 300)
    assert [json.loads(record.value) for record in stored] == list(range(300))
