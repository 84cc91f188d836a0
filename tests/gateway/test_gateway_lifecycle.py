"""Gateway processes stopping: SIGTERM closes its consumer instances (they leave their groups and
commit what they returned); kill -9 loses them, and their registration goes with its lease, so the
other replica answers 40403 rather than forwarding to a dead one. Own module: its own cluster."""

from __future__ import annotations

import signal

import httpx
from etcd3aio import Etcd3Client

from tidelog.client.group_admin import GroupAdmin
from tidelog.dev.local_cluster import LocalCluster
from tidelog.server_common.metadata import gateway_consumer_key

from ..cluster.conftest import wait_until
from .conftest import BINARY_V2, V2
from .test_rest_v2 import _b64, _topic


async def _subscribed(gateway: httpx.AsyncClient, group: str, name: str, topic: str) -> str:
    created = await gateway.post(
        f"/consumers/{group}", json={"name": name, "auto.offset.reset": "earliest"}, headers={"content-type": V2}
    )
    assert created.status_code == 200, created.text
    base = f"/consumers/{group}/instances/{name}"
    assert (
        await gateway.post(f"{base}/subscription", json={"topics": [topic]}, headers={"content-type": V2})
    ).status_code == 204
    return base


async def _restart(cluster: LocalCluster, gateway: httpx.AsyncClient) -> None:
    cluster.start_gateway(2)

    async def serving() -> bool:
        return (await gateway.get("/healthz")).status_code == 200

    await wait_until(serving, timeout_s=30, what="gateway-2 serving again")


async def test_sigterm_closes_instances_and_kill_loses_them(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 1, 1)
    await gateways[0].post(
        f"/topics/{name}", json={"records": [{"value": _b64(b"v")}] * 5}, headers={"content-type": BINARY_V2}
    )
    base = await _subscribed(gateways[1], "graceful", "held", name)  # held by gateway-2
    read: list[object] = []

    async def all_read() -> bool:
        read.extend((await gateways[0].get(f"{base}/records", params={"timeout": 300})).json())  # via gateway-1
        return len(read) == 5

    await wait_until(all_read, timeout_s=30, what="the records through the other replica")
    assert gateway_cluster.signal("gateway-2", signal.SIGTERM) == 0
    log = (gateway_cluster.data_dir / "logs" / "gateway-2.log").read_text()
    assert '"event": "consumer_instance_closed"' in log and '"event": "gateway_stopped"' in log
    gone = await gateways[0].get(f"{base}/assignments")
    assert (gone.status_code, gone.json()["error_code"]) == (404, 40403)
    async with GroupAdmin(gateway_cluster.bootstrap) as admin:
        described = await admin.describe_group("graceful")
    assert described.members == []  # it left the group rather than waiting out its session
    assert [lag.committed for lag in described.partitions] == [5]  # auto-commit on close

    await _restart(gateway_cluster, gateways[1])
    base = await _subscribed(gateways[1], "abrupt", "held", name)
    assert (await gateways[0].get(f"{base}/subscription")).status_code == 200
    gateway_cluster.signal("gateway-2", signal.SIGKILL)

    async def forgotten() -> bool:  # its lease expires with its session (3 s here)
        answer = await gateways[0].get(f"{base}/subscription")
        return answer.status_code == 404 and answer.json()["error_code"] == 40403

    await wait_until(forgotten, timeout_s=30, what="the dead gateway's registration to expire")
    await _restart(gateway_cluster, gateways[1])


async def test_a_lost_etcd_lease_is_replaced_and_the_instances_registered_again(
    gateway_cluster: LocalCluster, gateways: list[httpx.AsyncClient], name: str
) -> None:
    await _topic(gateway_cluster, name, 1, 1)
    base = await _subscribed(gateways[0], "renewed", "kept", name)  # held by gateway-1
    key = gateway_consumer_key("renewed", "kept").encode()
    etcd = Etcd3Client([gateway_cluster.etcd.endpoint])
    await etcd.connect()
    try:
        assert etcd.kv is not None and etcd.lease is not None
        lease = (await etcd.kv.get(key)).kvs[0].lease
        await etcd.lease.revoke(lease)  # as if etcd had been out of reach for the whole TTL

        async def registered_again() -> bool:
            assert etcd.kv is not None
            found = (await etcd.kv.get(key)).kvs
            return bool(found) and found[0].lease != lease

        await wait_until(registered_again, timeout_s=30, what="the registration under a new lease")
    finally:
        await etcd.close()
    through_the_other = await gateways[1].get(f"{base}/subscription")  # forwarded: found again
    assert through_the_other.json() == {"topics": [name]}
    assert (await gateways[1].delete(base)).status_code == 204
