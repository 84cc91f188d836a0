"""The records of `__transaction_state`, in Kafka's layout (TransactionLogKey / TransactionLogValue,
version 0; big-endian, strings int16-length-prefixed, arrays int32-counted), so Kafka's tools
could read the topic:

    key    int16 version (0) | string transactional_id
    value  int16 version (0) | int64 producer_id | int16 producer_epoch | int32 timeout_ms
           | int8 state | array [string topic | array [int32 partition]] | int64 last_update_ms
           | int64 start_ms

A null value (tombstone) deletes an expired transactional.id. One deviation: Kafka's version 1
value carries KIP-890's previous and next producer ids as tagged fields; here the epoch before the
last bump (int16 `last_producer_epoch`) and the id to go on with (int64 `next_producer_id`) follow
the version 0 fields, which Kafka's version 0 reader ignores.
"""

from __future__ import annotations

import struct
from typing import Final

from tidelog.common.errors import CorruptRecordError
from tidelog.coordinator.txn_state import TopicPartitionKey, TxnMetadata, TxnState

__all__ = ["decode_txn_key", "decode_txn_value", "txn_key", "txn_value"]

_VERSION: Final = 0
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_HEAD: Final = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_TIMES: Final = struct.Struct(">qq")
_TAIL: Final = struct.Struct(">hq")  # last_producer_epoch, next_producer_id (beyond Kafka's version 0)


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT16.pack(len(data)) + data


def txn_key(transactional_id: str) -> bytes:
    return _INT16.pack(_VERSION) + _string(transactional_id)


def decode_txn_key(data: bytes) -> str:
    try:
        version, length = struct.unpack_from(">hh", data)
        if version != _VERSION or len(data) != 4 + length:
            raise CorruptRecordError(f"transaction log key of version {version}, {len(data)} bytes")
        return data[4:].decode()
    except (struct.error, UnicodeDecodeError) as error:
        raise CorruptRecordError(f"unreadable transaction log key: {error}") from error


def txn_value(metadata: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [
        _HEAD.pack(_VERSION, metadata.producer_id, metadata.producer_epoch, metadata.timeout_ms, metadata.state.code),
        _INT32.pack(len(by_topic)),
    ]
    for topic, partitions in by_topic.items():
        parts += (_string(topic), _INT32.pack(len(partitions)), struct.pack(f">{len(partitions)}i", *partitions))
    parts += (
        _TIMES.pack(metadata.last_update_ms, metadata.start_ms),
        _TAIL.pack(metadata.last_producer_epoch, metadata.next_producer_id),
    )
    return b"".join(parts)


def decode_txn_value(transactional_id: str, data: bytes) -> TxnMetadata:
    try:
        version, producer_id, epoch, timeout_ms, state = _HEAD.unpack_from(data)
        if version != _VERSION:
            raise CorruptRecordError(f"transaction log value of version {version}")
        position = _HEAD.size
        (topics,) = _INT32.unpack_from(data, position)
        position += 4
        partitions: set[TopicPartitionKey] = set()
        for _ in range(topics):
            (length,) = _INT16.unpack_from(data, position)
            topic = data[position + 2 : position + 2 + length].decode()
            position += 2 + length
            (count,) = _INT32.unpack_from(data, position)
            position += 4
            partitions.update((topic, partition) for partition in struct.unpack_from(f">{count}i", data, position))
            position += 4 * count
        last_update_ms, start_ms = _TIMES.unpack_from(data, position)
        position += _TIMES.size
        last_epoch, next_id = _TAIL.unpack_from(data, position) if len(data) >= position + _TAIL.size else (-1, -1)
        return TxnMetadata(
            transactional_id,
            producer_id,
            epoch,
            timeout_ms,
            TxnState.of_code(state),
            frozenset(partitions),
            start_ms,
            last_update_ms,
            last_epoch,
            next_id,
        )
    except (struct.error, UnicodeDecodeError, KeyError) as error:
        raise CorruptRecordError(f"unreadable transaction log value of {transactional_id!r}: {error}") from error
