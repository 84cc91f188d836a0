"""SASL/SCRAM-SHA-512 over TLS with real processes: services log in to each other, users are
created, changed and deleted live, and a failed login says nothing about whether the user exists."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.conftest import poll_until, wait_until
from tests.security.conftest import Pki, password_of, sasl_client
from tidelog.cli.main import main as cli
from tidelog.client import AclBinding, AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)
from tidelog.common.security.authentication.scram import (
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    unknown_user_iterations,
)
from tidelog.common.settings import SecuritySettings
from tidelog.dev.local_cluster import LocalCluster
from tidelog.server_common.etcd.connect import etcd_client
from tidelog.server_common.metadata import SCRAM_UNKNOWN_USER_SECRET_KEY
from tidelog.server_common.security.authentication.interceptor import PRE_AUTHENTICATION_BYTES_MAX
from tidelog.v1 import broker_pb2, broker_pb2_grpc, security_pb2, security_pb2_grpc

pytestmark = pytest.mark.timeout(180)


def _admin(cluster: LocalCluster, pki: Pki, user: str = "admin", password: str | None = None) -> AdminClient:
    return AdminClient(
        cluster.bootstrap,
        controllers=cluster.controller_endpoints,
        request_timeout_ms=5000,
        security=sasl_client(pki, user, password),
    )


async def test_users_log_in_produce_and_consume_with_their_acls(sasl_cluster: LocalCluster, pki: Pki) -> None:
    topic = f"sasl-{uuid.uuid4().hex[:6]}"
    async with _admin(sasl_cluster, pki) as admin:
        assert (await admin.alter_user_scram_credentials({"carol": "carol-password-1"})) == {"carol": None}
        await admin.create_topic(topic, 1, 2, {"min.insync.replicas": "2"})  # replication over SASL too
        await admin.create_acls(
            [
                AclBinding.of(principal="User:carol", operation="Write", resource_type="Topic", resource_name=topic),
                AclBinding.of(principal="User:carol", operation="Read", resource_type="Topic", resource_name=topic),
            ]
        )
        assert (await admin.describe_user_scram_credentials())["carol"] == 4096
    carol = sasl_client(pki, "carol", "carol-password-1")
    async with Producer(sasl_cluster.bootstrap, acks="all", security=carol) as producer:
        await (await producer.send_batch(topic, [b"1", b"2", b"3"], partition=0))
    async with Consumer(sasl_cluster.bootstrap, security=carol, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert [record.value for record in await poll_until(consumer, 3)] == [b"1", b"2", b"3"]
    # Carol is not an administrator.
    async with _admin(sasl_cluster, pki, "carol", "carol-password-1") as as_carol:
        with pytest.raises(ClusterAuthorizationFailedError):
            await as_carol.alter_user_scram_credentials({"carol": "a-new-password"})
        with pytest.raises(TopicAuthorizationFailedError):
            await as_carol.create_topic(f"{topic}-2", 1, 1)


async def test_a_failed_login_does_not_say_whether_the_user_exists(sasl_cluster: LocalCluster, pki: Pki) -> None:
    failures_before = _broker_failures(sasl_cluster)
    messages = []
    for user, password in (("admin", "wrong-password"), (f"ghost-{uuid.uuid4().hex[:6]}", "any-password")):
        pool = ChannelPool(sasl_client(pki, user, password))
        try:
            with pytest.raises(SaslAuthenticationFailedError) as failed:
                await broker_pb2_grpc.BrokerStub(pool.channel(sasl_cluster.bootstrap[0])).Metadata(
                    broker_pb2.MetadataRequest()
                )
            messages.append(failed.value.message)
        finally:
            await pool.close()
    assert messages[0] == messages[1] == "authentication failed: wrong user name or password"
    assert _broker_failures(sasl_cluster) == failures_before + 2  # counted by the broker refusing them


def _broker_failures(cluster: LocalCluster) -> float:
    text = httpx.get(cluster.metrics_endpoint("broker-1")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kafka_server_socket_server_metrics_failed_authentication_total":
                return float(sample.value)
    raise AssertionError("the broker exports no failed-authentication counter")


async def test_calls_without_a_session_are_unauthenticated(sasl_cluster: LocalCluster, pki: Pki) -> None:
    tls_only = ChannelPool(
        SecuritySettings.from_configs({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)})
    )
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await broker_pb2_grpc.BrokerStub(tls_only.channel(sasl_cluster.bootstrap[0])).Metadata(
                broker_pb2.MetadataRequest()
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        forged = (("tidelog-session", "not-a-session"),)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await broker_pb2_grpc.BrokerStub(tls_only.channel(sasl_cluster.bootstrap[0])).Metadata(
                broker_pb2.MetadataRequest(), metadata=forged
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await tls_only.close()


async def test_password_changes_and_deletions_apply_live(sasl_cluster: LocalCluster, pki: Pki) -> None:
    async with _admin(sasl_cluster, pki) as admin:
        await admin.alter_user_scram_credentials({"dave": "dave-password-1"})

        async def can_log_in(password: str) -> bool:
            try:
                async with _admin(sasl_cluster, pki, "dave", password) as as_dave:
                    await as_dave.list_topics()
                return True
            except SaslAuthenticationFailedError:
                return False

        assert await wait_until(lambda: can_log_in("dave-password-1"), timeout_s=5, what="dave's first login")
        await admin.alter_user_scram_credentials({"dave": "dave-password-2"})
        await wait_until(lambda: _not(can_log_in("dave-password-1")), timeout_s=2, what="the old password refused")
        assert await can_log_in("dave-password-2")
        assert await admin.alter_user_scram_credentials(deletions=["dave"]) == {"dave": None}
        await wait_until(lambda: _not(can_log_in("dave-password-2")), timeout_s=2, what="the deleted user refused")
        deleted_again = await admin.alter_user_scram_credentials(deletions=["dave"])
        assert "has no SCRAM-SHA-512 credential" in str(deleted_again["dave"])
        bad = await admin.alter_user_scram_credentials({"bad/name": "whatever-password"})
        assert isinstance(bad["bad/name"], InvalidRequestError)


async def _server_first(pool: ChannelPool, endpoint: str, user: str) -> dict[str, str]:
    """The salt and iteration count a service answers a login of `user` with (its first step)."""
    answer = await security_pb2_grpc.AuthenticationStub(pool.channel(endpoint)).SaslAuthenticate(
        security_pb2.SaslAuthenticateRequest(mechanism="SCRAM-SHA-512", auth_bytes=ScramClient(user, "x").first())
    )
    fields = dict(part.split("=", 1) for part in answer.auth_bytes.decode().split(","))
    return {"s": fields["s"], "i": fields["i"]}


async def test_logins_of_users_that_do_not_exist_look_like_real_ones_everywhere(
    sasl_cluster: LocalCluster, pki: Pki
) -> None:
    """Issue 38 (4, 5): every process answers an unknown user with the same salt, and with an
    iteration count drawn from the real users', as it would a real user."""
    async with _admin(sasl_cluster, pki) as admin:
        await admin.alter_user_scram_credentials({"ivy": "ivy-password-1"}, iterations=8192)
        every_user = await admin.describe_user_scram_credentials()
    counts = set(every_user.values())
    assert counts == {4096, 8192}
    # Which count each unknown name must get (the rule, with the cluster's secret read from etcd,
    # which this test cluster leaves open): some names the real 8192, which a fixed count never gives.
    etcd = etcd_client(sasl_cluster.etcd.endpoint)
    await etcd.connect()
    try:
        assert etcd.kv is not None
        secret = bytes((await etcd.kv.get(SCRAM_UNKNOWN_USER_SECRET_KEY)).kvs[0].value)
    finally:
        await etcd.close()
    drawn = {
        name: unknown_user_iterations(secret, name, tuple(sorted(every_user.values())))
        for name in (f"ghost-{n}-{uuid.uuid4().hex[:6]}" for n in range(200))
    }
    ghosts = [n for n, i in drawn.items() if i == 8192][:4] + [n for n, i in drawn.items() if i == 4096][:4]
    tls_only = ChannelPool(
        SecuritySettings.from_configs({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)})
    )
    endpoints = [*sasl_cluster.bootstrap, *sasl_cluster.controller_endpoints]
    try:

        async def ivy_everywhere() -> bool:  # each process follows the credentials from etcd
            answers = [await _server_first(tls_only, endpoint, "ivy") for endpoint in endpoints]
            return all(answer["i"] == "8192" for answer in answers)

        await wait_until(ivy_everywhere, timeout_s=5, what="ivy's credential in every process")
        assert len(ghosts) == 8
        for ghost in ghosts:
            answers = [await _server_first(tls_only, endpoint, ghost) for endpoint in endpoints]
            assert all(answer == answers[0] for answer in answers), (ghost, answers)
            assert int(answers[0]["i"]) == drawn[ghost]
    finally:
        await tls_only.close()


def test_unknown_users_iteration_counts_follow_the_real_users() -> None:
    real = (4096, 4096, 8192)
    drawn = [unknown_user_iterations(b"k" * 32, f"user-{n}", real) for n in range(3000)]
    assert set(drawn) == {4096, 8192} and 0.28 < drawn.count(8192) / len(drawn) < 0.39
    assert unknown_user_iterations(b"k" * 32, "same", real) == unknown_user_iterations(b"k" * 32, "same", real)
    assert unknown_user_iterations(b"k" * 32, "anyone", ()) == 4096  # no users yet: the default


async def test_a_session_ends_when_its_user_is_re_created_or_its_password_changes(
    sasl_cluster: LocalCluster, pki: Pki
) -> None:
    """Issue 38 (3): a session is bound to the credential it logged in with."""
    async with _admin(sasl_cluster, pki) as admin:
        for recreate in (True, False):
            await admin.alter_user_scram_credentials({"hank": "hank-password-1"})
            pool = ChannelPool(sasl_client(pki, "hank", "hank-password-1"))
            try:
                await _session_ends(pool.channel(sasl_cluster.bootstrap[0]), admin, recreate=recreate)
            finally:
                await pool.close()
            await admin.alter_user_scram_credentials(deletions=["hank"])


async def _session_ends(channel: grpc.aio.Channel, admin: AdminClient, *, recreate: bool) -> None:
    broker = broker_pb2_grpc.BrokerStub(channel)
    await wait_until(lambda: broker.Metadata(broker_pb2.MetadataRequest()), what="hank logged in")
    if recreate:
        await admin.alter_user_scram_credentials(deletions=["hank"])
    await admin.alter_user_scram_credentials({"hank": "hank-password-2"})

    async def refused() -> bool:
        try:
            await broker.Metadata(broker_pb2.MetadataRequest())
        except (grpc.aio.AioRpcError, SaslAuthenticationFailedError):
            return True
        return False

    await wait_until(
        refused, timeout_s=3, what=f"hank's session ended ({'re-created' if recreate else 'new password'})"
    )


async def _not(awaitable) -> bool:
    return not await awaitable


def test_scram_exchange_against_rfc_7677_style_vectors() -> None:
    """Both sides agree, a wrong proof fails, and a tampered server signature is noticed."""
    credential = ScramCredential.from_password("pencil", iterations=4096)
    server = ScramServer(lambda user: credential if user == "user,=odd" else None, b"s" * 32)
    client = ScramClient("user,=odd", "pencil")  # a name needing =2C and =3D escapes
    first = client.first()
    assert first.startswith(b"n,,n=user=2C=3Dodd,r=")
    final, user = server.final(client.final(server.first(first)))
    assert user == "user,=odd"
    client.verify(final)
    with pytest.raises(ScramError, match="signature is wrong"):
        client.verify(b"v=" + b"A" * 88)
    for hostile in (
        b"y,,n=a,r=b",
        b"n,a=x,n=a,r=b",
        b"n,,n=a",
        b"n,,garbage",
        b"n,,n=a=zz,r=b",
        b"\xff\xfe",
        b"n" * 5000,
    ):
        with pytest.raises(ScramError):
            ScramServer(lambda user: credential, b"s" * 32).first(hostile)
    replay = ScramServer(lambda user: credential if user == "user,=odd" else None, b"s" * 32)
    replay.first(ScramClient("user,=odd", "pencil").first())
    with pytest.raises(ScramError, match="nonce"):
        replay.final(client.final(server.first(first)))  # a proof made for another exchange


def test_user_command_creates_lists_and_deletes_users(
    sasl_cluster: LocalCluster, pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    properties = tmp_path / "admin.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.ca.location={pki.ca_file}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=admin\n"
        f"sasl.password={password_of('admin')}\n"
    )
    password = tmp_path / "password"
    password.write_text("grace-password-1\n")
    common = ["--bootstrap", ",".join(sasl_cluster.bootstrap), "--command-config", str(properties)]
    assert cli(["user", "create", "grace", "--password-file", str(password), *common]) == 0
    assert "grace: SCRAM-SHA-512 credential set (4096 iterations)" in capsys.readouterr().out
    assert cli(["user", "list", *common]) == 0
    assert "grace" in capsys.readouterr().out
    short = tmp_path / "short"
    short.write_text("abc")
    with pytest.raises(SystemExit, match="at least 8 characters"):
        cli(["user", "create", "henry", "--password-file", str(short), *common])
    assert cli(["user", "delete", "grace", *common]) == 0
    capsys.readouterr()
    assert cli(["user", "list", *common]) == 0
    assert "grace" not in capsys.readouterr().out
    assert cli(["user", "delete", "grace", *common]) == 1  # gone already: said so
    assert "has no SCRAM-SHA-512 credential" in capsys.readouterr().err


def _memory_kib(pid: int) -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {name: int(fields[name].split()[0]) for name in ("VmRSS", "VmHWM")}


async def test_an_unauthenticated_call_is_refused_before_its_body_is_read(sasl_cluster: LocalCluster, pki: Pki) -> None:
    """Issue 38 (6): three concurrent 80 MiB Produce calls without a session are refused, and the
    broker's peak memory grows by less than the bodies' pre-authentication allowance."""
    pid = sasl_cluster.processes["broker-1"].pid
    before = _memory_kib(pid)
    tls_only = ChannelPool(
        SecuritySettings.from_configs({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file)})
    )
    records = bytes(80 * 1024 * 1024)
    body = broker_pb2.ProduceRequest(
        acks=1, partitions=[broker_pb2.ProducePartition(topic="t", partition=0, record_batches=records)]
    )
    stub = broker_pb2_grpc.BrokerStub(tls_only.channel(sasl_cluster.bootstrap[0]))
    try:
        refused = await asyncio.gather(*(stub.Produce(body, timeout=60) for _ in range(3)), return_exceptions=True)
    finally:
        await tls_only.close()
    codes = [r.code() if isinstance(r, grpc.aio.AioRpcError) else r for r in refused]
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 3
    after = _memory_kib(pid)
    grown_mib = (after["VmHWM"] - before["VmHWM"]) / 1024
    assert grown_mib < PRE_AUTHENTICATION_BYTES_MAX / (1024 * 1024), (before, after)
