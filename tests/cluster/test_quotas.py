"""Client quotas on real brokers: a producer over its producer_byte_rate is throttled to it (the
broker answers with throttle_time_ms and holds its next request; the client waits), within ±15%
over 10 s; quotas change live."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.cluster.conftest import wait_until
from tidelog.cli.main import main as cli
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.security.quotas.quota import QuotaEntity
from tidelog.dev.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

QUOTA_BYTES_PER_S = 1_000_000
MEASURED_S = 10.0
RECORD = b"x" * 1000


async def _produce_for(cluster: LocalCluster, topic: str, client_id: str, seconds: float) -> int:
    """Bytes of record batches acknowledged while producing as fast as the quota lets."""
    acknowledged = 0
    async with Producer(cluster.bootstrap, acks=1, linger_ms=5, batch_size=16_384, client_id=client_id) as producer:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            delivery = await producer.send_batch(topic, [RECORD] * 16, partition=0)
            await delivery
            acknowledged += 16 * len(RECORD)
    return acknowledged


async def test_a_producer_is_held_to_its_byte_rate(cluster: LocalCluster, admin: AdminClient, topic_name: str) -> None:
    client_id = f"quota-{uuid.uuid4().hex[:6]}"
    entity = QuotaEntity(client_id=client_id)
    await admin.create_topic(topic_name, 1, 1)
    await admin.alter_client_quotas(entity, {"producer_byte_rate": QUOTA_BYTES_PER_S})
    try:
        assert (await admin.describe_client_quotas())[entity] == {"producer_byte_rate": QUOTA_BYTES_PER_S}
        await asyncio.sleep(0.5)
        produced = await _produce_for(cluster, topic_name, client_id, MEASURED_S)
        rate = produced / MEASURED_S
        print(f"quota {QUOTA_BYTES_PER_S} B/s, measured {rate:,.0f} B/s ({rate / QUOTA_BYTES_PER_S:.2f}×)")
        assert 0.85 * QUOTA_BYTES_PER_S <= rate <= 1.15 * QUOTA_BYTES_PER_S
        # Removed live: the same client runs unthrottled again.
        await admin.alter_client_quotas(entity, remove=["producer_byte_rate"])
        assert entity not in await admin.describe_client_quotas()

        async def unthrottled() -> bool:
            return await _produce_for(cluster, topic_name, client_id, 1.0) > 3 * QUOTA_BYTES_PER_S

        await wait_until(unthrottled, timeout_s=30, what="the quota lifted")
    finally:
        await admin.alter_client_quotas(entity, remove=["producer_byte_rate"])
    async with Consumer(cluster.bootstrap) as consumer:  # everything acknowledged is there
        end = await consumer.end_offsets([TopicPartition(topic_name, 0)])
        assert end[TopicPartition(topic_name, 0)] * len(RECORD) >= produced


def test_quota_commands_alter_and_describe(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    where = ["--bootstrap", ",".join(cluster.bootstrap)]
    assert (
        cli(
            [
                "quota",
                "alter",
                "--user-default",
                "--client-id",
                "cli-app",
                "--add-config",
                "consumer_byte_rate=5e6,request_percentage=50",
                *where,
            ]
        )
        == 0
    )
    assert cli(["quota", "describe", *where]) == 0
    described = capsys.readouterr().out
    assert (
        "<default>" in described
        and "cli-app" in described
        and "5,000,000" in described  # in full (issue 31), not 5e+06
        and "request_percentage" in described
    )
    assert (
        cli(["quota", "alter", "--user-default", "--client-id", "cli-app", "--add-config", "consumer_rate=1", *where])
        == 1
    )
    assert "unknown quota 'consumer_rate'" in capsys.readouterr().err
    assert (
        cli(
            [
                "quota",
                "alter",
                "--user-default",
                "--client-id",
                "cli-app",
                "--delete-config",
                "consumer_byte_rate,request_percentage",
                *where,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert cli(["quota", "describe", *where]) == 0
    assert "cli-app" not in capsys.readouterr().out
