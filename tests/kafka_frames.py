"""Kafka-protocol Produce requests written by hand, for tests that need exactly what one connection
sends (a real client decides its own retries and batching)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from tidelog.common.kafka_wire.message_codec import codec
from tidelog.common.kafka_wire.record_batches import to_kafka_batches
from tidelog.common.record.batch_encoding import encode_batch

__all__ = ["PRODUCE_VERSION", "idempotent_batch", "produce_frame", "read_produce_answer"]

PRODUCE_VERSION = 8  # the last with request header v1 (9 is flexible)


def idempotent_batch(producer_id: int, sequence: int, count: int = 2, producer_epoch: int = 0) -> bytes:
    """A stored batch of `count` records numbered from `sequence` (values `seq-N`)."""
    return encode_batch(
        [b"seq-%d" % (sequence + index) for index in range(count)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=sequence,
    )


def produce_frame(correlation_id: int, topic: str, partition: int, batch: bytes, acks: int = -1) -> bytes:
    """A size-prefixed Produce request of one stored batch, sent as Kafka's batch format."""
    body = codec("ProduceRequest", PRODUCE_VERSION).encode(
        {
            "TransactionalId": None,
            "Acks": acks,
            "TimeoutMs": 30_000,
            "TopicData": [{"Name": topic, "PartitionData": [{"Index": partition, "Records": to_kafka_batches(batch)}]}],
        }
    )
    client = b"test"
    frame = struct.pack(">hhih", 0, PRODUCE_VERSION, correlation_id, len(client)) + client + body
    return struct.pack(">i", len(frame)) + frame


async def read_produce_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
    """The next answer on the connection: its correlation id and its (only) partition's response."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    frame = await reader.readexactly(size)
    body = codec("ProduceResponse", PRODUCE_VERSION).decode(frame[4:])
    return struct.unpack(">i", frame[:4])[0], body["Responses"][0]["PartitionResponses"][0]
