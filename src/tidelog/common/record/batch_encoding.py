"""Encoding a record batch (layout in batch_layout.py): the records section's columns built by a
handful of bulk operations over all records at once, then compressed, then the header and CRC."""

from __future__ import annotations

from collections.abc import Sequence

import crc32c
import numpy as np
import numpy.typing as npt

from tidelog.common.errors import InvalidRecordError
from tidelog.common.record.batch_layout import (
    BATCH_OVERHEAD,
    CONTROL_BIT,
    CRC_FIELD,
    CRC_POSITION,
    HEADER,
    HEADER_KEY,
    HEADER_VALUE,
    INT32,
    INT64,
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    RECORDS_PER_BATCH_MAX,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    UNCOMPRESSED_LENGTH,
    Headers,
    TimestampType,
    batch_crc,
)
from tidelog.common.record.compression import CompressionType, compress


def _lengths(items: Sequence[bytes | None]) -> tuple[npt.NDArray[np.int32], bytes]:
    """Length column (-1 for None) and concatenation of the non-null items."""
    try:
        lengths = np.fromiter(map(len, items), dtype=INT32, count=len(items))  # type: ignore[arg-type]
        return lengths, b"".join(items)  # type: ignore[arg-type]
    except TypeError:  # some items are None: the slower path
        lengths = np.fromiter((-1 if item is None else len(item) for item in items), dtype=INT32, count=len(items))
        return lengths, b"".join([item for item in items if item is not None])


def _encode_headers(headers: Sequence[Headers]) -> tuple[npt.NDArray[np.int32], bytes]:
    """Each record's headers as Kafka lays them out. The hot loop does no numpy element writes and
    encodes a header name once per call (records usually share their names)."""
    parts: list[bytes] = []
    lengths: list[int] = []
    named: dict[str, bytes] = {}  # name → its length prefix and UTF-8 bytes
    pack_value = HEADER_VALUE.pack
    null_value = pack_value(-1)
    value_size = HEADER_VALUE.size
    for record_headers in headers:
        size = 0
        for name, value in record_headers:
            prefix = named.get(name)
            if prefix is None:
                encoded_name = name.encode()
                prefix = named[name] = HEADER_KEY.pack(len(encoded_name)) + encoded_name
            if value is None:
                parts += (prefix, null_value)
                size += len(prefix) + value_size
            else:
                parts += (prefix, pack_value(len(value)), value)
                size += len(prefix) + value_size + len(value)
        lengths.append(size)
    return np.array(lengths, dtype=INT32), b"".join(parts)


def encode_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | int = NO_TIMESTAMP,
    headers: Sequence[Headers] | None = None,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Encode one batch. `timestamps` is one per record, or one int for all of them.

    `offset_deltas` defaults to 0..N-1; the log cleaner passes the survivors' deltas (and the
    original `last_offset_delta`) so compaction keeps every offset unchanged.
    """
    count = len(values)
    if count == 0:
        raise InvalidRecordError("a batch holds at least one record")
    if count > RECORDS_PER_BATCH_MAX:
        raise InvalidRecordError(f"a batch holds at most {RECORDS_PER_BATCH_MAX} records")
    if offset_deltas is None:
        delta_column = np.arange(count, dtype=INT32)
    else:
        delta_column = np.asarray(offset_deltas, dtype=INT32)
        if len(delta_column) != count:
            raise InvalidRecordError("offset_deltas and values differ in length")
    last_delta = int(delta_column[-1]) if last_offset_delta is None else last_offset_delta
    if isinstance(timestamps, int):
        first_timestamp = max_timestamp = timestamps
        timestamp_column = np.zeros(count, dtype=INT64)
    else:
        absolute = np.asarray(timestamps, dtype=INT64)
        if len(absolute) != count:
            raise InvalidRecordError("timestamps and values differ in length")
        first_timestamp = int(absolute[0])
        max_timestamp = int(absolute.max())
        timestamp_column = absolute - first_timestamp
    value_lengths, values_blob = _lengths(values)
    if keys is None:
        key_lengths, keys_blob = np.full(count, -1, dtype=INT32), b""
    else:
        if len(keys) != count:
            raise InvalidRecordError("keys and values differ in length")
        key_lengths, keys_blob = _lengths(keys)
    if headers is None:
        header_lengths, headers_blob = np.zeros(count, dtype=INT32), b""
    else:
        if len(headers) != count:
            raise InvalidRecordError("headers and values differ in length")
        header_lengths, headers_blob = _encode_headers(headers)
    section = b"".join(
        (
            delta_column.tobytes(),
            timestamp_column.tobytes(),
            key_lengths.tobytes(),
            value_lengths.tobytes(),
            header_lengths.tobytes(),
            keys_blob,
            values_blob,
            headers_blob,
        )
    )
    return assemble_batch(
        section,
        count=count,
        last_offset_delta=last_delta,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=control,
    )


def assemble_batch(
    section: bytes,
    *,
    count: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    base_offset: int,
    partition_leader_epoch: int,
    compression: CompressionType,
    timestamp_type: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
    control: bool,
) -> bytes:
    """A batch around an uncompressed records section already laid out (encode_batch's columns,
    or the Kafka listener's compiled transcoder): compressed, then the header and CRC."""
    if compression != CompressionType.NONE:
        section = UNCOMPRESSED_LENGTH.pack(len(section)) + compress(compression, section)
    attributes = (
        int(compression)
        | (TIMESTAMP_TYPE_BIT if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_BIT if transactional else 0)
        | (CONTROL_BIT if control else 0)
    )
    header = bytearray(
        HEADER.pack(
            base_offset,
            BATCH_OVERHEAD - LOG_OVERHEAD + len(section),
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c.crc32c(section, batch_crc(header))
    CRC_FIELD.pack_into(header, CRC_POSITION, crc)
    return bytes(header) + section
