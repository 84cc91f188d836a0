"""The gateway's registry of REST consumer instances against a real etcd: a lost session keeps them."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from types import SimpleNamespace
from typing import cast

import grpc
from etcd3aio import Etcd3Client

from tests.cluster.conftest import wait_until
from tidelog.common.settings import GatewaySettings
from tidelog.gateway.consumer_instances import ConsumerInstance
from tidelog.gateway.instance_registry import InstanceRegistry
from tidelog.server_common.etcd.session import new_session
from tidelog.server_common.metadata import GatewayConsumerRecord, gateway_consumer_key

TTL_S = 6


def _instance(principal: str) -> ConsumerInstance:
    closed = asyncio.Event()

    async def close() -> None:
        closed.set()

    return cast(
        ConsumerInstance,
        SimpleNamespace(principal=principal, lock=asyncio.Lock(), close=close, closed=closed, touch=lambda: None),
    )


async def test_a_session_lost_before_etcd_expires_its_lease_keeps_every_instance(etcd_client: Etcd3Client) -> None:
    """The gateway declares its session lost on its own clock; etcd expires the lease a moment later.
    Re-registering finds the instances' keys still there, its own: they move onto the new lease
    instead of the instances being closed as taken, and outlive the old lease."""
    assert etcd_client.kv is not None and etcd_client.lease is not None
    gateway_id = uuid.uuid4().hex
    session = await new_session(etcd_client, ttl_s=TTL_S, holder="test-gateway")
    registry = InstanceRegistry(
        etcd_client, session, gateway_id=gateway_id, url="http://127.0.0.1:1", settings=GatewaySettings.from_configs()
    )
    group = f"g-{gateway_id[:8]}"
    instance = await registry.add(group, "one", "alice", lambda: _instance("alice"))
    old_lease = session.lease_id
    keeping = asyncio.create_task(registry.keep_registered())
    try:
        await session.close(revoke=False)  # lost here, still alive in etcd

        async def renewed() -> bool:
            return registry.session.lease_id != old_lease and bool(await _held_lease(etcd_client, group))

        await wait_until(renewed, timeout_s=10, what="the instance registered under the new session")
        with contextlib.suppress(grpc.aio.AioRpcError):
            await etcd_client.lease.revoke(old_lease)  # etcd's own expiry, a moment later
        assert await _held_lease(etcd_client, group) == registry.session.lease_id
        assert registry.get(group, "one", "alice") is instance
        assert not cast(SimpleNamespace, instance).closed.is_set()
        # A name held by another gateway is still refused, and a second add of our own name too.
        other = GatewayConsumerRecord("another-gateway", "http://127.0.0.1:2", "bob")
        await etcd_client.kv.put(gateway_consumer_key(group, "two"), other.to_json())
        for name in ("one", "two"):
            try:
                await registry.add(group, name, "alice", lambda: _instance("alice"))
            except Exception as error:
                assert "already exists" in str(error)
            else:
                raise AssertionError(f"{name} was added twice")
    finally:
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
        await registry.session.close(revoke=True)


async def _held_lease(etcd_client: Etcd3Client, group: str) -> int:
    assert etcd_client.kv is not None
    found = (await etcd_client.kv.get(gateway_consumer_key(group, "one"))).kvs
    return int(found[0].lease) if found else 0


async def test_an_instance_created_after_etcd_dropped_the_lease_unseen_is_registered_under_a_new_session(
    etcd_client: Etcd3Client,
) -> None:
    """etcd expires the gateway's lease on its own clock; the keep-alive (every TTL/3, here 20 s)
    has not seen it yet when a consumer instance is created. etcd refuses the write under the gone
    lease ("requested lease not found", once a 500 from the REST API): the registry ends the
    session, keep_registered takes a new one, and the instance is registered under it."""
    assert etcd_client.kv is not None and etcd_client.lease is not None
    gateway_id = uuid.uuid4().hex
    session = await new_session(etcd_client, ttl_s=60, holder="test-gateway")
    registry = InstanceRegistry(
        etcd_client, session, gateway_id=gateway_id, url="http://127.0.0.1:1", settings=GatewaySettings.from_configs()
    )
    group = f"g-{gateway_id[:8]}"
    keeping = asyncio.create_task(registry.keep_registered())
    try:
        await etcd_client.lease.revoke(session.lease_id)  # etcd's expiry, unseen by the keep-alive
        instance = await asyncio.wait_for(registry.add(group, "one", "alice", lambda: _instance("alice")), 10)
        assert session.done.is_set() and registry.session is not session
        assert await _held_lease(etcd_client, group) == registry.session.lease_id != session.lease_id
        assert registry.get(group, "one", "alice") is instance
    finally:
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
        await registry.session.close(revoke=True)
