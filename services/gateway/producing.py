"""Produce requests → the client's bulk path, with one result per record in request order.

The whole request is checked first (topic, partitions, every key and value decodes), so a bad
record refuses the request before any record of it is sent: never a silent partial produce.
Records are then grouped by target partition (explicit partition, else murmur2 of the key, else one
partition picked per request, as Kafka's sticky partitioner would) and each group goes down
`Producer.send_batch` — one bulk append per partition, no per-record send. Small requests, and
records with headers or their own timestamp, take `Producer.send`, whose open batches gather the
records of many requests during linger.ms into one Produce call.

Records travel as columns (`OutgoingRecords`) and results come back as columns (`ProduceResults`):
the common body — plain records, no headers — is decoded, checked, sent and answered with bulk
operations (`map`, `join`, `split`), not with Python bytecode per record.
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
import itertools
import random
import re
from collections.abc import Sequence
from typing import Final, cast

import orjson
import pydantic_core

from tidelog.client import BulkDelivery, Producer, RecordDelivery
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.murmur2 import partition_for_key
from tidelog.common.errors import TidelogError
from tidelog.common.record.batch import Headers
from tidelog.gateway.embedded_format import EmbeddedFormat, plain_json_bytes
from tidelog.gateway.rest_errors import INVALID_PAYLOAD, PARTITION_NOT_FOUND, RestError, from_tidelog
from tidelog.gateway.rest_models import BASE64, ProduceRecord

__all__ = ["OutgoingRecords", "ProduceResults", "decode_plain_records", "decode_records", "produce"]

# Fewer records than this go through `send`: they join the partition's open batch for linger.ms, so
# many small requests share one Produce call (one gRPC call costs more than a request's records).
BULK_RECORDS_MIN = 64
NON_RETRIABLE = 1  # REST Proxy's per-record error codes
RETRIABLE = 2

# One entry of a produce response's `offsets` (rest_models.PartitionOffset's shape).
OffsetEntry = dict[str, int | str | None]


@dataclasses.dataclass(slots=True)
class OutgoingRecords:
    """A produce request's records as columns, an entry per record; `headers` and `timestamps`
    are None when no record has any (the common case: the whole request goes down the bulk path)."""

    keys: list[bytes | None]
    values: list[bytes | None]
    partitions: list[int | None]
    headers: list[Headers | None] | None = None
    timestamps: list[int | None] | None = None

    def __post_init__(self) -> None:
        assert len(self.keys) == len(self.values) == len(self.partitions)
        assert self.headers is None or len(self.headers) == len(self.values)
        assert self.timestamps is None or len(self.timestamps) == len(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def bulk(self, index: int) -> bool:
        """Whether the record may go down the bulk path: no headers, no timestamp of its own."""
        return (self.headers is None or self.headers[index] is None) and (
            self.timestamps is None or self.timestamps[index] is None
        )


@dataclasses.dataclass(slots=True)
class ProduceResults:
    """Where each record went (partition, offset), or why it did not (`errors`, by index)."""

    partitions: list[int | None]
    offsets: list[int | None]
    errors: dict[int, BaseException]

    @classmethod
    def pending(cls, count: int) -> ProduceResults:
        return cls([None] * count, [None] * count, {})

    def complete(self) -> bool:
        return len(self.errors) + len(self.offsets) - self.offsets.count(None) == len(self.offsets)

    def produced(self) -> int:
        return len(self.offsets) - len(self.errors)

    def response_json(self) -> bytes:
        """The produce response (REST Proxy's; schema ids null). Without errors, the common case,
        the offset entries are written from the columns by map and join (no dict per record)."""
        if self.errors:
            return orjson.dumps({"key_schema_id": None, "value_schema_id": None, "offsets": self.entries()})
        repeat = itertools.repeat
        columns = (
            repeat(b'{"partition":'),
            map(_NUMBER, self.partitions),
            repeat(b',"offset":'),
            map(_NUMBER, self.offsets),
            repeat(b',"error_code":null,"error":null}'),
        )
        entries = b",".join(map(b"".join, zip(*columns, strict=False)))  # (the repeats are endless)
        return b'{"key_schema_id":null,"value_schema_id":null,"offsets":[' + entries + b"]}"

    def entries(self) -> list[OffsetEntry]:
        entries: list[OffsetEntry] = []
        for index, (partition, offset) in enumerate(zip(self.partitions, self.offsets, strict=True)):
            error = self.errors.get(index)
            entries.append(_failed(error) if error is not None else _offset(partition, offset))
        return entries


_NUMBER: Final = b"%d".__mod__
_PLAIN_FIELDS: Final = frozenset({"key", "value", "partition"})
_STRICT_BASE64: Final = functools.partial(binascii.a2b_base64, strict_mode=True)
# The models' pattern, matched per string in C: strict a2b_base64 alone also takes padding after a
# whole quad ("AAAA=", "AAAA===="), which the models refuse (found by the property test).
_BASE64_MATCH: Final = re.compile(BASE64).fullmatch


def decode_plain_records(data: bytes, embedded: EmbeddedFormat, records_max: int) -> OutgoingRecords | None:
    """The common body (records of a key, a value, maybe a partition) decoded column by column,
    without a model or a Python loop per record: parsed by pydantic-core (exact integers, as the
    model path), each column checked and encoded in bulk. None for anything else or anything
    wrong: the model path then validates it and says what is wrong, so a body is accepted or
    refused here exactly as there (a property test in tests/gateway holds the two together)."""
    try:
        body = pydantic_core.from_json(data)
    except ValueError:
        return None
    records = body.get("records") if type(body) is dict else None
    if type(records) is not list or not 0 < len(records) <= records_max:
        return None
    if set(map(type, records)) != {dict} or not all(map(_PLAIN_FIELDS.issuperset, records)):
        return None
    partitions: list[int | None] = list(map(dict.get, records, itertools.repeat("partition")))
    if partitions.count(None) != len(partitions) and not all(
        partition is None or (type(partition) is int and partition >= 0) for partition in partitions
    ):
        return None
    keys = _encoded_column(list(map(dict.get, records, itertools.repeat("key"))), embedded)
    values = _encoded_column(list(map(dict.get, records, itertools.repeat("value"))), embedded)
    if keys is None or values is None:
        return None
    return OutgoingRecords(keys, values, partitions)


def _encoded_column(items: list[object], embedded: EmbeddedFormat) -> list[bytes | None] | None:
    """A column of keys or values as stored, or None where one cannot be taken on the fast path."""
    nulls = items.count(None)
    if nulls == len(items):
        return [None] * len(items)
    present = items if not nulls else [item for item in items if item is not None]
    strings = cast(list[str], present) if set(map(type, present)) == {str} else None
    encoded: list[bytes]
    if embedded is EmbeddedFormat.BINARY:
        if strings is None:
            return None
        if not all(map(_BASE64_MATCH, strings)):
            return None
        try:  # strict: no characters outside the alphabet, padding as base64.b64decode(validate=True)
            encoded = list(map(_STRICT_BASE64, strings))
        except ValueError:  # (binascii.Error, and non-ASCII text)
            return None
    elif strings is not None and _needs_no_escaping(strings):
        # JSON strings with nothing to escape, the common value: quoted and encoded all at once,
        # then cut apart at a character none of them can hold (they are printable).
        encoded = ('"' + '"\0"'.join(strings) + '"').encode().split(b"\0")
    else:
        maybe = list(map(plain_json_bytes, present))
        if None in maybe:
            return None
        encoded = cast(list[bytes], maybe)
    if not nulls:
        return cast(list[bytes | None], encoded)
    filled = iter(encoded)
    return [None if item is None else next(filled) for item in items]


def _needs_no_escaping(strings: list[str]) -> bool:
    """What plain_json_bytes checks of one string, for all of them at once (joined by a character
    that changes none of the answers)."""
    joined = " ".join(strings)
    return joined.isprintable() and '"' not in joined and "\\" not in joined


def decode_records(records: Sequence[ProduceRecord], embedded: EmbeddedFormat) -> OutgoingRecords:
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Headers | None] = []
    for index, record in enumerate(records):
        record_headers: Headers | None = None
        if record.headers:
            record_headers = tuple(
                (header.name, EmbeddedFormat.BINARY.encode(header.value, f"records[{index}].headers.{header.name}"))
                for header in record.headers
            )
        keys.append(embedded.encode(record.key, f"records[{index}].key"))
        values.append(embedded.encode(record.value, f"records[{index}].value"))
        headers.append(record_headers)
    timestamps = [record.timestamp for record in records]
    return OutgoingRecords(
        keys,
        values,
        [record.partition for record in records],
        headers if headers.count(None) != len(headers) else None,
        timestamps if timestamps.count(None) != len(timestamps) else None,
    )


async def produce(
    producer: Producer, metadata: ClusterMetadata, topic: str, records: OutgoingRecords
) -> ProduceResults:
    try:
        count = len(await metadata.partitions_of(topic))
    except TidelogError as error:
        raise from_tidelog(error) from None
    _check_sizes(producer, records)  # nothing is sent unless every record passes
    targets = _targets(topic, records, count)
    results = ProduceResults.pending(len(records))
    await _send(producer, topic, records, targets, results)
    assert results.complete(), "every record has its offset or its error"
    return results


def _check_sizes(producer: Producer, records: OutgoingRecords) -> None:
    """RecordTooLarge as INVALID_PAYLOAD naming the first record that can never be sent. The
    largest key with the largest value bound every record without headers: one check for all."""
    if records.headers is None:
        try:
            producer.record_size(
                max(filter(None, records.values), key=len, default=None),
                max(filter(None, records.keys), key=len, default=None),
            )
            return
        except TidelogError:
            pass  # some record is too large: find the first
    for index, (key, value) in enumerate(zip(records.keys, records.values, strict=True)):
        try:
            producer.record_size(value, key, records.headers[index] if records.headers is not None else None)
        except TidelogError as error:
            raise RestError(INVALID_PAYLOAD, f"records[{index}]: {error}") from None


def _targets(topic: str, records: OutgoingRecords, count: int) -> dict[int, Sequence[int]]:
    """Record indexes by target partition, each in request order."""
    sticky = random.randrange(count)
    partitions, keys = records.partitions, records.keys
    if partitions.count(None) == len(records) and keys.count(None) == len(records):
        return {sticky: range(len(records))}  # no partition, no key: all to one
    targets: dict[int, list[int]] = {}
    for index, (partition, key) in enumerate(zip(partitions, keys, strict=True)):
        if partition is not None:
            if partition >= count:
                raise RestError(PARTITION_NOT_FOUND, f"topic {topic!r} has no partition {partition}")
            target = partition
        else:
            target = partition_for_key(key, count) if key is not None else sticky
        targets.setdefault(target, []).append(index)
    return dict(targets)


async def _send(
    producer: Producer,
    topic: str,
    records: OutgoingRecords,
    targets: dict[int, Sequence[int]],
    results: ProduceResults,
) -> None:
    singles: list[tuple[int, RecordDelivery]] = []
    bulks: list[tuple[Sequence[int], BulkDelivery]] = []
    for partition, indexes in targets.items():
        bulk: Sequence[int]
        single: Sequence[int]
        if len(records) < BULK_RECORDS_MIN:
            bulk, single = (), indexes
        elif records.headers is None and records.timestamps is None:
            bulk, single = indexes, ()
        else:
            bulk = [index for index in indexes if records.bulk(index)]
            single = [index for index in indexes if not records.bulk(index)]
        for index in single:
            delivery = await producer.send(
                topic,
                records.values[index],
                key=records.keys[index],
                partition=partition,
                headers=records.headers[index] if records.headers is not None else None,
                timestamp=records.timestamps[index] if records.timestamps is not None else None,
            )
            singles.append((index, delivery))
        if not bulk:
            continue
        if len(bulk) == len(records):  # the whole request, in order: its columns as they are
            bulk = range(len(records))
            keys, values = records.keys, records.values
        else:
            keys, values = [records.keys[index] for index in bulk], [records.values[index] for index in bulk]
        bulk_delivery = await producer.send_batch(
            topic, values, keys=keys if keys.count(None) != len(keys) else None, partition=partition
        )
        bulks.append((bulk, bulk_delivery))
    for bulk, bulk_delivery in bulks:
        position = 0
        for partition, outcome, count in await bulk_delivery.settled():
            placed = bulk[position : position + count]
            if isinstance(outcome, BaseException):
                for index in placed:
                    results.errors[index] = outcome
            elif isinstance(placed, range):  # the whole request in order: slices, not a loop
                results.partitions[placed.start : placed.stop] = [partition] * count
                results.offsets[placed.start : placed.stop] = range(outcome, outcome + count)
            else:
                for in_batch, index in enumerate(placed):
                    results.partitions[index], results.offsets[index] = partition, outcome + in_batch
            position += count
    for index, delivery in singles:
        try:
            metadata = await delivery
            results.partitions[index], results.offsets[index] = metadata.partition, metadata.offset
        except TidelogError as error:
            results.errors[index] = error


def _offset(partition: int | None, offset: int | None) -> OffsetEntry:
    return {"partition": partition, "offset": offset, "error_code": None, "error": None}


def _failed(error: BaseException) -> OffsetEntry:
    retriable = isinstance(error, TidelogError) and error.retriable
    return {
        "partition": None,
        "offset": None,
        "error_code": RETRIABLE if retriable else NON_RETRIABLE,
        "error": str(error),
    }
