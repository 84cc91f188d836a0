"""`User` resources (Strimzi's KafkaUser) through the kopf operator process, against kmock's
Kubernetes emulator and a real local cluster: credentials in owned Secrets, ACLs and quotas made
exactly as the spec says, status conditions, and everything removed with the resource."""

from __future__ import annotations

import base64
import datetime
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from cryptography import x509

from tests.cluster.conftest import wait_until
from tests.operator.test_operator import _start_operator, _stop_operator, kubernetes
from tidelog.client import AclFilter, AdminClient
from tidelog.common.security.quotas.quota import QuotaEntity
from tidelog.dev.local_cluster import LocalCluster

__all__ = ["kubernetes"]  # (the emulator fixture, shared with test_operator)

API = "/apis/tidelog.io/v1beta1/namespaces/default/tidelogusers"
LEGACY_API = "/apis/tidelog.io/v1beta1/namespaces/default/users"  # the kind's deprecated first name
SECRETS = "/api/v1/namespaces/default/secrets"


@pytest.fixture
async def user_operator(
    kubernetes: tuple[str, Path], cluster: LocalCluster, tmp_path: Path
) -> AsyncIterator[tuple[str, trustme.CA]]:
    ca = trustme.CA(organization_name="clients CA")
    ca.cert_pem.write_to_path(str(tmp_path / "clients-ca.crt"))
    ca.private_key_pem.write_to_path(str(tmp_path / "clients-ca.key"))
    process, log = _start_operator(
        kubernetes[1],
        cluster,
        tmp_path / "operator.log",
        "--standalone",
        "--clients-ca-cert",
        str(tmp_path / "clients-ca.crt"),
        "--clients-ca-key",
        str(tmp_path / "clients-ca.key"),
    )
    try:
        yield kubernetes[0], ca
    finally:
        await _stop_operator(process, log)


async def _get(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    async with session.get(url) as answer:
        if answer.status == 404:
            return None
        found: dict[str, Any] = await answer.json()
        return found


async def _ready(session: aiohttp.ClientSession, url: str, name: str, api: str = API) -> dict[str, Any] | None:
    found = await _get(session, f"{url}{api}/{name}")
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c["type"] == "Ready" and c["status"] == "True"), None)
    return found if ready else None


async def test_a_scram_user_gets_a_password_secret_acls_and_quotas_and_loses_them_when_deleted(
    user_operator: tuple[str, trustme.CA], admin: AdminClient
) -> None:
    url, _ = user_operator
    name = f"app-{uuid.uuid4().hex[:6]}"
    spec = {
        "authentication": {"type": "scram-sha-512"},
        "authorization": {
            "type": "simple",
            "acls": [
                {
                    "resource": {"type": "topic", "name": "orders", "patternType": "prefix"},
                    "operations": ["Read", "Describe"],
                },
                {"resource": {"type": "group", "name": "billing"}, "operations": ["Read"]},
            ],
        },
        "quotas": {"producerByteRate": 1048576, "consumerByteRate": 2097152},
    }
    body = {
        "apiVersion": "tidelog.io/v1beta1",
        "kind": "TidelogUser",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}{API}", json=body) as answer:
            assert answer.status in (200, 201), await answer.text()
        resource = await wait_until(lambda: _ready(session, url, name), timeout_s=30, what="the User Ready")
        assert resource["status"]["principal"] == f"User:{name}" and resource["status"]["secret"] == name
        secret = await _get(session, f"{url}{SECRETS}/{name}")
        assert secret is not None and len(base64.b64decode(secret["data"]["password"])) >= 24
        assert secret["metadata"]["ownerReferences"][0]["kind"] == "TidelogUser"
        assert name in await admin.describe_user_scram_credentials([name])
        acls = {
            (b.operation.value, b.resource_type.value, b.resource_name, b.pattern_type.value)
            for b in await admin.describe_acls(AclFilter(principal=f"User:{name}"))
        }
        assert acls == {
            ("Read", "Topic", "orders", "Prefixed"),
            ("Describe", "Topic", "orders", "Prefixed"),
            ("Read", "Group", "billing", "Literal"),
        }
        assert (await admin.describe_client_quotas())[QuotaEntity(user=name)] == {
            "producer_byte_rate": 1048576,
            "consumer_byte_rate": 2097152,
        }

        # The spec shrinks: the ACL and the quota it no longer names go.
        patch = {
            "spec": {
                "authorization": {"type": "simple", "acls": spec["authorization"]["acls"][1:]},
                "quotas": {"consumerByteRate": None},  # (merge patch: null removes)
            }
        }
        async with session.patch(
            f"{url}{API}/{name}", json=patch, headers={"Content-Type": "application/merge-patch+json"}
        ) as answer:
            assert answer.status == 200, await answer.text()

        async def shrunk() -> bool:
            left = await admin.describe_acls(AclFilter(principal=f"User:{name}"))
            quotas = (await admin.describe_client_quotas()).get(QuotaEntity(user=name))
            return len(left) == 1 and quotas == {"producer_byte_rate": 1048576}

        await wait_until(shrunk, timeout_s=30, what="the removed ACLs and quota gone")

        async with session.delete(f"{url}{API}/{name}") as answer:
            assert answer.status in (200, 202)

        async def removed() -> bool:
            return (
                await _get(session, f"{url}{API}/{name}") is None
                and not await admin.describe_acls(AclFilter(principal=f"User:{name}"))
                and QuotaEntity(user=name) not in await admin.describe_client_quotas()
                and name not in await admin.describe_user_scram_credentials()
            )

        await wait_until(removed, timeout_s=30, what="the user's ACLs, quotas and credential removed")


async def test_a_tls_user_gets_a_client_certificate_signed_by_the_clients_ca(
    user_operator: tuple[str, trustme.CA],
) -> None:
    """On the kind's deprecated first name (`User`, served one more release): still reconciled."""
    url, ca = user_operator
    name = f"svc-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "tidelog.io/v1beta1",
        "kind": "User",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"authentication": {"type": "tls"}},
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}{LEGACY_API}", json=body) as answer:
            assert answer.status in (200, 201), await answer.text()
        await wait_until(lambda: _ready(session, url, name, LEGACY_API), timeout_s=30, what="the User Ready")
        secret = await _get(session, f"{url}{SECRETS}/{name}")
        assert secret is not None
        certificate = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["user.crt"]))
        assert certificate.subject.rfc4514_string() == f"CN={name}"
        assert certificate.issuer == x509.load_pem_x509_certificate(ca.cert_pem.bytes()).subject
        assert certificate.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=300)
        assert base64.b64decode(secret["data"]["ca.crt"]) == ca.cert_pem.bytes()
        assert b"PRIVATE KEY" in base64.b64decode(secret["data"]["user.key"])


async def test_a_user_named_like_a_service_is_refused(user_operator: tuple[str, trustme.CA]) -> None:
    url, _ = user_operator
    body = {
        "apiVersion": "tidelog.io/v1beta1",
        "kind": "TidelogUser",
        "metadata": {"name": "tidelog-broker", "namespace": "default"},
        "spec": {"authentication": {"type": "tls"}},
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}{API}", json=body) as answer:
            assert answer.status in (200, 201), await answer.text()

        async def refused() -> dict[str, Any] | None:
            found = await _get(session, f"{url}{API}/tidelog-broker")
            conditions = ((found or {}).get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["reason"] == "InvalidSpec"), None)

        condition = await wait_until(refused, timeout_s=30, what="the InvalidSpec condition")
        assert condition["status"] == "False" and "services' own identities" in condition["message"]
        assert await _get(session, f"{url}{SECRETS}/tidelog-broker") is None  # no certificate was issued
