"""Stored record batches → Arrow record batches with the Kafka source's schema, in bulk: each
column is built from the decoded batch's own columns (one list per field), never a tuple per
record, and timestamps are converted with numpy."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Final

import numpy as np
import pyarrow as pa

from tidelog.common.record.batch import RecordBatch

__all__ = ["HEADERS_TYPE", "SCHEMA_DDL", "arrow_schema", "to_arrow"]

# Spark's Kafka source's schema, column for column.
SCHEMA_DDL: Final = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL: Final = ", headers array<struct<key: string, value: binary>>"
HEADERS_TYPE: Final = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


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


def to_arrow(
    topic: str, partition: int, batches: Sequence[RecordBatch], start: int, end: int, *, include_headers: bool
) -> pa.RecordBatch | None:
    """The records of `batches` with start ≤ offset < end as one Arrow batch (None if none)."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    headers: list[list[dict[str, object]]] = []
    for batch in batches:
        low = bisect.bisect_left(batch.offsets, start)  # offsets ascend within a batch
        high = bisect.bisect_left(batch.offsets, end)
        if low >= high:
            continue
        keys += batch.keys[low:high]
        values += batch.values[low:high]
        offsets += batch.offsets[low:high]
        timestamps += batch.timestamps[low:high]
        types += [batch.header.timestamp_type] * (high - low)
        if include_headers:
            headers += [[{"key": k, "value": v} for k, v in record] for record in batch.headers[low:high]]
    if not offsets:
        return None
    count = len(offsets)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([topic] * count, pa.string()),
        pa.array(np.full(count, partition, dtype=np.int32)),
        pa.array(np.asarray(offsets, dtype=np.int64)),
        pa.array(np.asarray(timestamps, dtype=np.int64) * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(np.asarray(types, dtype=np.int32)),
    ]
    if include_headers:
        columns.append(pa.array(headers, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
