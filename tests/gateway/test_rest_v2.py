"""The REST Proxy v2 API against a real cluster: metadata, produce, the consumer flow, bad input."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

from ..cluster.conftest import wait_until
from .conftest import BINARY_V2, INSTANCE_TIMEOUT_MS, JSON_V2, REQUEST_MAX_BYTES, V2


async def _topic(cluster: LocalCluster, name: str, partitions: int = 3, replication: int = 2) -> None:
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(name, partitions, replication)


async def _read_all(cluster: LocalCluster, topic: str, partitions: int, count: int) -> list[Any]:
    """Every record of the topic, read with the plain client (what really was stored)."""
    found: list[Any] = []
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        async def enough() -> bool:
            found.extend(await consumer.poll(200))
            return len(found) >= count

        await wait_until(enough, timeout_s=30, what=f"{count} records in {topic}")
    return found


async def _end_offsets(cluster: LocalCluster, topic: str, partitions: int) -> list[int]:
    async with Consumer(cluster.bootstrap) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.list_offsets(tps, -1)
        return [ends[tp] for tp in tps]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_topic_metadata(gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str) -> None:
    await _topic(gateway_cluster, name, 3, 2)
    gateway = gateways[0]
    listed = (await gateway.get("/topics")).json()
    assert name in listed and "__consumer_offsets" not in listed
    topic = (await gateway.get(f"/topics/{name}")).json()
    assert topic["name"] == name and [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    partition = (await gateway.get(f"/topics/{name}/partitions/1")).json()
    assert len(partition["replicas"]) == 2
    assert [r["broker"] for r in partition["replicas"] if r["leader"]] == [partition["leader"]]
    assert all(r["in_sync"] for r in partition["replicas"])
    assert (await gateway.get(f"/topics/{name}/partitions")).json() == topic["partitions"]
    missing = await gateway.get("/topics/no-such-topic")
    assert (missing.status_code, missing.json()["error_code"]) == (404, 40401)
    no_partition = await gateway.get(f"/topics/{name}/partitions/9")
    assert (no_partition.status_code, no_partition.json()["error_code"]) == (404, 40402)
    assert missing.headers["content-type"] == V2


async def test_produce_json_and_binary_and_read_back(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 3, 2)
    gateway = gateways[1]
    json_records = [{"value": {"n": n, "text": "é"}} for n in range(5)] + [
        {"key": "k", "value": [1, 2], "partition": 2}
    ]
    produced = await gateway.post(
        f"/topics/{name}", content=json.dumps({"records": json_records}), headers={"content-type": JSON_V2}
    )
    assert produced.status_code == 200, produced.text
    offsets = produced.json()["offsets"]
    assert len(offsets) == 6 and all(entry["error_code"] is None for entry in offsets)
    assert offsets[5]["partition"] == 2
    binary = await gateway.post(
        f"/topics/{name}/partitions/1",
        json={"records": [{"key": _b64(b"\x00k"), "value": _b64(b"\xff\x00bytes")}, {"value": None}]},
        headers={"content-type": BINARY_V2},
    )
    assert binary.status_code == 200, binary.text
    assert [entry["partition"] for entry in binary.json()["offsets"]] == [1, 1]
    second, first = binary.json()["offsets"][1], binary.json()["offsets"][0]
    assert second["offset"] == first["offset"] + 1
    stored = await _read_all(gateway_cluster, name, 3, 8)
    by_position = {(record.partition, record.offset): record for record in stored}
    for record, entry in zip(json_records, offsets, strict=True):
        kept = by_position[(entry["partition"], entry["offset"])]
        assert json.loads(kept.value) == record["value"]
    raw = by_position[(1, first["offset"])]
    assert (raw.key, raw.value) == (b"\x00k", b"\xff\x00bytes")
    assert by_position[(1, second["offset"])].value is None


async def test_a_large_mixed_produce_answers_each_record_with_where_it_was_stored(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    # Enough records for the bulk path, mixed with what takes the per-record path (headers, own
    # timestamps) and with keyed and explicitly placed records: every offset entry must point at
    # exactly its record.
    await _topic(gateway_cluster, name, 3, 1)
    records: list[dict[str, Any]] = []
    for n in range(150):
        record: dict[str, Any] = {"value": _b64(b"v%d" % n)}
        if n % 5 == 1:
            record["key"] = _b64(b"k%d" % n)
        if n % 7 == 2:
            record["partition"] = 2
        if n % 11 == 3:
            record["headers"] = [{"name": "n", "value": _b64(b"%d" % n)}]
        if n % 13 == 4:
            record["timestamp"] = 1_700_000_000_000 + n
        records.append(record)
    answer = await gateways[0].post(f"/topics/{name}", json={"records": records}, headers={"content-type": BINARY_V2})
    assert answer.status_code == 200, answer.text
    offsets = answer.json()["offsets"]
    assert len(offsets) == 150 and all(entry["error_code"] is None for entry in offsets)
    stored_records = await _read_all(gateway_cluster, name, 3, 150)
    by_position = {(record.partition, record.offset): record for record in stored_records}
    assert len(by_position) == 150
    for n, (record, entry) in enumerate(zip(records, offsets, strict=True)):
        stored = by_position[(entry["partition"], entry["offset"])]
        assert stored.value == b"v%d" % n
        assert stored.key == (b"k%d" % n if "key" in record else None)
        assert dict(stored.headers) == ({"n": b"%d" % n} if "headers" in record else {})
        if "partition" in record:
            assert entry["partition"] == 2
        if "timestamp" in record:
            assert stored.timestamp == record["timestamp"]


async def test_bad_produce_requests_are_refused_whole(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 2, 1)
    gateway = gateways[0]
    before = await _end_offsets(gateway_cluster, name, 2)

    async def refused(content: bytes, content_type: str, path: str = f"/topics/{name}") -> tuple[int, int]:
        answer = await gateway.post(path, content=content, headers={"content-type": content_type})
        assert set(answer.json()) == {"error_code", "message"} and answer.json()["message"]
        return answer.status_code, answer.json()["error_code"]

    assert await refused(b'{"records": [{"value": 1}', JSON_V2) == (400, 400)
    assert await refused(b'{"records": [{"value": 1}]}', "text/plain") == (415, 415)
    assert await refused(b'{"records": []}', JSON_V2) == (422, 422)
    assert await refused(b'{"records": [{"value": 1, "partition": -1}]}', JSON_V2) == (422, 422)
    good_then_bad = {"records": [{"value": _b64(b"fine")}, {"value": "not base64!"}]}
    assert await refused(json.dumps(good_then_bad).encode(), BINARY_V2) == (422, 422)  # records.1.value
    good_then_missing = {"records": [{"value": 1}, {"value": 2, "partition": 5}]}
    assert await refused(json.dumps(good_then_missing).encode(), JSON_V2) == (404, 40402)
    assert await refused(b'{"records": [{"value": 1}]}', JSON_V2, "/topics/no-such-topic") == (404, 40401)
    big = json.dumps({"records": [{"value": "x" * 1000}] * (REQUEST_MAX_BYTES // 1000 + 10)}).encode()
    assert await refused(big, JSON_V2) == (413, 413)
    assert await _end_offsets(gateway_cluster, name, 2) == before  # nothing of any of them was written


async def test_the_whole_consumer_flow(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 2, 2)
    gateway = gateways[0]
    headers = {"content-type": V2}
    created = await gateway.post(
        f"/consumers/{name}",
        json={"name": "reader", "format": "json", "auto.offset.reset": "earliest", "auto.commit.enable": "false"},
        headers=headers,
    )
    assert created.status_code == 200, created.text
    base = created.json()["base_uri"].removeprefix(str(gateway.base_url).rstrip("/"))
    assert base == f"/consumers/{name}/instances/reader"
    again = await gateway.post(f"/consumers/{name}", json={"name": "reader"}, headers=headers)
    assert (again.status_code, again.json()["error_code"]) == (409, 40902)
    assert (await gateway.post(f"{base}/subscription", json={"topics": [name]}, headers=headers)).status_code == 204
    assert (await gateway.get(f"{base}/subscription")).json() == {"topics": [name]}
    values = [{"n": n} for n in range(20)]
    await gateway.post(
        f"/topics/{name}",
        json={"records": [{"key": v["n"], "value": v} for v in values]},  # keyed: both partitions get some
        headers={"content-type": JSON_V2},
    )
    # The first poll long-polls through the join: it returns records, not [] (REST Proxy's complaint).
    first = await gateway.get(f"{base}/records", params={"timeout": 10_000}, headers={"accept": JSON_V2})
    assert first.status_code == 200 and first.headers["content-type"] == JSON_V2
    got = first.json()
    assert got, "the first poll came back empty"

    async def all_read() -> bool:
        page = await gateway.get(f"{base}/records", params={"timeout": 500}, headers={"accept": JSON_V2})
        got.extend(page.json())
        return len(got) >= len(values)

    await wait_until(all_read, timeout_s=30, what="all records through the gateway")
    assert sorted(record["value"]["n"] for record in got) == list(range(20))
    assert all(record["timestamp"] > 0 and record["headers"] == [] for record in got)
    mismatch = await gateway.get(f"{base}/records", headers={"accept": BINARY_V2})
    assert (mismatch.status_code, mismatch.json()["error_code"]) == (406, 40601)
    assert (await gateway.post(f"{base}/offsets")).status_code == 200  # empty body: everything fetched
    partitions = {"partitions": [{"topic": name, "partition": p} for p in range(2)]}
    committed = (await gateway.request("GET", f"{base}/offsets", json=partitions, headers=headers)).json()
    ends = await _end_offsets(gateway_cluster, name, 2)
    assert all(ends) and [entry["offset"] for entry in committed["offsets"]] == ends
    explicit = {"offsets": [{"topic": name, "partition": 0, "offset": 0}]}  # the last record processed
    assert (await gateway.post(f"{base}/offsets", json=explicit, headers=headers)).status_code == 200
    committed = (await gateway.request("GET", f"{base}/offsets", json=partitions, headers=headers)).json()
    assert committed["offsets"][0]["offset"] == 1  # REST Proxy stores the next offset to read
    seek = {"offsets": [{"topic": name, "partition": p, "offset": max(end - 1, 0)} for p, end in enumerate(ends)]}
    assert (await gateway.post(f"{base}/positions", json=seek, headers=headers)).status_code == 204
    tails: list[dict[str, Any]] = []

    async def both_tails() -> bool:
        page = await gateway.get(f"{base}/records", params={"timeout": 500}, headers={"accept": JSON_V2})
        tails.extend(page.json())
        return len(tails) >= 2

    await wait_until(both_tails, timeout_s=30, what="the last record of each partition")
    assert sorted((r["partition"], r["offset"]) for r in tails) == [(p, end - 1) for p, end in enumerate(ends) if end]
    assert (await gateway.post(f"{base}/positions/beginning", json=partitions, headers=headers)).status_code == 204
    replay: list[dict[str, Any]] = []

    async def replayed() -> bool:
        page = await gateway.get(f"{base}/records", params={"timeout": 500}, headers={"accept": JSON_V2})
        replay.extend(page.json())
        return len(replay) >= len(values)

    await wait_until(replayed, timeout_s=30, what="a replay from the beginning")
    assert (await gateway.post(f"{base}/positions/end", json=partitions, headers=headers)).status_code == 204
    empty = await gateway.get(f"{base}/records", params={"timeout": 200}, headers={"accept": JSON_V2})
    assert empty.json() == []
    # Subscribing again replaces the subscription (KafkaConsumer.subscribe), here by a pattern.
    pattern = {"topic_pattern": f"{name}|no-such-topic-.*"}
    assert (await gateway.post(f"{base}/subscription", json=pattern, headers=headers)).status_code == 204

    async def by_pattern() -> bool:
        await gateway.get(f"{base}/records", params={"timeout": 200}, headers={"accept": JSON_V2})
        return (await gateway.get(f"{base}/subscription")).json() == {"topics": [name]}

    await wait_until(by_pattern, timeout_s=30, what="the pattern subscription assigned")
    assert (await gateway.delete(f"{base}/subscription")).status_code == 204
    assert (await gateway.get(f"{base}/subscription")).json() == {"topics": []}
    assert (await gateway.get(f"{base}/assignments")).json() == {"partitions": []}
    assert (await gateway.get(f"{base}/records", headers={"accept": JSON_V2})).json()["error_code"] == 40903
    assert (await gateway.delete(base)).status_code == 204
    gone = await gateway.get(f"{base}/subscription")
    assert (gone.status_code, gone.json()["error_code"]) == (404, 40403)


async def test_two_instances_share_the_partitions_and_any_gateway_reaches_either(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 4, 1)
    headers = {"content-type": V2}
    bases = []
    for index, gateway in enumerate(gateways):  # one instance held by each gateway
        created = await gateway.post(
            f"/consumers/{name}",
            json={"name": f"m{index}", "format": "binary", "auto.offset.reset": "earliest"},
            headers=headers,
        )
        bases.append(f"/consumers/{name}/instances/m{index}")
        assert created.status_code == 200, created.text
        subscribed = await gateway.post(f"{bases[-1]}/subscription", json={"topics": [name]}, headers=headers)
        assert subscribed.status_code == 204
    seen: dict[int, list[bytes]] = {0: [], 1: []}

    async def poll(member: int) -> None:
        other = gateways[1 - member]  # always through the gateway that does NOT hold the instance
        page = await other.get(f"{bases[member]}/records", params={"timeout": 300}, headers={"accept": BINARY_V2})
        assert page.status_code == 200, page.text
        seen[member].extend(base64.b64decode(record["value"]) for record in page.json())

    async def assignments() -> list[set[tuple[str, int]]]:
        return [
            {(p["topic"], p["partition"]) for p in (await gateways[0].get(f"{b}/assignments")).json()["partitions"]}
            for b in bases
        ]

    async def split() -> bool:
        await asyncio.gather(poll(0), poll(1))
        owned = await assignments()
        return len(owned[0]) == len(owned[1]) == 2 and len(owned[0] | owned[1]) == 4

    await wait_until(split, timeout_s=60, what="the two members owning two partitions each")
    settled = await assignments()
    produced = [b"%03d" % n for n in range(200)]
    await gateways[0].post(
        f"/topics/{name}",
        json={"records": [{"value": _b64(v), "key": _b64(v)} for v in produced]},  # keyed: all partitions
        headers={"content-type": BINARY_V2},
    )

    async def all_read() -> bool:
        await asyncio.gather(poll(0), poll(1))
        return len(seen[0]) + len(seen[1]) >= len(produced)

    await wait_until(all_read, timeout_s=60, what="both members reading their own partitions")
    assert await assignments() == settled  # no rebalance while reading
    assert sorted(seen[0] + seen[1]) == produced  # each record once: the group split the partitions
    assert seen[0] and seen[1]
    for base in bases:
        assert (await gateways[1].delete(base)).status_code == 204


async def test_records_beyond_max_bytes_wait_for_the_next_poll(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 1, 1)
    gateway = gateways[0]
    headers = {"content-type": V2}
    await gateway.post(
        f"/topics/{name}",
        json={"records": [{"value": _b64(b"%04d" % n)} for n in range(50)]},
        headers={"content-type": BINARY_V2},
    )
    await gateway.post(f"/consumers/{name}", json={"name": "small", "auto.offset.reset": "earliest"}, headers=headers)
    base = f"/consumers/{name}/instances/small"
    await gateway.post(f"{base}/assignments", json={"partitions": [{"topic": name, "partition": 0}]}, headers=headers)
    offsets: list[int] = []

    async def drained() -> bool:
        page = await gateway.get(f"{base}/records", params={"timeout": 300, "max_bytes": 40})
        assert len(page.json()) <= 10  # 4 bytes each
        offsets.extend(record["offset"] for record in page.json())
        return len(offsets) >= 50

    await wait_until(drained, timeout_s=30, what="50 records 10 at a time")
    assert offsets == list(range(50))  # none skipped, none twice
    assert (await gateway.get(f"{base}/assignments")).json() == {"partitions": [{"topic": name, "partition": 0}]}
    subscribe = await gateway.post(f"{base}/subscription", json={"topics": [name]}, headers=headers)
    assert (subscribe.status_code, subscribe.json()["error_code"]) == (409, 40903)
    await gateway.delete(base)


async def test_bad_consumer_requests(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    gateway = gateways[0]
    headers = {"content-type": V2}

    async def code(answer: httpx.Response) -> tuple[int, int]:
        return answer.status_code, answer.json()["error_code"]

    assert await code(await gateway.post(f"/consumers/{name}", json={"format": "avro"}, headers=headers)) == (
        422,
        42204,
    )
    bad_reset = {"auto.offset.reset": "sometimes"}
    assert await code(await gateway.post(f"/consumers/{name}", json=bad_reset, headers=headers)) == (422, 42204)
    bad_commit = {"auto.commit.enable": "perhaps"}
    assert await code(await gateway.post(f"/consumers/{name}", json=bad_commit, headers=headers)) == (422, 42204)
    assert await code(await gateway.post(f"/consumers/{name}", content=b"{", headers=headers)) == (400, 400)
    assert await code(await gateway.get(f"/consumers/{name}/instances/ghost/records")) == (404, 40403)
    assert await code(await gateway.delete(f"/consumers/{name}/instances/ghost")) == (404, 40403)
    await gateway.post(f"/consumers/{name}", json={"name": "idle"}, headers=headers)
    nothing = await gateway.get(f"/consumers/{name}/instances/idle/records")
    assert await code(nothing) == (409, 40903)  # neither subscribed nor assigned
    subscription = f"/consumers/{name}/instances/idle/subscription"
    bad_pattern = await gateway.post(subscription, json={"topic_pattern": "("}, headers=headers)
    assert await code(bad_pattern) == (422, 422)
    both = await gateway.post(subscription, json={"topics": ["a"], "topic_pattern": "b.*"}, headers=headers)
    assert await code(both) == (422, 422)
    unknown = {"partitions": [{"topic": "no-such-topic", "partition": 0}]}
    assigned = await gateway.post(f"/consumers/{name}/instances/idle/assignments", json=unknown, headers=headers)
    assert await code(assigned) == (404, 40401)
    await gateway.delete(f"/consumers/{name}/instances/idle")


async def test_an_idle_instance_expires_and_leaves_its_group(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 2, 1)
    headers = {"content-type": V2}
    bases = []
    for member in ("idle", "busy"):
        await gateways[0].post(f"/consumers/{name}", json={"name": member}, headers=headers)
        bases.append(f"/consumers/{name}/instances/{member}")
        await gateways[0].post(f"{bases[-1]}/subscription", json={"topics": [name]}, headers=headers)

    async def split() -> bool:
        await asyncio.gather(*(gateways[0].get(f"{b}/records", params={"timeout": 200}) for b in bases))
        owned = [len((await gateways[0].get(f"{b}/assignments")).json()["partitions"]) for b in bases]
        return owned == [1, 1]

    await wait_until(split, timeout_s=30, what="one partition each")

    async def busy_owns_both() -> bool:  # only "busy" keeps polling; "idle" expires
        await gateways[1].get(f"{bases[1]}/records", params={"timeout": 200})
        return len((await gateways[1].get(f"{bases[1]}/assignments")).json()["partitions"]) == 2

    await wait_until(busy_owns_both, timeout_s=INSTANCE_TIMEOUT_MS / 1000 + 30, what="the idle member gone")
    gone = await gateways[1].get(f"{bases[0]}/assignments")
    assert (gone.status_code, gone.json()["error_code"]) == (404, 40403)
    await gateways[1].delete(bases[1])


async def test_records_stream_as_server_sent_events(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 1, 1)
    headers = {"content-type": V2}
    await gateways[0].post(f"/consumers/{name}", json={"name": "sse", "format": "json"}, headers=headers)
    base = f"/consumers/{name}/instances/sse"
    await gateways[0].post(
        f"{base}/assignments", json={"partitions": [{"topic": name, "partition": 0}]}, headers=headers
    )
    await gateways[0].post(
        f"{base}/positions/end", json={"partitions": [{"topic": name, "partition": 0}]}, headers=headers
    )
    events: list[dict[str, Any]] = []
    async with gateways[1].stream("GET", f"{base}/records/stream", headers={"accept": "text/event-stream"}) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        await gateways[0].post(
            f"/topics/{name}", json={"records": [{"value": n} for n in range(3)]}, headers={"content-type": JSON_V2}
        )
        lines = stream.aiter_lines()
        async for line in lines:
            if line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
            if len(events) == 3:
                break
        # The stream does not hold the instance: a commit goes through while it is open.
        committed = await asyncio.wait_for(gateways[0].post(f"{base}/offsets"), timeout=5)
        assert committed.status_code == 200
        await gateways[0].post(
            f"/topics/{name}", json={"records": [{"value": _b64(b"not json")}]}, headers={"content-type": BINARY_V2}
        )
        rest = [line async for line in lines]  # the stream ends with the error as its last event
    assert [(event["offset"], event["value"]) for event in events] == [(0, 0), (1, 1), (2, 2)]
    ending = [line for line in rest if line]
    assert ending[-2] == "event: error" and json.loads(ending[-1].removeprefix("data: "))["error_code"] == 50002
    await gateways[0].delete(base)


async def test_metrics_count_requests_by_route(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient]
) -> None:
    await gateways[0].get("/topics")
    await gateways[0].get("/topics/no-such-topic")
    async with httpx.AsyncClient() as client:
        text = (await client.get(gateway_cluster.metrics_endpoint("gateway-1"))).text
    assert 'tidelog_gateway_requests_total{method="GET",route="/topics",status="200"}' in text
    assert 'tidelog_gateway_requests_total{method="GET",route="/topics/{topic}",status="404"}' in text
    assert "no-such-topic" not in text


async def test_a_json_consumer_meeting_a_record_that_is_not_json_says_so_and_skips_nothing(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 1, 1)
    gateway = gateways[0]
    headers = {"content-type": V2}
    await gateway.post(
        f"/topics/{name}", json={"records": [{"value": _b64(b"not json")}]}, headers={"content-type": BINARY_V2}
    )
    await gateway.post(f"/consumers/{name}", json={"name": "j", "format": "json"}, headers=headers)
    base = f"/consumers/{name}/instances/j"
    await gateway.post(f"{base}/assignments", json={"partitions": [{"topic": name, "partition": 0}]}, headers=headers)
    await gateway.post(
        f"{base}/positions", json={"offsets": [{"topic": name, "partition": 0, "offset": 0}]}, headers=headers
    )
    for _ in range(2):  # the same answer again: the record was not skipped
        answer = await gateway.get(f"{base}/records", params={"timeout": 5000})
        assert (answer.status_code, answer.json()["error_code"]) == (500, 50002), answer.text
    await gateway.delete(base)


async def test_records_of_a_batch_the_broker_refuses_report_their_error_and_the_rest_their_offsets(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    """The bulk path (a request of many records) reports per record: small records land, the batch
    holding the large ones is refused by the partition (max.message.bytes), non-retriable."""
    async with AdminClient(gateway_cluster.bootstrap, controllers=gateway_cluster.controller_endpoints) as admin:
        await admin.create_topic(name, 1, 1, {"max.message.bytes": str(64 * 1024)})
    records = [{"value": _b64(b"s" * 10)}] * 1200 + [{"value": _b64(b"L" * 10_000)}] * 20
    answer = await gateways[0].post(
        f"/topics/{name}/partitions/0", json={"records": records}, headers={"content-type": BINARY_V2}
    )
    assert answer.status_code == 200, answer.text
    offsets = answer.json()["offsets"]
    landed = [entry for entry in offsets if entry["error_code"] is None]
    refused = offsets[len(landed) :]
    assert 0 < len(landed) < 1200 and [entry["offset"] for entry in landed] == list(range(len(landed)))
    assert refused and all(entry["error_code"] == 1 and "MESSAGE_TOO_LARGE" in entry["error"] for entry in refused)
    assert await _end_offsets(gateway_cluster, name, 1) == [len(landed)]


async def test_subscribing_to_a_topic_not_yet_created_answers_no_records_until_it_exists(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    """Issue 31: a subscription to a missing topic answered 40401 on every poll; REST Proxy (and
    Kafka's consumer) answer [] and assign the topic's partitions once it is created."""
    gateway = gateways[0]
    created = await gateway.post(
        f"/consumers/{name}",
        json={"name": "early", "format": "json", "auto.offset.reset": "earliest"},
        headers={"content-type": V2},
    )
    base = created.json()["base_uri"].removeprefix(str(gateway.base_url).rstrip("/"))
    subscribed = await gateway.post(f"{base}/subscription", json={"topics": [name]}, headers={"content-type": V2})
    assert subscribed.status_code == 204
    empty = await gateway.get(f"{base}/records", params={"timeout": 1000}, headers={"accept": JSON_V2})
    assert (empty.status_code, empty.json()) == (200, []), empty.text
    await _topic(gateway_cluster, name, 2, 1)
    await gateway.post(
        f"/topics/{name}", json={"records": [{"value": {"late": True}}]}, headers={"content-type": JSON_V2}
    )
    got: list[Any] = []

    async def arrived() -> bool:
        page = await gateway.get(f"{base}/records", params={"timeout": 500}, headers={"accept": JSON_V2})
        assert page.status_code == 200, page.text
        got.extend(page.json())
        return bool(got)

    await wait_until(arrived, timeout_s=30, what="the record of the topic created after the subscription")
    assert [record["value"] for record in got] == [{"late": True}]
    assert (await gateway.delete(base)).status_code == 204


async def test_a_read_committed_instance_reads_committed_transactions_only(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    """`isolation.level` in the instance's config, as a consumer's (KIP-98)."""
    await _topic(gateway_cluster, name, 1, 2)
    async with Producer(gateway_cluster.bootstrap, transactional_id=f"{name}-tx") as producer:
        await producer.init_transactions()
        for value, commit in ((b"aborted", False), (b"committed", True)):
            producer.begin_transaction()
            await (await producer.send(name, value, partition=0))
            await (producer.commit_transaction() if commit else producer.abort_transaction())
        producer.begin_transaction()
        await (await producer.send(name, b"open", partition=0))  # still open while the instance reads
        gateway = gateways[0]
        created = await gateway.post(
            f"/consumers/{name}",
            json={
                "name": "committed",
                "format": "binary",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            },
            headers={"content-type": V2},
        )
        assert created.status_code == 200, created.text
        base = f"/consumers/{name}/instances/committed"
        assigned = await gateway.post(
            f"{base}/assignments", json={"partitions": [{"topic": name, "partition": 0}]}, headers={"content-type": V2}
        )
        assert assigned.status_code == 204
        seen: list[bytes] = []

        async def committed_read() -> bool:
            page = await gateway.get(f"{base}/records", params={"timeout": 500}, headers={"accept": BINARY_V2})
            seen.extend(base64.b64decode(record["value"]) for record in page.json())
            return bool(seen)

        await wait_until(committed_read, what="the committed record")
        page = await gateway.get(f"{base}/records", params={"timeout": 500}, headers={"accept": BINARY_V2})
        assert seen + [base64.b64decode(record["value"]) for record in page.json()] == [b"committed"]
        await producer.abort_transaction()
        bad = await gateway.post(
            f"/consumers/{name}", json={"name": "bad", "isolation.level": "serializable"}, headers={"content-type": V2}
        )
        assert (bad.status_code, bad.json()["error_code"]) == (422, 42204), bad.text
        await gateway.delete(base, headers={"content-type": V2})
