"""Stored record batches → Arrow record batches with the Kafka source's schema, with no Python
object per record: the stored format is columnar (a length column and one blob per field), so
each Arrow binary column is the blob itself plus offsets computed with numpy, and the fixed-width
columns are numpy arrays. Only headers, when asked for, are decoded record by record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tidelog.common.record.batch import BatchColumns, decode_headers

__all__ = ["HEADERS_DDL", "HEADERS_TYPE", "SCHEMA_DDL", "arrow_schema", "to_arrow"]

# Spark's Kafka source's schema, column for column.
SCHEMA_DDL: Final = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL: Final = ", headers array<struct<key: string, value: binary>>"
HEADERS_TYPE: Final = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
# Arrow's binary type has int32 offsets: one Arrow batch holds less than this of one column.
ARROW_BINARY_BYTES_MAX: Final = 2**31 - 1


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", HEADERS_TYPE))
    return pa.schema(fields)


def _binary(lengths: npt.NDArray[np.int32], blobs: list[memoryview]) -> pa.Array:
    """An Arrow binary array from a length column (-1 = null) and the non-null items' bytes."""
    count = len(lengths)
    sizes = np.maximum(lengths, 0).astype(np.int64)
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if count else 0
    assert total <= ARROW_BINARY_BYTES_MAX, f"{total} bytes of one column in one Arrow batch"
    value_offsets = np.zeros(count + 1, dtype=np.int32)
    value_offsets[1:] = ends
    nulls = lengths < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    data = pa.py_buffer(b"".join(blobs)) if total else pa.py_buffer(b"")
    return pa.Array.from_buffers(
        pa.binary(), count, [validity, pa.py_buffer(value_offsets), data], null_count=null_count
    )


def _repeated(text: str, count: int) -> pa.Array:
    """`text` `count` times as an Arrow string array, built from buffers."""
    encoded = text.encode()
    value_offsets = np.arange(count + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(value_offsets), pa.py_buffer(encoded * count)])


def _blob_range(lengths: npt.NDArray[np.int32], low: int, high: int) -> tuple[int, int]:
    """Byte range, within a field's blob, of records low..high-1."""
    sizes = np.maximum(lengths, 0)
    first = int(sizes[:low].sum(dtype=np.int64))
    return first, first + int(sizes[low:high].sum(dtype=np.int64))


def to_arrow(
    topic: str,
    partition: int,
    batches: Sequence[BatchColumns],
    start: int,
    end: int,
    *,
    include_headers: bool,
) -> pa.RecordBatch | None:
    """The records of `batches` with start ≤ offset < end as one Arrow batch (None if none)."""
    key_lengths: list[npt.NDArray[np.int32]] = []
    value_lengths: list[npt.NDArray[np.int32]] = []
    key_blobs: list[memoryview] = []
    value_blobs: list[memoryview] = []
    offsets: list[npt.NDArray[np.int64]] = []
    timestamps: list[npt.NDArray[np.int64]] = []
    types: list[npt.NDArray[np.int32]] = []
    headers: list[list[dict[str, object]] | None] = []
    for batch in batches:
        low = int(np.searchsorted(batch.offsets, start, side="left"))  # offsets ascend within a batch
        high = int(np.searchsorted(batch.offsets, end, side="left"))
        if low >= high:
            continue
        if low == 0 and high == len(batch.offsets):  # the whole batch (all but the first and last)
            key_blobs.append(batch.keys)
            value_blobs.append(batch.values)
        else:
            first, last = _blob_range(batch.key_lengths, low, high)
            key_blobs.append(batch.keys[first:last])
            first, last = _blob_range(batch.value_lengths, low, high)
            value_blobs.append(batch.values[first:last])
        key_lengths.append(batch.key_lengths[low:high])
        value_lengths.append(batch.value_lengths[low:high])
        offsets.append(batch.offsets[low:high])
        timestamps.append(batch.timestamps[low:high])
        types.append(np.full(high - low, batch.header.timestamp_type, dtype=np.int32))
        if include_headers:
            # Spark's Kafka source: null for a record without headers, not an empty list
            headers += [
                [{"key": k, "value": v} for k, v in record] if record else None
                for record in decode_headers(batch, low, high)
            ]
    if not offsets:
        return None
    count = sum(map(len, offsets))
    columns = [
        _binary(np.concatenate(key_lengths), key_blobs),
        _binary(np.concatenate(value_lengths), value_blobs),
        _repeated(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(np.concatenate(offsets)),
        pa.array(np.concatenate(timestamps) * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(np.concatenate(types)),
    ]
    if include_headers:
        columns.append(pa.array(headers, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
