"""Produce requests → the client's bulk path, with one result per record in request order.

The whole request is checked first (topic, partitions, every key and value decodes), so a bad
record refuses the request before any record of it is sent: never a silent partial produce.
Records are then grouped by target partition (explicit partition, else murmur2 of the key, else one
partition picked per request, as Kafka's sticky partitioner would) and each group goes down
`Producer.send_batch` — one bulk append per partition, no per-record send. Small requests, and
records with headers or their own timestamp, take `Producer.send`, whose open batches gather the
records of many requests during linger.ms into one Produce call.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Final

import pydantic_core

from tidelog.client import Producer, RecordDelivery
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.murmur2 import partition_for_key
from tidelog.common.errors import TidelogError
from tidelog.common.record.batch import Headers
from tidelog.gateway.embedded_format import EmbeddedFormat, base64_bytes, plain_json_bytes
from tidelog.gateway.rest_errors import INVALID_PAYLOAD, PARTITION_NOT_FOUND, RestError, from_tidelog
from tidelog.gateway.rest_models import ProduceRecord

__all__ = ["OutgoingRecord", "decode_plain_records", "decode_records", "produce"]

# Fewer records than this go through `send`: they join the partition's open batch for linger.ms, so
# many small requests share one Produce call (one gRPC call costs more than a request's records).
BULK_RECORDS_MIN = 64
NON_RETRIABLE = 1  # REST Proxy's per-record error codes
RETRIABLE = 2

# One entry of a produce response's `offsets` (rest_models.PartitionOffset's shape): plain dicts,
# since this is built per record on the hot path and serialised by orjson.
OffsetEntry = dict[str, int | str | None]


@dataclasses.dataclass(slots=True)
class OutgoingRecord:
    key: bytes | None
    value: bytes | None
    partition: int | None
    headers: Headers | None = None
    timestamp: int | None = None


_PLAIN_FIELDS: Final = frozenset({"key", "value", "partition"})


def decode_plain_records(data: bytes, embedded: EmbeddedFormat, records_max: int) -> list[OutgoingRecord] | None:
    """The common body (records of a key, a value, maybe a partition) decoded without a model per
    record: parsed by pydantic-core (exact integers, as the model path), checked field by field.
    None for anything else or anything wrong: the model path then validates it and says what is
    wrong, so a body is accepted or refused here exactly as there."""
    try:
        body = pydantic_core.from_json(data)
    except ValueError:
        return None
    records = body.get("records") if type(body) is dict else None
    if type(records) is not list or not 0 < len(records) <= records_max:
        return None
    json_format = embedded is EmbeddedFormat.JSON
    decoded = []
    for record in records:
        if type(record) is not dict or not record.keys() <= _PLAIN_FIELDS:
            return None
        partition = record.get("partition")
        if partition is not None and (type(partition) is not int or partition < 0):
            return None
        key, value = record.get("key"), record.get("value")
        if json_format:
            key_bytes = None if key is None else plain_json_bytes(key)
            value_bytes = None if value is None else plain_json_bytes(value)
            if (key is not None and key_bytes is None) or (value is not None and value_bytes is None):
                return None
        else:
            try:
                key_bytes = None if key is None else base64_bytes(key, "key")
                value_bytes = None if value is None else base64_bytes(value, "value")
            except ValueError:
                return None
        decoded.append(OutgoingRecord(key_bytes, value_bytes, partition))
    return decoded


def decode_records(records: Sequence[ProduceRecord], embedded: EmbeddedFormat) -> list[OutgoingRecord]:
    decoded = []
    for index, record in enumerate(records):
        headers: Headers | None = None
        if record.headers:
            headers = tuple(
                (header.name, EmbeddedFormat.BINARY.encode(header.value, f"records[{index}].headers.{header.name}"))
                for header in record.headers
            )
        decoded.append(
            OutgoingRecord(
                embedded.encode(record.key, f"records[{index}].key"),
                embedded.encode(record.value, f"records[{index}].value"),
                record.partition,
                headers,
                record.timestamp,
            )
        )
    return decoded


async def produce(
    producer: Producer, metadata: ClusterMetadata, topic: str, records: list[OutgoingRecord]
) -> list[OffsetEntry]:
    try:
        count = len(await metadata.partitions_of(topic))
    except TidelogError as error:
        raise from_tidelog(error) from None
    targets: dict[int, list[int]] = {}
    sticky = random.randrange(count)
    for index, record in enumerate(records):  # one pass; nothing is sent unless every record passes
        try:
            producer.record_size(record.value, record.key, record.headers)
        except TidelogError as error:
            raise RestError(INVALID_PAYLOAD, f"records[{index}]: {error}") from None
        if record.partition is not None:
            if record.partition >= count:
                raise RestError(PARTITION_NOT_FOUND, f"topic {topic!r} has no partition {record.partition}")
            target = record.partition
        else:
            target = partition_for_key(record.key, count) if record.key is not None else sticky
        targets.setdefault(target, []).append(index)
    results: list[OffsetEntry | None] = [None] * len(records)
    await _send(producer, topic, records, targets, results)
    assert all(result is not None for result in results)
    return results  # type: ignore[return-value]


async def _send(
    producer: Producer,
    topic: str,
    records: list[OutgoingRecord],
    targets: dict[int, list[int]],
    results: list[OffsetEntry | None],
) -> None:
    singles: list[tuple[int, RecordDelivery]] = []
    bulks = []
    small = len(records) < BULK_RECORDS_MIN
    for partition, indexes in targets.items():
        plain = [] if small else [i for i in indexes if records[i].headers is None and records[i].timestamp is None]
        for index in indexes:
            record = records[index]
            if small or record.headers is not None or record.timestamp is not None:
                delivery = await producer.send(
                    topic,
                    record.value,
                    key=record.key,
                    partition=partition,
                    headers=record.headers,
                    timestamp=record.timestamp,
                )
                singles.append((index, delivery))
        if plain:
            keys = [records[index].key for index in plain]
            bulk = await producer.send_batch(
                topic,
                [records[index].value for index in plain],
                keys=keys if any(key is not None for key in keys) else None,
                partition=partition,
            )
            bulks.append((plain, bulk))
    for plain, bulk in bulks:
        position = 0
        for partition, outcome, count in await bulk.settled():
            if isinstance(outcome, BaseException):
                failed = _failed(outcome)
                for index in plain[position : position + count]:
                    results[index] = failed
            else:
                for in_batch, index in enumerate(plain[position : position + count]):
                    results[index] = _offset(partition, outcome + in_batch)
            position += count
    for index, delivery in singles:
        try:
            metadata = await delivery
            results[index] = _offset(metadata.partition, metadata.offset)
        except TidelogError as error:
            results[index] = _failed(error)


def _offset(partition: int, offset: int) -> OffsetEntry:
    return {"partition": partition, "offset": offset, "error_code": None, "error": None}


def _failed(error: BaseException) -> OffsetEntry:
    retriable = isinstance(error, TidelogError) and error.retriable
    return {
        "partition": None,
        "offset": None,
        "error_code": RETRIABLE if retriable else NON_RETRIABLE,
        "error": str(error),
    }
