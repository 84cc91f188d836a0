"""The REST gateway secured end to end: HTTPS, HTTP Basic against the SCRAM users, and each REST
caller acting as its own principal towards the cluster (its ACLs decide, not the gateway's)."""

from __future__ import annotations

import ssl
import uuid

import httpx
import pytest

from tests.cluster.conftest import wait_until
from tests.security.conftest import Pki, sasl_client
from tidelog.client import AclBinding, AdminClient
from tidelog.dev.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def _url(cluster: LocalCluster) -> str:
    return cluster.gateway_urls[0].replace("http://", "https://")


def _rest(cluster: LocalCluster, pki: Pki, auth: tuple[str, str] | None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=_url(cluster), verify=ssl.create_default_context(cafile=str(pki.ca_file)), auth=auth, timeout=20
    )


async def test_rest_principals_see_and_touch_only_what_their_acls_allow(sasl_cluster: LocalCluster, pki: Pki) -> None:
    erin_topic, frank_topic = f"erin-{uuid.uuid4().hex[:6]}", f"frank-{uuid.uuid4().hex[:6]}"
    async with AdminClient(
        sasl_cluster.bootstrap, controllers=sasl_cluster.controller_endpoints, security=sasl_client(pki, "admin")
    ) as admin:
        await admin.alter_user_scram_credentials({"erin": "erin-password-1", "frank": "frank-password-1"})
        await admin.create_topic(erin_topic, 1, 1)
        await admin.create_topic(frank_topic, 1, 1)
        await admin.create_acls(
            [
                AclBinding.of(principal="User:erin", operation="All", resource_type="Topic", resource_name=erin_topic),
                AclBinding.of(
                    principal="User:erin",
                    operation="Read",
                    resource_type="Group",
                    resource_name="erin-",
                    pattern_type="Prefixed",
                ),
                AclBinding.of(
                    principal="User:frank", operation="All", resource_type="Topic", resource_name=frank_topic
                ),
            ]
        )
    # Plain HTTP to the HTTPS listener, no credentials, a wrong password: refused.
    with pytest.raises(httpx.HTTPError):
        async with httpx.AsyncClient(base_url=sasl_cluster.gateway_urls[0], timeout=5) as plain:
            await plain.get("/topics")
    async with _rest(sasl_cluster, pki, None) as nobody:
        refused = await nobody.get("/topics")
        assert refused.status_code == 401 and refused.json()["error_code"] == 40101
        assert refused.headers["www-authenticate"].startswith("Basic")
    async with _rest(sasl_cluster, pki, ("erin", "wrong-password")) as wrong:
        assert (await wrong.get("/topics")).status_code == 401
    async with (
        _rest(sasl_cluster, pki, ("erin", "erin-password-1")) as erin,
        _rest(sasl_cluster, pki, ("frank", "frank-password-1")) as frank,
    ):

        async def erin_lists() -> list[str] | None:
            answer = await erin.get("/topics")
            return answer.json() if answer.status_code == 200 and erin_topic in answer.json() else None

        topics = await wait_until(erin_lists, timeout_s=10, what="erin's topic listed")
        assert frank_topic not in topics  # listings hide what a principal may not describe
        produced = await erin.post(
            f"/topics/{erin_topic}", json={"records": [{"value": "aGk="}]}, headers={"content-type": BINARY_V2}
        )
        assert produced.status_code == 200, produced.text
        assert produced.json()["offsets"][0]["error_code"] is None
        # Erin may not write (or even see) Frank's topic.
        foreign = await erin.post(
            f"/topics/{frank_topic}", json={"records": [{"value": "aGk="}]}, headers={"content-type": BINARY_V2}
        )
        assert foreign.status_code == 403, foreign.text
        assert foreign.json()["error_code"] == 40301
        # Erin's consumer reads her records through her group; Frank's instance lookup is refused.
        created = await erin.post(
            "/consumers/erin-group",
            json={"name": "e1", "format": "binary", "auto.offset.reset": "earliest"},
            headers={"content-type": V2},
        )
        assert created.status_code == 200, created.text
        base = "/consumers/erin-group/instances/e1"
        assert (
            await erin.post(f"{base}/subscription", json={"topics": [erin_topic]}, headers={"content-type": V2})
        ).status_code == 204

        async def read() -> list[object] | None:
            answer = await erin.get(f"{base}/records", headers={"accept": BINARY_V2})
            assert answer.status_code == 200, answer.text
            return answer.json() or None

        records = await wait_until(read, timeout_s=20, what="erin's records over REST")
        assert [record["value"] for record in records] == ["aGk="]  # type: ignore[index]
        assert (await frank.get(f"{base}/assignments")).status_code == 404  # erin's instance: not confirmed
        # Frank's group has no ACL: his consumer is refused when it joins.
        created = await frank.post(
            "/consumers/frank-group", json={"name": "f1", "format": "binary"}, headers={"content-type": V2}
        )
        assert created.status_code == 200
        await frank.post(
            "/consumers/frank-group/instances/f1/subscription",
            json={"topics": [frank_topic]},
            headers={"content-type": V2},
        )
        joined = await frank.get("/consumers/frank-group/instances/f1/records", headers={"accept": BINARY_V2})
        assert joined.status_code == 403, joined.text
        assert joined.json()["error_code"] == 40301
        await erin.delete(base)


async def test_a_forwarded_header_does_not_move_a_caller_past_a_host_deny(sasl_cluster: LocalCluster, pki: Pki) -> None:
    """Issue 38 (2): Allow from anywhere, Deny from 127.0.0.1: a caller on loopback naming another
    address in X-Forwarded-For is still the caller on loopback (no proxy is trusted by default)."""
    topic = f"hosts-{uuid.uuid4().hex[:6]}"
    async with AdminClient(
        sasl_cluster.bootstrap, controllers=sasl_cluster.controller_endpoints, security=sasl_client(pki, "admin")
    ) as admin:
        await admin.alter_user_scram_credentials({"gina": "gina-password-1"})
        await admin.create_topic(topic, 1, 1)
        await admin.create_acls(
            [
                AclBinding.of(principal="User:gina", operation="All", resource_type="Topic", resource_name=topic),
                AclBinding.of(
                    principal="User:gina",
                    operation="All",
                    resource_type="Topic",
                    resource_name=topic,
                    permission="Deny",
                    host="127.0.0.1",
                ),
            ]
        )
    async with _rest(sasl_cluster, pki, ("gina", "gina-password-1")) as gina:

        async def denied() -> bool:
            return (await gina.get(f"/topics/{topic}")).status_code == 403

        await wait_until(denied, timeout_s=10, what="the host Deny applied")
        spoofed = {"x-forwarded-for": "10.9.9.9", "x-real-ip": "10.9.9.9", "forwarded": "for=10.9.9.9"}
        assert (await gina.get(f"/topics/{topic}", headers=spoofed)).status_code == 403
        produced = await gina.post(
            f"/topics/{topic}",
            json={"records": [{"value": "aGk="}]},
            headers={"content-type": BINARY_V2, **spoofed},
        )
        assert produced.status_code == 403, produced.text
