"""Kafka's own clients against the brokers' Kafka listeners (docs/kafka-protocol.md): librdkafka
(confluent-kafka and kcat), kafka-python and aiokafka write with every codec, acks level and
idempotence, and every one of them — and the native client over gRPC — reads back exactly what
each wrote, offset, key, value and headers."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Callable

import httpx
import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition as RdPartition
from confluent_kafka.admin import AdminClient as RdAdmin
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic
from kafka.admin import ConfigResource as PyConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster import kafka_clients
from tests.cluster.kafka_clients import KCAT, Sent, records_to_send
from tidelog.client import AdminClient
from tidelog.common.kafka_wire.message_codec import codec
from tidelog.dev.local_cluster import LocalCluster

needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian package kcat)")
COUNT = 12


async def _topic(admin: AdminClient, name: str, partitions: int) -> None:
    await admin.create_topic(name, num_partitions=partitions, replication_factor=3)


@needs_kcat
async def test_kcat_lists_the_brokers_and_the_topics_partitions(
    cluster: LocalCluster, admin: AdminClient, topic_name: str
) -> None:
    await _topic(admin, topic_name, 3)
    listing = await asyncio.to_thread(
        subprocess.run,
        [KCAT, "-b", cluster.kafka_bootstrap.split(",")[0], "-L", "-t", topic_name],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    for broker_id in cluster.broker_ids:
        assert f"broker {broker_id} at 127.0.0.1:{cluster.ports.kafka[broker_id]}" in listing.stdout
    assert f'topic "{topic_name}" with 3 partitions' in listing.stdout
    assert listing.stdout.count("isrs: ") == 3


@needs_kcat
async def test_what_any_client_writes_every_client_reads_back_the_same(
    cluster: LocalCluster, admin: AdminClient, topic_name: str
) -> None:
    await _topic(admin, topic_name, 5)
    bootstrap = cluster.kafka_bootstrap
    sent: dict[int, list[Sent]] = {}
    # Partition 0: librdkafka, idempotent, acks=all, zstd; 1: kafka-python, acks=1, gzip;
    # 2: aiokafka, idempotent, lz4; 3: kcat, snappy; 4: the native client over gRPC.
    sent[0] = records_to_send("confluent", COUNT)
    await asyncio.to_thread(
        kafka_clients.write_confluent,
        bootstrap,
        topic_name,
        0,
        sent[0],
        **{"enable.idempotence": True, "acks": "all", "compression.type": "zstd"},
    )
    sent[1] = records_to_send("kafka-python", COUNT)
    await asyncio.to_thread(
        kafka_clients.write_kafka_python, bootstrap, topic_name, 1, sent[1], acks=1, compression_type="gzip"
    )
    sent[2] = records_to_send("aiokafka", COUNT)
    await kafka_clients.write_aiokafka(
        bootstrap, topic_name, 2, sent[2], enable_idempotence=True, compression_type="lz4"
    )
    sent[3] = records_to_send("kcat", 4)
    await asyncio.to_thread(kafka_clients.write_kcat, bootstrap, topic_name, 3, sent[3], "-z", "snappy")
    sent[4] = records_to_send("native", COUNT)
    await kafka_clients.write_native(cluster.bootstrap, topic_name, 4, sent[4])

    expected = {
        partition: [(offset, key, value, tuple(headers)) for offset, (key, value, headers) in enumerate(records)]
        for partition, records in sent.items()
    }
    ends = {partition: len(records) for partition, records in sent.items()}
    readers = {
        "confluent-kafka": asyncio.to_thread(kafka_clients.read_confluent, bootstrap, topic_name, ends),
        "kafka-python": asyncio.to_thread(kafka_clients.read_kafka_python, bootstrap, topic_name, ends),
        "aiokafka": kafka_clients.read_aiokafka(bootstrap, topic_name, ends),
        "kcat": asyncio.to_thread(kafka_clients.read_kcat, bootstrap, topic_name, ends),
        "native": kafka_clients.read_native(cluster.bootstrap, topic_name, ends),
    }
    for reader, reading in readers.items():
        assert await reading == expected, reader


async def test_acks_zero_and_one_write_and_offsets_for_times_find_the_first_record_at_or_after(
    cluster: LocalCluster, admin: AdminClient, topic_name: str
) -> None:
    await _topic(admin, topic_name, 1)
    bootstrap = cluster.kafka_bootstrap

    def produce_and_look_up() -> tuple[int, int, bool]:
        early = [(None, b"ack-one", [])] * 3
        kafka_clients.write_confluent(bootstrap, topic_name, 0, early, acks=1)
        middle_ms = int(time.time() * 1000) + 5
        while int(time.time() * 1000) <= middle_ms:
            time.sleep(0.005)  # (the records below are stamped after middle_ms by the producer)
        kafka_clients.write_confluent(bootstrap, topic_name, 0, [(None, b"ack-zero", [])] * 3, acks=0)
        consumer = RdConsumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
        deadline = time.monotonic() + 30
        end = 0
        while end < 6 and time.monotonic() < deadline:  # acks=0 is not waited for: its records land soon after
            end = consumer.get_watermark_offsets(RdPartition(topic_name, 0), timeout=10)[1]
        found = consumer.offsets_for_times([RdPartition(topic_name, 0, middle_ms)], timeout=10)
        consumer.close()
        return end, found[0].offset, found[0].error is None

    end, offset, ok = await asyncio.to_thread(produce_and_look_up)
    assert end == 6
    assert ok and offset == 3


def _raw_request(port: int, frame: bytes) -> bytes:
    """Send one framed request; the answer's bytes (empty: the broker closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(frame)
        received = b""
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                return received
            received += chunk
            if len(received) >= 4 and len(received) >= 4 + struct.unpack_from(">i", received)[0]:
                return received


def test_bad_frames_close_the_connection_and_an_unknown_api_versions_version_gets_the_list(
    cluster: LocalCluster,
) -> None:
    port = cluster.ports.kafka[cluster.broker_ids[0]]
    api_versions_v9 = b"\x00\x12\x00\x09\x00\x00\x00\x2a\xff\xff"
    answer = _raw_request(port, struct.pack(">i", len(api_versions_v9)) + api_versions_v9)
    assert answer[4:8] == b"\x00\x00\x00\x2a"  # correlation id 42, response header v0
    body = codec("ApiVersionsResponse", 0).decode(answer[8:])
    assert body["ErrorCode"] == 35  # UNSUPPORTED_VERSION
    assert {entry["ApiKey"] for entry in body["ApiKeys"]} >= {0, 1, 2, 3, 18}
    unknown_key = b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff"
    assert _raw_request(port, struct.pack(">i", len(unknown_key)) + unknown_key) == b""
    assert _raw_request(port, struct.pack(">i", 2**31 - 1)) == b""  # beyond socket.request.max.bytes
    truncated_metadata = b"\x00\x03\x00\x01\x00\x00\x00\x01\xff\xff\x00\x00\x00\x05"  # 5 topics, none there
    assert _raw_request(port, struct.pack(">i", len(truncated_metadata)) + truncated_metadata) == b""
    # ... and the listener serves the next connection as ever.
    producer = RdProducer({"bootstrap.servers": f"127.0.0.1:{port}"})
    assert producer.list_topics(timeout=10).brokers


def test_librdkafkas_and_kafka_pythons_admin_clients_create_describe_grow_and_delete_topics(
    cluster: LocalCluster, topic_name: str
) -> None:
    bootstrap = cluster.kafka_bootstrap
    admin = RdAdmin({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(topic_name, 2, 3, config={"retention.ms": "12345"})])
    created[topic_name].result(timeout=30)
    with pytest.raises(KafkaException) as again:
        admin.create_topics([NewTopic(topic_name, 2, 3)])[topic_name].result(timeout=30)
    assert again.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as invalid:
        admin.create_topics([NewTopic("no spaces allowed", 1, 1)])["no spaces allowed"].result(timeout=30)
    assert invalid.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(timeout=30)
    configs = admin.describe_configs([ConfigResource("topic", topic_name)])
    described = next(iter(configs.values())).result(timeout=30)
    assert described["retention.ms"].value == "12345" and not described["retention.ms"].is_default
    assert described["cleanup.policy"].is_default
    # kafka-python's admin client sees the four partitions (metadata through the same listener).
    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    deadline = time.monotonic() + 30
    while len(python_admin.describe_topics([topic_name])[0]["partitions"]) != 4:
        assert time.monotonic() < deadline, "the new partitions never showed"
        time.sleep(0.1)
    python_admin.delete_topics([topic_name])
    python_admin.close()
    with pytest.raises(KafkaException) as gone:
        admin.delete_topics([topic_name])[topic_name].result(timeout=30)
    assert gone.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # Kafka's request metrics count the listener's forwarded requests, by name and error.
    counted: dict[tuple[str, str], float] = {}
    for broker_id in cluster.broker_ids:
        scraped = httpx.get(cluster.metrics_endpoint(f"broker-{broker_id}"), timeout=10).text
        for family in text_string_to_metric_families(scraped):
            for sample in family.samples:
                if sample.name == "kafka_network_requestmetrics_requests_total":
                    key = (sample.labels["request"], sample.labels["error"])
                    counted[key] = counted.get(key, 0) + sample.value
    assert counted.get(("CreateTopics", "NONE"), 0) >= 1
    assert counted.get(("DeleteTopics", "NONE"), 0) >= 1


def test_pipelined_produce_requests_of_one_connection_append_in_their_order(
    cluster: LocalCluster, topic_name: str
) -> None:
    """librdkafka keeps up to five produce requests in flight on a connection; the listener starts
    the next before the last is replicated. Small batches make hundreds of requests: the records
    must land in the order sent, each once."""
    admin = RdAdmin({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(timeout=30)
    count = 20_000
    for idempotent in (True, False):
        records = [(None, f"{idempotent}-{number}".encode(), []) for number in range(count)]
        kafka_clients.write_confluent(
            cluster.kafka_bootstrap,
            topic_name,
            0,
            records,  # type: ignore[arg-type]
            **{"enable.idempotence": idempotent, "batch.size": 2000, "linger.ms": 0, "acks": "all"},
        )
    read = kafka_clients.read_confluent(cluster.kafka_bootstrap, topic_name, {0: 2 * count})[0]
    assert [value for _, _, value, _ in read] == [
        f"{idempotent}-{number}".encode() for idempotent in (True, False) for number in range(count)
    ]
    assert [offset for offset, _, _, _ in read] == list(range(2 * count))


def test_configs_altered_whole_and_incrementally_through_librdkafkas_admin_client(
    cluster: LocalCluster, topic_name: str
) -> None:
    admin = RdAdmin({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3, config={"retention.ms": "100000"})])[topic_name].result(30)
    resource = ConfigResource("topic", topic_name)

    def described() -> dict[str, tuple[str, bool]]:
        found = next(iter(admin.describe_configs([resource]).values())).result(timeout=30)
        return {name: (entry.value, entry.is_default) for name, entry in found.items()}

    def until(condition: Callable[[dict[str, tuple[str, bool]]], bool]) -> dict[str, tuple[str, bool]]:
        deadline = time.monotonic() + 30  # (the controller's push reaches the broker asked moments later)
        while not condition(seen := described()):
            assert time.monotonic() < deadline, seen
            time.sleep(0.1)
        return seen

    incremental = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    next(iter(admin.incremental_alter_configs([incremental]).values())).result(timeout=30)
    seen = until(lambda configs: configs["segment.ms"][0] == "600000")
    assert seen["cleanup.policy"] == ("delete,compact", False)
    assert seen["retention.ms"][1]  # back to its default
    # AlterConfigs (kafka-python's; librdkafka deprecates it). kafka-python reads the topic's
    # configs and sends them whole with the change, as AlterConfigs replaces them whole.
    python_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    python_admin.alter_configs(
        [PyConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "5000"})],
        incremental=False,  # (kafka-python would send IncrementalAlterConfigs)
    )
    python_admin.close()
    seen = until(lambda configs: configs["retention.ms"][0] == "5000")
    assert seen["segment.ms"] == ("600000", False), seen


def _api_call(port: int, name: str, api_key: int, version: int, body: dict[str, object]) -> dict[str, object]:
    """One request of Kafka's framing (request header v2: these versions are flexible), decoded answer."""
    request = codec(name + "Request", version)
    frame = struct.pack(">hhi", api_key, version, 9) + b"\x00\x04test" + b"\x00" + request.encode(body)
    answer = _raw_request(port, struct.pack(">i", len(frame)) + frame)
    assert answer[4:8] == struct.pack(">i", 9) and answer[8] == 0  # correlation id; no header tags
    return codec(name + "Response", version).decode(answer[9:])


def test_client_quotas_are_altered_and_described_as_kip_546_filters_them(cluster: LocalCluster) -> None:
    """No Python Kafka client has these two APIs: they are sent as Kafka's tools send them."""
    port = cluster.ports.kafka[cluster.broker_ids[0]]
    user = f"quota-{uuid.uuid4().hex[:6]}"
    entity = [{"EntityType": "user", "EntityName": user}]
    altered = _api_call(
        port,
        "AlterClientQuotas",
        49,
        1,
        {
            "Entries": [{"Entity": entity, "Ops": [{"Key": "producer_byte_rate", "Value": 1024.0, "Remove": False}]}],
            "ValidateOnly": False,
        },
    )
    assert [entry["ErrorCode"] for entry in altered["Entries"]] == [0]  # type: ignore[union-attr]
    exact = {"Components": [{"EntityType": "user", "MatchType": 0, "Match": user}], "Strict": True}
    described = _api_call(port, "DescribeClientQuotas", 48, 1, exact)
    assert described["ErrorCode"] == 0
    assert described["Entries"] == [{"Entity": entity, "Values": [{"Key": "producer_byte_rate", "Value": 1024.0}]}]
    by_client = {"Components": [{"EntityType": "client-id", "MatchType": 2, "Match": None}], "Strict": False}
    assert user not in str(_api_call(port, "DescribeClientQuotas", 48, 1, by_client)["Entries"])


def test_delete_records_moves_the_log_start_for_every_reader(cluster: LocalCluster, topic_name: str) -> None:
    admin = RdAdmin({"bootstrap.servers": cluster.kafka_bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 3)])[topic_name].result(timeout=30)
    records = [(None, b"r-%d" % number, []) for number in range(10)]
    kafka_clients.write_confluent(cluster.kafka_bootstrap, topic_name, 0, records, acks="all")  # type: ignore[arg-type]
    deleted = admin.delete_records([RdPartition(topic_name, 0, 6)])
    assert next(iter(deleted.values())).result(timeout=30).low_watermark == 6
    consumer = RdConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "unused",  # (no commit: this cluster runs no group coordinator)
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    assert consumer.get_watermark_offsets(RdPartition(topic_name, 0), timeout=10) == (6, 10)
    consumer.assign([RdPartition(topic_name, 0, 0)])  # below the log start now: reset to the earliest
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while len(offsets) < 4 and time.monotonic() < deadline:
        offsets += [m.offset() for m in consumer.consume(10, 0.5) if m.error() is None]
    assert offsets == [6, 7, 8, 9]
    consumer.close()
    beyond = admin.delete_records([RdPartition(topic_name, 0, 11)])  # past the high watermark
    with pytest.raises(KafkaException) as refused:
        next(iter(beyond.values())).result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
