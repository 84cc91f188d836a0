"""The broker's etcd registration against a real etcd: a restart takes its key over at once."""

from __future__ import annotations

import asyncio
import contextlib
import random

import grpc
from etcd3aio import Etcd3Client

from tests.cluster.conftest import wait_until
from tidelog.broker.registration import Registration
from tidelog.server_common.metadata import BrokerRegistration, broker_key

TTL_S = 6  # the old life keeps its lease alive: without a takeover the new one would wait forever


async def _holder(etcd_client: Etcd3Client, broker_id: int) -> str:
    assert etcd_client.kv is not None
    found = (await etcd_client.kv.get(broker_key(broker_id))).kvs
    return BrokerRegistration.from_json(found[0].value).incarnation if found else ""


async def test_a_new_life_takes_the_key_over_and_the_old_one_stops(etcd_client: Etcd3Client) -> None:
    broker_id = random.randrange(10_000, 1_000_000)
    replaced = asyncio.Event()
    old = Registration(
        etcd_client,
        BrokerRegistration(broker_id, "127.0.0.1", 1, incarnation="old"),
        ttl_s=TTL_S,
        on_replaced=replaced.set,
    )
    await old.register()
    assert await _holder(etcd_client, broker_id) == "old"

    # A restart within the old life's session (kill -9, then start): no wait for the lease.
    new = Registration(etcd_client, BrokerRegistration(broker_id, "127.0.0.1", 1, incarnation="new"), ttl_s=TTL_S)
    await asyncio.wait_for(new.register(), 5)
    assert await _holder(etcd_client, broker_id) == "new"

    # The old life, were it still running, loses its revoked session and stops instead of taking
    # the key back (two processes with one id must not alternate).
    await asyncio.wait_for(replaced.wait(), 10)
    assert await _holder(etcd_client, broker_id) == "new"
    await old.deregister()
    assert await _holder(etcd_client, broker_id) == "new", "the old life's clean stop leaves the new key alone"
    await new.deregister()
    await wait_until(lambda: _gone(etcd_client, broker_id), timeout_s=5, what="the key gone with its lease")


async def _gone(etcd_client: Etcd3Client, broker_id: int) -> bool:
    return await _holder(etcd_client, broker_id) == ""


async def test_a_session_lost_before_etcd_expires_its_lease_moves_the_key_onto_the_new_one(
    etcd_client: Etcd3Client,
) -> None:
    """The broker declares its session lost on its own clock; etcd expires the lease a moment later.
    The re-registration finds its own key still on the old lease: left there, the key would vanish
    with that lease and the broker, alive, would stay out of the controller's view for good (seen
    in the transactional nemesis, seed 33: brokers frozen past their session)."""
    assert etcd_client.kv is not None and etcd_client.lease is not None
    broker_id = random.randrange(10_000, 1_000_000)
    registration = Registration(
        etcd_client, BrokerRegistration(broker_id, "127.0.0.1", 1, incarnation="one"), ttl_s=TTL_S
    )
    await registration.register()
    assert registration.session is not None
    old_lease = registration.session.lease_id
    await registration.session.close(revoke=False)  # lost here, still alive in etcd

    async def registered_again() -> bool:
        return registration.session is not None and registration.session.lease_id != old_lease

    await wait_until(registered_again, timeout_s=10, what="a registration under a new session")
    with contextlib.suppress(grpc.aio.AioRpcError):  # (NOT_FOUND: the re-registration revoked it already)
        await etcd_client.lease.revoke(old_lease)  # etcd's own expiry of the old lease, a moment later
    held = (await etcd_client.kv.get(broker_key(broker_id))).kvs
    assert held, "the key vanished with the old lease"
    assert registration.session is not None
    assert int(held[0].lease) == registration.session.lease_id
    assert BrokerRegistration.from_json(held[0].value).incarnation == "one"
    await registration.deregister()
