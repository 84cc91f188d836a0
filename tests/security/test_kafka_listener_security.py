"""The Kafka listener secured as the gRPC listener is (SASL_SSL, the ACL authorizer): librdkafka
and kafka-python log in with SCRAM-SHA-512 or PLAIN over TLS against the users in etcd; ACLs decide
what each may do, also for the group and admin requests a broker forwards (the client's principal
goes with them); nothing but ApiVersions and the login is served before a login."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as RdProducer
from confluent_kafka.admin import AclBinding as AclBinding_
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import AdminClient as RdAdmin
from kafka import KafkaConsumer, TopicPartition

from tests.cluster.conftest import COORDINATOR_ARGS, running_cluster
from tests.security.conftest import SERVICE_USERS, Pki, password_of, sasl_client, sasl_settings
from tidelog.client import AclBinding, AdminClient
from tidelog.dev.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def kafka_sasl_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("kafka-sasl-cluster"),
        brokers=2,
        controllers=1,
        coordinators=1,
        coordinator_args=COORDINATOR_ARGS,
        service_security=sasl_settings(pki),
        client_security=sasl_client(pki, "admin"),
        scram_users={user: password_of(user) for user in SERVICE_USERS},
        kafka_listeners=True,
    ) as local:
        yield local


def _rd(cluster: LocalCluster, pki: Pki, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(pki.ca_file),
        "ssl.endpoint.identification.algorithm": "none",  # (the test CA's certificates name no host)
    }


async def _user_with_acls(cluster: LocalCluster, pki: Pki, user: str, topic: str, group: str, *, read: bool) -> None:
    async with AdminClient(
        cluster.bootstrap, controllers=cluster.controller_endpoints, security=sasl_client(pki, "admin")
    ) as admin:
        await admin.alter_user_scram_credentials({user: password_of(user)})
        bindings = [
            AclBinding.of(principal=f"User:{user}", operation="Write", resource_type="Topic", resource_name=topic),
            AclBinding.of(principal=f"User:{user}", operation="Create", resource_type="Topic", resource_name=topic),
            AclBinding.of(principal=f"User:{user}", operation="Describe", resource_type="Topic", resource_name=topic),
        ]
        if read:
            bindings += [
                AclBinding.of(principal=f"User:{user}", operation="Read", resource_type="Topic", resource_name=topic),
                AclBinding.of(principal=f"User:{user}", operation="Read", resource_type="Group", resource_name=group),
            ]
        await admin.create_acls(bindings)


async def test_a_scram_user_creates_writes_and_reads_in_a_group_as_its_acls_allow_and_no_further(
    kafka_sasl_cluster: LocalCluster, pki: Pki
) -> None:
    cluster, topic, group = kafka_sasl_cluster, f"k-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    await _user_with_acls(cluster, pki, "kwriter", topic, group, read=False)
    await _user_with_acls(cluster, pki, "kreader", topic, group, read=True)

    def scenario() -> None:
        writer = _rd(cluster, pki, "kwriter", password_of("kwriter"))
        # CreateTopics goes to the controller on the client's behalf: its Create ACL decides.
        admin = RdAdmin(writer)
        admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(timeout=30)
        producer = RdProducer({**writer, "enable.idempotence": True, "acks": "all"})
        for number in range(20):
            producer.produce(topic, b"secret-%d" % number, partition=number % 2)
        assert producer.flush(30) == 0
        # The reader's group requests are forwarded to the coordinator, which checks its Read ACL.
        reader = RdConsumer(
            {**_rd(cluster, pki, "kreader", password_of("kreader")), "group.id": group, "auto.offset.reset": "earliest"}
        )
        reader.subscribe([topic])
        values: list[bytes] = []
        while len(values) < 20:
            values += [m.value() for m in reader.consume(20, 10.0) if m.error() is None]
        reader.close()
        assert sorted(values) == sorted(b"secret-%d" % n for n in range(20))
        # The writer may not read, nor use a group.
        refused = RdConsumer({**writer, "group.id": group, "auto.offset.reset": "earliest"})
        refused.subscribe([topic])
        errors = [m.error().code() for m in refused.consume(5, 10.0) if m.error() is not None]
        refused.close()
        assert errors and set(errors) <= {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}

    await asyncio.to_thread(scenario)


async def test_a_wrong_password_fails_the_login_and_plain_over_tls_logs_in(
    kafka_sasl_cluster: LocalCluster, pki: Pki
) -> None:
    cluster, topic, group = kafka_sasl_cluster, f"k-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    await _user_with_acls(cluster, pki, "kplain", topic, group, read=True)

    def scenario() -> None:
        wrong = RdProducer({**_rd(cluster, pki, "kplain", "not-the-password"), "message.timeout.ms": 5000})
        failures: list[KafkaError] = []
        wrong.produce(topic, b"x", on_delivery=lambda error, _: failures.append(error))
        wrong.flush(15)
        assert failures and failures[0] is not None
        with pytest.raises(KafkaException) as refused:
            wrong.list_topics(timeout=5)
        assert refused.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT)
        # PLAIN, from kafka-python: the password checked against the stored SCRAM credential.
        plain = _rd(cluster, pki, "kplain", password_of("kplain"), "PLAIN")
        admin = RdAdmin(plain)
        admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(timeout=30)
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        context.check_hostname = False
        consumer = KafkaConsumer(
            bootstrap_servers=cluster.kafka_bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_plain_username="kplain",
            sasl_plain_password=password_of("kplain"),
            ssl_context=context,
        )
        assert topic in consumer.topics()
        consumer.assign([TopicPartition(topic, 0)])
        assert consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)] == 0
        consumer.close()

    await asyncio.to_thread(scenario)


def test_nothing_but_api_versions_and_the_login_is_served_before_a_login(
    kafka_sasl_cluster: LocalCluster, pki: Pki
) -> None:
    host, port = kafka_sasl_cluster.kafka_bootstrap.split(",")[0].split(":")
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    context.check_hostname = False
    metadata_v1 = b"\x00\x03\x00\x01\x00\x00\x00\x07\xff\xff\xff\xff\xff\xff"  # every topic
    with socket.create_connection((host, int(port)), timeout=10) as raw, context.wrap_socket(raw) as tls:
        tls.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
        assert tls.recv(100) == b""  # closed, nothing answered


async def test_librdkafkas_admin_client_creates_describes_and_deletes_acls_that_take_effect(
    kafka_sasl_cluster: LocalCluster, pki: Pki
) -> None:
    cluster, topic = kafka_sasl_cluster, f"k-{uuid.uuid4().hex[:6]}"
    async with AdminClient(
        cluster.bootstrap, controllers=cluster.controller_endpoints, security=sasl_client(pki, "admin")
    ) as native:
        await native.alter_user_scram_credentials({"kacl": password_of("kacl")})
        await native.create_topic(topic, 1, 2)

    def scenario() -> None:
        admin = RdAdmin(_rd(cluster, pki, "admin", password_of("admin")))
        user = _rd(cluster, pki, "kacl", password_of("kacl"))
        write = AclBinding_(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:kacl",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        describe = AclBinding_(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:kacl",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([write, describe]).values():
            future.result(timeout=30)
        listed = admin.describe_acls(
            AclBindingFilter(
                ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
            )
        ).result(timeout=30)
        assert {(acl.principal, acl.operation) for acl in listed} == {
            ("User:kacl", AclOperation.WRITE),
            ("User:kacl", AclOperation.DESCRIBE),
        }
        producer = RdProducer({**user, "message.timeout.ms": 20_000})
        deadline = time.monotonic() + 30
        outcomes: list[object] = []
        while True:  # (ACLs reach the brokers through etcd's watch: moments after they are written)
            outcomes.clear()
            producer.produce(topic, b"allowed", on_delivery=lambda error, _: outcomes.append(error))
            producer.flush(25)
            if outcomes == [None]:
                break
            assert time.monotonic() < deadline, outcomes
        removed = admin.delete_acls(
            [
                AclBindingFilter(
                    ResourceType.TOPIC,
                    topic,
                    ResourcePatternType.LITERAL,
                    "User:kacl",
                    None,
                    AclOperation.WRITE,
                    AclPermissionType.ANY,
                )
            ]
        )
        assert [acl.operation for acl in next(iter(removed.values())).result(timeout=30)] == [AclOperation.WRITE]

    await asyncio.to_thread(scenario)
