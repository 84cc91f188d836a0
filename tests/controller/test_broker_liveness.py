"""The active controller's crash detection: a broker life whose process is gone loses its lease
at once; a life another one replaced, or one still listening, keeps what it holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from etcd3aio import Etcd3Client
from etcd3aio.kv import KVService
from grpc_health.v1 import health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from tests.waiting import until
from tidelog.common.channels import ChannelPool
from tidelog.controller.broker_liveness import BrokerLiveness
from tidelog.server_common.etcd.session import Session
from tidelog.server_common.metadata import BrokerRegistration, broker_key

BROKER_ID = 97_001  # far from the ids other tests on the shared etcd register


async def _serving() -> tuple[grpc.aio.Server, int]:
    """A stand-in broker process: a gRPC server with health, on a port of its own."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def _register(etcd: Etcd3Client, registration: BrokerRegistration) -> Session:
    assert etcd.kv is not None
    session = await Session(etcd, ttl_s=60).start()  # a lease that outlives the test
    put = KVService.txn_op_put(broker_key(registration.broker_id), registration.to_json(), lease=session.lease_id)
    await etcd.kv.txn(compare=[], success=[put])
    return session


async def _watched(
    etcd: Etcd3Client, liveness: BrokerLiveness, incarnation: str
) -> tuple[grpc.aio.Server, int, Session]:
    """A stand-in broker life, registered and followed: its server, port and session."""
    server, port = await _serving()
    registration = BrokerRegistration(BROKER_ID, "127.0.0.1", port, incarnation=incarnation)
    session = await _register(etcd, registration)
    liveness.follow({BROKER_ID: registration})
    return server, port, session


@pytest.fixture
async def liveness(etcd_client: Etcd3Client) -> AsyncIterator[BrokerLiveness]:
    channels = ChannelPool()
    watch = BrokerLiveness(etcd_client, channels)
    yield watch
    await watch.close()
    await channels.close()
    assert etcd_client.kv is not None
    await etcd_client.kv.delete(broker_key(BROKER_ID))


async def test_a_dead_process_loses_its_registration_long_before_its_lease_expires(
    etcd_client: Etcd3Client, liveness: BrokerLiveness
) -> None:
    assert etcd_client.kv is not None
    server, _, session = await _watched(etcd_client, liveness, "first")
    await asyncio.sleep(0.3)  # the health stream is open: a living process is never taken for dead
    assert (await etcd_client.kv.get(broker_key(BROKER_ID))).kvs
    assert liveness.confirmed_dead == 0

    await server.stop(None)  # the process "dies": its sockets close, its port refuses
    started = time.monotonic()

    async with asyncio.timeout(10):
        # Both: the key can be seen gone before the revoking task resumes to count it.
        while (await etcd_client.kv.get(broker_key(BROKER_ID))).kvs or liveness.confirmed_dead == 0:
            await asyncio.sleep(0.02)
    assert time.monotonic() - started < 5  # the lease has 60 s to run
    assert liveness.confirmed_dead == 1
    await session.close(revoke=False)


async def test_a_new_life_that_took_the_key_over_keeps_its_lease(
    etcd_client: Etcd3Client, liveness: BrokerLiveness
) -> None:
    assert etcd_client.kv is not None
    server, port, old_session = await _watched(etcd_client, liveness, "old")
    new_session = await _register(etcd_client, BrokerRegistration(BROKER_ID, "127.0.0.1", port, incarnation="new"))

    await server.stop(None)  # the old life's process is gone, but a new life holds the key now
    watch = liveness._watches[(BROKER_ID, "old", f"127.0.0.1:{port}")]

    await until(watch.done)
    held = (await etcd_client.kv.get(broker_key(BROKER_ID))).kvs
    assert held and BrokerRegistration.from_json(held[0].value).incarnation == "new"
    assert int(held[0].lease) == new_session.lease_id
    assert liveness.confirmed_dead == 0
    await old_session.close()
    await new_session.close()


async def test_following_a_smaller_set_stops_watching_who_left(liveness: BrokerLiveness) -> None:
    server, port = await _serving()
    try:
        registration = BrokerRegistration(BROKER_ID, "127.0.0.1", port, incarnation="only")
        liveness.follow({BROKER_ID: registration})
        (watch,) = liveness._watches.values()
        liveness.follow({})
        await asyncio.sleep(0)  # (the cancellation is delivered at the task's next step)
        assert not liveness._watches
        await until(watch.done)
        assert watch.cancelled()
    finally:
        await server.stop(None)
