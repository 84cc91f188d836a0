"""The nemesis's writers as librdkafka producers (confluent-kafka) through the brokers' Kafka
listeners: idempotent, acks=all, each in a thread of its own, writing numbered values to every
partition. They record what the native writers record (tests/faults/nemesis.py `Writers`), so the
same checker judges the history: nothing acknowledged lost, duplicated or reordered."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any

from confluent_kafka import Producer as RdProducer

from tests.faults.nemesis import PARTITIONS, PRODUCERS, TOPIC, Ack, value_of
from tidelog.dev.local_cluster import LocalCluster

IN_FLIGHT_MAX = 200  # records a producer has unacknowledged before it waits for deliveries
STOP_FLUSH_S = 30.0
REQUEST_TIMEOUT_MS = 30_000  # librdkafka's and Kafka's default; a leader's acks=all wait in each request
MESSAGE_TIMEOUT_MS = 120_000  # Kafka's delivery.timeout.ms default


class RdWriters:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.acks: list[Ack] = []
        self.sent: set[bytes] = set()
        self.failed: collections.Counter[str] = collections.Counter()
        self.send_errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the delivery callbacks run in each producer's own thread

    async def run(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(self._produce, producer) for producer in range(PRODUCERS)))

    def _produce(self, producer_id: int) -> None:
        producer = RdProducer(
            {
                "bootstrap.servers": self.cluster.kafka_bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "retry.backoff.ms": 50,
                "reconnect.backoff.max.ms": 1000,
                # Kafka's producer rule (delivery.timeout.ms >= linger.ms + request.timeout.ms, its
                # defaults 120 s and 30 s): a record may outlive a leader's whole acks=all wait and
                # its retry. At 30 s, equal to the request timeout, a request that waited out its
                # timeout took its records' delivery timeout with it; librdkafka then bumps its
                # epoch and sends queued records again from sequence 0, retried ones it may
                # already have written among them (its INTRODUCTION.md, "Message timeout
                # considerations"): 40 records written twice in CI.
                "request.timeout.ms": REQUEST_TIMEOUT_MS,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                "log_level": 2,  # (librdkafka reports every refused reconnect otherwise)
            }
        )
        in_flight = [0]

        def delivered(error: Any, message: Any, number: int, sent_at: float) -> None:
            in_flight[0] -= 1
            with self._lock:
                if error is not None:
                    self.failed[error.name()] += 1
                    if len(self.send_errors) < 20:
                        self.send_errors.append(f"p{message.partition()}: {error}")
                    return
                self.acks.append(
                    Ack(producer_id, number, message.partition(), message.offset(), sent_at, time.monotonic())
                )

        number = 0
        while not self._stop.is_set():
            if in_flight[0] >= IN_FLIGHT_MAX:
                producer.poll(0.01)
                continue
            value = value_of(producer_id, number)
            with self._lock:
                self.sent.add(value)
            sent_at = time.monotonic()
            try:
                producer.produce(
                    TOPIC,
                    value,
                    partition=number % PARTITIONS,
                    on_delivery=lambda error, message, n=number, at=sent_at: delivered(error, message, n, at),
                )
            except BufferError:
                producer.poll(0.05)
                continue
            in_flight[0] += 1
            number += 1
            producer.poll(0)
        producer.flush(STOP_FLUSH_S)

    def producer_queues(self) -> str:
        return "(librdkafka producers: see each broker's log)"

    def acked_per_partition(self) -> collections.Counter[int]:
        with self._lock:
            return collections.Counter(ack.partition for ack in self.acks)

    def stop(self) -> None:
        self._stop.set()
