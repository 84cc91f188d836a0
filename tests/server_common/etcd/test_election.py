"""Sessions and elections against a real etcd server."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from etcd3aio import Etcd3Client
from etcd3aio.kv import KVService
from prometheus_client import REGISTRY

from tidelog.server_common.etcd.election import Election, NotLeaderError
from tidelog.server_common.etcd.session import Session


@pytest.fixture
def prefix() -> str:
    return f"/test/{uuid.uuid4().hex}/election"


async def test_leased_key_vanishes_when_the_session_closes(etcd_client: Etcd3Client, prefix: str) -> None:
    session = await Session(etcd_client, ttl_s=5).start()
    assert etcd_client.kv is not None
    await etcd_client.kv.put(prefix + "/broker", b"1", lease=session.lease_id)
    await session.close()
    assert session.done.is_set()
    assert not (await etcd_client.kv.get(prefix + "/broker")).kvs


async def test_candidates_queue_and_the_next_takes_over(etcd_client: Etcd3Client, prefix: str) -> None:
    first = Election(await Session(etcd_client, ttl_s=5).start(), prefix)
    second = Election(await Session(etcd_client, ttl_s=5).start(), prefix)
    await asyncio.wait_for(first.campaign(b"one"), timeout=10)
    waiting = asyncio.create_task(second.campaign(b"two"))
    await asyncio.sleep(0.2)  # give it every chance to win wrongly; it must still be waiting
    assert not waiting.done()
    leader = await first.leader()
    assert leader is not None and leader.value == b"one"
    await first.resign()
    await asyncio.wait_for(waiting, timeout=10)
    leader = await second.leader()
    assert leader is not None and leader.value == b"two"
    await second.session.close()
    await first.session.close()


async def test_a_deposed_leader_is_fenced(etcd_client: Etcd3Client, prefix: str) -> None:
    session = await Session(etcd_client, ttl_s=5).start()
    election = Election(session, prefix)
    await asyncio.wait_for(election.campaign(b"one"), timeout=10)
    fence = election.fence()
    assert etcd_client.kv is not None
    ok = await etcd_client.kv.txn(compare=[fence], success=[KVService.txn_op_put(prefix + "-state", b"a")])
    assert ok.succeeded
    await session.close()  # the lease goes: our key goes with it
    stale = await etcd_client.kv.txn(compare=[fence], success=[KVService.txn_op_put(prefix + "-state", b"b")])
    assert not stale.succeeded
    assert (await etcd_client.kv.get(prefix + "-state")).kvs[0].value == b"a"
    with pytest.raises(NotLeaderError):
        await election.proclaim(b"again")


async def test_session_notices_its_lease_is_gone(etcd_client: Etcd3Client) -> None:
    session = await Session(etcd_client, ttl_s=2).start()
    assert etcd_client.lease is not None
    await etcd_client.lease.revoke(session.lease_id)
    await asyncio.wait_for(session.done.wait(), timeout=10)
    await session.close()


async def test_sessions_held_and_lost_are_counted(etcd_client: Etcd3Client) -> None:
    def value(name: str) -> float:
        found = REGISTRY.get_sample_value(name)
        assert found is not None, name
        return found

    held, lost = value("tidelog_etcd_sessions"), value("tidelog_etcd_session_losses_total")
    kept = await Session(etcd_client, ttl_s=5).start()
    doomed = await Session(etcd_client, ttl_s=2).start()
    assert value("tidelog_etcd_sessions") == held + 2
    assert etcd_client.lease is not None
    await etcd_client.lease.revoke(doomed.lease_id)  # etcd forgets it: the holder must give up
    await asyncio.wait_for(doomed.done.wait(), timeout=10)
    assert value("tidelog_etcd_session_losses_total") == lost + 1
    assert value("tidelog_etcd_sessions") == held + 1
    await doomed.close()  # closing what was lost counts nothing twice
    await kept.close()  # a close is not a loss
    assert (value("tidelog_etcd_sessions"), value("tidelog_etcd_session_losses_total")) == (held, lost + 1)


async def test_a_predecessor_known_dead_loses_its_lease_at_once(etcd_client: Etcd3Client, prefix: str) -> None:
    # A 60 s lease that stops being kept alive (its holder is gone): without the death watch the
    # next candidate would wait out the TTL; told its predecessor is dead, it revokes the lease.
    first_session = await Session(etcd_client, ttl_s=60).start()
    first = Election(first_session, prefix)
    await asyncio.wait_for(first.campaign(b"one"), timeout=10)
    told: list[bytes] = []

    async def dead(value: bytes) -> None:
        told.append(value)

    second = Election(await Session(etcd_client, ttl_s=5).start(), prefix)
    await asyncio.wait_for(second.campaign(b"two", predecessor_dead=dead), timeout=10)
    assert told == [b"one"]
    leader = await second.leader()
    assert leader is not None and leader.value == b"two"
    await second.session.close()
    await first_session.close(revoke=False)


async def test_a_broken_death_watch_leaves_the_decision_to_the_lease(etcd_client: Etcd3Client, prefix: str) -> None:
    first = Election(await Session(etcd_client, ttl_s=60).start(), prefix)
    await asyncio.wait_for(first.campaign(b"one"), timeout=10)

    async def broken(value: bytes) -> None:
        raise RuntimeError("cannot tell")

    second = Election(await Session(etcd_client, ttl_s=5).start(), prefix)
    waiting = asyncio.create_task(second.campaign(b"two", predecessor_dead=broken))
    await asyncio.sleep(0.3)  # every chance to take over wrongly (or to spin): it must still wait
    assert not waiting.done()
    await first.resign()
    await asyncio.wait_for(waiting, timeout=10)
    await second.session.close()
    await first.session.close()
