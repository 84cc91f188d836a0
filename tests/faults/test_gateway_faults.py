"""A REST gateway killed (kill -9) under REST produce and consume, one of two (issue 19): every
record a gateway acknowledged is in the log at its acknowledged offset, none twice; the surviving
gateway goes on serving its own consumer instance and the producers that use it. Prints the
summary line the fault suite prints for every scenario."""

from __future__ import annotations

import asyncio
import base64
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster, wait_until
from tests.faults import summary
from tidelog.client import AdminClient, Consumer, TopicPartition

pytestmark = pytest.mark.timeout(240)

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
TOPIC = "rest-faults"


async def test_kill_one_of_two_gateways_under_rest_produce_and_consume(tmp_path: Path) -> None:
    async with started_cluster(
        tmp_path / "cluster", coordinators=1, coordinator_args=COORDINATOR_ARGS, gateways=2
    ) as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        first, second = cluster.gateway_urls
        acknowledged: dict[int, bytes] = {}  # offset → value, as the gateways answered
        failed_posts = 0
        stop = asyncio.Event()
        last_ack = {"at": time.monotonic()}
        gaps: list[float] = []

        async def produce(client: httpx.AsyncClient) -> None:
            nonlocal failed_posts
            number = 0
            while not stop.is_set():
                url = (first, second)[number % 2]  # alternate: half the requests go to the one killed
                values = [b"%06d-%d" % (number, i) for i in range(10)]
                number += 1
                try:
                    answer = await client.post(
                        f"{url}/topics/{TOPIC}",
                        json={"records": [{"value": base64.b64encode(v).decode(), "partition": 0} for v in values]},
                        headers={"content-type": BINARY_V2},
                        timeout=10,
                    )
                except httpx.HTTPError:
                    failed_posts += 1
                    continue
                if answer.status_code != 200:
                    failed_posts += 1
                    continue
                for value, entry in zip(values, answer.json()["offsets"], strict=True):
                    if entry["error_code"] is None:
                        assert entry["offset"] not in acknowledged, "one offset acknowledged twice"
                        acknowledged[entry["offset"]] = value
                now = time.monotonic()
                gaps.append(now - last_ack["at"])
                last_ack["at"] = now

        async with httpx.AsyncClient() as client:
            group = f"g-{uuid.uuid4().hex[:6]}"
            created = await client.post(
                f"{second}/consumers/{group}",
                json={"name": "survivor", "format": "binary", "auto.offset.reset": "earliest"},
                headers={"content-type": V2},
            )
            assert created.status_code == 200, created.text
            base = f"{second}/consumers/{group}/instances/survivor"
            assert (
                await client.post(f"{base}/subscription", json={"topics": [TOPIC]}, headers={"content-type": V2})
            ).status_code == 204
            read: list[bytes] = []

            async def consume() -> None:
                while not stop.is_set() or len(read) < len(acknowledged):
                    answer = await client.get(f"{base}/records", headers={"accept": BINARY_V2}, timeout=10)
                    assert answer.status_code == 200, answer.text  # the surviving gateway keeps serving it
                    read.extend(base64.b64decode(record["value"]) for record in answer.json())

            producing = asyncio.create_task(produce(client))
            await wait_until(lambda: _at_least(acknowledged, 200), timeout_s=30, what="records before the kill")
            cluster.signal("gateway-1", signal.SIGKILL)
            killed_at_count = len(acknowledged)
            await wait_until(
                lambda: _at_least(acknowledged, killed_at_count + 300), timeout_s=30, what="records after the kill"
            )
            stop.set()
            await producing
            consuming = asyncio.create_task(consume())
            await asyncio.wait_for(consuming, timeout=60)

        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            log: dict[int, bytes] = {}
            end = (await consumer.end_offsets([tp]))[tp]
            while len(log) < end:
                for record in await consumer.poll(500):
                    log[record.offset] = record.value or b""
        lost = [offset for offset, value in acknowledged.items() if log.get(offset) != value]
        values = list(log.values())
        duplicated = len(values) - len(set(values))
        seen = set(read)
        missed_by_rest_consumer = [value for value in acknowledged.values() if value not in seen]
        print(
            f"gateway kill -9 (1 of 2): acknowledged {len(acknowledged)}, lost {len(lost)}, duplicated {duplicated}, "
            f"failed REST produce requests {failed_posts}, longest gap between acknowledgements {max(gaps):.2f} s, "
            f"REST consumer on the survivor read {len(read)}"
        )
        summary.record(
            "gateway kill -9 (1 of 2), REST produce and consume",
            acknowledged=len(acknowledged),
            lost=len(lost),
            duplicated=duplicated,
            longest_unavailability_s=max(gaps),
        )
        assert lost == [] and duplicated == 0
        assert missed_by_rest_consumer == []


async def _at_least(acknowledged: dict[int, bytes], count: int) -> bool:
    return len(acknowledged) >= count
