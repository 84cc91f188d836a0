"""Real Kafka clients, each driven the same way for the Kafka-listener tests: write records to one
partition, and read partitions from the beginning to their end. A record is compared as
(offset, key, value, headers) whoever wrote and whoever read it.

librdkafka (confluent-kafka and kcat), kafka-python and aiokafka are independent implementations
of Kafka's protocol; the native Tidelog client reads the same records over gRPC.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import aiokafka.errors
import httpx
import kafka.errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioPartition
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError as RdError
from confluent_kafka import KafkaException as RdException
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition as RdPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as PyPartition

from tidelog.client import Consumer, Producer, TopicPartition

Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
Sent = tuple[bytes | None, bytes, list[tuple[str, bytes]]]  # key, value, headers
READ_TIMEOUT_S = 30.0
KCAT = shutil.which("kcat")


def records_to_send(writer: str, count: int) -> list[Sent]:
    """Printable keys, values and headers (kcat reads and prints text)."""
    return [
        (
            f"{writer}-k{number % 3}".encode() if number % 4 else None,
            f"{writer}-v{number}".encode(),
            [("writer", writer.encode())],
        )
        for number in range(count)
    ]


def _headers(pairs: Sequence[tuple[str, Any]] | None) -> tuple[tuple[str, bytes | None], ...]:
    return tuple((name, None if value is None else bytes(value)) for name, value in pairs or ())


# ---- writers: each returns once every record is acknowledged -----------------------------------


def write_confluent(bootstrap: str, topic: str, partition: int, records: list[Sent], **config: Any) -> None:
    producer = RdProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failures: list[Any] = []
    for key, value, headers in records:
        producer.produce(
            topic, value, key, partition, on_delivery=lambda error, _: error and failures.append(error), headers=headers
        )
    assert producer.flush(READ_TIMEOUT_S) == 0, "records left undelivered"
    assert not failures, failures


def write_kafka_python(bootstrap: str, topic: str, partition: int, records: list[Sent], **config: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    futures = [producer.send(topic, value, key, headers, partition) for key, value, headers in records]
    for future in futures:
        future.get(timeout=READ_TIMEOUT_S)
    producer.close()


async def write_aiokafka(bootstrap: str, topic: str, partition: int, records: list[Sent], **config: Any) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        deliveries = [
            await producer.send(topic, value, key, partition, headers=headers) for key, value, headers in records
        ]
        await asyncio.gather(*deliveries)
    finally:
        await producer.stop()


def write_kcat(bootstrap: str, topic: str, partition: int, records: list[Sent], *options: str) -> None:
    """One kcat run per key and headers (kcat takes them per run), values one per line."""
    assert KCAT is not None
    for key, value, headers in records:
        command = [KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", str(partition), *options]
        if key is not None:
            command += ["-k", key.decode()]
        for name, header in headers:
            command += ["-H", f"{name}={header.decode()}"]
        subprocess.run(command, input=value + b"\n", check=True, timeout=READ_TIMEOUT_S, capture_output=True)


async def write_native(bootstrap: list[str], topic: str, partition: int, records: list[Sent]) -> None:
    async with Producer(bootstrap) as producer:
        deliveries = [
            await producer.send(topic, value, key=key, partition=partition, headers=tuple(headers))
            for key, value, headers in records
        ]
        await asyncio.gather(*deliveries)


# ---- readers: partition → its records, read until each partition's end offset -----------------


def read_confluent(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[Record]]:
    consumer = RdConsumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([RdPartition(topic, partition, 0) for partition in ends])
        got: dict[int, list[Record]] = {partition: [] for partition in ends}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(len(got[p]) < end for p, end in ends.items()) and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                got[message.partition()].append(
                    (message.offset(), message.key(), message.value(), _headers(message.headers()))
                )
    finally:
        consumer.close()
    return got


def read_kafka_python(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[Record]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([PyPartition(topic, partition) for partition in ends])
        consumer.seek_to_beginning()
        got: dict[int, list[Record]] = {partition: [] for partition in ends}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(len(got[p]) < end for p, end in ends.items()) and time.monotonic() < deadline:
            for partition, messages in consumer.poll(500).items():
                got[partition.partition] += [(m.offset, m.key, m.value, _headers(m.headers)) for m in messages]
    finally:
        consumer.close()
    return got


async def read_aiokafka(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[Record]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    got: dict[int, list[Record]] = {partition: [] for partition in ends}
    try:
        consumer.assign([AioPartition(topic, partition) for partition in ends])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(len(got[p]) < end for p, end in ends.items()) and time.monotonic() < deadline:
            for partition, messages in (await consumer.getmany(timeout_ms=500)).items():
                got[partition.partition] += [(m.offset, m.key, m.value, _headers(m.headers)) for m in messages]
    finally:
        await consumer.stop()
    return got


def read_kcat(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[Record]]:
    assert KCAT is not None
    got: dict[int, list[Record]] = {}
    for partition, end in ends.items():
        output = subprocess.run(
            [
                KCAT,
                "-b",
                bootstrap,
                "-C",
                "-t",
                topic,
                "-p",
                str(partition),
                "-o",
                "beginning",
                "-c",
                str(end),
                "-e",
                "-f",
                "%o\t%k\t%K\t%s\t%h\n",
            ],
            check=True,
            timeout=READ_TIMEOUT_S,
            capture_output=True,
        ).stdout.decode()
        got[partition] = []
        for line in output.splitlines():
            offset, key, key_length, value, headers = line.split("\t")
            pairs = tuple(
                (name, text.encode()) for name, _, text in (item.partition("=") for item in headers.split(",") if item)
            )
            got[partition].append((int(offset), None if key_length == "-1" else key.encode(), value.encode(), pairs))
    return got


async def read_native(bootstrap: list[str], topic: str, ends: dict[int, int]) -> dict[int, list[Record]]:
    got: dict[int, list[Record]] = {partition: [] for partition in ends}
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, partition) for partition in ends])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(len(got[p]) < end for p, end in ends.items()) and time.monotonic() < deadline:
            for record in await consumer.poll(500):
                got[record.partition].append((record.offset, record.key, record.value, _headers(record.headers)))
    return got


# ---- group members: each polls and commits what it read until told to stop ---------------------

# A commit the group refuses because it rebalances meanwhile: the member goes on polling (it rejoins
# there) and commits again after it, what it still holds (as an application would). Raised up, it
# ended a member's thread: the member stopped rejoining, was expired, and the other held all.
PY_REBALANCING = (
    kafka.errors.CommitFailedError,
    kafka.errors.RebalanceInProgressError,
    kafka.errors.IllegalGenerationError,
    kafka.errors.UnknownMemberIdError,
)
AIO_REBALANCING = (
    aiokafka.errors.CommitFailedError,
    aiokafka.errors.RebalanceInProgressError,
    aiokafka.errors.IllegalGenerationError,
    aiokafka.errors.UnknownMemberIdError,
)
RD_REBALANCING = frozenset(
    {
        RdError.REBALANCE_IN_PROGRESS,
        RdError.ILLEGAL_GENERATION,
        RdError.UNKNOWN_MEMBER_ID,
        RdError._ASSIGNMENT_LOST,  # librdkafka's own local error codes
        RdError._STATE,
    }
)


class GroupMember:
    """One subscribed consumer of a library, run in its own thread: what it read, its assignment."""

    def __init__(self, library: str, bootstrap: str, group: str, topic: str, **config: Any) -> None:
        self.library, self.bootstrap, self.group, self.topic, self.config = library, bootstrap, group, topic, config
        self.values: list[bytes] = []
        self.assignment: frozenset[int] = frozenset()
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"{library}-member", daemon=True)
        self.polling_since: float | None = None  # kafka-python: when its current poll() began

    def hung_for(self) -> float:
        """How long the current kafka-python poll() or metadata fetch has lasted (0 outside one).
        kafka-python 3.0's poll() can wait forever on its own I/O thread (`net.run` waits on an event
        without a timeout: dpkp/kafka-python#3121; 3.0.12 has no fix): seen here once in five runs
        right after a rebalance, the I/O thread idle, the member then expired by the coordinator."""
        since = self.polling_since
        return 0.0 if since is None else time.monotonic() - since

    def start(self) -> GroupMember:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=READ_TIMEOUT_S)
        assert not self.thread.is_alive(), f"{self.library} did not stop"
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        try:
            if self.library == "aiokafka":
                asyncio.run(self._aiokafka())
            else:
                getattr(self, "_" + self.library.replace("-", "_"))()
        except BaseException as error:  # reported by close()
            self.failure = error

    def _confluent(self) -> None:
        consumer = RdConsumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **self.config,
            }
        )
        try:
            # Its metadata holds the topic before it joins (see _kafka_python): a leader that does not
            # know it yet assigns the group without it.
            consumer.list_topics(self.topic, timeout=READ_TIMEOUT_S)
            consumer.subscribe([self.topic])
            uncommitted = False  # a commit a rebalance refused: done again after it (RD_REBALANCING)
            while not self.stop.is_set():
                messages = consumer.consume(100, 0.2)
                for message in messages:
                    # An error event that is not fatal (a broker connection lost, a topic not yet in
                    # its metadata) is librdkafka's news, not a failure: it retries by itself.
                    if message.error() is not None:
                        assert not message.error().fatal(), message.error()
                        continue
                    self.values.append(message.value())
                if messages or uncommitted:
                    try:
                        consumer.commit(asynchronous=False)
                        uncommitted = False
                    except RdException as error:
                        if error.args[0].code() == RdError._NO_OFFSET:  # nothing of its own left to commit
                            uncommitted = False
                        elif error.args[0].code() in RD_REBALANCING:
                            uncommitted = True
                        else:
                            raise
                self.assignment = frozenset(partition.partition for partition in consumer.assignment())
        finally:  # also when it failed: a consumer left to the garbage collector hung the exit
            consumer.close()

    def _kafka_python(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **self.config,
        )
        try:
            # kafka-python subscribed at once joins the group before its first metadata of the topic
            # has come (the race KAFKA-3949 describes): as leader it assigns without the topic
            # ("No partition metadata for topic"). It heals when that metadata comes - not always: in
            # CI twice in a row one member kept all 6 partitions, the other none, for 60 s. So the
            # topic's partitions are known first (a blocking fetch, watched like poll() by hung_for).
            self.polling_since = time.monotonic()
            assert consumer.partitions_for_topic(self.topic), f"{self.topic} has no partitions"
            self.polling_since = None
            consumer.subscribe([self.topic])
            uncommitted = False  # a commit a rebalance refused: done again after it (PY_REBALANCING)
            while not self.stop.is_set():
                self.polling_since = time.monotonic()
                polled = consumer.poll(200)
                self.polling_since = None
                for messages in polled.values():
                    self.values += [message.value for message in messages]
                if polled or uncommitted:
                    try:
                        consumer.commit()
                        uncommitted = False
                    except PY_REBALANCING:
                        uncommitted = True
                self.assignment = frozenset(partition.partition for partition in consumer.assignment())
        finally:  # also when it failed: a consumer left to the garbage collector hung the exit
            consumer.close()

    async def _aiokafka(self) -> None:
        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **self.config,
        )
        await consumer.start()
        uncommitted = False  # a commit a rebalance refused: done again after it (AIO_REBALANCING)
        try:
            while not self.stop.is_set():
                polled = await consumer.getmany(timeout_ms=200)
                for messages in polled.values():
                    self.values += [message.value for message in messages]
                if polled or uncommitted:
                    try:
                        await consumer.commit()
                        uncommitted = False
                    except AIO_REBALANCING:
                        uncommitted = True
                self.assignment = frozenset(partition.partition for partition in consumer.assignment())
        finally:
            await consumer.stop()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = RdConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([RdPartition(topic, partition) for partition in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return {entry.partition: entry.offset for entry in found}


def read_confluent_from(bootstrap: str, topic: str, partitions: int, config: dict[str, Any]) -> list[bytes]:
    """Every value a consumer of `config` reads from the partitions' start until it sees no more
    for two seconds (the end of a read_committed log is not an offset count)."""
    consumer = RdConsumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **config})
    try:
        consumer.assign([RdPartition(topic, partition, 0) for partition in range(partitions)])
        values: list[bytes] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 2.0:
            messages = [m for m in consumer.consume(500, 0.5) if m.error() is None]
            if messages:
                values += [message.value() for message in messages]
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return values


def read_rest(gateway: str, topic: str, ends: dict[int, int]) -> dict[int, list[Record]]:
    """Through the REST gateway (Confluent REST Proxy's v2 API, binary format): base64 keys, values
    and header values."""
    v2, binary = "application/vnd.kafka.v2+json", "application/vnd.kafka.binary.v2+json"
    group = f"rest-{time.monotonic_ns()}"
    got: dict[int, list[Record]] = {partition: [] for partition in ends}
    with httpx.Client(base_url=gateway, timeout=READ_TIMEOUT_S) as rest:
        created = rest.post(
            f"/consumers/{group}", json={"name": "reader", "format": "binary"}, headers={"content-type": v2}
        )
        assert created.status_code == 200, created.text
        base = f"/consumers/{group}/instances/reader"
        partitions = {"partitions": [{"topic": topic, "partition": partition} for partition in ends]}
        assert rest.post(f"{base}/assignments", json=partitions, headers={"content-type": v2}).status_code == 204
        assert (
            rest.post(f"{base}/positions/beginning", json=partitions, headers={"content-type": v2}).status_code == 204
        )
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(len(got[p]) < end for p, end in ends.items()) and time.monotonic() < deadline:
            page = rest.get(f"{base}/records", params={"timeout": 500}, headers={"accept": binary})
            assert page.status_code == 200, page.text
            for record in page.json():
                decode = base64.b64decode
                got[record["partition"]].append(
                    (
                        record["offset"],
                        None if record["key"] is None else decode(record["key"]),
                        None if record["value"] is None else decode(record["value"]),
                        tuple(
                            (header["name"], None if header["value"] is None else decode(header["value"]))
                            for header in record.get("headers") or ()
                        ),
                    )
                )
        rest.delete(base, headers={"content-type": v2})
    return got
