"""Every gRPC method of every service fed malformed and hostile messages through real servers
(issue 19): bytes that are not protobuf, negative and extreme numbers, unknown enum values, huge
strings and repeated fields. Each call must end with a specific answer — a response (usually with
an error code) or a deliberate gRPC status — never UNKNOWN (an exception the handler did not
expect), never a dead process; afterwards the cluster still works and holds nothing it should not.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Final

import grpc
import pytest
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import message_factory
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.cluster.conftest import COORDINATOR_ARGS, poll_until, started_cluster
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.grpc_options import GRPC_OPTIONS
from tidelog.common.record.batch import encode_batch
from tidelog.dev.local_cluster import LocalCluster
from tidelog.v1 import broker_pb2, broker_pb2_grpc, controller_pb2, coordinator_pb2, security_pb2

pytestmark = pytest.mark.timeout(300)

FieldDescriptor = pb_descriptor.FieldDescriptor
CALL_TIMEOUT_S: Final = 8.0
# Requests a controller sends to brokers, and brokers to the controller: on a PLAINTEXT cluster
# (no authoriser) anyone may send them, and a high enough epoch is obeyed by design — that is
# what docs/security.md's service roles are for. Here they get hostile content with stale epochs.
PRIVILEGED: Final = frozenset(
    {
        "/tidelog.v1.Broker/LeaderAndIsr",
        "/tidelog.v1.Broker/StopReplica",
        "/tidelog.v1.Broker/UpdateMetadata",
        "/tidelog.v1.Controller/AlterPartition",
        "/tidelog.v1.Controller/ControlledShutdown",
        "/tidelog.v1.Controller/ElectLeaders",
        "/tidelog.v1.Controller/AlterPartitionReassignments",
        "/tidelog.v1.Controller/DeleteTopics",
    }
)
# Long polls and group waits may run out the call's deadline with hostile (huge) waits asked for.
MAY_WAIT: Final = frozenset(
    {
        "/tidelog.v1.Broker/Fetch",
        "/tidelog.v1.Broker/Produce",
        "/tidelog.v1.Coordinator/JoinGroup",
        "/tidelog.v1.Coordinator/SyncGroup",
    }
)
INT_LIMITS: Final = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
STRINGS: Final = {
    "negative": "-1",
    "max": "x" * 100_000,
    "weird": "../..\x00\u2028\ud7ff:/,=*",
    "many": "t",
}


def _scalar(field: FieldDescriptor, mode: str) -> Any:
    low, high = INT_LIMITS.get(field.type, (None, None))
    if low is not None:
        return {"negative": max(low, -1) if mode == "weird" else low, "max": high}.get(mode, -1 if low < 0 else 0)
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return {"negative": -1e308, "max": float("inf"), "weird": float("nan")}.get(mode, -0.0)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True
    if field.type == FieldDescriptor.TYPE_ENUM:
        return 999_999  # an unknown value (proto3 enums are open)
    if field.type == FieldDescriptor.TYPE_STRING:
        return STRINGS[mode]
    if field.type == FieldDescriptor.TYPE_BYTES:
        return os.urandom(100_000 if mode == "max" else 64)  # garbage record batches, salts, proofs
    raise AssertionError(field.type)


def _fill(message: Message, mode: str, depth: int = 0) -> Message:
    """Every field of `message` set the `mode` way: nested messages to depth 3, repeated fields 3
    long — or 20,000 long at the top level in `many` mode."""
    for field in message.DESCRIPTOR.fields:
        count = 20_000 if mode == "many" and depth == 0 else 3
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            string_keys = field.message_type.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING
            target = getattr(message, field.name)
            for index in range(count if depth < 2 else 0):
                key: Any = f"{STRINGS[mode][:1000]}{index}" if string_keys else -index if mode == "negative" else index
                if value_field.message_type is not None:
                    _fill(target[key], mode, depth + 1)
                else:
                    target[key] = _scalar(value_field, mode)
        elif field.message_type is not None:
            if depth >= 3:
                continue
            if field.is_repeated:
                repeated = getattr(message, field.name)
                template = _fill(repeated.add(), mode, depth + 1)
                for _ in range(count - 1):
                    repeated.add().CopyFrom(template)
            else:
                _fill(getattr(message, field.name), mode, depth + 1)
        elif field.is_repeated:
            getattr(message, field.name).extend([_scalar(field, mode)] * count)
        else:
            setattr(message, field.name, _scalar(field, mode))
    return message


def _methods() -> Iterator[tuple[str, Any, str]]:
    """(full method path, request class, which service's endpoint) of every method."""
    for module, where in (
        (broker_pb2, "broker"),
        (controller_pb2, "controller"),
        (coordinator_pb2, "coordinator"),
        (security_pb2, "broker"),
    ):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                request = message_factory.GetMessageClass(method.input_type)
                yield f"/{service.full_name}/{method.name}", request, where


def _variants(path: str, request: Any) -> Iterator[tuple[str, bytes]]:
    yield "not protobuf", b"\xff\xff\xff\xff\x0f" + os.urandom(256)
    yield "empty", request().SerializeToString()
    for mode in ("negative", "weird", "many", "max"):
        if mode == "max" and path in PRIVILEGED:
            continue  # a maximal epoch is obeyed by design on a cluster without service roles
        yield mode, _fill(request(), mode).SerializeToString()


@pytest.fixture
async def hostile_cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    async with started_cluster(
        tmp_path / "hostile", brokers=2, controllers=1, coordinators=1, coordinator_args=COORDINATOR_ARGS
    ) as cluster:
        yield cluster


async def test_every_method_answers_hostile_messages_specifically_and_the_cluster_survives(
    hostile_cluster: LocalCluster,
) -> None:
    cluster = hostile_cluster
    endpoints = {
        "broker": cluster.bootstrap[0],
        "controller": cluster.controller_endpoints[0],
        "coordinator": cluster.coordinator_endpoints[0],
    }
    topic = f"before-{uuid.uuid4().hex[:6]}"
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 1, 2)
        topics_before = set(await admin.list_topics())
    unexpected: list[str] = []
    answered = 0
    channels = {
        where: grpc.aio.insecure_channel(endpoint, options=GRPC_OPTIONS) for where, endpoint in endpoints.items()
    }
    try:
        for path, request, where in _methods():
            call: Callable[..., Any] = channels[where].unary_unary(
                path, request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw
            )
            for label, payload in _variants(path, request):
                try:
                    await call(payload, timeout=CALL_TIMEOUT_S)
                    answered += 1
                except grpc.aio.AioRpcError as error:
                    code = error.code()
                    allowed = code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE)
                    if code == grpc.StatusCode.DEADLINE_EXCEEDED and path not in MAY_WAIT:
                        allowed = False
                    if not allowed:
                        unexpected.append(f"{path} [{label}]: {code.name} {(error.details() or '')[:200]}")
                    else:
                        answered += 1
                cluster.check_alive()
    finally:
        for channel in channels.values():
            await channel.close()
    # Hostile batches to a real partition, on every broker (the leader checks them, the other
    # answers NOT_LEADER): refused, nothing written — the first record read below is "after".
    valid = encode_batch([b"v"] * 10, timestamps=0)
    truncated_and_garbled = (
        valid[:-3],
        valid[:20],
        bytes(len(valid)),
        valid + os.urandom(30),
        valid[:30] + os.urandom(len(valid) - 30),
    )
    for endpoint in cluster.bootstrap:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            for hostile in truncated_and_garbled:
                request = broker_pb2.ProduceRequest(
                    acks=-1,
                    timeout_ms=5000,
                    partitions=[broker_pb2.ProducePartition(topic=topic, partition=0, record_batches=hostile)],
                )
                answer = await broker_pb2_grpc.BrokerStub(channel).Produce(request, timeout=CALL_TIMEOUT_S)
                assert answer.partitions[0].error_code != 0
    assert unexpected == [], "\n".join(unexpected)
    assert answered > 150
    # Every service still serves, and the cluster still works end to end.
    for endpoint in endpoints.values():
        async with grpc.aio.insecure_channel(endpoint) as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    async with Producer(cluster.bootstrap, acks="all") as producer:
        await (await producer.send_batch(topic, [b"after"], partition=0))
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert [record.value for record in await poll_until(consumer, 1)] == [b"after"]
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        assert set(await admin.list_topics()) == topics_before  # no hostile request created a topic
