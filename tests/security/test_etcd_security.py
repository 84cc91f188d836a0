"""etcd locked (issue 38, 7): with `etcd.ssl.*` every service speaks TLS to an etcd that requires a
client certificate from the cluster's CA (`--client-cert-auth`), and the cluster works as before;
a client without a certificate, with one from another CA, or speaking plain HTTP/2 reads nothing —
not the SCRAM credentials, not the ACLs — and writes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from etcd3aio import prefix_range_end

from tests.cluster.conftest import poll_until, running_cluster
from tests.security.conftest import Pki, authorising
from tidelog.client import AclBinding, AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.settings import SecuritySettings
from tidelog.dev.etcd_server import EtcdTls
from tidelog.dev.local_cluster import LocalCluster
from tidelog.server_common.etcd.connect import etcd_client
from tidelog.server_common.metadata import ACLS_PREFIX, ROOT

pytestmark = pytest.mark.timeout(180)


def _etcd_settings(pki: Pki, name: str) -> dict[str, str]:
    certificate, key = pki.issue(f"{name}-etcd-client")
    return {
        "etcd.ssl.ca.location": str(pki.ca_file),
        "etcd.ssl.certificate.location": str(certificate),
        "etcd.ssl.key.location": str(key),
    }


@pytest.fixture(scope="module")
def locked_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    certificate, key = pki.issue("etcd")
    services = authorising(pki)
    with running_cluster(
        tmp_path_factory.mktemp("etcd-locked"),
        brokers=1,
        controllers=1,
        service_security=lambda name: {**services(name), **_etcd_settings(pki, name)},
        client_security=pki.client("admin"),
        etcd_tls=EtcdTls(pki.ca_file, certificate, key),
        etcd_client_security=SecuritySettings.from_configs(_etcd_settings(pki, "harness")),
    ) as local:
        yield local


async def _read_everything(cluster: LocalCluster, security: SecuritySettings | None) -> int:
    etcd = etcd_client(cluster.etcd.endpoint, security)
    try:
        await asyncio.wait_for(etcd.connect(), 5)
        assert etcd.kv is not None
        prefix = ROOT.encode()
        found = await asyncio.wait_for(etcd.kv.get(prefix, prefix_range_end(prefix)), 5)
        return len(found.kvs)
    finally:
        await etcd.close()


async def _write(cluster: LocalCluster, security: SecuritySettings | None, key: str) -> None:
    etcd = etcd_client(cluster.etcd.endpoint, security)
    try:
        await asyncio.wait_for(etcd.connect(), 5)
        assert etcd.kv is not None
        await asyncio.wait_for(etcd.kv.put(key, b"{}"), 5)
    finally:
        await etcd.close()


async def test_the_cluster_works_on_a_locked_etcd(locked_cluster: LocalCluster, pki: Pki) -> None:
    topic = f"locked-{uuid.uuid4().hex[:6]}"
    admin_security = pki.client("admin")
    async with AdminClient(
        locked_cluster.bootstrap, controllers=locked_cluster.controller_endpoints, security=admin_security
    ) as admin:
        await admin.create_topic(topic, 1, 1)
        await admin.create_acls(
            [AclBinding.of(principal="User:reader", operation="Read", resource_type="Topic", resource_name=topic)]
        )
    async with Producer(locked_cluster.bootstrap, acks="all", security=admin_security) as producer:
        await (await producer.send_batch(topic, [b"a", b"b"], partition=0))
    async with Consumer(
        locked_cluster.bootstrap, security=pki.client("reader"), auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert [r.value for r in await poll_until(consumer, 2)] == [b"a", b"b"]
    # the harness's certificate reads what the services wrote: the refusals below are not vacuous
    assert await _read_everything(locked_cluster, locked_cluster.etcd_client_security) > 0


@pytest.mark.parametrize("attacker", ["no certificate", "another CA's certificate", "plain HTTP/2"])
async def test_without_the_clusters_certificate_etcd_serves_nothing(
    locked_cluster: LocalCluster, pki: Pki, tmp_path: Path, attacker: str
) -> None:
    if attacker == "plain HTTP/2":
        security = None
    elif attacker == "no certificate":
        security = SecuritySettings.from_configs({"etcd.ssl.ca.location": str(pki.ca_file)})
    else:
        other = trustme.CA(organization_name="not the cluster")
        issued = other.issue_cert("127.0.0.1", common_name="mallory")
        certificate, key = tmp_path / "mallory.crt", tmp_path / "mallory.key"
        certificate.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(key))
        security = SecuritySettings.from_configs(
            {
                "etcd.ssl.ca.location": str(pki.ca_file),
                "etcd.ssl.certificate.location": str(certificate),
                "etcd.ssl.key.location": str(key),
            }
        )
    with pytest.raises(Exception):  # noqa: B017 - refused at the handshake or the first call, as etcd's gRPC says
        await _read_everything(locked_cluster, security)
    with pytest.raises(Exception):  # noqa: B017
        await _write(locked_cluster, security, f"{ACLS_PREFIX}mallory-reads-everything")
    assert await _read_everything(locked_cluster, locked_cluster.etcd_client_security) > 0
    etcd = etcd_client(locked_cluster.etcd.endpoint, locked_cluster.etcd_client_security)
    await etcd.connect()
    try:
        assert etcd.kv is not None
        assert not (await etcd.kv.get(f"{ACLS_PREFIX}mallory-reads-everything")).kvs
    finally:
        await etcd.close()
