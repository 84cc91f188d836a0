"""TLS on every listener and channel, with real processes: the cluster works end to end over mutual
TLS (replication, controller requests, the coordinator), and what should be refused is."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import uuid
from pathlib import Path

import grpc
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY

from tests.cluster.conftest import poll_until
from tests.security.conftest import Pki
from tidelog.broker.kafka_api.listener_security import server_ssl_context
from tidelog.client import AdminClient, Consumer, GroupConsumer, Producer, TopicPartition
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import InvalidConfigError
from tidelog.common.security.tls.credentials import server_credentials
from tidelog.common.settings import SecuritySettings
from tidelog.dev.local_cluster import LocalCluster
from tidelog.server_common.runtime import grpc_server
from tidelog.server_common.security.authentication.interceptor import AuthenticationInterceptor, current_principal
from tidelog.v1 import broker_pb2, broker_pb2_grpc

pytestmark = pytest.mark.timeout(180)

FAILED = "kafka_server_socket_server_metrics_failed_authentication_total"


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


async def test_a_cluster_on_mutual_tls_replicates_and_serves_groups(tls_cluster: LocalCluster, pki: Pki) -> None:
    security = pki.client("app")
    topic = _topic()
    async with AdminClient(
        tls_cluster.bootstrap, controllers=tls_cluster.controller_endpoints, security=security
    ) as admin:
        await admin.create_topic(topic, 2, 2, {"min.insync.replicas": "2"})
    async with Producer(tls_cluster.bootstrap, acks="all", security=security) as producer:
        await producer.send_batch(topic, [f"v{i}".encode() for i in range(100)], partition=0)
    # acks=all with min.insync.replicas=2: the follower fetched over TLS as well.
    async with GroupConsumer(
        tls_cluster.bootstrap, "tls-group", auto_offset_reset="earliest", security=security
    ) as consumer:
        consumer.subscribe([topic])
        records = await poll_until(consumer, 100)
        await consumer.commit()
    assert [record.value for record in records] == [f"v{i}".encode() for i in range(100)]


async def _reachable(cluster: LocalCluster, security: SecuritySettings | dict[str, str] | None) -> str:
    """ "ok", or the failure a client with these settings meets."""
    try:
        async with Consumer(cluster.bootstrap, request_timeout_ms=3000, security=security) as consumer:
            await consumer.end_offsets([TopicPartition("__consumer_offsets", 0)])
    except (ConnectionError, grpc.aio.AioRpcError) as error:
        return str(error)
    return "ok"


async def test_plaintext_a_wrong_ca_and_a_missing_client_certificate_are_refused(
    tls_cluster: LocalCluster, pki: Pki, tmp_path
) -> None:
    assert await _reachable(tls_cluster, pki.client("ok-client")) == "ok"
    assert await _reachable(tls_cluster, None) != "ok"  # plaintext to a TLS listener

    other = Pki(tmp_path, trustme.CA(organization_name="someone else"))
    assert await _reachable(tls_cluster, other.client("stranger")) != "ok"  # a certificate of another CA

    no_certificate = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)}
    assert await _reachable(tls_cluster, no_certificate) != "ok"  # mutual TLS wants one

    trusting_other = {**pki.mutual("mixed"), "ssl.ca.location": str(other.ca_file)}
    assert await _reachable(tls_cluster, trusting_other) != "ok"  # the brokers' certificates are not trusted


async def test_an_unmapped_certificate_subject_is_unauthenticated_and_counted(pki: Pki, tmp_path) -> None:
    """A listener whose mapping rules accept only O=tidelog subjects refuses another organisation's
    certificate with UNAUTHENTICATED (the CA is the same: TLS itself accepts it)."""

    server_settings = SecuritySettings.from_configs(
        pki.mutual("listener", **{"ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=[^,]*,O=tidelog$/$1/"})
    )
    seen = []

    class Broker(broker_pb2_grpc.BrokerServicer):
        async def Metadata(self, request, context):  # noqa: N802 - gRPC's name
            seen.append(str(current_principal.get()))
            return broker_pb2.MetadataResponse()

    server, _ = grpc_server(interceptors=[AuthenticationInterceptor(server_settings)])
    broker_pb2_grpc.add_BrokerServicer_to_server(Broker(), server)
    port = server.add_secure_port("127.0.0.1:0", server_credentials(server_settings))
    await server.start()
    try:
        good = ChannelPool(pki.client("alice"))
        await broker_pb2_grpc.BrokerStub(good.channel(f"127.0.0.1:{port}")).Metadata(broker_pb2.MetadataRequest())
        assert seen == ["User:alice"]

        certificate, key = pki.issue("mallory", organization="elsewhere")
        bad = ChannelPool(
            SecuritySettings.from_configs(
                {
                    **pki.mutual("x"),
                    "ssl.certificate.location": str(certificate),
                    "ssl.key.location": str(key),
                }
            )
        )
        failures_before = REGISTRY.get_sample_value(FAILED) or 0.0
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await broker_pb2_grpc.BrokerStub(bad.channel(f"127.0.0.1:{port}")).Metadata(broker_pb2.MetadataRequest())
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "maps to no principal" in (refused.value.details() or "")
        assert seen == ["User:alice"]  # the handler never ran
        assert REGISTRY.get_sample_value(FAILED) == failures_before + 1
        await good.close()
        await bad.close()
    finally:
        await server.stop(0)


async def test_a_rotated_listener_certificate_applies_to_new_connections(pki: Pki, tmp_path) -> None:
    """The listener's files are replaced by a certificate of a new CA: a client trusting only the
    new CA connects without the server restarting."""

    listener = pki.mutual("rotating")
    server_settings = SecuritySettings.from_configs({**listener, "ssl.client.auth": "none"})
    server, _ = grpc_server()
    port = server.add_secure_port("127.0.0.1:0", server_credentials(server_settings))
    await server.start()
    endpoint = f"127.0.0.1:{port}"

    async def check(ca_file: str) -> bool:
        pool = ChannelPool(SecuritySettings.from_configs({"security.protocol": "SSL", "ssl.ca.location": ca_file}))
        try:
            await health_pb2_grpc.HealthStub(pool.channel(endpoint)).Check(health_pb2.HealthCheckRequest(), timeout=3)
            return True
        except grpc.aio.AioRpcError:
            return False
        finally:
            await pool.close()

    try:
        new = Pki(tmp_path, trustme.CA(organization_name="next CA"))
        assert await check(str(pki.ca_file))
        assert not await check(str(new.ca_file))
        certificate, key = new.issue("rotating-next")
        # As Kubernetes does: the new files appear at the same paths.
        shutil.copy(key, listener["ssl.key.location"])
        shutil.copy(certificate, listener["ssl.certificate.location"])
        assert await check(str(new.ca_file))
        assert not await check(str(pki.ca_file))
    finally:
        await server.stop(0)


async def test_a_rotated_kafka_listener_certificate_applies_to_new_connections(pki: Pki, tmp_path) -> None:
    """The Kafka listener's files rotate as the gRPC listener's do: a half-written rotation (a new
    key beside the old certificate) is not taken; once the certificate follows, a client trusting
    only the new CA connects, without the listener restarting. The clients connect by address,
    sending no server name: the handshake still looks at the files."""
    listener = pki.mutual("rotating-kafka")
    settings = SecuritySettings.from_configs({**listener, "ssl.client.auth": "none"})

    async def served(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(served, "127.0.0.1", 0, ssl=server_ssl_context(settings))
    port = server.sockets[0].getsockname()[1]

    async def check(ca_file: Path) -> bool:
        trusting = ssl.create_default_context(cafile=str(ca_file))
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=trusting), 10)
        except ssl.SSLError:
            return False
        writer.close()
        return True

    try:
        new = Pki(tmp_path, trustme.CA(organization_name="next CA"))
        assert await check(pki.ca_file)
        assert not await check(new.ca_file)
        certificate, key = new.issue("rotating-kafka-next")
        shutil.copy(key, listener["ssl.key.location"])  # the key first: not a pair with the old certificate
        assert await check(pki.ca_file), "a half-written rotation is not taken: the last good files serve"
        shutil.copy(certificate, listener["ssl.certificate.location"])
        assert await check(new.ca_file)
        assert not await check(pki.ca_file)
    finally:
        server.close()
        await server.wait_closed()


def test_settings_that_cannot_make_a_tls_identity_are_refused(pki: Pki, tmp_path) -> None:

    with pytest.raises(InvalidConfigError, match="given together"):
        ChannelPool(SecuritySettings.from_configs({"security.protocol": "SSL", "ssl.certificate.location": "x"}))
    with pytest.raises(InvalidConfigError, match=r"needs ssl\.certificate\.location"):
        server_credentials(SecuritySettings.from_configs({"security.protocol": "SSL"}))
    mismatched = pki.mutual("one")
    _, other_key = pki.issue("two")
    with pytest.raises(InvalidConfigError, match="do not form a certificate and its key"):
        ChannelPool(SecuritySettings.from_configs({**mismatched, "ssl.key.location": str(other_key)}))
    with pytest.raises(InvalidConfigError, match="not one of none, required"):
        SecuritySettings.from_configs({"ssl.client.auth": "requested"})
    (tmp_path / "empty.pem").write_text("nothing")
    with pytest.raises(InvalidConfigError, match="holds no PEM data"):
        ChannelPool(
            SecuritySettings.from_configs({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "empty.pem")})
        )
